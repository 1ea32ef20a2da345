//! `kind: anthropic` upstreams: an OpenAI chat request translated into a Messages API request
//! (`POST {root}/v1/messages` with `x-api-key` and `anthropic-version`), and the answer
//! translated back, whole or streamed, by `maestro_llm::anthropic::translate`.
//!
//! Failover follows the OpenAI path: a connect error, a timeout, a 429, a 5xx (529
//! `overloaded_error` included), or an `error` event before the first chunk reached the client
//! tries the next target. After that, an `error` event or a cut stream ends the client's stream
//! with an SSE error event, recorded as `cut`.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt as _};
use maestro_llm::anthropic::ANTHROPIC_VERSION;
use maestro_llm::anthropic::translate::{
    DEFAULT_MAX_TOKENS, StreamError, StreamTranslator, chat_request_to_messages,
    messages_response_to_chat,
};
use serde_json::{Map, Value, json};

use crate::errors::{error_response, stream_error_event};
use crate::gateway::Gateway;
use crate::proxy::{
    Endpoint, Failure, Meter, TokenCounts, describe, fail, first_byte, is_event_stream,
    not_a_stream, status_failure, timeout_text,
};
use crate::route::Upstream;
use crate::stream::{data_of, event_end, idle_limited};
use crate::usage::UsageStatus;

type UpstreamBody = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// What one attempt at an Anthropic upstream came to.
pub(crate) enum Attempt {
    /// An answer for the client (the upstream's, translated, or a refusal of the request).
    Answered(Response),
    /// The upstream failed before any byte reached the client: try the next target.
    Failed(Failure),
    /// The upstream cannot serve this endpoint at all (no embeddings): why, naming it.
    Unable(String),
}

/// One request to send to one Anthropic upstream.
pub(crate) struct Call<'a> {
    pub gateway: &'a Gateway,
    pub endpoint: Endpoint,
    pub upstream: &'a Upstream,
    pub stream: bool,
    pub client_wants_usage: bool,
}

