//! Peak memory of a whole `maestro run` (results in docs/benchmarks.md).
//!
//! `cargo bench -p maestro-cli --bench footprint` runs the `maestro` binary of the bench profile
//! (release) on a 3-movement maestro-dialect piece against the scripted model server on
//! 127.0.0.1: the first movement reads a file, the second writes one, the third completes, so
//! the run sets up its tools, streams six answers and writes its record. Each run is reaped with
//! `wait4`, whose resource usage gives that process's peak resident set (`ru_maxrss`). It prints
//! every run's figure and the median. `FOOTPRINT_BIN=path` measures another build of `maestro`;
//! `FOOTPRINT_SERVE=1` only serves the script (see [`serve`]), and `FOOTPRINT_DATA_ORDER=1` reads
//! the constants a run touched out of a memory trace (see [`data_order`]).
//!
//! Most of the resident set is the binary's own pages, and Linux maps a file's page cache a
//! whole (large) folio per fault, so the figure depends on how the binary came into the cache:
//! written by the linker or `cp`, read with `read` (`cat`), or paged in by running it. Unless
//! `FOOTPRINT_CACHE=keep`, the bench first drops the binary's pages from the cache
//! (`POSIX_FADV_DONTNEED`) and makes one run it does not count, so the counted runs see the
//! binary as an installed one usually is: paged in by running it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::Instant;

use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::json;

const RUNS: usize = 7;

const PIECE: &str = r#"name: three-steps
description: Read, write, finish.
max_movements: 5
initial_movement: read
movements:
  - name: read
    edit: false
    persona: You read carefully.
    instruction: Read notes.md, then call `transition` with next=write.
    allowed_tools: [Read, Glob]
    rules:
      - condition: the notes are read
        next: write
    default_next: write
  - name: write
    edit: true
    persona: You write briefly.
    instruction: Write output/summary.md, then call `transition` with next=finish.
    allowed_tools: [Read, Write]
    rules:
      - condition: the summary is written
        next: finish
    default_next: finish
  - name: finish
    edit: false
    persona: You close the task.
    instruction: Call `complete` with status=success.
    allowed_tools: []
    rules: []
    default_next: ABORT
"#;

fn turns() -> Vec<Turn> {
    vec![
        Turn::tool_call("Read", json!({"file_path": "notes.md"})).with_usage(900, 20),
        Turn::tool_call("transition", json!({"next": "write"})).with_usage(1_100, 15),
        Turn::tool_call(
            "Write",
            json!({"file_path": "output/summary.md", "content": "# Summary\nThree steps."}),
        )
        .with_usage(1_200, 40),
        Turn::tool_call("transition", json!({"next": "finish"})).with_usage(1_300, 15),
        Turn::text("Done.").with_usage(800, 5),
        Turn::tool_call("complete", json!({"status": "success", "result": "done"}))
            .with_usage(850, 12),
    ]
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    if std::env::var_os("FOOTPRINT_SERVE").is_some() {
        return serve(&runtime);
    }
    if std::env::var_os("FOOTPRINT_DATA_ORDER").is_some() {
        let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
        let (Some(map), Some(base)) = (args.next(), args.next()) else {
            panic!("usage: FOOTPRINT_DATA_ORDER=1 footprint LINK_MAP LOAD_BASE_HEX < TRACE");
        };
        let base = u64::from_str_radix(base.trim_start_matches("0x"), 16).unwrap();
        return data_order(&std::fs::read_to_string(&map).unwrap(), base);
    }
    // Another build of `maestro` (to compare), else this profile's.
    let binary = std::env::var("FOOTPRINT_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_maestro").to_string());
    if std::env::var("FOOTPRINT_CACHE").as_deref() != Ok("keep") {
        drop_from_page_cache(&binary);
        let _warm_up = measure(&runtime, &binary);
    }
    let mut peaks_kb = Vec::new();
    for _ in 0..RUNS {
        let (maxrss_kb, wall) = measure(&runtime, &binary);
        println!("run: peak RSS {maxrss_kb} KiB, wall {wall:.2?}");
        peaks_kb.push(maxrss_kb);
    }
    peaks_kb.sort_unstable();
    println!(
        "maestro run, 3 movements: peak RSS median {:.1} MiB (min {:.1}, max {:.1}) over {RUNS} runs",
        peaks_kb[RUNS / 2] as f64 / 1024.0,
        peaks_kb[0] as f64 / 1024.0,
        peaks_kb[RUNS - 1] as f64 / 1024.0,
    );
}

