//! [`Anthropic`]: the [`Provider`] speaking the Anthropic Messages API. A request is written as
//! for a Chat Completions endpoint and put into the Messages API's form by [`translate`]; the
//! answer's events are translated back into chunks and folded by the OpenAI client's
//! accumulator, so both providers share their retry, timeout, size-cap and usage rules.

use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::translate::{self, StreamError, StreamTranslator};
use crate::openai::answer::RawAnswer;
use crate::openai::retry::{Failure, describe, provider_message};
use crate::openai::send::{Sent, send};
use crate::openai::sse::{self, Accumulator, Fold};
use crate::openai::wire::{self, Shape, Transport};
use crate::openai::{header_value, http_client, redact_error};
use crate::{
    BoxFuture, ChatRequest, ChatResponse, ConfigError, LlmError, OpenAiConfig, Provider,
    StreamEvent,
};

/// The API version sent as `anthropic-version`, the one whose events and fields this client
/// reads.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The Anthropic API's root, the default `base_url` of `llm.provider: anthropic`.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The context window assumed when none is configured: every Claude model the API serves has a
/// window of at least 200,000 tokens (`llm.context_length` says otherwise for one with more).
pub const DEFAULT_CONTEXT_LENGTH: u64 = 200_000;

/// Side requests (model listing) never wait longer than this.
const SIDE_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A client for the Anthropic Messages API (`POST {base_url}/v1/messages`).
///
/// It takes the same [`OpenAiConfig`] as [`OpenAiCompat`](crate::OpenAiCompat) and keeps the
/// same promises: streamed answers (SSE) read with the idle timeout between events and the
/// answer caps, retries with backoff on connect errors, 429, 5xx (529 `overloaded_error`
/// included), an `overloaded_error` or `api_error` event mid-stream and a stream cut before
/// `message_stop`, the call deadline, usage from the API (cache reads and writes counted as
/// prompt tokens) or estimated, and no secret in an error. What differs:
///
/// - `base_url` is the API root without the version, e.g. `https://api.anthropic.com`
///   ([`DEFAULT_BASE_URL`]); a trailing `/v1` is accepted and dropped;
/// - the key goes as `x-api-key`, with `anthropic-version: 2023-06-01`;
/// - tools are always native (`tool_mode` is not used): the Messages API takes them on every
///   model;
/// - a judge call's JSON schema becomes an instruction in `system` (the Messages API has no
///   `response_format`);
/// - `max_tokens`, which the Messages API requires, is the request's, else
///   [`translate::DEFAULT_MAX_TOKENS`];
/// - the context length is the configured one, else [`DEFAULT_CONTEXT_LENGTH`] (the API does
///   not tell it); a prompt too long for the model (`prompt is too long: …`) is
///   [`LlmError::ContextOverflow`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use maestro_llm::anthropic::{Anthropic, DEFAULT_BASE_URL};
/// use maestro_llm::{ChatRequest, Message, OpenAiConfig, Provider};
/// use maestro_protocol::Secret;
///
/// let config = OpenAiConfig::new(DEFAULT_BASE_URL)
///     .with_api_key(Secret::new(std::env::var("ANTHROPIC_API_KEY")?));
/// let llm = Anthropic::new(config)?;
/// let request = ChatRequest {
///     model: "claude-sonnet-4-5".into(),
///     messages: vec![Message::user("Say hi.")],
///     ..ChatRequest::default()
/// };
/// let answer = llm.chat(request, &|event| eprintln!("{event:?}")).await?;
/// println!("{} ({} tokens)", answer.content, answer.usage.total_tokens);
/// # Ok(()) }
/// ```
pub struct Anthropic {
    config: OpenAiConfig,
    /// `{root}/v1/messages`.
    messages_url: String,
    /// `{root}/v1/models`.
    models_url: String,
    client: reqwest::Client,
}

