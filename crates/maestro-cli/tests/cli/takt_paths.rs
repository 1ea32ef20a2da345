//! The paths Maestro is compared on with TAKT 0.60 itself (`scripts/takt-compare.sh`, the
//! `takt_compare` bench) keep running: the real binary, a builtin workflow, the scripted model
//! server on 127.0.0.1, and no more model calls per step than TAKT 0.60 made on the same path
//! (docs/benchmarks.md, "Side by side with TAKT 0.60").

#[path = "../../benches/support/takt_paths.rs"]
mod compared;

use std::collections::BTreeMap;

use compared::{PATHS, calls_by_step, events_of, finish_of, place_workflow, step_order};
use maestro_testkit::ScriptedLlm;

/// Runs the compared path of `workflow`: its record's events and the calls the server got.
async fn run_path(workflow: &str) -> (Vec<serde_json::Value>, usize, usize, String) {
    let path = PATHS.iter().find(|p| p.workflow == workflow).unwrap();
    let server = ScriptedLlm::start((path.turns)()).await;
    let dir = tempfile::tempdir().unwrap();
    let workflow_file = place_workflow(dir.path(), path.workflow);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir.path())
        .args(["run", &workflow_file, "--task", path.task])
        .args(["--workspace", "."])
        .args(["--llm-base-url", &server.base_url()])
        .args(["--model", "scripted-model", "--tool-mode", "native"])
        .env("HOME", dir.path())
        .env_remove("MAESTRO_LLM_BASE_URL")
        .env_remove("MAESTRO_MODEL")
        .env_remove("MAESTRO_API_KEY")
        .env_remove("TAKT_CONFIG_DIR");
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "stderr:\n{stderr}");
    (
        events_of(dir.path()),
        server.requests().len(),
        server.remaining(),
        stderr,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn compound_eye_runs_the_compared_path_within_takts_calls() {
    let (events, sent, left, stderr) = run_path("compound-eye").await;
    assert_eq!(left, 0, "every scripted answer is used\n{stderr}");
    assert_eq!(step_order(&events), "evaluate[eye1,eye2] -> synthesize");
    assert_eq!(
        finish_of(&events).map(|(status, _)| status).as_deref(),
        Some("completed")
    );
    let calls = calls_by_step(&events);
    assert_eq!(calls.values().sum::<usize>(), sent, "{calls:?}");
    // TAKT 0.60.0 on the same path: each eye makes its turn, its report and a status judgment
    // (3 calls), `synthesize`, with one rule, its turn and its report (2).
    let takt = BTreeMap::from([("eye1", 3), ("eye2", 3), ("synthesize", 2)]);
    for (step, ours) in &calls {
        let theirs = takt.get(step.as_str()).copied();
        assert!(
            theirs.is_some_and(|t| *ours <= t),
            "step {step}: {ours} calls, TAKT {theirs:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn backend_runs_the_compared_path_through_its_workflow_call_within_takts_calls() {
    let (events, sent, left, stderr) = run_path("backend").await;
    assert_eq!(left, 0, "every scripted answer is used\n{stderr}");
    assert_eq!(step_order(&events), "develop/plan");
    assert_eq!(
        finish_of(&events).map(|(status, _)| status).as_deref(),
        Some("completed")
    );
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|t| t.starts_with("workflow_call"))
        .collect();
    assert_eq!(kinds, ["workflow_call_started", "workflow_call_returned"]);
    let calls = calls_by_step(&events);
    assert_eq!(calls.values().sum::<usize>(), sent, "{calls:?}");
    // TAKT 0.60.0 on the same path: `plan` makes its turn, its report and a status judgment.
    assert!(
        calls.get("develop/plan").is_some_and(|ours| *ours <= 3),
        "{calls:?}"
    );
    assert_eq!(calls.len(), 1, "the call step makes no call: {calls:?}");
}
