//! Two `maestro serve` nodes on one PostgreSQL: a client on one node follows, live, a job the
//! other node's worker runs, and answers its question there; the job's output file is served
//! after the node that ran it is gone; a piece written on one node runs on the other; a
//! configuration written on one node reaches the other's next job.

use std::time::{Duration, Instant};

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{Project, complete};

const FILES_PIECE: &str = "\
name: files
description: writes a report, asking first
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: true
    persona: You write reports.
    instruction: \"{task}\"
    allowed_tools: [Write]
    rules: []
";

const STORED_PIECE: &str = "\
name: stored
description: a piece written through node B
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

fn node(url: &str, base_url: &str, model: &str) -> Project {
    let mut project = Project::new();
    std::fs::write(project.path().join("pieces/files.yaml"), FILES_PIECE).unwrap();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        format!("llm:\n  tool_mode: native\n  base_url: {base_url}\n  model: {model}\n"),
    )
    .unwrap();
    project.db = Some(url.to_string());
    project
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn two_nodes_on_one_postgres_share_jobs_streams_files_pieces_and_configuration() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let llm = ScriptedLlm::builder()
        .model_id("model-a")
        .also_serves("model-b")
        .turns([
            complete("The stored piece ran."),
            Turn::tool_call(
                "complete",
                json!({"status": "needs_user_input", "result": "Which format?"}),
            ),
            Turn::tool_call(
                "Write",
                json!({"file_path": "output/report.md", "content": "# Report in markdown"}),
            ),
            complete("Report written."),
            complete("Ran with the new model."),
        ])
        .start()
        .await;
    let project_a = node(&cluster.url(), &llm.base_url(), "model-a");
    let project_b = node(&cluster.url(), &llm.base_url(), "model-a");
    let a = project_a.serve_plain(&["--lease-secs", "3"]);
    let b = project_b.serve_plain(&["--no-worker"]);

    // A piece written on B runs on A's worker.
    let response = b
        .http
        .put(b.url("/api/v1/pieces/stored"))
        .body(STORED_PIECE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let (status, job) = b
        .post(
            "/api/v1/jobs",
            json!({"piece": "stored", "task": "run the stored piece"}),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let stored_job = job["id"].as_str().unwrap().to_string();
    let done = b
        .until(&stored_job, "completed", |j| j["status"] == "completed")
        .await;
    assert_eq!(done["result"]["result"], "The stored piece ran.");

    // A job A runs, followed live on B, through its question answered on B.
    let (status, job) = a
        .post(
            "/api/v1/jobs",
            json!({"piece": "files", "task": "write the report"}),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let mut stream = b.stream(&id, None).await;
    let mut seen = Vec::new();
    loop {
        let event = stream
            .next()
            .await
            .expect("the stream on B ended at the park");
        let parked = event.event == "status" && event.data["status"] == "waiting_input";
        seen.push(event);
        if parked {
            break;
        }
    }
    let (status, _) = b
        .post(
            &format!("/api/v1/jobs/{id}/comments"),
            json!({"body": "Markdown"}),
        )
        .await;
    assert_eq!(status, 201);
    seen.extend(stream.rest().await);
    let ids: Vec<i64> = seen
        .iter()
        .filter_map(|e| e.id.as_ref().map(|i| i.parse().unwrap()))
        .collect();
    assert_eq!(ids, (1..=ids.len() as i64).collect::<Vec<_>>());
    assert_eq!(
        seen.iter().rfind(|e| e.event == "status").unwrap().data["status"],
        "completed"
    );
    assert!(seen.iter().any(|e| e.event == "tool_result"), "{seen:?}");

    // A is gone; B serves the job's output from the store.
    a.stop().await;
    std::fs::remove_dir_all(project_a.path().join(".maestro/runs")).unwrap();
    let response = b
        .http
        .get(b.url(&format!("/api/v1/jobs/{id}/files/report.md")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.text().await.unwrap(), "# Report in markdown");
    b.stop().await;

    // A configuration written on A (now without a worker) reaches B's (now with one) next job.
    let a = project_a.serve_plain(&["--no-worker"]);
    let b = project_b.serve_plain(&["--lease-secs", "3"]);
    let response = a.http.get(a.url("/api/v1/config")).send().await.unwrap();
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    let mut config: Value = response.json().await.unwrap();
    config["llm"]["model"] = json!("model-b");
    let response = a
        .http
        .put(a.url("/api/v1/config"))
        .header("if-match", &etag)
        .json(&config)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let written = Instant::now();
    // The change is seen by B's worker within 5 s: B's view of the configuration shows it.
    loop {
        let (_, seen) = b.get("/api/v1/config").await;
        if seen["llm"]["model"] == "model-b" {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(5),
            "B kept model-a: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, job) = a
        .post(
            "/api/v1/jobs",
            json!({"piece": "one", "task": "use the new model"}),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let last = job["id"].as_str().unwrap().to_string();
    b.until(&last, "completed", |j| j["status"] == "completed")
        .await;
    let model = llm.requests().last().unwrap()["model"].clone();
    assert_eq!(model, json!("model-b"));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn a_store_that_stops_answering_is_told_at_once_and_the_node_serves_again_once_it_is_back() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let mut project = Project::new();
    project.db = Some(cluster.url());
    // With a worker: it rides the outage out, and the node stops cleanly afterwards.
    let served = project.serve("http://127.0.0.1:9", &[]);
    let (status, ready) = served.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    let (status, before) = served.get("/api/v1/jobs").await;
    assert_eq!(status, 200, "{before}");

    tokio::task::block_in_place(|| cluster.stop());
    // The first requests meet the pool's connections broken, the later ones a pool that waits
    // for a new connection (30 s, for the worker's sake): each is answered as soon.
    for round in 0..3 {
        // A load balancer asking is answered within a couple of seconds.
        let started = Instant::now();
        let (status, problem) = served.get("/readyz").await;
        let waited = started.elapsed();
        assert_eq!(status, 503, "{round}: {problem}");
        assert!(
            waited < Duration::from_secs(10),
            "{round}: /readyz took {waited:?}"
        );
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("does not answer"),
            "{round}: {problem}"
        );
        // The API's requests are answered 503 with Retry-After, reads and writes alike.
        store_does_not_answer(&served).await;
    }

    // Back: the same node is ready and serves again, without a restart.
    tokio::task::block_in_place(|| cluster.restart());
    let started = Instant::now();
    loop {
        let (status, _) = served.get("/readyz").await;
        if status == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not ready again: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, after) = served.get("/api/v1/jobs").await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(
        after["jobs"], before["jobs"],
        "nothing was queued in the outage"
    );
    served.stop().await;
}

/// A read and a write are answered 503, with `Retry-After`, within seconds.
async fn store_does_not_answer(served: &support::serve::Served) {
    for (method, path, body) in [
        ("GET", "/api/v1/jobs", None),
        (
            "POST",
            "/api/v1/jobs",
            Some(json!({"piece": "one", "task": "x"})),
        ),
    ] {
        let started = Instant::now();
        let mut request = served
            .http
            .request(method.parse().unwrap(), served.url(path));
        if let Some(body) = &body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let waited = started.elapsed();
        assert_eq!(response.status().as_u16(), 503, "{method} {path}");
        assert!(
            waited < Duration::from_secs(15),
            "{method} {path} took {waited:?}"
        );
        let retry: u64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(retry >= 1, "{retry}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        let problem: Value = response.json().await.unwrap();
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("the store does not answer"),
            "{problem}"
        );
    }
}
