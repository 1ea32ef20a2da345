//! A TAKT workflow-call run killed with SIGKILL inside the called workflow: `maestro run
//! --resume` goes on inside the call without sending a recorded model call again, and
//! `maestro replay` drives the finished run again with no model call. Real processes, the
//! real embedded store, the scripted model server.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::Value;

const PARENT: &str = "\
name: parent
max_steps: 10
initial_step: plan
steps:
  - name: plan
    persona: planner
    edit: false
    instruction: Plan the change.
    rules:
      - condition: Planned
        next: build
  - name: build
    kind: workflow_call
    call: child
    rules:
      - condition: COMPLETE
        next: wrap-up
      - condition: ABORT
        next: ABORT
  - name: wrap-up
    persona: planner
    edit: false
    instruction: Sum up.
    rules:
      - condition: Done
        next: COMPLETE
";

const CHILD: &str = "\
name: child
subworkflow:
  callable: true
initial_step: write
steps:
  - name: write
    persona: coder
    edit: false
    instruction: Write it.
    rules:
      - condition: Written
        next: check
  - name: check
    persona: coder
    edit: false
    instruction: Check it.
    rules:
      - condition: Good
        next: COMPLETE
";

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let wf = dir.path().join("workflows");
    std::fs::create_dir_all(&wf).unwrap();
    std::fs::write(wf.join("parent.yaml"), PARENT).unwrap();
    std::fs::write(wf.join("child.yaml"), CHILD).unwrap();
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
        .env_remove("TAKT_CONFIG_DIR")
        .env("MAESTRO_LLM_BASE_URL", base_url)
        .env_remove("MAESTRO_MODEL")
        .env_remove("MAESTRO_DB")
        .stdin(Stdio::null());
    cmd
}

fn only_run(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir.join(".maestro/runs"))
        .ok()?
        .map(|e| e.unwrap().path())
        .next()
}

fn events(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

fn started(events: &[Value]) -> Vec<String> {
    of_type(events, "movement_started")
        .iter()
        .map(|e| e["movement"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_call_run_killed_inside_the_called_workflow_resumes_and_replays_without_model_calls()
 {
    let server = ScriptedLlm::start([
        Turn::text("Planned.\n[PLAN:1]"),
        Turn::text("Written.\n[WRITE:1]"),
        // In flight when the run is killed: answered to nobody.
        Turn::text("lost\n[CHECK:1]").with_delay(Duration::from_secs(5)),
        Turn::text("Good.\n[CHECK:1]"),
        Turn::text("Done.\n[WRAP-UP:1]"),
    ])
    .await;
    let dir = project();
    let mut run = maestro(
        dir.path(),
        &server.base_url(),
        &[
            "run",
            "workflows/parent.yaml",
            "--task",
            "Build it",
            "--events",
            "jsonl",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Inside the called workflow: `build/check` started and its model call sent.
    let start = Instant::now();
    loop {
        let inside = only_run(dir.path())
            .is_some_and(|r| started(&events(&r)).iter().any(|m| m == "build/check"));
        if inside && server.requests().len() == 3 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "waited for build/check's call"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // `Child::kill` is SIGKILL on Unix.
    run.kill().unwrap();
    run.wait().unwrap();
    let run_dir = only_run(dir.path()).unwrap();
    let id = run_dir.file_name().unwrap().to_str().unwrap().to_string();
    let before = events(&run_dir);
    assert!(of_type(&before, "run_finished").is_empty());
    assert_eq!(of_type(&before, "workflow_call_started").len(), 1);
    assert!(of_type(&before, "workflow_call_returned").is_empty());

    let out = maestro(dir.path(), &server.base_url(), &["run", "--resume", &id])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("run {id} completed")), "{stderr}");

    // Every answered call once; only the one in flight is sent again, with the same
    // conversation.
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    assert_eq!(requests[3]["messages"], requests[2]["messages"]);
    let texts: Vec<String> = requests.iter().map(|r| r["messages"].to_string()).collect();
    for (i, step) in ["Plan the change.", "Write it.", "Sum up."]
        .iter()
        .enumerate()
    {
        assert_eq!(
            texts.iter().filter(|t| t.contains(step)).count(),
            1,
            "step {i} ({step}) was asked once"
        );
    }

    let events = events(&run_dir);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        started(&events),
        ["plan", "build/write", "build/check", "wrap-up"],
        "the visit cut short by the kill goes on from its record, inside the call"
    );
    assert_eq!(of_type(&events, "run_resumed").len(), 1);
    assert_eq!(of_type(&events, "workflow_call_started").len(), 1);
    let returned = of_type(&events, "workflow_call_returned");
    assert_eq!(returned.len(), 1);
    assert_eq!(returned[0]["movement"], "build");
    assert_eq!(returned[0]["result"], "COMPLETE");
    let finished = of_type(&events, "run_finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["status"], "completed");

    // No endpoint at all: the replay needs none and makes no model call.
    let sent = server.requests().len();
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
}