impl std::fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Anthropic {
    /// Builds the client. Fails on a base URL that is not `http(s)://…` or a key or header that
    /// cannot be sent; nothing is contacted yet.
    pub fn new(config: OpenAiConfig) -> Result<Anthropic, ConfigError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            let mut value =
                HeaderValue::from_str(key.expose()).map_err(|_| ConfigError::Header {
                    name: "x-api-key".into(),
                    reason: "the API key has characters a header cannot carry".into(),
                })?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-api-key"), value);
        }
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        let client = http_client(&config, headers)?;
        let root = config.base_url.trim_end_matches('/');
        let root = root.strip_suffix("/v1").unwrap_or(root);
        Ok(Anthropic {
            messages_url: format!("{root}/v1/messages"),
            models_url: format!("{root}/v1/models"),
            config,
            client,
        })
    }

    /// The configuration this client was built from.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The model ids the API serves to this key (`GET {root}/v1/models`, `data[].id`).
    pub async fn list_models(&self) -> Result<Vec<String>, LlmError> {
        let url = format!("{}?limit=1000", self.models_url);
        let timeout = self.config.idle_timeout.min(SIDE_REQUEST_TIMEOUT);
        let response = tokio::time::timeout(timeout, self.client.get(&url).send())
            .await
            .map_err(|_| LlmError::Timeout(format!("listing models at {url}")))?
            .map_err(|e| LlmError::Connect {
                url: url.clone(),
                message: describe(&e),
            })
            .map_err(|e| redact_error(&self.config, e))?;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        if status >= 400 {
            return Err(redact_error(
                &self.config,
                LlmError::Http {
                    status,
                    message: explain(status, provider_message(&text)),
                },
            ));
        }
        let body: Value = serde_json::from_str(&text).map_err(|e| {
            LlmError::Protocol(format!("{url} answered HTTP {status} without JSON: {e}"))
        })?;
        Ok(body["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str().map(str::to_string))
            .collect())
    }

    fn limits(&self) -> sse::Limits {
        sse::Limits {
            bytes: self.config.max_answer_bytes,
            tokens: self.config.max_answer_tokens,
        }
    }

    /// The Messages request body for `request`, and the length of its prompt (for a usage
    /// estimate): written as a Chat Completions body, then translated.
    fn body(&self, request: &ChatRequest) -> Result<(bytes::Bytes, usize), LlmError> {
        let shape = if request.response_schema.is_some() {
            Shape::Schema
        } else if request.tools.is_empty() {
            Shape::Plain
        } else {
            Shape::NativeTools
        };
        let transport = Transport {
            stream: self.config.stream,
            stream_options: false,
        };
        let chat = wire::body(request, shape, transport)?;
        let chat_json: Value = serde_json::from_slice(&chat.bytes).map_err(|e| {
            LlmError::Protocol(format!("the request cannot be read back as JSON: {e}"))
        })?;
        let messages = translate::chat_request_to_messages(&chat_json).map_err(|e| {
            LlmError::Protocol(format!(
                "the request cannot be put into the Messages API's form: {e}"
            ))
        })?;
        let bytes = serde_json::to_vec(&messages).map_err(|e| {
            LlmError::Protocol(format!("the request cannot be written as JSON: {e}"))
        })?;
        Ok((bytes.into(), chat.prompt_chars))
    }

    async fn run(
        &self,
        request: ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ChatResponse, LlmError> {
        let (body, prompt_chars) = self
            .body(&request)
            .map_err(|e| redact_error(&self.config, e))?;
        let policy = self.config.retry;
        let mut attempt = 1u32;
        let mut resent = false;
        loop {
            let failure = match self.attempt(&body, &request, on_event).await {
                Ok(raw) => return Ok(finish(raw, prompt_chars)),
                Err(failure) => failure,
            };
            let failure = match failure {
                Failure::Resend(error) if resent => Failure::Retryable {
                    error,
                    retry_after: None,
                },
                other => other,
            };
            resent = false;
            match failure {
                Failure::Resend(error) => {
                    tracing::debug!(%error, "the endpoint closed a kept-alive connection; sending again at once");
                    resent = true;
                }
                Failure::Final(error) | Failure::Unsupported(_, error) => {
                    return Err(redact_error(&self.config, error));
                }
                Failure::Retryable { error, retry_after } => {
                    let error = redact_error(&self.config, error);
                    if attempt >= policy.max_attempts.max(1) {
                        return Err(error);
                    }
                    let delay = retry_after.unwrap_or_else(|| policy.backoff(attempt));
                    tracing::warn!(attempt, ?delay, %error, "model call failed; retrying");
                    on_event(StreamEvent::Retry {
                        attempt,
                        delay,
                        reason: error.to_string(),
                    });
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
            }
        }
    }

    async fn attempt(
        &self,
        body: &bytes::Bytes,
        request: &ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<RawAnswer, Failure> {
        let idle = self.config.idle_timeout;
        let url = self.messages_url.clone();
        let retry = |error| Failure::Retryable {
            error,
            retry_after: None,
        };
        let mut http = self.client.post(&url);
        for (name, value) in &request.headers {
            http = http.header(name.as_str(), header_value(value));
        }
        let response = send(
            http.header(CONTENT_TYPE, "application/json")
                .body(body.clone()),
            &url,
            idle,
            self.limits(),
            Sent {
                stream_options: false,
                stream: false,
            },
            explain,
        )
        .await?;
        let on_text = |text: &str| on_event(StreamEvent::TextDelta(text.to_string()));
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if self.config.stream && is_sse {
            let fold = MessagesFold {
                translator: StreamTranslator::new(request.model.clone()),
                acc: Accumulator::default(),
            };
            return sse::read_with(response, idle, self.limits(), fold, &on_text).await;
        }
        let text = sse::read_body(response, idle, self.limits()).await?;
        // A 200 whose body is not a message (an HTML page from a proxy, a cut-off JSON) is a
        // broken answer like a broken stream: retried within the same budget.
        let raw = parse_message(&text).map_err(retry)?;
        if !raw.content.is_empty() {
            on_text(&raw.content);
        }
        Ok(raw)
    }
}

/// The API's own words for a refused key, with what to check.
fn explain(status: u16, message: String) -> String {
    match status {
        401 | 403 => format!(
            "{message}; check the API key sent as x-api-key (llm.api_key_env or MAESTRO_API_KEY)"
        ),
        _ => message,
    }
}

/// A whole `message` object (an answer without streaming) read into a raw answer.
fn parse_message(text: &str) -> Result<RawAnswer, LlmError> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        LlmError::Protocol(format!(
            "the answer is not JSON ({e}): {}",
            crate::openai::retry::shorten(text, 300)
        ))
    })?;
    if value.get("type").and_then(Value::as_str) != Some("message") {
        return Err(LlmError::Protocol(format!(
            "the answer is not a Messages API message (no \"type\": \"message\"): {}",
            crate::openai::retry::shorten(text, 300)
        )));
    }
    let answered_by = value.get("model").and_then(Value::as_str).unwrap_or("");
    let chat = translate::messages_response_to_chat(&value, answered_by);
    let mut raw = wire::parse_completion(&chat.to_string())?;
    raw.model = (!answered_by.is_empty()).then(|| answered_by.to_string());
    Ok(raw)
}

