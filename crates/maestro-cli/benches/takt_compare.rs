//! Maestro's side of the comparison with TAKT 0.60 itself (`scripts/takt-compare.sh`, figures in
//! docs/benchmarks.md, "Side by side with TAKT 0.60").
//!
//! `cargo bench -p maestro-cli --bench takt_compare` runs the `maestro` binary of the bench
//! profile (release) on builtin TAKT v0.60 workflows, each on one fixed path, against the
//! scripted model server on 127.0.0.1, the same path `scripts/takt-compare.sh` scripts for
//! TAKT's mock provider:
//!
//! - `compound-eye`: the parallel step `evaluate` (sub-steps `eye1` and `eye2`, each writing its
//!   report and ending `done`), then `synthesize`, then COMPLETE;
//! - `backend`: its `workflow_call` step `develop` into `development-core`, whose `plan` writes
//!   `plan.md` and finds that the task is a question (the rule leading to COMPLETE), so the
//!   call returns COMPLETE and the run completes.
//!
//! For each workflow it prints the step order (sub-steps of a parallel step in brackets), the
//! model calls per step and in all, the final status, and the median wall time and peak
//! resident set (`ru_maxrss` from `wait4`) of the `maestro run` process over the runs.
//!
//! Environment: `TAKT_COMPARE_WORKFLOWS` (comma-separated, default `compound-eye,backend`),
//! `TAKT_COMPARE_RUNS` (default 5), `TAKT_COMPARE_BIN` (another build of `maestro`). A run that
//! does not complete is reported with its record's reason, and the bench exits 1 after the other
//! workflows ran.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/takt_paths.rs"]
mod takt_paths;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use maestro_testkit::ScriptedLlm;
use takt_paths::{
    PATHS, TaktPath, calls_by_step, events_of, finish_of, place_workflow, step_order,
};

/// What one run did, read from its record.
struct Outcome {
    exit: i32,
    maxrss_kb: i64,
    wall: Duration,
    steps: String,
    calls_by_step: BTreeMap<String, usize>,
    calls_sent: usize,
    turns_left: usize,
    status: String,
    result: String,
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let binary = std::env::var("TAKT_COMPARE_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_maestro").to_string());
    let runs: usize = std::env::var("TAKT_COMPARE_RUNS")
        .ok()
        .map(|r| r.parse().expect("TAKT_COMPARE_RUNS must be a whole number"))
        .unwrap_or(5)
        .max(1);
    let wanted = std::env::var("TAKT_COMPARE_WORKFLOWS")
        .unwrap_or_else(|_| "compound-eye,backend".to_string());
    let mut all_completed = true;
    for name in wanted.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(path) = PATHS.iter().find(|p| p.workflow == name) else {
            let known: Vec<&str> = PATHS.iter().map(|p| p.workflow).collect();
            panic!("TAKT_COMPARE_WORKFLOWS names `{name}`; the scripted paths are {known:?}");
        };
        // One run first that is not counted, so every counted run finds the binary paged in.
        let first = run_once(&runtime, &binary, path);
        if first.exit != 0 || first.turns_left != 0 {
            all_completed = false;
            println!(
                "maestro {name}: did not complete (exit {}, status {}, {} scripted answers left): {}",
                first.exit, first.status, first.turns_left, first.result
            );
            println!("maestro {name}: steps {} -> {}", first.steps, first.status);
            continue;
        }
        let mut outcomes = Vec::new();
        for _ in 0..runs {
            let outcome = run_once(&runtime, &binary, path);
            assert_eq!(
                outcome.exit, 0,
                "{name}: a counted run failed: {}",
                outcome.result
            );
            assert_eq!(
                outcome.steps, first.steps,
                "{name}: the path changed between runs"
            );
            outcomes.push(outcome);
        }
        report(name, &first, &outcomes);
    }
    if !all_completed {
        std::process::exit(1);
    }
}

fn report(name: &str, first: &Outcome, outcomes: &[Outcome]) {
    println!("maestro {name}: steps {} -> {}", first.steps, first.status);
    let per_step: Vec<String> = first
        .calls_by_step
        .iter()
        .map(|(step, calls)| format!("{step} {calls}"))
        .collect();
    println!(
        "maestro {name}: model calls {} ({})",
        first.calls_sent,
        per_step.join(", ")
    );
    let mut walls: Vec<f64> = outcomes.iter().map(|o| o.wall.as_secs_f64()).collect();
    walls.sort_by(f64::total_cmp);
    let mut peaks: Vec<i64> = outcomes.iter().map(|o| o.maxrss_kb).collect();
    peaks.sort_unstable();
    let n = outcomes.len();
    println!(
        "maestro {name}: wall median {:.2} s (min {:.2}, max {:.2}), peak RSS median {:.1} MiB (min {:.1}, max {:.1}) over {n} runs",
        walls[n / 2],
        walls[0],
        walls[n - 1],
        peaks[n / 2] as f64 / 1024.0,
        peaks[0] as f64 / 1024.0,
        peaks[n - 1] as f64 / 1024.0,
    );
}

/// One scripted `maestro run` of `path` in a fresh directory.
fn run_once(runtime: &tokio::runtime::Runtime, binary: &str, path: &TaktPath) -> Outcome {
    let server = runtime.block_on(ScriptedLlm::start((path.turns)()));
    let dir = tempfile::tempdir().unwrap();
    let workflow_file = place_workflow(dir.path(), path.workflow);
    let started = Instant::now();
    // Reaped by `reap` with `wait4`, which std's `wait` cannot replace (no resource usage).
    #[allow(clippy::zombie_processes)]
    let child = Command::new(binary)
        .current_dir(dir.path())
        .args(["run", &workflow_file, "--task", path.task])
        .args(["--workspace", "."])
        .args(["--llm-base-url", &server.base_url()])
        .args(["--model", "scripted-model", "--tool-mode", "native"])
        .env("HOME", dir.path())
        .env_remove("MAESTRO_LLM_BASE_URL")
        .env_remove("MAESTRO_MODEL")
        .env_remove("MAESTRO_API_KEY")
        .env_remove("TAKT_CONFIG_DIR")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("stderr.txt")).unwrap())
        .spawn()
        .unwrap();
    let (exit, maxrss_kb) = reap(child.id());
    let wall = started.elapsed();
    let events = events_of(dir.path());
    let stderr = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap_or_default();
    let (status, mut result) =
        finish_of(&events).unwrap_or_else(|| ("no record".to_string(), String::new()));
    if exit != 0 {
        // What the run printed last says why it stopped when the record does not.
        let last = stderr
            .lines()
            .rev()
            .find(|l| l.contains("error"))
            .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
            .unwrap_or("");
        result = format!("{result} {last}").trim().to_string();
    }
    Outcome {
        exit,
        maxrss_kb,
        wall,
        steps: step_order(&events),
        calls_by_step: calls_by_step(&events),
        calls_sent: server.requests().len(),
        turns_left: server.remaining(),
        status,
        result,
    }
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
