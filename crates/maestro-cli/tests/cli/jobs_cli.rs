//! The job commands end to end: `maestro submit`, real `maestro worker` processes, `maestro jobs
//! …` and `maestro workers`, on a real SQLite file (and a real PostgreSQL cluster), against the
//! scripted model server on 127.0.0.1.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{Project, complete, exited, signal, stderr, stop_worker, until_requests};

/// Submit, a worker runs the job to `completed`; list, show, events and wait agree with the
/// run's own record.
async fn a_job_runs_to_completed(project: &Project) -> String {
    let server = ScriptedLlm::start([complete("all done")]).await;
    let id = project.submit("Say done", &["--priority", "2"]).await;
    let queued = project.show(&id).await;
    assert_eq!(
        (&queued["status"], &queued["piece"], &queued["attempt"]),
        (&json!("queued"), &json!("one"), &json!(0))
    );
    // Following from before the run starts prints every event and ends with the job.
    let mut follow = project.command(&["jobs", "events", &id, "--follow"]);
    let follow = tokio::task::spawn_blocking(move || follow.output().unwrap());
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
    // `jobs show` is the list's line and then what the job spent.
    let mut listed = job.clone();
    for spent in ["usage", "cost_usd", "tree_usage", "tree_cost_usd"] {
        listed.as_object_mut().unwrap().remove(spent);
    }
    assert_eq!(lines, vec![listed]);
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
            "scheduled_for",
            "depth",
            "owner",
            "usage",
            "cost_usd",
            "tree_usage",
            "tree_cost_usd"
        ]
    );
    // A job submitted from the command line belongs to nobody.
    assert_eq!(job["owner"], Value::Null);
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
    let stored: Vec<Value> = String::from_utf8(events.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(stored, on_disk);
    assert_eq!(stored.last().unwrap()["type"], "run_finished");
    let followed = tokio::time::timeout(Duration::from_secs(10), follow)
        .await
        .expect("jobs events --follow ends with the job")
        .unwrap();
    assert_eq!(
        String::from_utf8(followed.stdout).unwrap(),
        String::from_utf8(events.stdout).unwrap()
    );
    let after = project
        .maestro(&["jobs", "events", &id, "--after", "2", "--follow"])
        .await;
    assert_eq!(
        String::from_utf8(after.stdout).unwrap().lines().count(),
        on_disk.len() - 2
    );

    stop_worker(worker, "stopped: 1 finished, 0 failed").await;
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_and_a_worker_run_a_job_to_completed_on_sqlite() {
    let project = Project::new();
    let id = a_job_runs_to_completed(&project).await;
    // No --db, no MAESTRO_DB, no store.url: the project's embedded store.
    assert!(project.path().join(".maestro/maestro.db").is_file());

    // What a person reads, with the id, the times and the run directory masked.
    let job = project.show(&id).await;
    let mask = |text: Vec<u8>| {
        let mut text = String::from_utf8(text).unwrap();
        for (value, name) in [
            (&job["result"]["run_dir"], "<run_dir>"),
            (&job["id"], "<id>"),
            (&job["created_at"], "<created_at>"),
            (&job["updated_at"], "<updated_at>"),
        ] {
            text = text.replace(value.as_str().unwrap(), name);
        }
        text
    };
    let show = mask(project.maestro(&["jobs", "show", &id]).await.stdout);
    let list = mask(project.maestro(&["jobs", "list"]).await.stdout);
    insta::assert_snapshot!(format!(
        "$ maestro jobs show ID\n{show}\n$ maestro jobs list\n{list}"
    ));
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
async fn submit_refuses_an_empty_task_and_fewer_than_one_attempt() {
    let project = Project::new();
    for task in ["", "  \n "] {
        let out = project.maestro(&["submit", "one", "--task", task]).await;
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_eq!(
            stderr(&out),
            "error: the task is empty; say what the job should do, e.g. \
             `--task \"make the failing tests pass\"`\n"
        );
    }
    let out = project
        .maestro(&["submit", "one", "--task", "t", "--max-attempts", "0"])
        .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "error: --max-attempts 0 is not allowed: a job needs at least 1 attempt; give 1 for no \
         retry, or leave the flag out for the default (3)\n"
    );
    let list = project.maestro(&["jobs", "list", "--json"]).await;
    assert_eq!(String::from_utf8(list.stdout).unwrap(), "");
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

    let cancel = project.maestro(&["jobs", "cancel", &first]).await;
    // The cancel is committed once the command returns; the 2 s count from there.
    let cancelled_at = Instant::now();
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

/// An endpoint that misbehaves on the first attempt (the client's own retries are off) is an
/// infrastructure failure like one that is down: the job is queued again, and the second
/// attempt, against the endpoint working again, completes it.
async fn a_misbehaving_endpoint_requeues_the_job(first: Turn, reason: &str) {
    let server = ScriptedLlm::start([first, complete("it works again")]).await;
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        "llm:\n  tool_mode: native\n  idle_timeout_secs: 1\n  retry: {max_attempts: 1}\n",
    )
    .unwrap();
    let id = project.submit("Say done", &["--max-attempts", "2"]).await;
    let worker = project.worker(&server.base_url(), &[]);
    let requeued = project
        .until(&id, "requeued", |job| {
            job["status"] != json!("running") && job["attempt"] == json!(1)
        })
        .await;
    assert_eq!(requeued["status"], "queued", "{requeued}");
    assert!(
        requeued["reason"].as_str().unwrap().contains(reason),
        "{requeued}"
    );
    project.until_completed(&id, 2, "it works again").await;
    assert_eq!(server.requests().len(), 2);
    stop_worker(worker, "1 finished").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_hangs_past_the_idle_timeout_requeues_the_job() {
    a_misbehaving_endpoint_requeues_the_job(
        Turn::stall(Duration::from_secs(30)),
        "the model call timed out: no data on the stream for 1000 ms (idle_timeout)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_answers_garbage_requeues_the_job() {
    a_misbehaving_endpoint_requeues_the_job(
        Turn::raw("text/html", "<html><body>502 Bad Gateway</body></html>"),
        "the model sent an answer that cannot be read",
    )
    .await;
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
async fn an_empty_answer_is_refused_and_the_job_keeps_waiting() {
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
    for text in ["", " \n"] {
        let out = project.maestro(&["jobs", "answer", &id, text]).await;
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_eq!(
            stderr(&out),
            format!(
                "error: the answer to job {id} is empty; write the answer to its question \
                 (`maestro jobs show {id}` prints the question)\n"
            )
        );
    }
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
async fn control_characters_from_the_endpoint_never_reach_the_terminal_raw() {
    // A hostile endpoint retitles the terminal, clears it, and hides text behind NUL and CR.
    let hostile = "done\u{1b}]0;pwned\u{7}\u{1b}[2J\0hidden\rover\u{9b}31m";
    // Its first answer is an error whose words the worker logs as it retries.
    let server = ScriptedLlm::start([
        Turn::http_error(503, "busy\u{1b}[2J\0\rnot busy").retry_after(0),
        complete(hostile),
    ])
    .await;
    let project = Project::new();
    let id = project.submit("Say done", &[]).await;
    let worker = project.worker(&server.base_url(), &[]);
    let wait = project
        .maestro(&["jobs", "wait", &id, "--timeout", "30"])
        .await;
    assert_eq!(wait.status.code(), Some(0), "{}", stderr(&wait));
    // The stored result is the endpoint's text as sent; JSON output escapes it.
    assert_eq!(project.show(&id).await["result"]["result"], hostile);

    let show = project.maestro(&["jobs", "show", &id]).await;
    assert!(show.status.success(), "{}", stderr(&show));
    let list = project.maestro(&["jobs", "list"]).await;
    assert!(list.status.success(), "{}", stderr(&list));
    for out in [&show.stdout, &list.stdout] {
        let raw: Vec<u8> = out
            .iter()
            .copied()
            .filter(|b| matches!(b, 0x1b | 0x00 | b'\r' | 0x07))
            .collect();
        assert_eq!(raw, b"", "{}", String::from_utf8_lossy(out));
        assert!(!String::from_utf8_lossy(out).contains('\u{9b}'));
    }
    let shown = String::from_utf8(show.stdout).unwrap();
    assert!(
        shown.contains("result: done\\x1b]0;pwned\\x07\\x1b[2J\\0hidden\\rover\\u{9b}31m\n"),
        "{shown}"
    );
    signal(&worker, "TERM");
    let (status, logged) = exited(worker, Duration::from_secs(10)).await;
    assert!(status.success(), "{logged}");
    assert!(logged.contains("busy\\x1b[2J\\0\\rnot busy"), "{logged:?}");
    assert!(!logged.contains(['\u{1b}', '\0', '\r']), "{logged:?}");
}