fn finish(raw: RawAnswer, prompt_chars: usize) -> ChatResponse {
    let usage = raw
        .usage
        .unwrap_or_else(|| wire::estimate_usage(prompt_chars, &raw));
    ChatResponse {
        content: raw.content,
        tool_calls: raw.tool_calls,
        usage,
        finish_reason: raw.finish_reason,
        model: raw.model,
    }
}

/// A Messages stream folded into an answer: each event translated into chunks, the chunks
/// accumulated as a Chat Completions stream's are.
struct MessagesFold {
    translator: StreamTranslator,
    acc: Accumulator,
}

/// An `error` event as a failure: the passing ones (overloaded, api, rate limit) are retried
/// like a broken stream; the others are final, under the HTTP status the API gives that error
/// outside a stream.
fn stream_failure(error: StreamError) -> Failure {
    if error.kind == "invalid_event" {
        return Failure::Retryable {
            error: LlmError::Protocol(error.message),
            retry_after: None,
        };
    }
    if error.is_transient() {
        return Failure::Retryable {
            error: LlmError::Stream(error.to_string()),
            retry_after: None,
        };
    }
    let status = match error.kind.as_str() {
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        _ => 400,
    };
    Failure::Final(LlmError::Http {
        status,
        message: explain(status, error.to_string()),
    })
}

impl Fold for MessagesFold {
    fn apply_event(&mut self, data: &str) -> Result<Option<String>, Failure> {
        let chunks = self.translator.feed_str(data).map_err(stream_failure)?;
        let mut text: Option<String> = None;
        for chunk in chunks {
            let added = self
                .acc
                .apply(&chunk.to_string())
                .map_err(|error| Failure::Retryable {
                    error,
                    retry_after: None,
                })?;
            if let Some(added) = added {
                text.get_or_insert_default().push_str(&added);
            }
        }
        Ok(text)
    }

    fn pieces(&self) -> u64 {
        Fold::pieces(&self.acc)
    }

    fn done(&self) -> bool {
        self.translator.is_complete()
    }

    fn is_complete(&self) -> bool {
        self.translator.is_complete()
    }

    fn incomplete(&self) -> &'static str {
        "the stream ended before message_stop"
    }

    fn finish(self) -> RawAnswer {
        let mut raw = Fold::finish(self.acc);
        raw.model = self.translator.answered_by().map(str::to_string);
        raw
    }
}

impl Provider for Anthropic {
    fn chat<'a>(
        &'a self,
        request: ChatRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let limit = self.config.call_timeout;
            tokio::time::timeout(limit, self.run(request, on_event))
                .await
                .unwrap_or(Err(LlmError::CallTimeout {
                    secs: limit.as_secs(),
                }))
        })
    }

    fn context_length<'a>(&'a self, _model: &'a str) -> BoxFuture<'a, Option<u64>> {
        Box::pin(std::future::ready(Some(
            self.config.context_length.unwrap_or(DEFAULT_CONTEXT_LENGTH),
        )))
    }
}
