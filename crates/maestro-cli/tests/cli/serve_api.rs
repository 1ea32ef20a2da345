//! `maestro serve` over real HTTP on 127.0.0.1: the jobs API, its event stream across a park
//! and its answer, an answer race, cancel, paging, and the errors a client gets for a bad
//! request.

use std::collections::HashSet;

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{Project, complete, stderr};

fn ask(question: &str) -> Turn {
    Turn::tool_call(
        "complete",
        json!({"status": "needs_user_input", "result": question}),
    )
}

async fn submit(served: &support::serve::Served, task: &str) -> String {
    let (status, job) = served
        .post("/api/v1/jobs", json!({"piece": "one", "task": task}))
        .await;
    assert_eq!(status, 201, "{job}");
    assert_eq!(job["status"], "queued");
    assert_eq!(job["task"], task);
    job["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_is_followed_across_its_question_and_answer_to_its_end() {
    let llm = ScriptedLlm::start([ask("Which cuisine?"), complete("Risotto.")]).await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &[]);
    let id = submit(&served, "Plan the dinner").await;

    let mut stream = served.stream(&id, None).await;
    let mut seen = Vec::new();
    // Up to the park: the question is asked, and the stream stays open.
    loop {
        let event = stream.next().await.expect("the stream ended at the park");
        let parked = event.event == "status" && event.data["status"] == "waiting_input";
        seen.push(event);
        if parked {
            break;
        }
    }
    let job = served
        .until(&id, "waiting", |j| j["status"] == "waiting_input")
        .await;
    assert_eq!(job["question"], "Which cuisine?");
    assert!(
        job.get("run_dir").is_none() && job["result"].get("run_dir").is_none(),
        "{job}"
    );
    let (status, answer) = served
        .post(
            &format!("/api/v1/jobs/{id}/comments"),
            json!({"body": "Italian"}),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["kind"], "answer");
    seen.extend(stream.rest().await);

    // Every committed event once, in order, from 1; statuses through the park to the end.
    let ids: Vec<i64> = seen
        .iter()
        .filter_map(|e| e.id.as_ref().map(|i| i.parse().unwrap()))
        .collect();
    assert_eq!(ids, (1..=ids.len() as i64).collect::<Vec<_>>());
    let statuses: Vec<&str> = seen
        .iter()
        .filter(|e| e.event == "status")
        .map(|e| e.data["status"].as_str().unwrap())
        .collect();
    assert!(statuses.contains(&"waiting_input"), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&"completed"), "{statuses:?}");
    let finished = seen.iter().filter(|e| e.event == "run_finished").count();
    assert_eq!(finished, 2, "the park's and the end's");
    for event in seen.iter().filter(|e| e.id.is_some()) {
        assert_eq!(event.data["type"], event.event.as_str());
        assert_eq!(event.data["seq"].to_string(), *event.id.as_ref().unwrap());
    }

    // The log at once, the same events.
    let jsonl = served
        .http
        .get(served.url(&format!("/api/v1/jobs/{id}/events?format=jsonl")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(jsonl.lines().count(), ids.len());
    // No host path leaves the server: the run's directories are dropped, its files are
    // relative to the run directory.
    let home = project.path().to_str().unwrap();
    let streamed: Vec<String> = seen.iter().map(|e| e.data.to_string()).collect();
    for line in jsonl.lines().chain(streamed.iter().map(String::as_str)) {
        let event: Value = serde_json::from_str(line).unwrap();
        assert!(!line.contains(home), "a host path: {line}");
        for key in ["run_dir", "workspace"] {
            assert!(event.get(key).is_none(), "{key}: {line}");
        }
        for key in ["prompt_log", "transcript"] {
            if let Some(path) = event.get(key) {
                assert!(path.as_str().unwrap().starts_with("logs/"), "{key}: {line}");
            }
        }
    }
    assert!(jsonl.contains("\"prompt_log\":\"logs/"), "{jsonl}");

    let (_, comments) = served.get(&format!("/api/v1/jobs/{id}/comments")).await;
    let kinds: Vec<&str> = comments
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["question", "answer"]);
    let (_, job) = served.get(&format!("/api/v1/jobs/{id}")).await;
    assert_eq!(job["result"]["result"], "Risotto.");
    // The document describes what the server answers.
    let (_, doc) = served.get("/api/v1/openapi.json").await;
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let documented = &doc["components"]["schemas"]["Job"]["properties"];
    let mut answered = keys(&job);
    answered.retain(|k| k != "title"); // left out when the job has none
    let mut described = keys(documented);
    described.retain(|k| k != "title");
    assert_eq!(answered, described);
    assert_eq!(
        keys(&job["result"]),
        keys(&doc["components"]["schemas"]["JobResult"]["properties"])
    );
    assert!(job["usage"]["total_tokens"].as_u64().unwrap() > 0, "{job}");

    // A stream opened after the end replays everything and ends.
    let again = served.stream(&id, Some(0)).await.rest().await;
    assert_eq!(again.iter().filter(|e| e.id.is_some()).count(), ids.len());
    // A cursor beyond the end is told so.
    let beyond = served.stream(&id, Some(10_000)).await.rest().await;
    assert_eq!(beyond[0].event, "resync");
    assert_eq!(beyond[0].data["last_seq"], json!(ids.len()));

    let metrics = served
        .http
        .get(served.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "maestro_jobs{status=\"completed\"} 1",
        "maestro_model_calls_total 2",
        "maestro_runs_total{status=\"completed\"} 1",
        "maestro_http_requests_total{route=\"/api/v1/jobs/{id}\",method=\"GET\",status=\"200\"}",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    for line in metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(line.starts_with("maestro_"), "{line}");
        assert!(!line.contains(&id), "an id in a label: {line}");
    }
    // The Prometheus text format 0.0.4: a counter's HELP and TYPE name its samples.
    for line in [
        "# TYPE maestro_http_requests_total counter",
        "# TYPE maestro_model_calls_total counter",
        "# HELP maestro_model_calls_total ",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
    for counter in metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
    {
        assert!(counter.ends_with("_total"), "{counter}:\n{metrics}");
    }
    // OpenMetrics to a scraper that asks for it.
    let response = served
        .http
        .get(served.url("/metrics"))
        .header("Accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .unwrap();
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let openmetrics = response.text().await.unwrap();
    assert!(
        openmetrics.contains("# TYPE maestro_model_calls counter\n"),
        "{openmetrics}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn of_two_racing_answers_one_wins_and_the_other_is_kept_as_a_note() {
    let llm = ScriptedLlm::start([ask("Which cuisine?"), complete("Done.")]).await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &[]);
    let id = submit(&served, "Plan the dinner").await;
    served
        .until(&id, "waiting", |j| j["status"] == "waiting_input")
        .await;
    let path = format!("/api/v1/jobs/{id}/comments");
    let (_, comments) = served.get(&path).await;
    let question = comments[0]["id"].clone();
    assert_eq!(comments[0]["kind"], "question");
    // Two people answer the question they both see.
    let (a, b) = tokio::join!(
        served.post(&path, json!({"body": "Italian", "in_reply_to": question})),
        served.post(&path, json!({"body": "French", "in_reply_to": question})),
    );
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(statuses, [201, 409], "{a:?} {b:?}");
    let lost = if a.0 == 409 { &a.1 } else { &b.1 };
    assert!(
        lost["detail"]
            .as_str()
            .unwrap()
            .contains("answered by someone else already"),
        "{lost}"
    );
    served
        .until(&id, "completed", |j| j["status"] == "completed")
        .await;
    let (_, comments) = served.get(&path).await;
    let kinds: Vec<&str> = comments
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["question", "answer", "note"]);
    // The model heard exactly one answer.
    let last = llm.requests().last().unwrap()["messages"].to_string();
    assert!(last.contains("Italian") ^ last.contains("French"), "{last}");
    // A comment on a job that is not waiting is a note.
    let (status, note) = served.post(&path, json!({"body": "thanks"})).await;
    assert_eq!((status, note["kind"].clone()), (201, json!("note")));
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_job_stops_and_a_second_cancel_is_a_conflict() {
    let llm = ScriptedLlm::start([ask("Which cuisine?")]).await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &[]);
    let id = submit(&served, "Plan the dinner").await;
    served
        .until(&id, "waiting", |j| j["status"] == "waiting_input")
        .await;
    let (status, body) = served
        .post(&format!("/api/v1/jobs/{id}/cancel"), json!({}))
        .await;
    assert_eq!((status, body["cancelled"].clone()), (200, json!([id])));
    let (_, job) = served.get(&format!("/api/v1/jobs/{id}")).await;
    assert_eq!(job["status"], "cancelled");
    let (status, body) = served
        .post(&format!("/api/v1/jobs/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    let (status, children) = served.get(&format!("/api/v1/jobs/{id}/children")).await;
    assert_eq!((status, children["jobs"].clone()), (200, json!([])));
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_are_listed_newest_first_a_page_at_a_time() {
    let project = Project::new();
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(submit(&served, &format!("task {n}")).await);
    }
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/jobs?limit=2&cursor={c}"),
            None => "/api/v1/jobs?limit=2".to_string(),
        };
        let (status, page) = served.get(&path).await;
        assert_eq!(status, 200, "{page}");
        for job in page["jobs"].as_array().unwrap() {
            listed.push(job["id"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(listed, ids);
    let (_, page) = served.get("/api/v1/jobs?status=completed").await;
    assert_eq!(page["jobs"], json!([]));
    let (_, page) = served.get("/api/v1/jobs?piece=one&limit=200").await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 5);
    // A stream open on a job that waits in the queue does not keep the server from stopping.
    let mut stream = served.stream(&ids[0], None).await;
    assert_eq!(stream.next().await.unwrap().data["status"], "queued");
    served.stop().await;
    assert_eq!(stream.next().await, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_problem_documents_that_say_what_to_fix() {
    let project = Project::new();
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let cases: Vec<(&str, &str, Value, u16, &str)> = vec![
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "one", "task": "x", "colour": "red"}),
            400,
            "unknown field `colour`",
        ),
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "one", "task": "x", "workspace": "/etc"}),
            400,
            "never takes a host directory",
        ),
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "/etc/passwd", "task": "x"}),
            400,
            "never runs a file path",
        ),
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "pieces/one.yaml", "task": "x"}),
            400,
            "never runs a file path",
        ),
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "nosuch", "task": "x"}),
            422,
            "nosuch",
        ),
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "one", "task": "x", "budget": {"max_cost_usd": 0}}),
            400,
            "`budget.max_cost_usd`: 0 is not a positive amount of US dollars",
        ),
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "one", "task": "x", "budget": {"max_usd": 1}}),
            400,
            "unknown field `max_usd`",
        ),
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "one", "task": "  "}),
            400,
            "the task is empty; say what the job should do in `task`",
        ),
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "one", "task": "x", "max_attempts": 0}),
            400,
            "`max_attempts` 0 is not allowed",
        ),
        (
            "POST",
            "/api/v1/jobs",
            json!({"piece": "one"}),
            400,
            "missing field `task`",
        ),
        (
            "GET",
            "/api/v1/jobs?status=done",
            Value::Null,
            400,
            "not a job status",
        ),
        (
            "GET",
            "/api/v1/jobs/not-an-id",
            Value::Null,
            404,
            "not a job id",
        ),
        (
            "GET",
            "/api/v1/jobs/01a21469-d7c1-7768-a83c-3149cc1664aa",
            Value::Null,
            404,
            "no job with id",
        ),
        ("GET", "/api/v1/nothing", Value::Null, 404, "openapi.json"),
        // What the router and the extractors refuse is a problem too.
        (
            "GET",
            "/api/v1/jobs?limit=abc",
            Value::Null,
            400,
            "the query string of GET /api/v1/jobs is not accepted: limit: invalid digit",
        ),
        (
            "GET",
            "/api/v1/jobs?colour=red",
            Value::Null,
            400,
            "unknown field `colour`",
        ),
        (
            "GET",
            "/api/v1/jobs?limit=0",
            Value::Null,
            400,
            "`limit` 0 is out of range; give 1 to 200",
        ),
        (
            "GET",
            "/api/v1/jobs?limit=1000",
            Value::Null,
            400,
            "`limit` 1000 is out of range; give 1 to 200",
        ),
        (
            "GET",
            "/api/v1/knowledge/search",
            Value::Null,
            400,
            "missing field `q`",
        ),
        (
            "DELETE",
            "/api/v1/jobs",
            Value::Null,
            405,
            "/api/v1/jobs does not take DELETE; the `Allow` header",
        ),
        (
            "GET",
            "/ui/..%2f..%2fetc%2fpasswd",
            Value::Null,
            404,
            "no such file",
        ),
    ];
    for (method, path, body, want, says) in cases {
        let request = match method {
            "POST" => served.http.post(served.url(path)).json(&body),
            "DELETE" => served.http.delete(served.url(path)),
            _ => served.http.get(served.url(path)),
        };
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        let problem: Value = response.json().await.unwrap();
        assert_eq!(status, want, "{method} {path}: {problem}");
        assert_eq!(kind, "application/problem+json", "{method} {path}");
        assert_eq!(problem["status"], json!(want));
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{method} {path}: {problem}");
        // The API's own words, not the CLI's flags.
        assert!(!detail.contains("--task"), "{method} {path}: {problem}");
    }
    let id = submit(&served, "x").await;
    let response = served
        .http
        .get(served.url(&format!("/api/v1/jobs/{id}/events?after=abc")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/problem+json"
    );
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["field"], "after", "{problem}");
    // A body over the limit.
    let big = "x".repeat(2 * 1024 * 1024);
    let (status, problem) = served
        .post("/api/v1/jobs", json!({"piece": "one", "task": big}))
        .await;
    assert_eq!(status, 413, "{problem}");
    // Not JSON (on a new connection: the server closed the one it refused the body on).
    let response = reqwest::Client::new()
        .post(served.url("/api/v1/jobs"))
        .body("piece=one")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 415);
    // Nothing was queued by any of it (but the job the events were asked of).
    let (_, page) = served.get("/api/v1/jobs").await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1, "{page}");
    served.stop().await;
}

