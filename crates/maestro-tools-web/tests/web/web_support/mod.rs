//! A real HTTP server on 127.0.0.1 for the web tool tests, and helpers to call the tools.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test binary uses part of it

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use maestro_tools::{BoxFuture, Tool, ToolContext, ToolOutput};
use maestro_tools_web::{HostLookup, WebConfig};
use tokio_util::sync::CancellationToken;

pub(crate) const PAGE: &str = "<html><head><title>T</title><style>body{}</style></head><body>\
    <h1>Welcome</h1><script>steal()</script><p>Some <b>bold</b> text.</p></body></html>";
pub(crate) const BINARY: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR-binary-bytes";

#[derive(Clone, Default)]
pub(crate) struct Hits(pub Arc<Mutex<Vec<String>>>);

pub(crate) struct Server {
    pub port: u16,
    pub hits: Hits,
}

impl Server {
    pub(crate) fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }

    pub(crate) fn hits(&self) -> Vec<String> {
        self.hits.0.lock().unwrap().clone()
    }
}

async fn page(State(h): State<Hits>) -> Response {
    h.0.lock().unwrap().push("/page".into());
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response()
}

async fn binary(State(h): State<Hits>) -> Response {
    h.0.lock().unwrap().push("/bin".into());
    ([(header::CONTENT_TYPE, "image/png")], BINARY).into_response()
}

async fn big() -> Response {
    ([(header::CONTENT_TYPE, "text/plain")], "x".repeat(5000)).into_response()
}

async fn redirect(Query(q): Query<HashMap<String, String>>) -> Response {
    let to = q.get("to").cloned().unwrap_or_default();
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

async fn redirect_loop(headers: HeaderMap) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    (
        StatusCode::FOUND,
        [(header::LOCATION, format!("http://{host}/loop"))],
    )
        .into_response()
}

async fn slow() -> Response {
    tokio::time::sleep(Duration::from_secs(5)).await;
    "late".into_response()
}

async fn search(State(h): State<Hits>, Query(q): Query<HashMap<String, String>>) -> Response {
    h.0.lock()
        .unwrap()
        .push(format!("/search?format={}&q={}", q["format"], q["q"]));
    let body = serde_json::json!({
        "query": q["q"],
        "results": [
            {"url": "https://example.org/a", "title": "First result", "content": "About a."},
            {"url": "https://example.org/b", "title": "Second result", "content": ""},
            {"url": "https://example.org/c", "title": "Third result", "content": "About c."}
        ]
    });
    axum::Json(body).into_response()
}

pub(crate) async fn start() -> Server {
    let hits = Hits::default();
    let app = Router::new()
        .route("/page", get(page))
        .route("/bin", get(binary))
        .route("/big", get(big))
        .route("/redirect", get(redirect))
        .route("/loop", get(redirect_loop))
        .route("/slow", get(slow))
        .route("/search", get(search))
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { port, hits }
}

/// Maps test names to addresses without DNS.
pub(crate) struct MapLookup(pub HashMap<String, Vec<IpAddr>>);

impl HostLookup for MapLookup {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            self.0.get(host).cloned().ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{host} is not in the test map"),
                )
            })
        })
    }
}

pub(crate) fn lookup(entries: &[(&str, &str)]) -> Arc<MapLookup> {
    Arc::new(MapLookup(
        entries
            .iter()
            .map(|(name, ip)| (name.to_string(), vec![ip.parse().unwrap()]))
            .collect(),
    ))
}

pub(crate) fn tool(tools: &[Arc<dyn Tool>], name: &str) -> Arc<dyn Tool> {
    tools
        .iter()
        .find(|t| t.spec().name == name)
        .cloned()
        .unwrap()
}

pub(crate) fn ctx(workspace: &std::path::Path) -> ToolContext {
    ToolContext {
        workspace: workspace.to_path_buf(),
        workspace_kind: maestro_tools::WorkspaceKind::Job,
        edit: false,
        allowed_commands: None,
        allowed_ssh_connections: None,
        cancel: CancellationToken::new(),
        scratch: Default::default(),
    }
}

/// Calls one web tool with a config and a name map.
pub(crate) async fn call(
    config: WebConfig,
    names: &[(&str, &str)],
    name: &str,
    input: serde_json::Value,
    workspace: &std::path::Path,
) -> ToolOutput {
    let tools = maestro_tools_web::tools_with_lookup(config, lookup(names));
    tool(&tools, name).call(&ctx(workspace), input).await
}
