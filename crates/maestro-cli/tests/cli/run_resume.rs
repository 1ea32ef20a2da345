//! `maestro run --resume` after a local run is killed (kill -9) or stopped (Ctrl-C), and
//! `maestro replay` of a finished takt run with a parallel movement: real processes, the real
//! embedded store, the scripted model server.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const WRITER: &str = "\
name: writer
description: writes its notes in several steps, then completes
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: true
    persona: You work.
    instruction: \"{task}\"
    allowed_tools: [Read, Write]
    rules: []
";

const REVIEWERS: &str = "\
name: reviewers
description: two reviewers in parallel, then a fix
max_movements: 5
initial_movement: review
movements:
  - name: review
    parallel:
      - name: arch
        persona: You review the architecture.
        instruction: Review the architecture of {task}.
        rules:
          - condition: approved
          - condition: needs_fix
      - name: tests
        persona: You review the tests.
        instruction: Review the tests of {task}.
        rules:
          - condition: passed
          - condition: failed
    rules:
      - condition: all(\"approved\", \"passed\")
        next: COMPLETE
      - condition: any(\"needs_fix\", \"failed\")
        next: fix
  - name: fix
    persona: You fix.
    instruction: Fix what the reviewers found in {task}.
    rules:
      - condition: Fixed
        next: COMPLETE
";

fn project(piece: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("piece.yaml"), piece).unwrap();
    std::fs::create_dir_all(dir.path().join(".maestro")).unwrap();
    std::fs::write(
        dir.path().join(".maestro/config.yaml"),
        "llm:\n  tool_mode: native\n  model: scripted-model\n",
    )
    .unwrap();
    dir
}

fn maestro(dir: &Path, base_url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir)
        .args(args)
        .env("HOME", dir)
        .env("MAESTRO_LLM_BASE_URL", base_url)
        .env_remove("MAESTRO_MODEL")
        .env_remove("MAESTRO_DB")
        .stdin(Stdio::null());
    cmd
}

fn only_run(dir: &Path) -> Option<PathBuf> {
    let runs: Vec<PathBuf> = std::fs::read_dir(dir.join(".maestro/runs"))
        .ok()?
        .map(|e| e.unwrap().path())
        .collect();
    runs.into_iter().next()
}

