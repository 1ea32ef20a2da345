//! [`ScriptedAnthropic`]: a server on 127.0.0.1 speaking the Anthropic Messages API
//! (`POST /v1/messages`, streamed as its documented SSE events or answered as one `message`
//! object), replaying a script of [`Turn`]s and recording every request it receives.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::render::{self, Frame};
use crate::scripted::{RecordedRequest, listen_loopback, lock, message_text};
use crate::serving;
use crate::turn::{Action, ScriptedCall, Turn};

/// The `anthropic-version` the server expects, as the Messages API documents it.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A scripted Anthropic Messages API server for tests, speaking real HTTP and SSE.
///
/// Each `POST /v1/messages` takes the next [`Turn`] (turns made with [`Turn::when_contains`]
/// are matched first, against the messages and the `system` prompt) and answers it as the
/// Messages API does:
///
/// - streamed (`"stream": true`): `message_start` (with the input usage), then per content
///   block `content_block_start`, `content_block_delta` (`text_delta`, or `input_json_delta`
///   for a `tool_use` block, the JSON in several pieces) and `content_block_stop`, a `ping`,
///   `message_delta` (`stop_reason` `end_turn` or `tool_use`, the output usage) and
///   `message_stop`, each as `event: NAME` + `data: JSON`;
/// - not streamed: one `{"type": "message", "content": [...], "stop_reason", "usage"}` object.
///
/// A [`Turn::tool_call`]'s arguments become the `tool_use` block's `input`; usage is sent only
/// when the turn has [`Turn::with_usage`] (plus the cache counts of
/// [`ScriptedAnthropicBuilder::cache_tokens`]). Error turns, broken, stalled, endless and raw
/// answers behave as with [`ScriptedLlm`](crate::ScriptedLlm); [`Turn::anthropic_error_event`]
/// sends an `error` event in the middle of a stream.
///
/// Like the real API it answers 400 `invalid_request_error` to a request without
/// `anthropic-version`, without `max_tokens`, or whose messages are not `user`/`assistant`
/// turns starting with `user`; and with [`ScriptedAnthropicBuilder::api_key`] it answers 401
/// `authentication_error` to a request whose `x-api-key` is another. When the script is used
/// up it answers HTTP 500, so an unplanned call fails the test loudly.
///
/// The server stops when the value is dropped.
pub struct ScriptedAnthropic {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ScriptedAnthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedAnthropic")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Options of a [`ScriptedAnthropic`] beyond its script; start from
/// [`ScriptedAnthropic::builder`].
#[derive(Debug, Clone, Default)]
pub struct ScriptedAnthropicBuilder {
    turns: Vec<Turn>,
    api_key: Option<String>,
    cache: Option<(u64, u64)>,
    models: Option<Vec<String>>,
}

struct Shared {
    options: ScriptedAnthropicBuilder,
    script: Mutex<VecDeque<Turn>>,
    recorded: Mutex<Vec<RecordedRequest>>,
    answered: AtomicUsize,
    sent: render::SentBytes,
}

impl ScriptedAnthropicBuilder {
    /// Appends turns to the script.
    pub fn turns(mut self, turns: impl IntoIterator<Item = Turn>) -> Self {
        self.turns.extend(turns);
        self
    }

    /// Accepts only requests whose `x-api-key` is `key`; others get 401
    /// `authentication_error` ("invalid x-api-key"), whose body never repeats the key sent.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Adds `cache_read_input_tokens: read` and `cache_creation_input_tokens: creation` to the
    /// usage of every turn that reports usage.
    pub fn cache_tokens(mut self, read: u64, creation: u64) -> Self {
        self.cache = Some((read, creation));
        self
    }

    /// Serves `GET /v1/models` listing these model ids as the API does (`data[].id`,
    /// `type: model`, `has_more: false`); without it that route answers 404.
    pub fn models<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.models = Some(ids.into_iter().map(Into::into).collect());
        self
    }

