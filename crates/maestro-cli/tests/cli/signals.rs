//! `maestro run` under a stop signal: the real binary against a scripted model that is slow to
//! answer, stopped with SIGTERM or SIGINT while it waits. The run record must still end with
//! `run_finished`, status `failed`, reason `cancelled`.

use std::time::{Duration, Instant};

use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::Value;

use crate::support;

async fn stopped_by(signal: &'static str) -> (std::process::ExitStatus, Vec<Value>) {
    // The model starts answering, then falls silent for far longer than the test waits.
    let server = ScriptedLlm::start([Turn::stall(Duration::from_secs(120))]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("piece.yaml"),
        "name: slow\ndescription: one slow movement\nmax_movements: 3\ninitial_movement: work\n\
         movements:\n  - name: work\n    edit: false\n    persona: You work.\n    \
         instruction: \"{task}\"\n    allowed_tools: [Read]\n    rules:\n      - condition: done\n        \
         next: work\n    default_next: ABORT\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"))
        .current_dir(dir.path())
        .args(["run", "piece.yaml", "--task", "Wait for me"])
        .args(["--llm-base-url", &server.base_url()])
        .args(["--model", "scripted-model", "--tool-mode", "native"])
        .env("HOME", dir.path())
        .env_remove("MAESTRO_LLM_BASE_URL")
        .env_remove("MAESTRO_MODEL")
        .env_remove("MAESTRO_API_KEY")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while server.requests().is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            panic!("maestro run ended ({status}) before calling the model:\n{stderr}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "maestro run never called the model"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the stalled stream's first chunk arrive: the run is now waiting on the model.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("maestro run did not stop within 30 s of SIG{signal}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    (status, support::events(&support::only_run(dir.path())))
}

/// The record ends with `run_finished{status: failed, reason: cancelled}` and the exit code is
/// the one of a failed run.
fn assert_cancelled(status: std::process::ExitStatus, events: &[Value]) {
    let last = events.last().unwrap();
    assert_eq!(last["type"], "run_finished", "events: {events:#?}");
    assert_eq!(last["reason"], "cancelled", "{last}");
    assert_eq!(last["status"], "failed", "{last}");
    assert_eq!(status.code(), Some(1), "exit status {status:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_the_run_as_cancelled_with_its_record() {
    let (status, events) = stopped_by("TERM").await;
    assert_cancelled(status, &events);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_ends_the_run_as_cancelled_with_its_record() {
    let (status, events) = stopped_by("INT").await;
    assert_cancelled(status, &events);
}
