//! Peak memory of a whole `maestro run` (results in docs/benchmarks.md).
//!
//! `cargo bench -p maestro-cli --bench footprint` runs the `maestro` binary of the bench profile
//! (release) on a 3-movement maestro-dialect piece against the scripted model server on
//! 127.0.0.1: the first movement reads a file, the second writes one, the third completes, so
//! the run sets up its tools, streams six answers and writes its record. Each run is reaped with
//! `wait4`, whose resource usage gives that process's peak resident set (`ru_maxrss`). It prints
//! every run's figure and the median. `FOOTPRINT_BIN=path` measures another build of `maestro`;
//! `FOOTPRINT_SERVE=1` only serves the script (see [`serve`]).
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
