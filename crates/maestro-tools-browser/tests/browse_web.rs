#![allow(clippy::unwrap_used, clippy::expect_used)]
//! BrowseWeb against a real Chromium and a real HTTP server on 127.0.0.1, with the guard
//! allowing that server's one port: driving a page (type, click, text, screenshot, back, a
//! download), the page kept between calls, and every request of the page that aims at a
//! private address (directly, through a redirect, through a name resolving there, over a
//! WebSocket, or at another port of the machine) refused by the guard proxy.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Uri, header};
use axum::response::{Html, IntoResponse, Redirect};
use axum::routing::get;
use maestro_tools::{BoxFuture, CancellationToken, Registry, ToolContext, ToolOutput, ToolsConfig};
use maestro_tools_web::{HostLookup, WebConfig};
use serde_json::json;

type Hits = Arc<Mutex<Vec<String>>>;

struct Server {
    port: u16,
    hits: Hits,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }
}

const FORM: &str = r#"<!doctype html><html><head><title>The form</title></head><body>
<h1>Greeter</h1>
<input id="name" type="text">
<button id="go" onclick="document.getElementById('out').textContent = 'Hello, ' + document.getElementById('name').value + '!'">Greet</button>
<p id="out">nobody greeted yet</p>
<p><a id="next" href="/second">Next page</a></p>
<p><a id="file" href="/report.csv">The report</a></p>
</body></html>"#;

const SECOND: &str = "<!doctype html><html><head><title>Second</title></head><body><h1>Second page</h1></body></html>";

/// A page whose script reaches `target` with fetch (`kind=fetch`) or a WebSocket (`kind=ws`)
/// and writes what it saw into `#result`, marked `.done`.
async fn probe(Query(q): Query<HashMap<String, String>>) -> Html<String> {
    let target = serde_json::to_string(q.get("target").map_or("", String::as_str)).unwrap();
    let script = if q.get("kind").map(String::as_str) == Some("ws") {
        format!(
            "const ws = new WebSocket({target});
             ws.onopen = () => show('opened');
             ws.onerror = () => show('failed: websocket error');"
        )
    } else {
        format!(
            "fetch({target}).then(r => r.text().then(t => show('status ' + r.status + ': ' + t)))
               .catch(e => show('failed: ' + e));"
        )
    };
    Html(format!(
        "<!doctype html><html><head><title>Probe</title></head><body><p id=\"result\">pending</p>
         <script>
         function show(text) {{
           const el = document.getElementById('result');
           el.textContent = text;
           el.className = 'done';
         }}
         {script}
         </script></body></html>"
    ))
}

async fn record(State(hits): State<Hits>, uri: Uri) -> &'static str {
    hits.lock().unwrap().push(uri.to_string());
    "inner-data"
}

async fn form(State(hits): State<Hits>, uri: Uri) -> Html<&'static str> {
    hits.lock().unwrap().push(uri.to_string());
    Html(FORM)
}

async fn report() -> impl IntoResponse {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, "text/csv".parse().unwrap());
    headers.insert(
        header::CONTENT_DISPOSITION,
        "attachment; filename=\"report.csv\"".parse().unwrap(),
    );
    (headers, "a,b\n1,2\n")
}

async fn start() -> Server {
    let hits: Hits = Arc::default();
    let app = Router::new()
        .route("/form", get(form))
        .route("/second", get(|| async { Html(SECOND) }))
        .route("/probe", get(probe))
        .route("/data", get(record))
        .route("/report.csv", get(report))
        .route(
            "/alert",
            get(|| async {
                Html("<!doctype html><body><script>alert('Cookies!')</script><h1>After the alert</h1></body>")
            }),
        )
        .route(
            "/to-metadata",
            get(|| async { Redirect::temporary("http://169.254.169.254/latest/meta-data/") }),
        )
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { port, hits }
}

/// Maps test names to addresses without DNS.
struct MapLookup(HashMap<String, Vec<IpAddr>>);

impl HostLookup for MapLookup {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            self.0.get(host).cloned().ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, format!("{host} is unknown"))
            })
        })
    }
}