fn events(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

/// Polls until `done` holds for the only run's events.
fn until_events(dir: &Path, what: &str, done: impl Fn(&[Value]) -> bool) -> PathBuf {
    let start = Instant::now();
    loop {
        if let Some(run) = only_run(dir)
            && done(&events(&run))
        {
            return run;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "waited for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_local_run_resumes_without_asking_again_what_was_answered() {
    let server = ScriptedLlm::start([
        Turn::tool_call(
            "Write",
            json!({"file_path": "output/one.md", "content": "first\n"}),
        ),
        Turn::tool_call(
            "Write",
            json!({"file_path": "output/two.md", "content": "second\n"}),
        ),
        // In flight when the run is killed: answered to nobody.
        Turn::tool_call("complete", json!({"status": "success", "result": "lost"}))
            .with_delay(Duration::from_secs(5)),
        Turn::tool_call(
            "complete",
            json!({"status": "success", "result": "written after the crash"}),
        ),
    ])
    .await;
    let dir = project(WRITER);
    let mut run = maestro(
        dir.path(),
        &server.base_url(),
        &[
            "run",
            "piece.yaml",
            "--task",
            "Write the notes",
            "--events",
            "jsonl",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // two tool results recorded, and the third model call sent: kill -9 mid tool loop
    until_events(dir.path(), "two tool results", |e| {
        kinds(e).iter().filter(|k| *k == "tool_result").count() == 2
    });
    let start = Instant::now();
    while server.requests().len() < 3 {
        assert!(start.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(20));
    }
    run.kill().unwrap();
    run.wait().unwrap();
    let run_dir = only_run(dir.path()).unwrap();
    let id = run_dir.file_name().unwrap().to_str().unwrap().to_string();

    let out = maestro(dir.path(), &server.base_url(), &["run", "--resume", &id])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "written after the crash"
    );
    assert!(stderr.contains(&format!("run {id} completed")), "{stderr}");

    // every answered request once, plus the one in flight sent again with the same conversation
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[3]["messages"], requests[2]["messages"]);
    // the recorded Writes did not run again: each file written once, as the record says
    let events = events(&run_dir);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let count = |kind: &str| kinds(&events).iter().filter(|k| *k == kind).count();
    assert_eq!(
        (
            count("run_started"),
            count("movement_started"),
            count("tool_call"),
            count("run_resumed"),
            count("run_finished")
        ),
        (1, 1, 3, 1, 1)
    );
    assert_eq!(
        std::fs::read_to_string(run_dir.join("output/one.md")).unwrap(),
        "first\n"
    );
    // the job is in the store, completed
    let show = maestro(
        dir.path(),
        &server.base_url(),
        &["jobs", "show", &id, "--json"],
    )
    .output()
    .unwrap();
    let job: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(job["status"], "completed", "{job}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_run_replays_with_no_model_call_and_a_changed_piece_diverges() {
    let server = ScriptedLlm::start([
        Turn::when_contains(
            "Review the architecture",
            Turn::text("The design holds. [ARCH:1]"),
        ),
        Turn::when_contains(
            "Review the tests",
            Turn::tool_call("Read", json!({"file_path": "piece.yaml"})),
        ),
        Turn::when_contains("name: reviewers", Turn::text("A test fails. [TESTS:2]")),
        Turn::when_contains("Fix what the reviewers", Turn::text("Fixed it. [FIX:1]")),
    ])
    .await;
    let dir = project(REVIEWERS);
    let out = maestro(
        dir.path(),
        &server.base_url(),
        &[
            "run",
            "piece.yaml",
            "--task",
            "the parser",
            "--workspace",
            ".",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = server.requests().len();
    assert_eq!(sent, 4);
    let id = only_run(dir.path())
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();

    // no endpoint at all: a replay must not need one
    let out = maestro(dir.path(), "http://127.0.0.1:9/v1", &["replay", &id])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("the same movements, transitions and status (completed)")
            && stderr.contains("0 model calls, 0 tool runs"),
        "{stderr}"
    );
    assert_eq!(server.requests().len(), sent);

    // without the store, the run's events.jsonl is replayed, and no store is created
    let db = dir.path().join(".maestro/maestro.db");
    assert!(db.is_file());
    let kept = dir.path().join("kept.db");
    std::fs::rename(&db, &kept).unwrap();
    let out = maestro(dir.path(), "http://127.0.0.1:9/v1", &["replay", &id])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("0 model calls, 0 tool runs"), "{stderr}");
    assert!(!db.exists(), "a replay created a store");
    std::fs::rename(&kept, &db).unwrap();

    // the piece now sends the fix elsewhere: the replay names where it leaves the record
    std::fs::write(
        dir.path().join("piece.yaml"),
        REVIEWERS.replace(
            "      - condition: Fixed\n        next: COMPLETE",
            "      - condition: Fixed\n        next: ABORT",
        ),
    )
    .unwrap();
    let out = maestro(dir.path(), "http://127.0.0.1:9/v1", &["replay", &id])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "replay of run {id} diverged: the run left its record at seq 1"
        )),
        "{stderr}"
    );
}

/// `--max-iterations` decides where a run goes (a movement that uses it up ends the run), so
/// the run records it and a replay keeps it: a replay without the flag goes where the run went,
/// and asks nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_with_its_own_iteration_limit_replays_with_that_limit() {
    let server = ScriptedLlm::start([
        Turn::tool_call("Read", json!({"file_path": "piece.yaml"})),
        Turn::tool_call("Read", json!({"file_path": "piece.yaml"})),
    ])
    .await;
    let dir = project(WRITER);
    let out = maestro(
        dir.path(),
        &server.base_url(),
        &[
            "run",
            "piece.yaml",
            "--task",
            "read it",
            "--workspace",
            ".",
            "--max-iterations",
            "2",
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(server.requests().len(), 2);
    let run = only_run(dir.path()).unwrap();
    let recorded = events(&run);
    assert_eq!(
        recorded[0]["max_iterations_per_movement"], 2,
        "{recorded:?}"
    );
    assert!(
        recorded
            .iter()
            .any(|e| e["type"] == "movement_finished" && e["reason"] == "max_iterations"),
        "{recorded:?}"
    );
    let id = run.file_name().unwrap().to_str().unwrap().to_string();

    let out = maestro(dir.path(), "http://127.0.0.1:9/v1", &["replay", &id])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("0 model calls"), "{stderr}");
    assert_eq!(server.requests().len(), 2);
}

/// A run started from a piece file named relative to where it was started resumes and replays
/// from any other directory: the job keeps the file's absolute path.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_of_a_relative_piece_file_replays_from_another_directory() {
    let server = ScriptedLlm::start([Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "done"}),
    )])
    .await;
    let dir = project(WRITER);
    let out = maestro(
        dir.path(),
        &server.base_url(),
        &["run", "piece.yaml", "--task", "finish", "--workspace", "."],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let run = only_run(dir.path()).unwrap();
    let recorded = events(&run);
    let piece_file = dir.path().canonicalize().unwrap().join("piece.yaml");
    assert_eq!(
        recorded[0]["piece_file"].as_str().map(PathBuf::from),
        Some(piece_file)
    );
    let id = run.file_name().unwrap().to_str().unwrap().to_string();

    let elsewhere = tempfile::tempdir().unwrap();
    let db = format!(
        "sqlite://{}",
        dir.path().join(".maestro/maestro.db").display()
    );
    let runs = dir.path().join(".maestro/runs");
    let out = maestro(
        elsewhere.path(),
        "http://127.0.0.1:9/v1",
        &[
            "replay",
            &id,
            "--db",
            &db,
            "--runs-dir",
            runs.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("0 model calls"), "{stderr}");
}