/// One scripted run of `binary` in a fresh directory: its peak RSS in KiB and its wall time.
fn measure(runtime: &tokio::runtime::Runtime, binary: &str) -> (i64, std::time::Duration) {
    let server = runtime.block_on(ScriptedLlm::start(turns()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("piece.yaml"), PIECE).unwrap();
    std::fs::write(dir.path().join("notes.md"), "# Notes\n".repeat(200)).unwrap();
    let started = Instant::now();
    // Reaped by `reap` with `wait4`, which std's `wait` cannot replace (no resource usage).
    #[allow(clippy::zombie_processes)]
    let child = Command::new(binary)
        .current_dir(dir.path())
        .args(["run", "piece.yaml", "--task", "Summarise the notes"])
        .args(["--workspace", "."])
        .args(["--llm-base-url", &server.base_url()])
        .args(["--model", "scripted-model", "--tool-mode", "native"])
        .env("HOME", dir.path())
        .env_remove("MAESTRO_LLM_BASE_URL")
        .env_remove("MAESTRO_MODEL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (status, maxrss_kb) = reap(child.id());
    let wall = started.elapsed();
    assert_eq!(status, 0, "the run did not complete");
    assert_eq!(runtime.block_on(async { server.remaining() }), 0);
    (maxrss_kb, wall)
}

/// Asks the kernel to drop `path`'s clean pages from the page cache (nothing may map it).
fn drop_from_page_cache(path: &str) {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a plain system call on a descriptor that `file` keeps open; std has no wrapper.
    #[allow(unsafe_code)]
    let failed = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(failed, 0, "posix_fadvise failed");
}

/// `FOOTPRINT_SERVE=1`: serves the same script for 200 runs in a row and prints the base URL
/// and the piece's path, so an outside tool can time `maestro run` itself:
/// `maestro run PIECE --task t --workspace DIR --llm-base-url URL --model scripted-model --tool-mode native`.
fn serve(runtime: &tokio::runtime::Runtime) {
    let server = runtime.block_on(ScriptedLlm::start((0..200).flat_map(|_| turns())));
    let dir = tempfile::tempdir().unwrap().keep();
    std::fs::write(dir.join("piece.yaml"), PIECE).unwrap();
    std::fs::write(dir.join("notes.md"), "# Notes\n".repeat(200)).unwrap();
    println!("{} {}", server.base_url(), dir.display());
    runtime.block_on(std::future::pending::<()>());
}

/// `FOOTPRINT_DATA_ORDER=1 footprint LINK_MAP LOAD_BASE < TRACE`: the binary's read-only
/// constants a run reads, as the input sections that hold them, for `scripts/code-order.sh`.
///
/// TRACE is valgrind's `--tool=lackey --trace-mem=yes` of one run of the binary that the linker
/// described in LINK_MAP (`-Map`, lld's layout), loaded at LOAD_BASE. Every load that falls in
/// `.rodata` marks the input section it falls in. The sections are printed in their order in the
/// binary, the ones the linker merges (constant pools and C strings, which it lays out as one
/// block each) first. Linked in that order, a run's constants share a few pages, where they were
/// otherwise spread over the whole section (docs/benchmarks.md, "Footprint of a run").
fn data_order(map: &str, base: u64) {
    use std::io::BufRead;
    let lines: Vec<MapLine<'_>> = map.lines().filter_map(map_line).collect();
    let sections = rodata_sections(&lines);
    assert!(
        !sections.is_empty(),
        "the link map has no `.rodata` input sections"
    );
    let (start, end) = (sections[0].0, sections.last().map_or(0, |s| s.0 + s.1));
    let text = lines
        .iter()
        .find(|line| line.depth == 0 && line.name == ".text")
        .map(|line| (line.address, line.address + line.size))
        .expect("the link map has no `.text`");
    let mut hot = vec![false; sections.len()];
    let (mut in_text, mut loads) = (0u64, 0u64);
    let stdin = std::io::stdin();
    for line in stdin.lock().split(b'\n') {
        let line = line.unwrap();
        // ` L 04222cc0,8` (a load), ` M …` (a load and a store), `I  04222cc0,3` (an instruction).
        let (kind, rest) = match line.as_slice() {
            [b' ', kind @ (b'L' | b'M'), b' ', rest @ ..] => (*kind, rest),
            [b'I', b' ', b' ', rest @ ..] => (b'I', rest),
            _ => continue,
        };
        let Some((address, size)) = trace_access(rest) else {
            continue;
        };
        let Some(offset) = address.checked_sub(base) else {
            continue;
        };
        if kind == b'I' {
            in_text += u64::from((text.0..text.1).contains(&offset));
            continue;
        }
        if offset + size <= start || offset >= end {
            continue;
        }
        loads += 1;
        let mut i = sections
            .partition_point(|s| s.0 <= offset)
            .saturating_sub(1);
        while i < sections.len() && sections[i].0 < offset + size {
            if sections[i].0 + sections[i].1 > offset {
                hot[i] = true;
            }
            i += 1;
        }
    }
    assert!(
        in_text > 0,
        "no instruction of the trace is in the binary's code at {base:#x}: the base is wrong"
    );
    assert!(loads > 0, "the trace reads nothing of `.rodata`");
    let chosen = || {
        sections
            .iter()
            .zip(&hot)
            .filter(|(_, h)| **h)
            .map(|(s, _)| s)
    };
    let mut seen = std::collections::HashSet::new();
    let merged = chosen().filter(|s| s.3);
    let single = chosen().filter(|s| !s.3);
    for section in merged.chain(single) {
        if seen.insert(section.2) {
            println!("{}", section.2);
        }
    }
    eprintln!(
        "{} of {} sections of `.rodata` read ({} loads)",
        seen.len(),
        sections.len(),
        loads
    );
}

/// One line of lld's link map: its address, size and name, and how deep it is (0 an output
/// section, 1 an input section, 2 a symbol).
struct MapLine<'a> {
    address: u64,
    size: u64,
    depth: usize,
    name: &'a str,
}

/// Reads `VMA LMA Size Align Name` (the name indented by eight more columns at each depth).
fn map_line(line: &str) -> Option<MapLine<'_>> {
    let mut rest = line;
    let mut fields = [0u64; 4];
    for (i, field) in fields.iter_mut().enumerate() {
        rest = rest.trim_start();
        let end = rest.find(' ')?;
        let radix = if i == 3 { 10 } else { 16 };
        *field = u64::from_str_radix(&rest[..end], radix).ok()?;
        rest = &rest[end..];
    }
    let name = rest.trim_start();
    let depth = (rest.len() - name.len()).checked_sub(1)? / 8;
    Some(MapLine {
        address: fields[0],
        size: fields[2],
        depth,
        name,
    })
}

