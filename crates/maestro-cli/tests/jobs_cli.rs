//! The job commands end to end: `maestro submit`, real `maestro worker` processes, `maestro jobs
//! …` and `maestro workers`, on a real SQLite file (and a real PostgreSQL cluster), against the
//! scripted model server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const PIECE: &str = "\
name: one
description: one movement that completes
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: false
    persona: You work.
    instruction: \"{task}\"
    allowed_tools: [Read]
    rules: []
";

/// A project directory (also HOME) with the piece `one` in `pieces/` and native tool calls.
struct Project {
    dir: tempfile::TempDir,
    db: Option<String>,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pieces")).unwrap();
        std::fs::write(dir.path().join("pieces/one.yaml"), PIECE).unwrap();
        std::fs::create_dir_all(dir.path().join(".maestro")).unwrap();
        std::fs::write(
            dir.path().join(".maestro/config.yaml"),
            "llm:\n  tool_mode: native\n",
        )
        .unwrap();
        Project { dir, db: None }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_maestro"));
        cmd.current_dir(self.path())
            .args(args)
            .env("HOME", self.path())
            .env_remove("MAESTRO_LLM_BASE_URL")
            .env_remove("MAESTRO_MODEL")
            .env_remove("MAESTRO_API_KEY")
            .env_remove("MAESTRO_DB");
        if let Some(db) = &self.db {
            cmd.args(["--db", db]);
        }
        cmd
    }

    async fn maestro(&self, args: &[&str]) -> Output {
        let mut cmd = self.command(args);
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap()
    }

    /// `maestro submit one --task TASK EXTRA…`: the job id.
    async fn submit(&self, task: &str, extra: &[&str]) -> String {
        let mut args = vec!["submit", "one", "--task", task];
        args.extend(extra);
        let out = self.maestro(&args).await;
        assert!(out.status.success(), "{}", stderr(&out));
        let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert_eq!(id.len(), 36, "a UUID: {id}");
        id
    }

    fn worker(&self, base_url: &str, extra: &[&str]) -> Child {
        let mut cmd = self.command(&["worker", "--llm-base-url", base_url]);
        cmd.args(["--model", "scripted-model", "--lease-secs", "3"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    }

    async fn show(&self, id: &str) -> Value {
        let out = self.maestro(&["jobs", "show", id, "--json"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Polls `jobs show` until `done` holds for the job, at most 30 s.
    async fn until(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let job = self.show(id).await;
            if done(&job) {
                return job;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "job never {what}: {job}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits for the worker to exit (at most `within`); its status and stderr.
async fn exited(mut child: Child, within: Duration) -> (ExitStatus, String) {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
                return (status, err);
            }
            if Instant::now() > deadline {
                child.kill().unwrap();
                let mut err = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
                panic!("the worker did not exit within {within:?}; stderr:\n{err}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap()
}

/// SIGTERM to an idle worker: it exits 0 and its last line counts what it did.
async fn stop_worker(worker: Child, summary: &str) {
    signal(&worker, "TERM");
    let (status, err) = exited(worker, Duration::from_secs(10)).await;
    assert!(status.success(), "{err}");
    assert!(err.contains(summary), "{err}");
}

async fn until_requests(server: &ScriptedLlm, n: usize) {
    let started = Instant::now();
    while server.requests().len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the model saw {} requests, not {n}",
            server.requests().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn complete(result: &str) -> Turn {
    Turn::tool_call("complete", json!({"status": "success", "result": result}))
}

/// Submit, a worker runs the job to `completed`; list, show, events and wait agree with the
/// run's own record.
async fn a_job_runs_to_completed(project: &Project) {
    let server = ScriptedLlm::start([complete("all done")]).await;
    let id = project.submit("Say done", &["--priority", "2"]).await;
    let queued = project.show(&id).await;
    assert_eq!(
        (&queued["status"], &queued["piece"], &queued["attempt"]),
        (&json!("queued"), &json!("one"), &json!(0))
    );
    let worker = project.worker(&server.base_url(), &["--name", "w1"]);
    let wait = project
        .maestro(&["jobs", "wait", &id, "--timeout", "30"])
        .await;
    assert_eq!(wait.status.code(), Some(0), "{}", stderr(&wait));

    let workers = project.maestro(&["workers", "--json"]).await;
    let live: Value = serde_json::from_slice(&workers.stdout).unwrap();
    assert_eq!(
        (&live["name"], &live["profile"], &live["running"]),
        (&json!("w1"), &json!("default"), &json!([]))
    );

    let list = project.maestro(&["jobs", "list", "--json"]).await;
    let lines: Vec<Value> = String::from_utf8(list.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let job = project.show(&id).await;
    assert_eq!(lines, vec![job.clone()]);
    let keys: Vec<&str> = job
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "id",
            "status",
            "piece",
            "parent_id",
            "attempt",
            "created_at",
            "updated_at",
            "result",
            "reason",
            "question",
            "schedule_id",
            "scheduled_for"
        ]
    );
    assert_eq!(
        (&job["status"], &job["attempt"], &job["result"]["result"]),
        (&json!("completed"), &json!(1), &json!("all done"))
    );
    let completed = project
        .maestro(&["jobs", "list", "--status", "completed"])
        .await;
    assert!(
        String::from_utf8(completed.stdout)
            .unwrap()
            .starts_with(&format!("{id}  completed")),
    );

    // The stored events are the run record's events.jsonl, line for line.
    let run_dir = PathBuf::from(job["result"]["run_dir"].as_str().unwrap());
    let on_disk: Vec<Value> = std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events = project.maestro(&["jobs", "events", &id]).await;
    let stored: Vec<Value> = String::from_utf8(events.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(stored, on_disk);
    assert_eq!(stored.last().unwrap()["type"], "run_finished");
    let after = project
        .maestro(&["jobs", "events", &id, "--after", "2", "--follow"])
        .await;
    assert_eq!(
        String::from_utf8(after.stdout).unwrap().lines().count(),
        on_disk.len() - 2
    );

    stop_worker(worker, "stopped: 1 finished, 0 failed").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_and_a_worker_run_a_job_to_completed_on_sqlite() {
    let project = Project::new();
    a_job_runs_to_completed(&project).await;
    // No --db, no MAESTRO_DB, no store.url: the project's embedded store.
    assert!(project.path().join(".maestro/maestro.db").is_file());
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn submit_and_a_worker_run_a_job_to_completed_on_postgres() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let mut project = Project::new();
    project.db = Some(cluster.url());
    a_job_runs_to_completed(&project).await;
    assert!(!project.path().join(".maestro/maestro.db").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_refuses_a_piece_that_does_not_exist() {
    let project = Project::new();
    let out = project
        .maestro(&["submit", "nosuch", "--task", "t", "--json"])
        .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no piece file or piece named `nosuch`"),
        "{}",
        stderr(&out)
    );
    let json = project
        .maestro(&["submit", "auto", "--task", "t", "--json"])
        .await;
    let id: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        project.show(id["id"].as_str().unwrap()).await["piece"],
        "auto"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_running_job_stops_within_two_seconds_and_the_worker_goes_on() {
    let server = ScriptedLlm::start([
        Turn::stall(Duration::from_secs(120)),
        complete("the second job"),
    ])
    .await;
    let project = Project::new();
    let first = project.submit("Wait for me", &[]).await;
    let second = project.submit("Then me", &[]).await;
    let worker = project.worker(&server.base_url(), &[]);
    until_requests(&server, 1).await;
    let events_before = project.maestro(&["jobs", "events", &first]).await.stdout;

    let cancelled_at = Instant::now();
    let cancel = project.maestro(&["jobs", "cancel", &first]).await;
    assert_eq!(
        String::from_utf8(cancel.stdout).unwrap(),
        format!("cancelled {first}\n")
    );
    // One worker slot: the second job is claimed only once the first run has stopped.
    project
        .until(&second, "claimed", |job| job["attempt"] == json!(1))
        .await;
    let stopped_after = cancelled_at.elapsed();
    assert!(
        stopped_after < Duration::from_secs(2),
        "the cancelled run stopped after {stopped_after:?}"
    );
    let done = project
        .until(&second, "completed", |job| {
            job["status"] == json!("completed")
        })
        .await;
    assert_eq!(done["result"]["result"], "the second job");
    let first_job = project.show(&first).await;
    assert_eq!(first_job["status"], "cancelled");
    // Nothing was written for the cancelled run after the cancel.
    let events_after = project.maestro(&["jobs", "events", &first]).await.stdout;
    assert_eq!(
        String::from_utf8(events_after).unwrap(),
        String::from_utf8(events_before).unwrap()
    );
    let wait = project.maestro(&["jobs", "wait", &first]).await;
    assert_eq!(wait.status.code(), Some(1));

    stop_worker(worker, "1 finished, 0 failed, 1 lost or cancelled").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_is_down_requeues_with_backoff_then_fails_with_the_reason() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let project = Project::new();
    let id = project
        .submit("Nobody answers", &["--max-attempts", "2"])
        .await;
    let worker = project.worker(&format!("http://127.0.0.1:{port}/v1"), &[]);
    let requeued = project
        .until(&id, "requeued", |job| {
            job["status"] == json!("queued") && job["attempt"] == json!(1)
        })
        .await;
    assert!(
        requeued["reason"]
            .as_str()
            .unwrap()
            .contains("cannot reach the model endpoint"),
        "{requeued}"
    );
    let wait = project
        .maestro(&["jobs", "wait", &id, "--timeout", "30"])
        .await;
    assert_eq!(wait.status.code(), Some(1), "{}", stderr(&wait));
    let failed = project.show(&id).await;
    assert_eq!(
        (&failed["status"], &failed["attempt"]),
        (&json!("failed"), &json!(2))
    );
    assert!(
        failed["reason"].as_str().unwrap().contains(&format!(
            "cannot reach the model endpoint http://127.0.0.1:{port}/v1"
        )),
        "{failed}"
    );
    // The retry waited for its backoff (at least half of 1 s after the first attempt).
    let updated = |job: &Value| {
        time::OffsetDateTime::parse(
            job["updated_at"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    assert!(updated(&failed) - updated(&requeued) >= time::Duration::milliseconds(500));
    stop_worker(worker, "0 finished, 2 failed").await;
}

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
    let done = project
        .until(&id, "completed", |job| job["status"] == json!("completed"))
        .await;
    assert_eq!(
        (&done["attempt"], &done["result"]["result"]),
        (&json!(1), &json!("resumed and done"))
    );
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

/// The job's stored events with the fencing token of the claim that wrote each.
async fn stored_events(project: &Project, id: &str) -> Vec<maestro_store::StoredEvent> {
    let url = maestro_store::StoreUrl::Sqlite {
        path: project.path().join(".maestro/maestro.db"),
    };
    let store = maestro_store::Store::open(&url).await.unwrap();
    let events = maestro_store::JobQueue::events(&store, id.parse().unwrap(), 0)
        .await
        .unwrap();
    store.close().await;
    events
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
    let done = project
        .until(&id, "completed", |job| job["status"] == json!("completed"))
        .await;
    assert_eq!(
        (&done["attempt"], &done["result"]["result"]),
        (&json!(2), &json!("finished by the second worker"))
    );
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

#[tokio::test(flavor = "multi_thread")]
async fn one_process_serves_the_configured_profiles_each_with_its_classes() {
    let server = ScriptedLlm::start([complete("a job")]).await;
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        "llm:\n  tool_mode: native\nworkers:\n  - {name: quick, concurrency: 2, task_classes: [default]}\n  - {name: heavy, task_classes: [build]}\n",
    )
    .unwrap();
    let other = project
        .submit("Nobody serves this class", &["--class", "gpu"])
        .await;
    let built = project.submit("Build it", &["--class", "build"]).await;
    let worker = project.worker(&server.base_url(), &[]);
    project
        .until(&built, "completed", |job| {
            job["status"] == json!("completed")
        })
        .await;
    let out = project.maestro(&["workers", "--json"]).await;
    let mut profiles: Vec<(String, Value)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|w| {
            (
                w["profile"].as_str().unwrap().to_string(),
                w["task_classes"].clone(),
            )
        })
        .collect();
    profiles.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        profiles,
        vec![
            ("heavy".to_string(), json!(["build"])),
            ("quick".to_string(), json!(["default"]))
        ]
    );
    assert_eq!(project.show(&other).await["status"], "queued");
    stop_worker(worker, "1 finished").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_needs_user_input_parks_with_its_question() {
    let server = ScriptedLlm::start([Turn::tool_call(
        "complete",
        json!({"status": "needs_user_input", "result": "Which colour should the button be?"}),
    )])
    .await;
    let project = Project::new();
    let id = project.submit("Style the button", &[]).await;
    let worker = project.worker(&server.base_url(), &[]);
    let wait = project
        .maestro(&["jobs", "wait", &id, "--timeout", "30"])
        .await;
    assert_eq!(wait.status.code(), Some(4), "{}", stderr(&wait));
    let job = project.show(&id).await;
    assert_eq!(
        (&job["status"], &job["question"]),
        (
            &json!("waiting_input"),
            &json!("Which colour should the button be?")
        )
    );
    stop_worker(worker, "1 finished").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_movement_is_replaced_and_nothing_answered_is_asked_again() {
    let server = ScriptedLlm::start([
        Turn::tool_call("Read", json!({"file_path": "input/notes.txt"})),
        // In flight when the first worker dies.
        complete("never delivered").with_delay(Duration::from_secs(5)),
        complete("finished after the crash"),
    ])
    .await;
    let project = Project::new();
    let id = project.submit("Read the notes", &[]).await;
    let mut first = project.worker(&server.base_url(), &["--name", "doomed"]);
    until_requests(&server, 2).await;
    first.kill().unwrap();
    first.wait().unwrap();
    let second = project.worker(&server.base_url(), &["--name", "rescuer"]);
    let done = project
        .until(&id, "completed", |job| job["status"] == json!("completed"))
        .await;
    assert_eq!(
        (&done["attempt"], &done["result"]["result"]),
        (&json!(2), &json!("finished after the crash"))
    );
    stop_worker(second, "1 finished").await;

    // The answered call was not sent again; the one in flight was, with the same conversation.
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2]["messages"], requests[1]["messages"]);
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
}
