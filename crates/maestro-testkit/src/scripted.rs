//! [`ScriptedLlm`]: an OpenAI-compatible Chat Completions server on 127.0.0.1 that replays a
//! script of [`Turn`]s and records every request it receives.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use crate::ask::Ask;
use crate::render;
use crate::serving;
use crate::turn::Turn;

/// A request as the server received it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names (lower case) and values, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`null` when empty or not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// The value of header `name` (case-insensitive), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A scripted OpenAI-compatible model server for tests, speaking real HTTP and SSE.
///
/// Each `POST /v1/chat/completions` takes the next [`Turn`] (turns made with
/// [`Turn::when_contains`] are matched first) and answers streamed or not, as the request's
/// `stream` flag says. When the script is used up it answers HTTP 500 `script exhausted`, so a
/// test that makes an unplanned call fails loudly. It also serves `GET /v1/models`,
/// `POST /v1/embeddings` (a vector per input, with usage), and optionally llama.cpp's `GET /props` and
/// Ollama's `POST /api/show`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use maestro_testkit::{ScriptedLlm, Turn};
///
/// let server = ScriptedLlm::start([Turn::text("hello")]).await;
/// let url = server.base_url(); // http://127.0.0.1:PORT/v1
/// # let _ = url;
/// // … run the code under test against `url`, then assert on what it sent:
/// assert!(server.requests().is_empty());
/// # }
/// ```
///
/// The server stops when the value is dropped.
pub struct ScriptedLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ScriptedLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedLlm")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Options of a [`ScriptedLlm`] beyond its script; start from [`ScriptedLlm::builder`].
#[derive(Debug, Clone)]
pub struct ScriptedLlmBuilder {
    turns: Vec<Turn>,
    model_id: String,
    model_fields: Map<String, Value>,
    props: Option<Value>,
    ollama_show: Option<Value>,
    reject_stream_options: bool,
    reject_streaming: bool,
    reject_tools: bool,
    also_served: Vec<String>,
    forget_requests: bool,
}

struct Shared {
    options: ScriptedLlmBuilder,
    script: Mutex<VecDeque<Turn>>,
    recorded: Mutex<Vec<RecordedRequest>>,
    answered: Mutex<usize>,
    sent: render::SentBytes,
    /// TCP connections accepted so far.
    connections: AtomicUsize,
    /// When each chat request arrived and when its answer began, in the order the answers began.
    timings: Mutex<Vec<Timing>>,
    /// Chat requests received whose answer has not begun yet.
    in_flight: AtomicUsize,
    /// The most chat requests ever in flight at once.
    peak_in_flight: AtomicUsize,
}

/// Counts a chat request as in flight until it is dropped (its answer began, or it failed).
struct InFlight(Arc<Shared>);