/// `.rodata`'s input sections: address, size, section name, and whether the linker merged it
/// (`<internal>`), sorted by address.
fn rodata_sections<'a>(lines: &[MapLine<'a>]) -> Vec<(u64, u64, &'a str, bool)> {
    let mut output = "";
    let mut sections = Vec::new();
    for line in lines {
        match line.depth {
            0 => output = line.name,
            1 if output == ".rodata" && line.size > 0 => {
                // `file:(section)`; the file may itself hold parentheses (`lib.a(member.o)`).
                let Some(open) = line.name.rfind(":(") else {
                    continue;
                };
                let section = line.name[open + 2..].trim_end_matches(')');
                let merged = line.name.starts_with("<internal>");
                sections.push((line.address, line.size, section, merged));
            }
            _ => {}
        }
    }
    sections.sort_by_key(|s| s.0);
    sections
}

/// `04222cc0,8` as an address and a size.
fn trace_access(text: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(text).ok()?.trim();
    let (address, size) = text.split_once(',')?;
    Some((u64::from_str_radix(address, 16).ok()?, size.parse().ok()?))
}

/// Waits for `pid` and returns its exit code and its own peak resident set in KiB.
fn reap(pid: u32) -> (i32, i64) {
    let mut status = 0;
    // SAFETY: `rusage` is plain data that `wait4` fills in; a zeroed value is valid for it.
    #[allow(unsafe_code)]
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own unreaped child (std's `Child` is never waited on), and both
    // pointers are to live locals. std has no way to read a child's resource usage.
    #[allow(unsafe_code)]
    let reaped = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid as libc::pid_t, "wait4 failed");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, usage.ru_maxrss)
}
