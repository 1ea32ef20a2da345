//! Shared parts of the CLI tool tests: running the binary in a private directory, calling one
//! tool by hand, a web server on 127.0.0.1 (page, download, SearXNG search), a throwaway OpenSSH
//! server, and reading a run's record.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test binary uses part of it

pub(crate) mod jobs;
pub(crate) mod serve;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{Uri, header};
use axum::response::IntoResponse;
use axum::routing::get;
use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::{Value, json};

pub(crate) const PAGE: &str = "<html><head><title>Toolbelt</title></head><body>\
    <h1>Welcome to the toolbelt page</h1><p>Fetched through the guard.</p></body></html>";

/// The body of `/files/data.csv`.
pub(crate) const CSV: &str = "id,name\n1,downloaded-row\n";

/// Runs the binary in `dir` (also its HOME, so no user or project configuration leaks in).
pub(crate) async fn maestro(dir: &Path, args: Vec<String>) -> Output {
    maestro_with_env(dir, args, &[]).await
}

/// [`maestro`] with these environment variables set.
pub(crate) async fn maestro_with_env(
    dir: &Path,
    args: Vec<String>,
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir)
        .args(args)
        .env("HOME", dir)
        .env_remove("MAESTRO_LLM_BASE_URL")
        .env_remove("MAESTRO_MODEL")
        .env_remove("MAESTRO_API_KEY")
        .envs(env.iter().copied());
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

pub(crate) fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `maestro tools call TOOL --workspace <dir>/ws --input INPUT EXTRA…`: exit code and the JSON
/// line.
pub(crate) async fn call(dir: &Path, tool: &str, input: Value, extra: &[&str]) -> (i32, Value) {
    let ws = dir.join("ws");
    let mut list = args(&["tools", "call", tool, "--input", &input.to_string()]);
    list.extend(args(&["--workspace", ws.to_str().unwrap()]));
    list.extend(args(extra));
    let out = maestro(dir, list).await;
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "one JSON line; stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap(),
        serde_json::from_str(&stdout).unwrap(),
    )
}

/// The output of a call that must have succeeded (exit code 0, `ok: true`).
pub(crate) fn ok_output((code, out): (i32, Value)) -> String {
    assert_eq!((code, &out["ok"]), (0, &json!(true)), "{out}");
    assert_eq!(out["error"], Value::Null, "{out}");
    out["output"].as_str().unwrap().to_string()
}

/// The error of a call that must have failed (exit code 1, `ok: false`).
pub(crate) fn error_output((code, out): (i32, Value)) -> String {
    assert_eq!((code, &out["ok"]), (1, &json!(false)), "{out}");
    assert_eq!(out["output"], Value::Null, "{out}");
    out["error"].as_str().unwrap().to_string()
}

pub(crate) fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("maestro-test-config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

type Hits = Arc<Mutex<Vec<String>>>;

/// A web server on 127.0.0.1 that records every request (`path?query`): `/page` (HTML),
/// `/files/data.csv` (a download) and `/search` (SearXNG's JSON API).
pub(crate) struct Web {
    pub port: u16,
    hits: Hits,
}

async fn record(State(hits): State<Hits>, uri: Uri) -> impl IntoResponse {
    hits.lock().unwrap().push(uri.to_string());
    match uri.path() {
        "/page" => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response(),
        _ => ([(header::CONTENT_TYPE, "text/csv")], CSV).into_response(),
    }
}

async fn search(
    State(hits): State<Hits>,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> impl IntoResponse {
    hits.lock().unwrap().push(uri.to_string());
    let query = q.get("q").cloned().unwrap_or_default();
    axum::Json(json!({
        "query": query,
        "results": [
            {"url": "https://docs.example/ssh", "title": format!("Guide to {query}"),
             "content": "How the searxng fake answers."},
            {"url": "https://docs.example/other", "title": "Second hit", "content": ""}
        ]
    }))
}

impl Web {
    pub(crate) async fn start() -> Web {
        let hits: Hits = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/page", get(record))
            .route("/files/data.csv", get(record))
            .route("/search", get(search))
            .with_state(Arc::clone(&hits));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Web { port, hits }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every request served so far, as `path?query` (percent-encoded as sent).
    pub(crate) fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }
}

pub(crate) use maestro_testkit::Sshd;

/// The CLI tests' view of the shared test server: its `ssh:` configuration section.
pub(crate) trait SshdConfig {
    fn config(&self, id: &str) -> String;
}

impl SshdConfig for Sshd {
    /// The `ssh:` configuration section registering this server as connection `id`.
    fn config(&self, id: &str) -> String {
        format!(
            "ssh:\n  connections:\n    - id: {id}\n      name: test-sshd\n      host: 127.0.0.1\n      \
             port: {}\n      user: {}\n      auth: {{key: \"{}\"}}\n      known_host_key: \"{}\"\n",
            self.port,
            Sshd::user(),
            self.path("user_key").display(),
            self.host_key_line()
        )
    }
}

/// A scripted model that makes `calls` one per turn, then completes the run with `result`.
pub(crate) async fn scripted_model(calls: &[(&str, Value)], result: &str) -> ScriptedLlm {
    let mut turns: Vec<Turn> = calls
        .iter()
        .map(|(tool, input)| Turn::tool_call(*tool, input.clone()))
        .collect();
    turns.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": result}),
    ));
    ScriptedLlm::start(turns).await
}

/// `maestro run piece.yaml` in `dir` against `server`, with native tool calls.
pub(crate) async fn run_piece(
    dir: &Path,
    config: &Path,
    server: &ScriptedLlm,
    task: &str,
) -> Output {
    maestro(
        dir,
        args(&[
            "run",
            "piece.yaml",
            "--task",
            task,
            "--config",
            config.to_str().unwrap(),
            "--llm-base-url",
            &server.base_url(),
            "--model",
            "scripted-model",
            "--tool-mode",
            "native",
        ]),
    )
    .await
}

/// The only run directory under `<dir>/.maestro/runs`.
pub(crate) fn only_run(dir: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(dir.join(".maestro/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs.into_iter().next().unwrap()
}

/// The run's `events.jsonl`.
pub(crate) fn events(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Each `tool_result` event as (tool, ok).
pub(crate) fn tool_results(events: &[Value]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| {
            (
                e["tool"].as_str().unwrap().to_string(),
                e["ok"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The content of a model request's last message, which must be a tool result.
pub(crate) fn last_tool_message(request: &Value) -> String {
    let last = request["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "tool", "{last}");
    last["content"].as_str().unwrap().to_string()
}