    /// Binds 127.0.0.1 on a free port and starts serving.
    ///
    /// # Panics
    /// When no loopback port can be bound: test support fails the test at once.
    #[allow(clippy::expect_used)]
    pub async fn start(self) -> ScriptedAnthropic {
        let listener = listen_loopback().expect("bind 127.0.0.1:0 for ScriptedAnthropic");
        let addr = listener
            .local_addr()
            .expect("local address of the ScriptedAnthropic listener");
        let shared = Arc::new(Shared {
            script: Mutex::new(self.turns.iter().cloned().collect()),
            options: self,
            recorded: Mutex::default(),
            answered: AtomicUsize::new(0),
            sent: render::SentBytes::default(),
        });
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/models", axum::routing::get(models))
            .fallback(not_found)
            .with_state(shared.clone());
        let task = serving::spawn("ScriptedAnthropic", listener, app);
        ScriptedAnthropic { addr, shared, task }
    }
}

impl ScriptedAnthropic {
    /// A server with default options replaying `turns`.
    pub async fn start(turns: impl IntoIterator<Item = Turn>) -> ScriptedAnthropic {
        ScriptedAnthropic::builder().turns(turns).start().await
    }

    /// Options beyond the script: a required API key, cache token counts.
    pub fn builder() -> ScriptedAnthropicBuilder {
        ScriptedAnthropicBuilder::default()
    }

    /// The API root to configure clients with, as `https://api.anthropic.com` is:
    /// `http://127.0.0.1:PORT` (requests go to `{base_url}/v1/messages`).
    pub fn base_url(&self) -> String {
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

    /// The bodies of every `POST /v1/messages` received, in arrival order (including those
    /// answered with errors).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.recorded)
            .iter()
            .filter(|r| r.path == "/v1/messages")
            .map(|r| r.body.clone())
            .collect()
    }

    /// Every request received on any route, with its headers (`x-api-key` included, for tests
    /// that check the key was sent; the server prints none of them).
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.recorded).clone()
    }

    /// The bytes of answer bodies sent so far (the scripted ones; HTTP errors excluded).
    pub fn bytes_sent(&self) -> usize {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// How many turns are left in the script.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.script).len()
    }
}

impl Drop for ScriptedAnthropic {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Turn {
    /// A streamed answer that starts well (`message_start`, a text block with one delta) and
    /// then sends the Messages API's `error` event, `{"type": "error", "error": {"type":
    /// error_type, "message": message}}`, e.g. `("overloaded_error", "Overloaded")`, and ends.
    /// For [`ScriptedAnthropic`]; sent as it is whatever the request asked for.
    pub fn anthropic_error_event(error_type: &str, message: &str) -> Turn {
        let message_start = json!({"type": "message_start", "message": {
            "id": "msg_scripted_error", "type": "message", "role": "assistant", "content": [],
            "model": "scripted", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}}});
        let body = [
            sse("message_start", &message_start),
            sse(
                "content_block_start",
                &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            sse(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
            ),
            sse(
                "error",
                &json!({"type": "error", "error": {"type": error_type, "message": message}}),
            ),
        ]
        .concat();
        Turn::raw("text/event-stream", body)
    }
}

/// One server-sent event as the Messages API writes it.
fn sse(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// The Messages API's error body.
fn api_error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"type": "error", "error": {"type": kind, "message": message}})),
    )
        .into_response()
}

impl Shared {
    fn record(&self, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Value {
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        lock(&self.recorded).push(serving::recorded(uri, headers, body.clone()));
        body
    }

    /// The first conditional turn whose needle occurs in the request's messages or system
    /// prompt, else the first unconditional turn.
    fn take_turn(&self, request: &Value) -> Option<Turn> {
        serving::take_turn(&mut lock(&self.script), || {
            message_text(&json!({"messages": [
                request.get("system").cloned().unwrap_or(Value::Null),
                request.get("messages").cloned().unwrap_or(Value::Null),
            ]}))
        })
    }
}

/// What the real API refuses before it looks at the model: the reason, or `None`.
fn invalid_request(headers: &HeaderMap, body: &Value) -> Option<String> {
    if headers.get("anthropic-version").is_none() {
        return Some("anthropic-version: header is required".into());
    }
    if !body.is_object() {
        return Some("the body must be a JSON object".into());
    }
    if body.get("max_tokens").and_then(Value::as_u64).is_none() {
        return Some("max_tokens: Field required".into());
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Some("messages: Field required".into());
    };
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if !matches!(role, "user" | "assistant") {
            return Some(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ));
        }
        if i == 0 && role != "user" {
            return Some("messages: first message must use the \"user\" role".into());
        }
    }
    None
}