#[tokio::test]
async fn without_auth_only_a_loopback_address_is_served() {
    let project = Project::new();
    let out = project
        .maestro(&["serve", "--bind", "0.0.0.0:0", "--no-worker"])
        .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 without auth"),
        "{err}"
    );
    assert!(err.contains("--insecure-no-auth"), "{err}");
    let ids: HashSet<&str> = HashSet::new();
    assert!(ids.is_empty());
}

const STORED_PIECE: &str = "\
name: stored
description: a piece written through the API
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

#[tokio::test(flavor = "multi_thread")]
async fn pieces_are_written_validated_run_and_deleted_through_the_api() {
    let llm = ScriptedLlm::start([complete("Stored piece ran.")]).await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &[]);
    let put = |name: &str, body: &str| {
        served
            .http
            .put(served.url(&format!("/api/v1/pieces/{name}")))
            .header("content-type", "application/yaml")
            .body(body.to_string())
            .send()
    };
    // Invalid: 422 with each error's path, line and column; nothing written.
    let broken = STORED_PIECE.replace("initial_movement: work", "initial_movement: nowhere");
    let response = put("stored", &broken).await.unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let problem: Value = response.json().await.unwrap();
    let error = &problem["errors"][0];
    assert_eq!(error["path"], "initial_movement", "{problem}");
    assert_eq!(
        (error["line"].clone(), error["column"].clone()),
        (json!(4), json!(19)),
        "{problem}"
    );
    let (status, _) = served.get("/api/v1/pieces/stored").await;
    assert_eq!(status, 404);
    // Validation alone answers the same without writing.
    let response = served
        .http
        .post(served.url("/api/v1/pieces/validate"))
        .body(broken.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    // A name is never a path.
    let response = put("..%2Fetc", STORED_PIECE).await.unwrap();
    assert!(
        matches!(response.status().as_u16(), 400 | 404),
        "{}",
        response.status()
    );
    // Written: version 1, listed, and run by the worker.
    let response = put("stored", STORED_PIECE).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let written: Value = response.json().await.unwrap();
    assert_eq!(
        (written["name"].clone(), written["version"].clone()),
        (json!("stored"), json!(1))
    );
    let (_, listed) = served.get("/api/v1/pieces").await;
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"stored") && names.contains(&"one"),
        "{names:?}"
    );
    let (status, piece) = served.get("/api/v1/pieces/stored").await;
    assert_eq!(
        (status, piece["origin"]["kind"].clone()),
        (200, json!("store"))
    );
    let (_, dir_piece) = served.get("/api/v1/pieces/one").await;
    assert_eq!(dir_piece["origin"]["kind"], "dir");
    assert!(
        !dir_piece["origin"]["path"]
            .as_str()
            .unwrap()
            .starts_with('/'),
        "{dir_piece}"
    );
    let (status, job) = served
        .post(
            "/api/v1/jobs",
            json!({"piece": "stored", "task": "use the stored piece"}),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let done = served
        .until(id, "completed", |j| j["status"] == "completed")
        .await;
    assert_eq!(done["result"]["result"], "Stored piece ran.");
    // A piece file cannot be deleted through the API; the stored one can.
    let response = served
        .http
        .delete(served.url("/api/v1/pieces/one"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 409);
    let response = served
        .http
        .delete(served.url("/api/v1/pieces/stored"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    let (status, _) = served.get("/api/v1/pieces/stored").await;
    assert_eq!(status, 404);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_configuration_is_changed_with_if_match_and_keeps_secrets_it_does_not_show() {
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        "llm:\n  tool_mode: native\n  api_key: sk-test-secret-1234\n",
    )
    .unwrap();
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let response = served
        .http
        .get(served.url("/api/v1/config"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    let mut config: Value = response.json().await.unwrap();
    assert_eq!(config["llm"]["api_key"], "***");
    assert!(!config.to_string().contains("sk-test-secret-1234"));
    config["llm"]["tool_mode"] = json!("json");
    let put = |body: &Value, if_match: Option<&str>| {
        let mut request = served.http.put(served.url("/api/v1/config")).json(body);
        if let Some(tag) = if_match {
            request = request.header("if-match", tag);
        }
        request.send()
    };
    // No If-Match: 428.
    assert_eq!(put(&config, None).await.unwrap().status().as_u16(), 428);
    // The right one: written, a new ETag.
    let response = put(&config, Some(&etag)).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let newer = response.headers()["etag"].to_str().unwrap().to_string();
    assert_ne!(newer, etag);
    let written: Value = response.json().await.unwrap();
    assert_eq!(written["llm"]["tool_mode"], "json");
    assert_eq!(written["llm"]["api_key"], "***");
    // The stale one: 412, nothing written.
    config["llm"]["tool_mode"] = json!("native");
    assert_eq!(
        put(&config, Some(&etag)).await.unwrap().status().as_u16(),
        412
    );
    // Invalid: 422 naming the field.
    let mut bad = written.clone();
    bad["llm"]["tool_mode"] = json!("telepathy");
    let response = put(&bad, Some(&newer)).await.unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let problem: Value = response.json().await.unwrap();
    assert!(
        problem["errors"].to_string().contains("tool_mode"),
        "{problem}"
    );
    // The secret behind *** is kept: the effective configuration still has it
    // (`maestro config show` redacts it too, and the store does not hold it in plain text).
    let out = project.maestro(&["config", "show", "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(shown.contains("\"json\""), "{shown}");
    assert!(!shown.contains("sk-test-secret-1234"), "{shown}");
    let log = served.stop().await;
    assert!(!log.contains("sk-test-secret-1234"));
    let db = std::fs::read(project.path().join(".maestro/maestro.db")).unwrap();
    assert!(!String::from_utf8_lossy(&db).contains("sk-test-secret-1234"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_refused_as_stale_reads_at_once_the_configuration_that_refused_it() {
    let project = Project::new();
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let get = || async {
        let response = served
            .http
            .get(served.url("/api/v1/config"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let etag = response.headers()["etag"].to_str().unwrap().to_string();
        (etag, response.json::<Value>().await.unwrap())
    };
    let put = |body: Value, if_match: String| {
        served
            .http
            .put(served.url("/api/v1/config"))
            .header("if-match", if_match)
            .json(&body)
            .send()
    };
    let (read, mut mine) = get().await;
    // Someone else saves first.
    let mut theirs = mine.clone();
    theirs["engine"]["max_iterations_per_movement"] = json!(40);
    let response = put(theirs, read.clone()).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let written = response.headers()["etag"].to_str().unwrap().to_string();
    // This writer is refused, reads again at once, and gets their change and the tag that a
    // write now accepts (not the configuration it read before, which would be refused again).
    mine["llm"]["tool_mode"] = json!("json");
    assert_eq!(
        put(mine.clone(), read).await.unwrap().status().as_u16(),
        412
    );
    let (now, stored) = get().await;
    assert_eq!(now, written);
    assert_eq!(stored["engine"]["max_iterations_per_movement"], 40);
    let mut merged = stored;
    merged["llm"]["tool_mode"] = json!("json");
    let response = put(merged, now).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let saved: Value = response.json().await.unwrap();
    assert_eq!(saved["llm"]["tool_mode"], "json");
    assert_eq!(saved["engine"]["max_iterations_per_movement"], 40);
    served.stop().await;
}

const FILES_PIECE: &str = "\
name: files
description: reads its inputs and leaves outputs
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: true
    persona: You work with files.
    instruction: \"{task}\"
    allowed_tools: [Read, Write]
    rules: []
";

#[tokio::test(flavor = "multi_thread")]
async fn uploads_reach_the_run_and_its_outputs_download_from_the_store() {
    let llm = ScriptedLlm::start([
        Turn::tool_call("Read", json!({"file_path": "input/notes.txt"})),
        Turn::tool_call(
            "Write",
            json!({"file_path": "output/report.md", "content": "# Report\nfrom the notes"}),
        ),
        complete("Report written."),
    ])
    .await;
    let project = Project::new();
    std::fs::write(project.path().join("pieces/files.yaml"), FILES_PIECE).unwrap();
    let served = project.serve(&llm.base_url(), &[]);
    let form = reqwest::multipart::Form::new()
        .text("piece", "files")
        .text("task", "Summarise input/notes.txt into output/report.md")
        .part(
            "files",
            reqwest::multipart::Part::bytes(b"the notes".to_vec()).file_name("notes.txt"),
        );
    let response = served
        .http
        .post(served.url("/api/v1/jobs"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let job: Value = response.json().await.unwrap();
    let id = job["id"].as_str().unwrap().to_string();
    served
        .until(&id, "completed", |j| j["status"] == "completed")
        .await;
    // The agent read the upload.
    let first_result = llm.requests()[1]["messages"].to_string();
    assert!(first_result.contains("the notes"), "{first_result}");
    let (status, files) = served.get(&format!("/api/v1/jobs/{id}/files")).await;
    assert_eq!(status, 200);
    let listed: Vec<(String, String, u64)> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["path"].as_str().unwrap().to_string(),
                f["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        listed.contains(&("input".into(), "notes.txt".into(), 9)),
        "{listed:?}"
    );
    assert!(
        listed.contains(&("output".into(), "report.md".into(), 23)),
        "{listed:?}"
    );
    // The server stops, its run directory goes: another server on the same store still
    // serves the file, from the store.
    served.stop().await;
    std::fs::remove_dir_all(project.path().join(".maestro/runs")).unwrap();
    let other = project.serve(&llm.base_url(), &["--no-worker"]);
    let response = other
        .http
        .get(other.url(&format!("/api/v1/jobs/{id}/files/report.md")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .contains("report.md")
    );
    assert_eq!(response.text().await.unwrap(), "# Report\nfrom the notes");
    // Paths are confined to the job.
    for path in [
        "..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "../notes.txt",
        "nothing.txt",
    ] {
        let response = reqwest::Client::new()
            .get(other.url(&format!("/api/v1/jobs/{id}/files/{path}")))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        assert!(matches!(status, 400 | 404), "{path}: {status}");
        let body = response.text().await.unwrap();
        assert!(!body.contains("root:"), "{path}: {body}");
    }
    // An upload whose name leaves input/ is refused and nothing is queued.
    let form = reqwest::multipart::Form::new()
        .text("piece", "files")
        .text("task", "x")
        .part(
            "files",
            reqwest::multipart::Part::bytes(b"x".to_vec()).file_name("../escape.txt"),
        );
    let response = other
        .http
        .post(other.url("/api/v1/jobs"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let (_, page) = other.get("/api/v1/jobs").await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1);
    other.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_reconnected_at_twenty_points_of_a_long_run_sees_every_event_once_in_order() {
    // A run of about a hundred events, committed while the client keeps reconnecting.
    let mut turns = Vec::new();
    for n in 0..24 {
        turns.push(
            Turn::tool_call("Read", json!({"file_path": format!("missing-{n}.txt")}))
                .with_delay(std::time::Duration::from_millis(30)),
        );
    }
    turns.push(complete("Read them all."));
    let llm = ScriptedLlm::start(turns).await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &[]);
    let id = submit(&served, "read many files").await;
    // The points to reconnect at: a pseudo-random number of events each time (seeded from the
    // job id, printed so that a failure can be replayed by reading it).
    let mut seed: u64 = id.bytes().fold(1469598103934665603, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(1099511628211)
    });
    eprintln!("reconnect seed {seed}");
    let mut received: Vec<Value> = Vec::new();
    let mut cursor: Option<i64> = None;
    let mut reconnects = 0;
    loop {
        let mut stream = served.stream(&id, cursor).await;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let take = if reconnects < 20 {
            1 + (seed % 4) as usize
        } else {
            usize::MAX
        };
        let mut taken = 0;
        let mut ended = true;
        while let Some(event) = stream.next().await {
            if let Some(seq) = &event.id {
                cursor = Some(seq.parse().unwrap());
                received.push(event.data);
                taken += 1;
                if taken >= take {
                    ended = false;
                    break;
                }
            }
        }
        drop(stream);
        if ended {
            break;
        }
        reconnects += 1;
    }
    assert!(reconnects >= 20, "only {reconnects} reconnects");
    let log: Vec<Value> = served
        .http
        .get(served.url(&format!("/api/v1/jobs/{id}/events?format=jsonl")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(log.len() > 60, "a long run: {} events", log.len());
    assert_eq!(received, log);
    served.stop().await;
}

const SPLIT: &str = "\
name: split
description: splits the task into subtasks and waits for them
max_movements: 6
initial_movement: plan
movements:
  - name: plan
    edit: false
    persona: You plan.
    instruction: \"Split this into parts: {task}\"
    allowed_tools: [SpawnSubTask]
    rules:
      - condition: the parts are spawned
        next: WAIT_SUBTASKS
    default_next: write
  - name: write
    edit: false
    persona: You write.
    instruction: Write it up alone.
    allowed_tools: [Read]
    rules: []
";

#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_splits_is_followed_through_its_subtasks_and_lists_its_children() {
    let mut turns: Vec<Turn> = (1..=2)
        .map(|n| Turn::when_contains("You work.", complete(&format!("child result {n}"))))
        .collect();
    turns.extend([
        Turn::tool_calls(["A", "B"].iter().map(|part| {
            (
                "SpawnSubTask",
                json!({"task": format!("Write part {part}"), "title": format!("part {part}"), "piece": "one"}),
            )
        })),
        Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"})),
        complete("Report from two parts."),
    ]);
    let llm = ScriptedLlm::start(turns).await;
    let project = Project::new();
    std::fs::write(project.path().join("pieces/split.yaml"), SPLIT).unwrap();
    let served = project.serve(&llm.base_url(), &["--concurrency", "3"]);
    let (status, job) = served
        .post(
            "/api/v1/jobs",
            json!({"piece": "split", "task": "Plan the report"}),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let events = served.stream(&id, None).await.rest().await;
    let statuses: Vec<&str> = events
        .iter()
        .filter(|e| e.event == "status")
        .map(|e| e.data["status"].as_str().unwrap())
        .collect();
    // The parent waited for its children: the record says so. (Its `waiting_subtasks` status
    // can be over before the stream looks, when the children end first.)
    let waited = events
        .iter()
        .any(|e| e.event == "movement_finished" && e.data["next"] == "WAIT_SUBTASKS");
    let ended = events.iter().any(|e| e.event == "subtasks_ended");
    assert!(
        waited && ended,
        "{:?}",
        events.iter().map(|e| &e.event).collect::<Vec<_>>()
    );
    assert_eq!(statuses.last(), Some(&"completed"), "{statuses:?}");
    let (_, parent) = served.get(&format!("/api/v1/jobs/{id}")).await;
    assert_eq!(parent["result"]["result"], "Report from two parts.");
    let (status, children) = served.get(&format!("/api/v1/jobs/{id}/children")).await;
    assert_eq!(status, 200);
    let mut titles: Vec<&str> = children["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["parent_id"], json!(id));
            assert_eq!(c["depth"], 1);
            assert_eq!(c["status"], "completed");
            c["title"].as_str().unwrap()
        })
        .collect();
    titles.sort();
    assert_eq!(titles, ["part A", "part B"]);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_stream_client_over_the_limit_is_told_to_wait() {
    let project = Project::new();
    let served = project.serve(
        "http://127.0.0.1:9",
        &["--no-worker", "--stream-clients-per-job", "2"],
    );
    let id = submit(&served, "wait in the queue").await;
    let mut first = served.stream(&id, None).await;
    let mut second = served.stream(&id, None).await;
    assert_eq!(first.next().await.unwrap().data["status"], "queued");
    assert_eq!(second.next().await.unwrap().data["status"], "queued");
    let (status, problem) = served.get(&format!("/api/v1/jobs/{id}/events")).await;
    assert_eq!(status, 429, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("--stream-clients-per-job"),
        "{problem}"
    );
    // A client that leaves frees its place.
    drop(first);
    let started = std::time::Instant::now();
    loop {
        let response = served
            .http
            .get(served.url(&format!("/api/v1/jobs/{id}/events")))
            .send()
            .await
            .unwrap();
        if response.status().as_u16() == 200 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the place stayed taken"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(second);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_cut_by_max_stream_secs_resumes_with_last_event_id_and_misses_nothing() {
    // A run of about four seconds, followed through streams that the server ends after 1 s.
    let mut turns = Vec::new();
    for n in 0..16 {
        turns.push(
            Turn::tool_call("Read", json!({"file_path": format!("missing-{n}.txt")}))
                .with_delay(std::time::Duration::from_millis(250)),
        );
    }
    turns.push(complete("Read them all."));
    let llm = ScriptedLlm::start(turns).await;
    let project = Project::new();
    let served = project.serve(&llm.base_url(), &["--max-stream-secs", "1"]);
    let id = submit(&served, "read many files").await;
    let mut received: Vec<Value> = Vec::new();
    let mut cursor: Option<i64> = None;
    let mut streams = 0;
    loop {
        let opened = std::time::Instant::now();
        let mut stream = served.stream(&id, cursor).await;
        streams += 1;
        let mut last_status = String::new();
        while let Some(event) = stream.next().await {
            if let Some(seq) = &event.id {
                cursor = Some(seq.parse().unwrap());
                received.push(event.data);
            } else if event.event == "status" {
                last_status = event.data["status"].as_str().unwrap().to_string();
            }
        }
        let (_, job) = served.get(&format!("/api/v1/jobs/{id}")).await;
        if job["status"] == "completed" && last_status == "completed" {
            break;
        }
        // The server ended a stream of a running job, after about the limit.
        assert!(
            opened.elapsed() >= std::time::Duration::from_millis(900),
            "a stream ended after {:?} with the job {}",
            opened.elapsed(),
            job["status"]
        );
        assert!(streams < 60, "the stream never reached the job's end");
    }
    assert!(streams >= 3, "the server cut the stream {streams} times");
    let log: Vec<Value> = served
        .http
        .get(served.url(&format!("/api/v1/jobs/{id}/events?format=jsonl")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(received, log);
    served.stop().await;
}

/// A request with a body as given (`content_type` as given, none when `None`).
async fn send_raw(
    served: &support::serve::Served,
    method: reqwest::Method,
    path: &str,
    content_type: Option<&str>,
    body: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = served.http.request(method, served.url(path));
    if let Some(kind) = content_type {
        request = request.header("content-type", kind);
    }
    if let Some(body) = body {
        request = request.body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_names_the_field_at_fault_in_a_body_a_query_or_a_form() {
    let project = Project::new();
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let id = submit(&served, "x").await;
    let comments = format!("/api/v1/jobs/{id}/comments");
    let json = Some("application/json");
    // (method, path, body, status, field, what the detail says)
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<&'a str>,
        u16,
        Option<&'a str>,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/api/v1/jobs",
            Some(r#"{"piece": "one", "task": "#),
            400,
            None,
            "at line 1 column",
        ),
        (
            "POST",
            "/api/v1/jobs",
            Some(r#"{"piece": "one" "task": "x"}"#),
            400,
            None,
            "at line 1 column",
        ),
        (
            "POST",
            "/api/v1/jobs",
            Some(r#"{"piece": "one"}"#),
            400,
            Some("task"),
            "missing field `task`",
        ),
        (
            "POST",
            "/api/v1/jobs",
            Some(r#"{"task": "x", "budget": {}}"#),
            400,
            Some("piece"),
            "missing field `piece`",
        ),
        (
            "POST",
            "/api/v1/jobs",
            Some(r#"{"piece": "one", "task": "x", "budget": {"max_usd": 1}}"#),
            400,
            Some("budget.max_usd"),
            "unknown field `max_usd`",
        ),
        (
            "POST",
            "/api/v1/jobs",
            Some(r#"{"piece": "one", "task": "x", "class": ""}"#),
            400,
            Some("class"),
            "`class` must be 1 to 64 characters",
        ),
        (
            "GET",
            "/api/v1/jobs?status=bogus",
            None,
            400,
            Some("status"),
            "not a job status",
        ),
        (
            "GET",
            "/api/v1/jobs?cursor=xyz",
            None,
            400,
            Some("cursor"),
            "`cursor`",
        ),
        (
            "POST",
            &comments,
            Some(r#"{"body": "   "}"#),
            400,
            Some("body"),
            "is empty",
        ),
    ];
    for (method, path, body, want, field, says) in cases {
        let method: reqwest::Method = method.parse().unwrap();
        let (status, headers, problem) = send_raw(&served, method.clone(), path, json, body).await;
        assert_eq!(status, want, "{method} {path} {body:?}: {problem}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(
            problem.get("field").and_then(Value::as_str),
            field,
            "{method} {path} {body:?}: {problem}"
        );
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{method} {path} {body:?}: {problem}");
    }
    // A multipart submission's refusal names the form's part, never a JSON body.
    let form = |pairs: &[(&'static str, &'static str)]| {
        let mut form = reqwest::multipart::Form::new();
        for (name, value) in pairs {
            form = form.text(*name, *value);
        }
        form
    };
    let forms: Vec<(reqwest::multipart::Form, &str, &str)> = vec![
        (
            form(&[("piece", "one"), ("task", "x"), ("workspace", "/etc")]),
            "workspace",
            "never takes a host directory",
        ),
        (form(&[("piece", "one")]), "task", "`task`"),
        (
            form(&[("piece", "one"), ("task", "x"), ("priority", "high")]),
            "priority",
            "whole number",
        ),
        (
            form(&[("piece", "one"), ("task", "x"), ("budget", "lots")]),
            "budget",
            "`budget` must be JSON",
        ),
        (
            form(&[
                ("piece", "one"),
                ("task", "x"),
                ("budget", r#"{"max_usd": 1}"#),
            ]),
            "budget.max_usd",
            "unknown field `max_usd`",
        ),
    ];
    for (form, field, says) in forms {
        let response = served
            .http
            .post(served.url("/api/v1/jobs"))
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400, "{field}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["field"], field, "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{problem}");
        assert!(
            detail.contains("form") && !detail.contains("JSON body") && !detail.contains("line 1"),
            "{problem}"
        );
    }
    // Media types are read without regard to case, with their parameters.
    for kind in ["APPLICATION/JSON", "Application/Json; Charset=UTF-8"] {
        let (status, _, job) = send_raw(
            &served,
            reqwest::Method::POST,
            "/api/v1/jobs",
            Some(kind),
            Some(r#"{"piece": "one", "task": "cased"}"#),
        )
        .await;
        assert_eq!(status, 201, "{kind}: {job}");
    }
    let (status, _, _) = send_raw(
        &served,
        reqwest::Method::POST,
        "/api/v1/jobs",
        Some("application/jsonp"),
        Some(r#"{"piece": "one", "task": "x"}"#),
    )
    .await;
    assert_eq!(status, 415);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_share_link_is_made_without_a_body_or_with_an_empty_one() {
    let project = Project::new();
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let id = submit(&served, "x").await;
    let share = format!("/api/v1/jobs/{id}/share");
    for (content_type, body) in [
        (None, None),
        (Some("application/json"), None),
        (Some("application/json"), Some("")),
        (Some("application/json"), Some("{}")),
    ] {
        let (status, _, link) =
            send_raw(&served, reqwest::Method::POST, &share, content_type, body).await;
        assert_eq!(status, 201, "{content_type:?} {body:?}: {link}");
        assert!(link["token"].as_str().unwrap().starts_with("mss_"));
        assert_eq!(link["expires_at"], Value::Null, "{link}");
    }
    // A body that is there is still read as JSON, and its fields are checked.
    let (status, _, problem) = send_raw(
        &served,
        reqwest::Method::POST,
        &share,
        Some("text/plain"),
        Some("24"),
    )
    .await;
    assert_eq!(status, 415, "{problem}");
    for (hours, says) in [(0_u64, "must be at least 1"), (876_001, "at most 876000")] {
        let (status, _, problem) = send_raw(
            &served,
            reqwest::Method::POST,
            &share,
            Some("application/json"),
            Some(&format!(r#"{{"expires_in_hours": {hours}}}"#)),
        )
        .await;
        assert_eq!(status, 422, "{problem}");
        assert_eq!(problem["field"], "expires_in_hours", "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{hours}: {problem}");
        assert!(hours > 0 || !detail.contains("smaller"), "{problem}");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_configuration_is_patched_with_a_merge_patch_that_keeps_everything_else() {
    let project = Project::new();
    let served = project.serve("http://127.0.0.1:9", &["--no-worker"]);
    let get = || async {
        let response = served
            .http
            .get(served.url("/api/v1/config"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let etag = response.headers()["etag"].to_str().unwrap().to_string();
        (etag, response.json::<Value>().await.unwrap())
    };
    let patch = |body: &str, content_type: &str, if_match: Option<&str>| {
        let mut request = served
            .http
            .patch(served.url("/api/v1/config"))
            .header("content-type", content_type)
            .body(body.to_string());
        if let Some(tag) = if_match {
            request = request.header("if-match", tag);
        }
        request.send()
    };
    let (first, base) = get().await;
    assert_eq!(base["llm"]["api_key"], Value::Null, "{base}");
    let default_iterations = base["engine"]["max_iterations_per_movement"].clone();
    // A whole document with a secret and a changed setting.
    let mut whole = base.clone();
    whole["llm"]["api_key"] = json!("sk-overlay-5678");
    whole["engine"]["max_iterations_per_movement"] = json!(40);
    let response = served
        .http
        .put(served.url("/api/v1/config"))
        .header("if-match", &first)
        .json(&whole)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let put_tag = response.headers()["etag"].to_str().unwrap().to_string();

    let merge = "application/merge-patch+json";
    let change = r#"{"llm": {"tool_mode": "json"}}"#;
    // The rules of PUT: If-Match required, a stale one refused, invalid values named.
    let response = patch(change, merge, None).await.unwrap();
    assert_eq!(response.status().as_u16(), 428);
    let response = patch(change, merge, Some(&first)).await.unwrap();
    assert_eq!(response.status().as_u16(), 412);
    let response = patch(change, "text/plain", Some(&put_tag)).await.unwrap();
    assert_eq!(response.status().as_u16(), 415);
    let response = patch(
        r#"{"llm": {"tool_mode": "telepathy"}}"#,
        merge,
        Some(&put_tag),
    )
    .await
    .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let problem: Value = response.json().await.unwrap();
    assert!(
        problem["errors"].to_string().contains("tool_mode"),
        "{problem}"
    );
    // Every field at fault is named, not only the first.
    let response = patch(
        r#"{"engine": {"foo": 1}, "subtasks": {"max_depth": -1}, "files": {"max_files": "many"}}"#,
        merge,
        Some(&put_tag),
    )
    .await
    .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let problem: Value = response.json().await.unwrap();
    let fields: HashSet<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        HashSet::from(["engine.foo", "subtasks.max_depth", "files.max_files"]),
        "{problem}"
    );

    // The patch changes what it names and keeps the rest: the setting and the secret.
    let response = patch(change, merge, Some(&put_tag)).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let patched_tag = response.headers()["etag"].to_str().unwrap().to_string();
    assert_ne!(patched_tag, put_tag);
    let patched: Value = response.json().await.unwrap();
    assert_eq!(patched["llm"]["tool_mode"], "json", "{patched}");
    assert_eq!(patched["engine"]["max_iterations_per_movement"], 40);
    assert_eq!(patched["llm"]["api_key"], "***", "the secret was dropped");
    let (now, stored) = get().await;
    assert_eq!((now.as_str(), &stored), (patched_tag.as_str(), &patched));
    // `null` takes a key back to the node's own configuration; `application/json` is taken too.
    let response = patch(
        r#"{"engine": {"max_iterations_per_movement": null}, "llm": {"tool_mode": "native"}}"#,
        "application/json",
        Some(&patched_tag),
    )
    .await
    .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let reverted: Value = response.json().await.unwrap();
    assert_eq!(
        reverted["engine"]["max_iterations_per_movement"],
        default_iterations
    );
    assert_eq!(reverted["llm"]["tool_mode"], "native");
    assert_eq!(reverted["llm"]["api_key"], "***", "the secret was dropped");
    // Each write is audited.
    let (status, audit) = served.get("/api/v1/admin/audit").await;
    assert_eq!(status, 200, "{audit}");
    let changes = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "config_changed")
        .count();
    assert_eq!(changes, 3, "{audit}");
    let log = served.stop().await;
    assert!(!log.contains("sk-overlay-5678"));
}