impl InFlight {
    fn enter(shared: &Arc<Shared>) -> InFlight {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(Arc::clone(shared))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// When the server received a chat request (its body read) and when it began to answer it (the
/// turn's delay over), by the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// When the request's body had been read.
    pub received: std::time::SystemTime,
    /// When the answer began: the turn's delay over, just before its response is rendered.
    pub answered: std::time::SystemTime,
}

/// The server's listener, counting the connections it accepts.
struct Counting {
    inner: tokio::net::TcpListener,
    shared: Arc<Shared>,
}

impl axum::serve::Listener for Counting {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let accepted = axum::serve::Listener::accept(&mut self.inner).await;
        self.shared.connections.fetch_add(1, Ordering::Relaxed);
        accepted
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A listener on a free loopback port whose accept queue holds 4,096 connections (the
/// system's usual `somaxconn`), not the 1,024 of `TcpListener::bind`: a thousand clients that
/// connect at once would otherwise overflow it, and each connection dropped there waits a
/// second for the handshake to be sent again.
pub fn listen_loopback() -> std::io::Result<tokio::net::TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    socket.listen(4096)
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ScriptedLlmBuilder {
    /// Appends turns to the script.
    pub fn turns(mut self, turns: impl IntoIterator<Item = Turn>) -> Self {
        self.turns.extend(turns);
        self
    }

    /// The model id listed by `/v1/models` (default `scripted-model`).
    pub fn model_id(mut self, id: impl Into<String>) -> Self {
        self.model_id = id.into();
        self
    }

    /// Lists `max_model_len` (vLLM style) in the `/v1/models` entry.
    pub fn max_model_len(self, tokens: u64) -> Self {
        self.model_field("max_model_len", json!(tokens))
    }

    /// Adds any field to the `/v1/models` entry, e.g. `("context_length", json!(4096))` or
    /// `("meta", json!({"n_ctx_train": 2048}))`.
    pub fn model_field(mut self, key: impl Into<String>, value: Value) -> Self {
        self.model_fields.insert(key.into(), value);
        self
    }

    /// Serves `GET /props` (llama.cpp) with this body, e.g.
    /// `json!({"default_generation_settings": {"n_ctx": 8192}})`.
    pub fn props(mut self, body: Value) -> Self {
        self.props = Some(body);
        self
    }

    /// Serves `POST /api/show` (Ollama) with this body, e.g.
    /// `json!({"model_info": {"llama.context_length": 131072}})`.
    pub fn ollama_show(mut self, body: Value) -> Self {
        self.ollama_show = Some(body);
        self
    }

    /// Answers HTTP 400 naming `stream_options` to any request that carries it.
    pub fn reject_stream_options(mut self) -> Self {
        self.reject_stream_options = true;
        self
    }

    /// Answers HTTP 400 ("streaming is not supported") to any request with `stream: true`.
    pub fn reject_streaming(mut self) -> Self {
        self.reject_streaming = true;
        self
    }

    /// Answers HTTP 400 naming tools to any request that carries `tools`, as llama.cpp started
    /// without `--jinja` does.
    pub fn reject_tools(mut self) -> Self {
        self.reject_tools = true;
        self
    }

    /// Keeps no record of the requests ([`ScriptedLlm::requests`] and
    /// [`ScriptedLlm::recorded`] stay empty): a benchmark serving thousands of requests then
    /// measures its own memory, not the server's record of every prompt.
    pub fn forget_requests(mut self) -> Self {
        self.forget_requests = true;
        self
    }

    /// Lists a further model id in `/v1/models` (after [`model_id`](Self::model_id)).
    pub fn also_serves(mut self, id: impl Into<String>) -> Self {
        self.also_served.push(id.into());
        self
    }

    /// Binds 127.0.0.1 on a free port and starts serving.
    ///
    /// # Panics
    /// When no loopback port can be bound: test support fails the test at once.
    #[allow(clippy::expect_used)]
    pub async fn start(self) -> ScriptedLlm {
        let listener = listen_loopback().expect("bind 127.0.0.1:0 for ScriptedLlm");
        let addr = listener
            .local_addr()
            .expect("local address of the ScriptedLlm listener");
        let shared = Arc::new(Shared {
            script: Mutex::new(self.turns.iter().cloned().collect()),
            options: self,
            recorded: Mutex::default(),
            answered: Mutex::default(),
            sent: render::SentBytes::default(),
            connections: AtomicUsize::new(0),
            timings: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .route("/v1/embeddings", post(embeddings))
            .route("/props", get(props))
            .route("/api/show", post(ollama_show))
            .fallback(not_found)
            .with_state(shared.clone());
        let listener = Counting {
            inner: listener,
            shared: shared.clone(),
        };
        let task = serving::spawn("ScriptedLlm", listener, app);
        ScriptedLlm { addr, shared, task }
    }
}

impl ScriptedLlm {
    /// A server with default options replaying `turns`.
    pub async fn start(turns: impl IntoIterator<Item = Turn>) -> ScriptedLlm {
        ScriptedLlm::builder().turns(turns).start().await
    }

    /// Options beyond the script: model listing, `/props`, `/api/show`, refused features.
    pub fn builder() -> ScriptedLlmBuilder {
        ScriptedLlmBuilder {
            turns: Vec::new(),
            model_id: "scripted-model".into(),
            model_fields: Map::new(),
            props: None,
            ollama_show: None,
            reject_stream_options: false,
            reject_streaming: false,
            reject_tools: false,
            also_served: Vec::new(),
            forget_requests: false,
        }
    }

    /// The API root to configure clients with: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The server root: `http://127.0.0.1:PORT`.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The loopback address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends a turn to the script while the server runs.
    pub fn push(&self, turn: Turn) {
        lock(&self.shared.script).push_back(turn);
    }

    /// The bodies of every chat-completion request received, in arrival order (including those
    /// answered with scripted errors).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.recorded)
            .iter()
            .filter(|r| r.path == "/v1/chat/completions")
            .map(|r| r.body.clone())
            .collect()
    }

    /// Every request received on any route, with headers.
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.recorded).clone()
    }

    /// The bytes of chat-completion answer bodies sent so far (the scripted ones; HTTP errors
    /// excluded). An endless answer that the client stopped reading stays near the client's cap.
    pub fn bytes_sent(&self) -> usize {
        self.shared.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many TCP connections the server has accepted: a client that reuses its connections
    /// makes one for calls made one after another.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// When each chat request that got a scripted turn arrived and when its answer began, in
    /// the order the answers began, since the last call; the server forgets them. Kept even
    /// with `forget_requests` (two timestamps a request).
    pub fn take_timings(&self) -> Vec<Timing> {
        std::mem::take(&mut *lock(&self.shared.timings))
    }

    /// The most chat requests the server held at once, each counted from its arrival until
    /// its answer began (a turn's delay included): a bound on how many calls a client had in
    /// flight together.
    pub fn peak_in_flight(&self) -> usize {
        self.shared.peak_in_flight.load(Ordering::SeqCst)
    }

    /// How many turns are left in the script.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.script).len()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Shared {
    fn record(&self, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Value {
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        if !self.options.forget_requests {
            lock(&self.recorded).push(serving::recorded(uri, headers, body.clone()));
        }
        body
    }

    /// What the server reads of a chat request. The whole body is parsed only when something
    /// needs it (requests kept, or conditional turns to match against the messages); otherwise
    /// only the few fields the answer depends on are read.
    fn read_ask(&self, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Ask {
        let conditional = lock(&self.script).iter().any(|t| t.matcher.is_some());
        if self.options.forget_requests
            && !conditional
            && let Ok(light) = serde_json::from_slice::<LightAsk>(body)
        {
            return Ask {
                stream: light.stream.unwrap_or(false),
                include_usage: light
                    .stream_options
                    .as_ref()
                    .and_then(|o| o.include_usage)
                    .unwrap_or(false),
                has_stream_options: light.stream_options.is_some(),
                has_tools: light.tools.is_some(),
                model: light.model,
                body: Value::Null,
            };
        }
        let body = self.record(uri, headers, body);
        Ask {
            stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
            include_usage: body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            has_stream_options: body.get("stream_options").is_some(),
            has_tools: body.get("tools").is_some(),
            model: body
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string),
            body,
        }
    }

    /// The first conditional turn whose needle occurs in the request's messages, else the first
    /// unconditional turn.
    fn take_turn(&self, request: &Value) -> Option<Turn> {
        serving::take_turn(&mut lock(&self.script), || message_text(request))
    }
}

/// Every string inside the request's `messages`, one per line.
pub(crate) fn message_text(request: &Value) -> String {
    fn collect(value: &Value, out: &mut String) {
        match value {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
            Value::Object(map) => map.values().for_each(|v| collect(v, out)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    let mut out = String::new();
    if let Some(messages) = request.get("messages") {
        collect(messages, &mut out);
    }
    out
}

/// The fields of a chat request [`Ask`] is made of; the rest of the body is skipped unparsed.
#[derive(serde::Deserialize)]
struct LightAsk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<LightStreamOptions>,
    #[serde(default)]
    tools: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct LightStreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": "scripted"}})),
    )
        .into_response()
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = std::time::SystemTime::now();
    let _in_flight = InFlight::enter(&shared);
    let ask = shared.read_ask(&uri, &headers, &body);
    let options = &shared.options;
    let stream = ask.stream;
    if options.reject_stream_options && ask.has_stream_options {
        return error(
            StatusCode::BAD_REQUEST,
            "Unrecognized request argument supplied: stream_options",
        );
    }
    if options.reject_tools && ask.has_tools {
        return error(StatusCode::BAD_REQUEST, "tools param requires --jinja flag");
    }
    if options.reject_streaming && stream {
        return error(
            StatusCode::BAD_REQUEST,
            "streaming is not supported by this server",
        );
    }
    let Some(turn) = shared.take_turn(&ask.body) else {
        let answered = *lock(&shared.answered);
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!(
                "script exhausted: the ScriptedLlm has no turn left for this request ({answered} turns were served)"
            ),
        );
    };
    if let Some(delay) = turn.delay {
        tokio::time::sleep(delay).await;
    }
    let seq = {
        let mut answered = lock(&shared.answered);
        *answered += 1;
        *answered
    };
    lock(&shared.timings).push(Timing {
        received,
        answered: std::time::SystemTime::now(),
    });
    render::respond(turn, &ask, seq, &shared.sent)
}

async fn models(State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    shared.record(&uri, &headers, &[]);
    let mut entry = json!({"id": shared.options.model_id, "object": "model", "created": 0, "owned_by": "maestro-testkit"});
    if let Some(map) = entry.as_object_mut() {
        map.extend(shared.options.model_fields.clone());
    }
    let mut data = vec![entry];
    data.extend(shared.options.also_served.iter().map(
        |id| json!({"id": id, "object": "model", "created": 0, "owned_by": "maestro-testkit"}),
    ));
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `POST /v1/embeddings`: one 8-dimensional vector per input string, made from its bytes (the
/// same text always gets the same vector), and usage counting one prompt token per
/// whitespace-separated word. Not part of the script.
async fn embeddings(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = shared.record(&uri, &headers, &body);
    let inputs: Vec<String> = match request.get("input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "`input` must be a string or an array of strings",
            );
        }
    };
    let tokens: usize = inputs.iter().map(|t| t.split_whitespace().count()).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let mut vector = [0f64; 8];
            for (i, byte) in text.bytes().enumerate() {
                vector[i % 8] += f64::from(byte) / 255.0;
            }
            json!({"object": "embedding", "index": index, "embedding": vector})
        })
        .collect();
    axum::Json(json!({
        "object": "list",
        "data": data,
        "model": request.get("model").cloned().unwrap_or(Value::Null),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response()
}

async fn props(State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    shared.record(&uri, &headers, &[]);
    match &shared.options.props {
        Some(body) => axum::Json(body.clone()).into_response(),
        None => error(StatusCode::NOT_FOUND, "File Not Found"),
    }
}

async fn ollama_show(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.record(&uri, &headers, &body);
    match &shared.options.ollama_show {
        Some(body) => axum::Json(body.clone()).into_response(),
        None => error(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

async fn not_found(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.record(&uri, &headers, &body);
    error(
        StatusCode::NOT_FOUND,
        &format!("ScriptedLlm does not serve {}", uri.path()),
    )
}