impl Call<'_> {
    /// Translates `request` (an OpenAI chat body, `model` already the upstream's), sends it,
    /// and answers the client or says why the next target should be tried.
    pub(crate) async fn attempt(&self, request: &Map<String, Value>, meter: &mut Meter) -> Attempt {
        let inner = &*self.gateway.inner;
        let upstream = self.upstream;
        if self.endpoint == Endpoint::Embeddings {
            return Attempt::Unable(format!(
                "its upstream {} speaks the Anthropic Messages API, which has no embeddings",
                upstream.name
            ));
        }
        let mut request = request.clone();
        if !request.contains_key("max_tokens") && !request.contains_key("max_completion_tokens") {
            request.insert(
                "max_tokens".into(),
                json!(upstream.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
            );
        }
        let messages = match chat_request_to_messages(&Value::Object(request)) {
            Ok(messages) => messages,
            Err(e) => {
                meter.finish(inner, UsageStatus::Rejected, 400, TokenCounts::default());
                return Attempt::Answered(error_response(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "untranslatable_request",
                    format!(
                        "the request cannot be sent to the upstream {}, which speaks the Anthropic Messages API: {e}",
                        upstream.name
                    ),
                ));
            }
        };
        let payload = match serde_json::to_vec(&messages) {
            Ok(payload) => payload,
            Err(e) => {
                meter.finish(inner, UsageStatus::Rejected, 400, TokenCounts::default());
                return Attempt::Answered(error_response(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "invalid_body",
                    format!("the translated request cannot be written as JSON ({e})"),
                ));
            }
        };
        let root = upstream
            .base_url
            .strip_suffix("/v1")
            .unwrap_or(&upstream.base_url);
        let mut call = inner
            .client
            .post(format!("{root}/v1/messages"))
            .header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .header(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static(ANTHROPIC_VERSION),
            )
            .body(payload);
        if let Some(key) = &upstream.authorization {
            call = call.header(HeaderName::from_static("x-api-key"), key.clone());
        }
        if self.stream {
            call = call.header(
                header::ACCEPT,
                HeaderValue::from_static("text/event-stream"),
            );
        }
        let timeout = || {
            Attempt::Failed(fail(
                inner,
                upstream,
                "timeout",
                timeout_text(inner.first_byte_timeout),
                None,
            ))
        };
        let deadline = tokio::time::Instant::now() + inner.first_byte_timeout;
        let answer = match tokio::time::timeout_at(deadline, call.send()).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                let reason = if e.is_timeout() { "timeout" } else { "connect" };
                return Attempt::Failed(fail(inner, upstream, reason, describe(&e), None));
            }
            Err(_) => return timeout(),
        };
        let status = answer.status();
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Attempt::Failed(status_failure(inner, upstream, answer, deadline).await);
        }
        if self.stream && status.is_success() {
            let content_type = answer.headers().get(header::CONTENT_TYPE);
            if !is_event_stream(content_type) {
                return Attempt::Failed(not_a_stream(inner, upstream, status, content_type));
            }
            let mut translating = Translating {
                translator: StreamTranslator::new(meter_model(meter)),
                buf: BytesMut::new(),
                client_wants_usage: self.client_wants_usage,
                counts: TokenCounts::default(),
                complete: false,
            };
            let mut body: UpstreamBody = Box::pin(answer.bytes_stream());
            // Held until the first chunk for the client, so that an upstream failing before
            // it (an `error` event first, a stream that ends at once) still fails over.
            let first = loop {
                match translating.take(true) {
                    Err((_, error)) => {
                        let reason = if error.kind == "rate_limit_error" {
                            "status_429"
                        } else {
                            "status_5xx"
                        };
                        return Attempt::Failed(fail(
                            inner,
                            upstream,
                            reason,
                            error.to_string(),
                            None,
                        ));
                    }
                    Ok(out) if !out.is_empty() => break out,
                    Ok(_) => {}
                }
                match tokio::time::timeout_at(deadline, body.next()).await {
                    Ok(Some(Ok(bytes))) => translating.buf.extend_from_slice(&bytes),
                    Ok(Some(Err(e))) => {
                        return Attempt::Failed(fail(inner, upstream, "empty", describe(&e), None));
                    }
                    Ok(None) => {
                        return Attempt::Failed(fail(
                            inner,
                            upstream,
                            "empty",
                            "the stream ended before its first event".into(),
                            None,
                        ));
                    }
                    Err(_) => return timeout(),
                }
            };
            first_byte(inner, meter);
            let body = idle_limited(body, inner.stream_idle_timeout);
            let stream = TranslatedStream {
                gateway: self.gateway.clone(),
                meter: meter.clone(),
                upstream_name: upstream.name.clone(),
                pending: Some(first),
                body,
                translating,
                ended: false,
                finished: false,
            };
            let mut response = Response::new(Body::from_stream(stream));
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            return Attempt::Answered(response);
        }
        // A whole answer (or the upstream's refusal): read before the client sees a byte.
        let bytes = match tokio::time::timeout_at(deadline, answer.bytes()).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => {
                return Attempt::Failed(fail(inner, upstream, "empty", describe(&e), None));
            }
            Err(_) => return timeout(),
        };
        first_byte(inner, meter);
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            meter.finish(
                inner,
                UsageStatus::Rejected,
                status.as_u16(),
                TokenCounts::default(),
            );
            return Attempt::Answered(refusal(status, &upstream.name, &body));
        }
        if body.get("type").and_then(Value::as_str) != Some("message") {
            return Attempt::Failed(fail(
                inner,
                upstream,
                "empty",
                "the answer is not a Messages API message (no \"type\": \"message\")".into(),
                None,
            ));
        }
        let chat = messages_response_to_chat(&body, &meter_model(meter));
        let counts = chat
            .get("usage")
            .and_then(|u| serde_json::from_value::<TokenCounts>(u.clone()).ok())
            .unwrap_or_default();
        meter.finish(inner, UsageStatus::Ok, status.as_u16(), counts);
        let mut response = Response::new(Body::from(chat.to_string()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Attempt::Answered(response)
    }
}

/// The model the answer names: the upstream's model the request was sent for.
fn meter_model(meter: &Meter) -> String {
    meter
        .upstream
        .as_ref()
        .map_or_else(|| meter.model.clone(), |(_, model)| model.clone())
}