/// A registry whose BrowseWeb may reach only `127.0.0.1:<port>` of the test server, and
/// resolves `metadata.test` to the cloud metadata address.
fn registry(server: &Server) -> Registry {
    let config = WebConfig {
        allow_hosts: vec![format!("127.0.0.1:{}", server.port)],
        ..WebConfig::default()
    };
    let lookup = MapLookup(HashMap::from([(
        "metadata.test".to_string(),
        vec!["169.254.169.254".parse().unwrap()],
    )]));
    let mut registry = Registry::builtin(ToolsConfig::default());
    registry.register(maestro_tools_browser::browse_web_with_lookup(
        &config,
        Arc::new(lookup),
    ));
    registry
}

fn ctx(workspace: &std::path::Path) -> ToolContext {
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

async fn browse(registry: &Registry, ws: &std::path::Path, input: serde_json::Value) -> ToolOutput {
    registry
        .execute(&ctx(ws), "BrowseWeb", &input.to_string())
        .await
}

fn ok(out: &ToolOutput) -> &str {
    assert!(out.ok, "BrowseWeb failed: {}", out.output);
    &out.output
}

#[tokio::test]
#[cfg_attr(
    no_chromium,
    ignore = "needs /usr/bin/chromium: scripts/prerequisites.sh"
)]
async fn drives_a_page_and_keeps_it_open_between_calls() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let registry = registry(&server);

    let out = browse(
        &registry,
        ws.path(),
        json!({
            "url": server.url("/form"),
            "actions": [
                {"type": {"selector": "#name", "text": "Ada"}},
                {"click": "#go"},
                {"wait_for": "#out"},
                {"screenshot": "greeted.png"}
            ]
        }),
    )
    .await;
    let text = ok(&out);
    assert!(
        text.starts_with(&format!("URL: {}\n", server.url("/form"))),
        "{text}"
    );
    assert!(text.contains("Title: The form"), "{text}");
    assert!(text.contains("# Greeter"), "{text}");
    assert!(text.contains("Hello, Ada!"), "the click's effect: {text}");
    assert!(!text.contains("nobody greeted yet"), "{text}");
    assert!(
        text.contains("Screenshot saved to input/greeted.png"),
        "{text}"
    );
    assert!(
        !text.contains("Downloaded"),
        "a screenshot is not a download: {text}"
    );
    let png = std::fs::File::open(ws.path().join("input/greeted.png")).unwrap();
    let mut reader = png::Decoder::new(std::io::BufReader::new(png))
        .read_info()
        .unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert!(frame.width >= 800 && frame.height >= 600, "{frame:?}");
    assert!(
        pixels.iter().any(|&b| b != pixels[0]),
        "the screenshot shows something"
    );

    // No `url`: the next call goes on with the same page.
    let out = browse(
        &registry,
        ws.path(),
        json!({"actions": [{"click": "#next"}]}),
    )
    .await;
    let text = ok(&out);
    assert!(
        text.starts_with(&format!("URL: {}\n", server.url("/second"))),
        "{text}"
    );
    assert!(text.contains("# Second page"), "{text}");

    let out = browse(&registry, ws.path(), json!({"actions": [{"back": true}]})).await;
    let text = ok(&out);
    assert!(
        text.starts_with(&format!("URL: {}\n", server.url("/form"))),
        "{text}"
    );

    // A second screenshot of the same name does not overwrite the first.
    let out = browse(
        &registry,
        ws.path(),
        json!({"actions": [{"scroll": "down"}, {"screenshot": "input/greeted.png"}]}),
    )
    .await;
    assert!(
        ok(&out).contains("Screenshot saved to input/greeted-1.png"),
        "{}",
        out.output
    );

    // A link to an attachment downloads it into input/.
    let out = browse(
        &registry,
        ws.path(),
        json!({"actions": [{"click": "#file"}]}),
    )
    .await;
    let text = ok(&out);
    assert!(
        !text.contains("greeted"),
        "earlier screenshots are not downloads: {text}"
    );
    let report = ws.path().join("input/report.csv");
    for _ in 0..50 {
        if report.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "a,b\n1,2\n");
}