async fn messages(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = shared.record(&uri, &headers, &body);
    if let Some(expected) = &shared.options.api_key {
        let sent = headers.get("x-api-key").map(HeaderValue::as_bytes);
        if sent != Some(expected.as_bytes()) {
            return api_error(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid x-api-key",
            );
        }
    }
    if let Some(reason) = invalid_request(&headers, &body) {
        return api_error(StatusCode::BAD_REQUEST, "invalid_request_error", &reason);
    }
    let Some(turn) = shared.take_turn(&body) else {
        let answered = shared.answered.load(Ordering::Relaxed);
        return api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            &format!(
                "script exhausted: the ScriptedAnthropic has no turn left for this request ({answered} turns were served)"
            ),
        );
    };
    if let Some(delay) = turn.delay {
        tokio::time::sleep(delay).await;
    }
    let seq = shared.answered.fetch_add(1, Ordering::Relaxed) + 1;
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let model = turn
        .answered_by
        .clone()
        .or_else(|| {
            body.get("model")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "scripted".into());
    let answer = Answer {
        id: format!("msg_scripted_{seq}"),
        model,
        seq,
        usage: turn.usage,
        cache: shared.options.cache,
    };
    answer.respond(turn.action, stream, &shared.sent)
}

async fn models(State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    shared.record(&uri, &headers, &[]);
    if let Some(expected) = &shared.options.api_key
        && headers.get("x-api-key").map(HeaderValue::as_bytes) != Some(expected.as_bytes())
    {
        return api_error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid x-api-key",
        );
    }
    let Some(ids) = &shared.options.models else {
        return api_error(
            StatusCode::NOT_FOUND,
            "not_found_error",
            "ScriptedAnthropic lists no models (ScriptedAnthropicBuilder::models)",
        );
    };
    let data: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "model", "id": id, "display_name": id, "created_at": "2025-01-01T00:00:00Z"}))
        .collect();
    axum::Json(json!({"data": data, "has_more": false,
        "first_id": ids.first(), "last_id": ids.last()}))
    .into_response()
}

async fn not_found(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.record(&uri, &headers, &body);
    api_error(
        StatusCode::NOT_FOUND,
        "not_found_error",
        &format!("ScriptedAnthropic does not serve {}", uri.path()),
    )
}

/// One answer being rendered.
struct Answer {
    id: String,
    model: String,
    seq: usize,
    usage: Option<(u64, u64)>,
    cache: Option<(u64, u64)>,
}

impl Answer {
    fn respond(&self, action: Action, stream: bool, sent: &render::SentBytes) -> Response {
        match action {
            Action::HttpError {
                status,
                body,
                retry_after,
            } => {
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let mut response = (status, body).into_response();
                if let Some(seconds) = retry_after {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                }
                response
            }
            Action::Reply {
                content,
                tool_calls,
            } if stream => {
                let frames = self
                    .events(&content, &tool_calls)
                    .into_iter()
                    .map(Frame::Data)
                    .collect();
                render::body_response("text/event-stream", frames, false, sent)
            }
            Action::Reply {
                content,
                tool_calls,
            } => {
                let body = self.message(&content, &tool_calls);
                (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/json")],
                    body.to_string(),
                )
                    .into_response()
            }
            Action::BrokenStream {
                after_chunks,
                clean_close,
            } if stream => {
                let mut frames: Vec<Frame> = self
                    .events("this answer breaks off before it ends", &[])
                    .into_iter()
                    .take(after_chunks)
                    .map(Frame::Data)
                    .collect();
                if !clean_close {
                    frames.push(Frame::Abort);
                }
                render::body_response("text/event-stream", frames, false, sent)
            }
            Action::BrokenStream { .. } => render::body_response(
                "application/json",
                vec![
                    Frame::Data("{\"id\":\"msg_broken\",\"type\":\"message\",\"cont".into()),
                    Frame::Abort,
                ],
                false,
                sent,
            ),
            Action::Stall(duration) if stream => render::body_response(
                "text/event-stream",
                vec![
                    Frame::Data(self.message_start()),
                    Frame::Sleep(duration),
                    Frame::Abort,
                ],
                false,
                sent,
            ),
            Action::Stall(duration) => render::body_response(
                "application/json",
                vec![Frame::Sleep(duration), Frame::Abort],
                false,
                sent,
            ),
            Action::Endless { every } if stream => render::body_response(
                "text/event-stream",
                vec![
                    Frame::Data(self.message_start()),
                    Frame::Data(block_start(0, &json!({"type": "text", "text": ""}))),
                    Frame::Forever {
                        data: block_delta(0, &json!({"type": "text_delta", "text": "la "})),
                        every,
                    },
                ],
                false,
                sent,
            ),
            Action::Endless { every } => render::body_response(
                "application/json",
                vec![
                    Frame::Data(format!(
                        "{{\"id\":\"{}\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"",
                        self.id
                    )),
                    Frame::Forever {
                        data: "la ".repeat(64),
                        every,
                    },
                ],
                false,
                sent,
            ),
            Action::Raw { content_type, body } => {
                sent.fetch_add(body.len(), Ordering::Relaxed);
                let mut response = (StatusCode::OK, body).into_response();
                if let Ok(value) = HeaderValue::from_str(&content_type) {
                    response.headers_mut().insert(header::CONTENT_TYPE, value);
                }
                response
            }
        }
    }