/// The upstream's 4xx in OpenAI's error shape, under its status: the Messages API's
/// `{"type": "error", "error": {"type", "message"}}` becomes `{"error": {"message", "type",
/// "code"}}`, the message naming the upstream.
fn refusal(status: StatusCode, upstream: &str, body: &Value) -> Response {
    let kind = body
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("upstream_error");
    let message = body
        .pointer("/error/message")
        .and_then(Value::as_str)
        .map_or_else(|| body.to_string(), str::to_string);
    let answer = json!({"error": {
        "message": format!("the upstream {upstream} refused the request (HTTP {}): {message}", status.as_u16()),
        "type": kind,
        "code": kind,
    }});
    let mut response = Response::new(Body::from(answer.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The Messages events received and not yet translated, and the translation's state.
struct Translating {
    translator: StreamTranslator,
    buf: BytesMut,
    client_wants_usage: bool,
    counts: TokenCounts,
    /// `message_stop` came and `[DONE]` was written.
    complete: bool,
}

impl Translating {
    /// Translates the complete events in the buffer into `data: <chunk>` lines, and `[DONE]`
    /// after `message_stop`. With `one`, stops after the first event that gave a chunk (the
    /// rest waits in the buffer). An `error` event stops it with what was translated before.
    fn take(&mut self, one: bool) -> Result<Bytes, (Bytes, StreamError)> {
        let mut out = BytesMut::new();
        while !self.complete {
            let Some(end) = event_end(&self.buf) else {
                break;
            };
            let event = self.buf.split_to(end);
            let data = data_of(&event);
            if data.is_empty() {
                continue;
            }
            let chunks = match self.translator.feed_str(&String::from_utf8_lossy(data)) {
                Ok(chunks) => chunks,
                Err(error) => return Err((out.freeze(), error)),
            };
            for chunk in chunks {
                let usage_only = chunk["choices"].as_array().is_some_and(Vec::is_empty);
                if let Some(usage) = chunk.get("usage")
                    && let Ok(counts) = serde_json::from_value::<TokenCounts>(usage.clone())
                {
                    self.counts = counts;
                }
                if usage_only && !self.client_wants_usage {
                    continue;
                }
                out.extend_from_slice(format!("data: {chunk}\n\n").as_bytes());
            }
            if self.translator.is_complete() {
                out.extend_from_slice(b"data: [DONE]\n\n");
                self.complete = true;
            }
            if one && !out.is_empty() {
                break;
            }
        }
        Ok(out.freeze())
    }
}

/// The client's side of a translated stream: OpenAI chunks as the Messages events arrive.
struct TranslatedStream {
    gateway: Gateway,
    meter: Meter,
    upstream_name: String,
    pending: Option<Bytes>,
    body: crate::stream::Upstream,
    translating: Translating,
    ended: bool,
    finished: bool,
}

impl TranslatedStream {
    fn finish(&mut self, status: UsageStatus) {
        if !self.finished {
            self.finished = true;
            // What the stream reported so far counts, even when it was cut.
            if let Some(usage) = self.translating.translator.usage()
                && let Ok(counts) = serde_json::from_value::<TokenCounts>(usage)
            {
                self.translating.counts = counts;
            }
            self.meter
                .finish(&self.gateway.inner, status, 200, self.translating.counts);
        }
    }

    /// `before`, then the SSE error event ending a stream that broke off.
    fn cut(&mut self, before: &[u8], detail: &str) -> Bytes {
        self.ended = true;
        let mut out = BytesMut::from(before);
        let message = format!(
            "the upstream {} broke off the stream before its end ({detail}); the answer is incomplete",
            self.upstream_name
        );
        tracing::warn!(upstream = %self.upstream_name, model = %self.meter.model, detail, "gateway stream cut");
        out.extend_from_slice(&stream_error_event(&message));
        self.finish(UsageStatus::Cut);
        out.freeze()
    }

    /// What the buffer gives now, or the stream's end after an `error` event.
    fn translate(&mut self) -> Bytes {
        match self.translating.take(false) {
            Ok(out) => {
                if self.translating.complete {
                    self.ended = true;
                    self.finish(UsageStatus::Ok);
                }
                out
            }
            Err((before, error)) => self.cut(&before, &format!("it sent an error event: {error}")),
        }
    }
}

impl Stream for TranslatedStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(pending) = this.pending.take() {
                // The first chunk may have been the whole answer.
                if !this.ended {
                    let more = this.translate();
                    if !more.is_empty() {
                        let mut all = BytesMut::from(&pending[..]);
                        all.extend_from_slice(&more);
                        return Poll::Ready(Some(Ok(all.freeze())));
                    }
                }
                return Poll::Ready(Some(Ok(pending)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match this.body.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(bytes))) => {
                    this.translating.buf.extend_from_slice(&bytes);
                    let out = this.translate();
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(out)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    let out = this.cut(b"", &e);
                    return Poll::Ready(Some(Ok(out)));
                }
                Poll::Ready(None) => {
                    // An unterminated last event counts as complete.
                    if !this.translating.buf.is_empty() {
                        this.translating.buf.extend_from_slice(b"\n\n");
                    }
                    let out = this.translate();
                    if this.ended {
                        return Poll::Ready((!out.is_empty()).then_some(Ok(out)));
                    }
                    let out = this.cut(&out, "it closed before message_stop");
                    return Poll::Ready(Some(Ok(out)));
                }
            }
        }
    }
}

impl Drop for TranslatedStream {
    fn drop(&mut self) {
        // The client went away before the end.
        self.finish(if self.translating.complete {
            UsageStatus::Ok
        } else {
            UsageStatus::Abandoned
        });
    }
}