/// Opens the probe page aimed at `target` and returns what its script saw and the answer.
async fn probe_page(
    registry: &Registry,
    server: &Server,
    ws: &std::path::Path,
    kind: &str,
    target: &str,
) -> String {
    let url = format!(
        "{}?kind={kind}&target={}",
        server.url("/probe"),
        url_encode(target)
    );
    let out = browse(
        registry,
        ws,
        json!({"url": url, "actions": [{"wait_for": "#result.done"}]}),
    )
    .await;
    ok(&out).to_string()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
#[cfg_attr(
    no_chromium,
    ignore = "needs /usr/bin/chromium: scripts/prerequisites.sh"
)]
async fn every_request_of_the_page_to_a_private_address_is_refused_by_the_guard() {
    let server = start().await;
    let other = start().await;
    let ws = tempfile::tempdir().unwrap();
    let registry = registry(&server);

    // The allowed port is reached, so the refusals below are the guard's doing.
    let text = probe_page(&registry, &server, ws.path(), "fetch", &server.url("/data")).await;
    assert!(text.contains("status 200: inner-data"), "{text}");
    assert!(!text.contains("SSRF guard refused"), "{text}");

    // Another port of the machine first: it must go through the proxy too.
    let cases = [
        (
            "fetch",
            other.url("/data"),
            "refused to connect to 127.0.0.1 (loopback address)",
        ),
        (
            "fetch",
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "http://169.254.169.254/latest/meta-data/: refused to connect to 169.254.169.254 \
             (link-local / cloud metadata address)",
        ),
        (
            "fetch",
            "http://10.0.0.1/admin".to_string(),
            "http://10.0.0.1/admin: refused to connect to 10.0.0.1 (private network address)",
        ),
        (
            "fetch",
            server.url("/to-metadata"),
            "http://169.254.169.254/latest/meta-data/: refused to connect to 169.254.169.254",
        ),
        (
            "fetch",
            "http://metadata.test/latest/meta-data/".to_string(),
            "refused to connect to metadata.test: it resolves to 169.254.169.254 \
             (link-local / cloud metadata address)",
        ),
        (
            "ws",
            "ws://10.0.0.1/socket".to_string(),
            "10.0.0.1:80: refused to connect to 10.0.0.1 (private network address)",
        ),
    ];
    for (kind, target, refusal) in cases {
        let text = probe_page(&registry, &server, ws.path(), kind, &target).await;
        assert!(
            text.contains("The SSRF guard refused these requests of the page:"),
            "{target}: {text}"
        );
        assert!(
            text.contains(refusal),
            "{target}: expected {refusal:?} in {text}"
        );
        assert!(
            text.contains("failed: "),
            "{target}: the page saw a failure: {text}"
        );
    }
    assert_eq!(
        other.hits(),
        Vec::<String>::new(),
        "another port of the machine"
    );
}

#[tokio::test]
#[cfg_attr(
    no_chromium,
    ignore = "needs /usr/bin/chromium: scripts/prerequisites.sh"
)]
async fn a_dialog_is_accepted_and_named_instead_of_stalling_the_page() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let registry = registry(&server);
    let out = browse(&registry, ws.path(), json!({"url": server.url("/alert")})).await;
    let text = ok(&out);
    assert!(
        text.contains("The page showed a dialog, accepted: \"Cookies!\"."),
        "{text}"
    );
    assert!(text.contains("# After the alert"), "{text}");
}

#[tokio::test]
async fn a_refused_url_is_answered_before_any_browser_starts() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let registry = registry(&server);
    let out = browse(
        &registry,
        ws.path(),
        json!({"url": "http://metadata.test/latest/"}),
    )
    .await;
    assert!(!out.ok);
    assert_eq!(
        out.output,
        "BrowseWeb http://metadata.test/latest/: refused to connect to metadata.test: it \
         resolves to 169.254.169.254 (link-local / cloud metadata address); private, loopback \
         and metadata addresses are not reachable from the browser"
    );
    let out = browse(&registry, ws.path(), json!({"url": "file:///etc/passwd"})).await;
    assert!(!out.ok);
    assert!(
        out.output.contains("only http and https pages are opened"),
        "{}",
        out.output
    );
    assert!(server.hits().is_empty());
}

#[tokio::test]
async fn without_a_page_a_call_says_to_pass_url() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    // A fresh tool stands for a run resumed on another worker: no browser, no page.
    let registry = registry(&server);
    let out = browse(
        &registry,
        ws.path(),
        json!({"actions": [{"click": "#next"}]}),
    )
    .await;
    assert!(!out.ok);
    assert!(
        out.output.contains("no page is open in this run"),
        "{}",
        out.output
    );
    assert!(out.output.contains("pass `url`"), "{}", out.output);
}