    /// The input side of the usage: what `message_start` and the whole message report.
    fn input_usage(&self) -> Option<Value> {
        let (input, _) = self.usage?;
        let mut usage = json!({"input_tokens": input});
        if let Some((read, creation)) = self.cache {
            usage["cache_read_input_tokens"] = json!(read);
            usage["cache_creation_input_tokens"] = json!(creation);
        }
        Some(usage)
    }

    fn message_start(&self) -> String {
        let mut message = json!({"id": self.id, "type": "message", "role": "assistant",
            "content": [], "model": self.model, "stop_reason": null, "stop_sequence": null});
        if let Some(mut usage) = self.input_usage() {
            // The API reports the first output token here and the cumulative count at the end.
            usage["output_tokens"] = json!(1);
            message["usage"] = usage;
        }
        sse(
            "message_start",
            &json!({"type": "message_start", "message": message}),
        )
    }

    fn tool_id(&self, index: usize) -> String {
        format!("toolu_scripted_{}_{index}", self.seq)
    }

    /// The events of a whole streamed answer, in the documented order.
    fn events(&self, content: &str, calls: &[ScriptedCall]) -> Vec<String> {
        let mut events = vec![self.message_start()];
        let mut index = 0;
        if !content.is_empty() || calls.is_empty() {
            events.push(block_start(index, &json!({"type": "text", "text": ""})));
            events.push(sse("ping", &json!({"type": "ping"})));
            for piece in render::split(content, 3) {
                events.push(block_delta(
                    index,
                    &json!({"type": "text_delta", "text": piece}),
                ));
            }
            events.push(block_stop(index));
            index += 1;
        }
        for (i, call) in calls.iter().enumerate() {
            events.push(block_start(
                index,
                &json!({"type": "tool_use", "id": self.tool_id(i), "name": call.name, "input": {}}),
            ));
            for piece in render::split(&call.arguments, 3) {
                events.push(block_delta(
                    index,
                    &json!({"type": "input_json_delta", "partial_json": piece}),
                ));
            }
            events.push(block_stop(index));
            index += 1;
        }
        let mut delta = json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason(calls), "stop_sequence": null}});
        if let Some((_, output)) = self.usage {
            delta["usage"] = json!({"output_tokens": output});
        }
        events.push(sse("message_delta", &delta));
        events.push(sse("message_stop", &json!({"type": "message_stop"})));
        events
    }

    /// The whole answer as one `message` object (a request without `stream`).
    fn message(&self, content: &str, calls: &[ScriptedCall]) -> Value {
        let mut blocks = Vec::new();
        if !content.is_empty() || calls.is_empty() {
            blocks.push(json!({"type": "text", "text": content}));
        }
        for (i, call) in calls.iter().enumerate() {
            let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
            blocks.push(
                json!({"type": "tool_use", "id": self.tool_id(i), "name": call.name, "input": input}),
            );
        }
        let mut message = json!({"id": self.id, "type": "message", "role": "assistant",
            "model": self.model, "content": blocks, "stop_reason": stop_reason(calls),
            "stop_sequence": null});
        if let (Some(mut usage), Some((_, output))) = (self.input_usage(), self.usage) {
            usage["output_tokens"] = json!(output);
            message["usage"] = usage;
        }
        message
    }
}

fn stop_reason(calls: &[ScriptedCall]) -> &'static str {
    if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

fn block_start(index: usize, block: &Value) -> String {
    sse(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn block_delta(index: usize, delta: &Value) -> String {
    sse(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn block_stop(index: usize) -> String {
    sse(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    )
}
