//! Workers that stop: drained, handed back, paused past their lease, killed. Real `maestro
//! worker` processes and signals, a real SQLite store, the scripted model server.

use std::time::Duration;

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{
    Project, complete, exited, signal, stop_worker, stored_events, until_requests,
};

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_run_in_flight_finish() {
    let server = ScriptedLlm::start([
        complete("finished while draining").with_delay(Duration::from_millis(1500))
    ])
    .await;
    let project = Project::new();
    let id = project.submit("Finish", &[]).await;
    let worker = project.worker(&server.base_url(), &["--drain-secs", "20"]);
    until_requests(&server, 1).await;
    signal(&worker, "TERM");
    let (status, err) = exited(worker, Duration::from_secs(20)).await;
    assert!(status.success(), "{err}");
    assert!(err.contains("1 finished"), "{err}");
    let job = project.show(&id).await;
    assert_eq!(
        (&job["status"], &job["result"]["result"]),
        (&json!("completed"), &json!("finished while draining"))
    );
}

/// A run that does not finish in time is handed back: queued again, its attempt not counted,
/// and the next worker resumes it.
async fn handed_back(second_signal: bool) {
    let server = ScriptedLlm::start([Turn::stall(Duration::from_secs(120))]).await;
    let project = Project::new();
    let id = project.submit("Never finishes", &[]).await;
    let drain = if second_signal { "60" } else { "1" };
    let worker = project.worker(&server.base_url(), &["--drain-secs", drain]);
    until_requests(&server, 1).await;
    signal(&worker, "TERM");
    if second_signal {
        tokio::time::sleep(Duration::from_millis(300)).await;
        signal(&worker, "TERM");
    }
    let (status, err) = exited(worker, Duration::from_secs(15)).await;
    assert!(status.success(), "{err}");
    assert!(err.contains("1 handed back"), "{err}");
    let job = project.show(&id).await;
    assert_eq!(
        (&job["status"], &job["attempt"]),
        (&json!("queued"), &json!(0))
    );
    let events = project.maestro(&["jobs", "events", &id]).await;
    let text = String::from_utf8(events.stdout).unwrap();
    assert!(!text.contains("run_finished"), "{text}");

    // The next worker resumes the run from its stored events: the interrupted model call is
    // sent again, nothing recorded is repeated, and the stream goes on without a gap.
    server.push(complete("resumed and done"));
    let next = project.worker(&server.base_url(), &[]);
    project.until_completed(&id, 1, "resumed and done").await;
    let events = project.maestro(&["jobs", "events", &id]).await;
    let events: Vec<Value> = String::from_utf8(events.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let count = |kind: &str| events.iter().filter(|e| e["type"] == kind).count();
    assert_eq!(
        (
            count("run_started"),
            count("run_resumed"),
            count("run_finished")
        ),
        (1, 1, 1)
    );
    assert_eq!(server.requests().len(), 2);
    stop_worker(next, "1 finished").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_drain_timeout_hands_the_run_back() {
    handed_back(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigterm_hands_the_run_back_at_once() {
    handed_back(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_paused_past_its_lease_writes_nothing_after_another_took_its_job() {
    // The paused worker's answer arrives while it is stopped; it reads it on SIGCONT, long after
    // the second worker has taken the job over, and must not record it.
    let server = ScriptedLlm::start([
        complete("from the paused worker").with_delay(Duration::from_millis(500)),
        complete("finished by the second worker"),
    ])
    .await;
    let project = Project::new();
    let id = project.submit("Survive a pause", &[]).await;
    let paused = project.worker(&server.base_url(), &["--name", "paused"]);
    until_requests(&server, 1).await;
    signal(&paused, "STOP");
    // Past the 3 s lease: the second worker takes the job over and finishes it.
    let second = project.worker(&server.base_url(), &["--name", "second"]);
    project
        .until_completed(&id, 2, "finished by the second worker")
        .await;
    let before = stored_events(&project, &id).await;
    signal(&paused, "CONT");
    // The paused worker notices its lost lease within a heartbeat and stops that run.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_worker(paused, "0 finished, 0 failed, 1 lost or cancelled").await;
    stop_worker(second, "1 finished").await;

    let after = stored_events(&project, &id).await;
    assert_eq!(after, before, "nothing was written after the takeover");
    let seqs: Vec<i64> = after.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=after.len() as i64).collect::<Vec<_>>());
    // Every event of the first claim precedes every event of the second.
    let fences: Vec<i64> = after.iter().map(|e| e.fence).collect();
    let mut sorted = fences.clone();
    sorted.sort();
    assert_eq!(fences, sorted);
    assert_eq!((fences[0], *fences.last().unwrap()), (1, 2));
}

/// A worker is killed (SIGKILL) while its model call is in flight; another takes the job over.
/// With `auto`, the classifier's choice is part of the record and is not asked for again.
async fn killed_mid_movement(piece: &str) {
    let mut turns = Vec::new();
    if piece == "auto" {
        turns.push(Turn::json(
            json!({"piece": "one", "reason": "the only piece"}),
        ));
    }
    let before = turns.len();
    turns.extend([
        Turn::tool_call("Read", json!({"file_path": "input/notes.txt"})),
        // In flight when the first worker dies.
        complete("never delivered").with_delay(Duration::from_secs(5)),
        complete("finished after the crash"),
    ]);
    let server = ScriptedLlm::start(turns).await;
    let project = Project::new();
    let id = project.submit_piece(piece, "Read the notes", &[]).await;
    let mut first = project.worker(&server.base_url(), &["--name", "doomed"]);
    until_requests(&server, before + 2).await;
    first.kill().unwrap();
    first.wait().unwrap();
    let second = project.worker(&server.base_url(), &["--name", "rescuer"]);
    project
        .until_completed(&id, 2, "finished after the crash")
        .await;
    stop_worker(second, "1 finished").await;

    // The answered call was not sent again; the one in flight was, with the same conversation.
    let requests = server.requests();
    assert_eq!(requests.len(), before + 3);
    assert_eq!(
        requests[before + 2]["messages"],
        requests[before + 1]["messages"]
    );
    let events = stored_events(&project, &id).await;
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as i64).collect::<Vec<_>>());
    let count = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    assert_eq!(
        (
            count("run_started"),
            count("movement_started"),
            count("run_resumed"),
            count("run_finished")
        ),
        (1, 1, 1, 1)
    );
    // The classifier's call is in the job's record, right after `run_started`, and only once.
    let classifier: Vec<(i64, &str)> = events
        .iter()
        .filter(|e| e.payload["purpose"] == "classifier")
        .map(|e| (e.seq, e.kind.as_str()))
        .collect();
    if piece == "auto" {
        assert_eq!(classifier, vec![(2, "llm_request"), (3, "llm_response")]);
    } else {
        assert_eq!(classifier, vec![]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_movement_is_replaced_and_nothing_answered_is_asked_again() {
    killed_mid_movement("one").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_classified_job_resumes_with_the_piece_it_started_with() {
    killed_mid_movement("auto").await;
}
