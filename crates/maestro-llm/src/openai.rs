//! [`OpenAiCompat`]: the [`Provider`] for OpenAI-compatible Chat Completions endpoints (Ollama,
//! vLLM, llama.cpp server, OpenAI). This module owns the attempt loop; its submodules own the
//! wire format, SSE accumulation, retry rules, JSON tool mode and context detection.

pub(crate) mod answer;
mod config;
mod context;
mod embeddings;
mod json_mode;
pub(crate) mod retry;
mod schema_text;
pub(crate) mod send;
pub(crate) mod sse;
mod tool_modes;
pub(crate) mod wire;

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

pub use config::{
    ConfigError, DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_ANSWER_TOKENS,
    OpenAiConfig, RetryPolicy,
};
pub use embeddings::EMBEDDING_BATCH;

use crate::flight::{Flight, Turn};

use self::answer::RawAnswer;
use self::context::Endpoints;
use self::retry::{Failure, Feature, describe};
use self::send::{Sent, send};
use self::tool_modes::ToolModeFile;
use self::wire::{Shape, Transport};
use crate::{BoxFuture, ChatRequest, ChatResponse, LlmError, Provider, StreamEvent, ToolMode};

/// Side requests (model listing, context detection) never wait longer than this: they read a
/// few fields an endpoint has at hand, so one that says nothing for this long is not answering.
const SIDE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A client for one OpenAI-compatible endpoint.
///
/// It streams answers over SSE (falling back to plain answers where the endpoint refuses),
/// retries what is retryable as [`OpenAiConfig::retry`] says, offers tools natively or in JSON
/// mode, and detects the context window. It remembers per endpoint what the endpoint refused
/// and per model the tool mode and context length it found, so it is meant to be shared
/// (`Arc<OpenAiCompat>` or `Arc<dyn Provider>`).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use maestro_llm::{ChatRequest, Message, OpenAiCompat, OpenAiConfig, Provider};
///
/// let llm = OpenAiCompat::new(OpenAiConfig::new("http://127.0.0.1:8088/v1"))?;
/// let request = ChatRequest {
///     model: "local".into(),
///     messages: vec![Message::user("Say hi.")],
///     ..ChatRequest::default()
/// };
/// let answer = llm.chat(request, &|event| eprintln!("{event:?}")).await?;
/// println!("{} ({} tokens)", answer.content, answer.usage.total_tokens);
/// # Ok(()) }
/// ```
pub struct OpenAiCompat {
    config: OpenAiConfig,
    endpoints: Endpoints,
    client: reqwest::Client,
    learned: Mutex<Learned>,
    /// Held while the endpoint is asked for a context length: runs that start together wait
    /// for the one answer together instead of each sending the same request.
    detecting: Flight<()>,
    tool_mode_file: ToolModeFile,
}

/// What the client found out about its endpoint while running.
#[derive(Debug, Default)]
struct Learned {
    stream_options_refused: bool,
    streaming_refused: bool,
    tool_modes: HashMap<String, ToolMode>,
    /// Models looked up in the tool-mode file already.
    tool_mode_file_read: std::collections::HashSet<String>,
    context_lengths: HashMap<String, u64>,
    /// Models the endpoint refused images for (HTTP 400 naming images): they get the images'
    /// descriptions from then on.
    text_only: std::collections::HashSet<String>,
    /// Models whose context length the endpoint did not tell, and when it was asked: not asked
    /// again for [`UNKNOWN_CONTEXT_KEPT`], so that runs sharing the client do not each spend
    /// a request on it.
    context_unknown: HashMap<String, std::time::Instant>,
}

/// How long a context length the endpoint did not tell stays unknown before it is asked again.
const UNKNOWN_CONTEXT_KEPT: Duration = Duration::from_secs(60);

impl fmt::Debug for OpenAiCompat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiCompat")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OpenAiCompat {
    /// Builds the client. Fails on a base URL that is not `http(s)://…` or a header that cannot
    /// be sent; nothing is contacted yet.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiCompat, ConfigError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                    ConfigError::Header {
                        name: "Authorization".into(),
                        reason: "the API key has characters a header cannot carry".into(),
                    }
                })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let client = http_client(&config, headers)?;
        Ok(OpenAiCompat {
            endpoints: Endpoints::new(&config.base_url),
            tool_mode_file: ToolModeFile::new(config.tool_mode_cache.clone()),
            config,
            client,
            learned: Mutex::default(),
            detecting: Flight::default(),
        })
    }

    /// The model ids the endpoint serves (`GET {base}/models`, `data[].id`), in its order. Used
    /// to pick a model when none is configured and the endpoint serves exactly one.
    pub async fn list_models(&self) -> Result<Vec<String>, LlmError> {
        let url = format!("{}/models", self.endpoints.base);
        let response = tokio::time::timeout(self.side_timeout(), self.client.get(&url).send())
            .await
            .map_err(|_| LlmError::Timeout(format!("listing models at {url}")))?
            .map_err(|e| LlmError::Connect {
                url: url.clone(),
                message: describe(&e),
            })?;
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.map_err(|e| {
            LlmError::Protocol(format!("{url} answered HTTP {status} without JSON: {e}"))
        })?;
        if status >= 400 {
            return Err(LlmError::Http {
                status,
                message: body.to_string(),
            });
        }
        Ok(body["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str().map(str::to_string))
            .collect())
    }

    /// The configuration this client was built from.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The tool mode used for `model`: the configured one, or for [`ToolMode::Auto`] the one
    /// it settled on (in this client, or earlier in the [`OpenAiConfig::tool_mode_cache`]
    /// file). [`ToolMode::Auto`] means nothing is settled yet: requests offer tools natively.
    pub fn tool_mode_for(&self, model: &str) -> ToolMode {
        match self.config.tool_mode {
            ToolMode::Native => return ToolMode::Native,
            ToolMode::Json => return ToolMode::Json,
            ToolMode::Auto => {}
        }
        {
            let learned = self.learned();
            if let Some(mode) = learned.tool_modes.get(model) {
                return *mode;
            }
            // The file was read for this model already and had nothing: this client settles
            // the mode itself (and writes it there), so the file is not read on every call.
            if learned.tool_mode_file_read.contains(model) {
                return ToolMode::Auto;
            }
        }
        let remembered = self.tool_mode_file.get(&self.endpoints.base, model);
        let mut learned = self.learned();
        learned.tool_mode_file_read.insert(model.to_string());
        match remembered {
            Some(mode) => {
                learned.tool_modes.insert(model.to_string(), mode);
                mode
            }
            None => ToolMode::Auto,
        }
    }

    /// Settles `model`'s tool mode (under [`ToolMode::Auto`]) here and in the cache file.
    fn settle_tool_mode(&self, model: &str, mode: ToolMode) {
        if self.config.tool_mode != ToolMode::Auto {
            return;
        }
        let previous = self.learned().tool_modes.insert(model.to_string(), mode);
        if previous != Some(mode) {
            tracing::info!(model, ?mode, "tool mode settled");
            self.tool_mode_file.set(&self.endpoints.base, model, mode);
        }
    }

    fn learned(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn limits(&self) -> sse::Limits {
        sse::Limits {
            bytes: self.config.max_answer_bytes,
            tokens: self.config.max_answer_tokens,
        }
    }

    /// Runs `call` within [`OpenAiConfig::call_timeout`].
    async fn within_deadline(
        &self,
        call: impl std::future::Future<Output = Result<ChatResponse, LlmError>>,
    ) -> Result<ChatResponse, LlmError> {
        let limit = self.config.call_timeout;
        tokio::time::timeout(limit, call)
            .await
            .unwrap_or(Err(LlmError::CallTimeout {
                secs: limit.as_secs(),
            }))
    }

    fn side_timeout(&self) -> Duration {
        self.config.idle_timeout.min(SIDE_REQUEST_TIMEOUT)
    }

    fn transport(&self) -> Transport {
        let learned = self.learned();
        Transport {
            stream: self.config.stream && !learned.streaming_refused,
            stream_options: !learned.stream_options_refused,
        }
    }

    fn shape(&self, request: &ChatRequest) -> Shape {
        if request.response_schema.is_some() {
            return Shape::Schema;
        }
        if request.tools.is_empty() {
            return Shape::Plain;
        }
        match self.tool_mode_for(&request.model) {
            ToolMode::Json => Shape::JsonTools,
            ToolMode::Native | ToolMode::Auto => Shape::NativeTools,
        }
    }

    /// Under [`ToolMode::Auto`], an endpoint that refuses the `tools` parameter (HTTP 400 whose
    /// message names tools: llama.cpp without `--jinja`, vLLM without a tool parser, Ollama for
    /// a model without tool support) settles JSON mode.
    fn refuses_native_tools(&self, shape: Shape, error: &LlmError) -> bool {
        let LlmError::Http {
            status: 400,
            message,
        } = error
        else {
            return false;
        };
        self.config.tool_mode == ToolMode::Auto
            && shape == Shape::NativeTools
            && message.to_ascii_lowercase().contains("tool")
    }

    /// True when `model` is known not to take images: configured so
    /// ([`OpenAiConfig::text_only_models`], `llm.models.<name>.vision: false`) or refused by the
    /// endpoint earlier.
    pub fn is_text_only(&self, model: &str) -> bool {
        self.config.text_only_models.iter().any(|m| m == model)
            || self.learned().text_only.contains(model)
    }

    /// An HTTP 400 that names images, for a request that carries some: the endpoint's model
    /// does not take them (llama.cpp without a projector, vLLM or Ollama serving a text model,
    /// OpenAI's "image_url is only supported by certain models").
    fn refuses_images(request: &ChatRequest, error: &LlmError) -> bool {
        let LlmError::Http {
            status: 400,
            message,
        } = error
        else {
            return false;
        };
        let message = message.to_ascii_lowercase();
        crate::image::has_images(&request.messages)
            && ["image", "vision", "multimodal", "multi-modal"]
                .iter()
                .any(|word| message.contains(word))
    }

    async fn run(
        &self,
        mut request: ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ChatResponse, LlmError> {
        if crate::image::has_images(&request.messages) && self.is_text_only(&request.model) {
            request.messages = crate::describe_images(&request.messages);
        }
        let mut shape = self.shape(&request);
        let policy = self.config.retry;
        let mut attempt = 1u32;
        let mut fallbacks = 0;
        let mut resent = false;
        loop {
            let transport = self.transport();
            let body = wire::body(&request, shape, transport).map_err(|e| self.redact(e))?;
            let failure = match self
                .attempt(&body, &request.headers, transport, shape, on_event)
                .await
            {
                Ok(raw) => {
                    if shape == Shape::NativeTools && !raw.tool_calls.is_empty() {
                        self.settle_tool_mode(&request.model, ToolMode::Native);
                    }
                    return Ok(self.finish(raw, body.prompt_chars, shape, &request));
                }
                Err(failure) => failure,
            };
            if let Failure::Final(error) = &failure
                && Self::refuses_images(&request, error)
            {
                tracing::warn!(model = %request.model, %error, "the endpoint refused images; sending their descriptions from now on");
                self.learned().text_only.insert(request.model.clone());
                request.messages = crate::describe_images(&request.messages);
                continue;
            }
            if let Failure::Final(error) = &failure
                && self.refuses_native_tools(shape, error)
            {
                self.settle_tool_mode(&request.model, ToolMode::Json);
                shape = Shape::JsonTools;
                on_event(StreamEvent::ToolModeChanged {
                    mode: ToolMode::Json,
                    reason: self.redact(error.clone()).to_string(),
                });
                continue;
            }
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
                Failure::Unsupported(feature, error) => {
                    fallbacks += 1;
                    if fallbacks > 2 {
                        return Err(self.redact(error));
                    }
                    tracing::info!(base_url = %self.endpoints.base, ?feature, "endpoint refused a feature; sending without it");
                    let mut learned = self.learned();
                    match feature {
                        Feature::StreamOptions => learned.stream_options_refused = true,
                        Feature::Streaming => learned.streaming_refused = true,
                    }
                }
                Failure::Final(error) => return Err(self.redact(error)),
                Failure::Retryable { error, retry_after } => {
                    let error = self.redact(error);
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
        body: &wire::Body,
        headers: &[(String, String)],
        transport: Transport,
        shape: Shape,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<RawAnswer, Failure> {
        let idle = self.config.idle_timeout;
        let url = self.endpoints.chat.clone();
        let retry = |error| Failure::Retryable {
            error,
            retry_after: None,
        };
        // The URL parsed once; one that does not parse goes as text, and reqwest says why.
        let mut request = match &self.endpoints.chat_url {
            Some(parsed) => self.client.post(parsed.clone()),
            None => self.client.post(&url),
        };
        for (name, value) in headers {
            request = request.header(name.as_str(), header_value(value));
        }
        let response = send(
            request
                .header(CONTENT_TYPE, "application/json")
                .body(body.bytes.clone()),
            &url,
            idle,
            self.limits(),
            Sent {
                stream_options: transport.stream_options,
                stream: transport.stream,
            },
            |_, message| message,
        )
        .await?;
        // JSON mode answers are JSON, not prose for a reader: they are not streamed as text.
        let on_text = |text: &str| {
            if shape != Shape::JsonTools {
                on_event(StreamEvent::TextDelta(text.to_string()));
            }
        };
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if transport.stream && is_sse {
            return sse::read(response, idle, self.limits(), &on_text).await;
        }
        let text = sse::read_body(response, idle, self.limits()).await?;
        // A 200 whose body is not an answer (an HTML error page from a proxy, a cut-off JSON)
        // is a broken answer like a broken stream: retried within the same budget.
        let raw = wire::parse_completion(&text).map_err(retry)?;
        if !raw.content.is_empty() {
            on_text(&raw.content);
        }
        Ok(raw)
    }

    fn finish(
        &self,
        raw: RawAnswer,
        prompt_chars: usize,
        shape: Shape,
        request: &ChatRequest,
    ) -> ChatResponse {
        let usage = raw
            .usage
            .unwrap_or_else(|| wire::estimate_usage(prompt_chars, &raw));
        let raw = match shape {
            Shape::JsonTools => json_mode::interpret(raw, &request.tools),
            Shape::Plain | Shape::NativeTools | Shape::Schema => raw,
        };
        ChatResponse {
            content: raw.content,
            tool_calls: raw.tool_calls,
            usage,
            finish_reason: raw.finish_reason,
            model: raw.model,
        }
    }

    fn redact(&self, error: LlmError) -> LlmError {
        redact_error(&self.config, error)
    }

    /// What the client already knows of `model`'s context length: `Some(answer)` when it
    /// knows (or knows that the endpoint does not tell), `None` when it must ask.
    fn known_context_length(&self, model: &str) -> Option<Option<u64>> {
        let learned = self.learned();
        if let Some(known) = learned.context_lengths.get(model) {
            return Some(Some(*known));
        }
        learned
            .context_unknown
            .get(model)
            .is_some_and(|asked| asked.elapsed() < UNKNOWN_CONTEXT_KEPT)
            .then_some(None)
    }

    async fn detect_context_length(&self, model: &str) -> Option<u64> {
        if let Some(configured) = self.config.context_length {
            return Some(configured);
        }
        // One request at a time: whoever waited finds the answer the first one learned.
        let _detecting = match self
            .detecting
            .lead_unless(|_| self.known_context_length(model))
            .await
        {
            Turn::Done(known) => return known,
            Turn::Lead(detecting) => detecting,
        };
        let Some(found) =
            context::detect(&self.client, &self.endpoints, model, self.side_timeout()).await
        else {
            self.learned()
                .context_unknown
                .insert(model.to_string(), std::time::Instant::now());
            return None;
        };
        tracing::info!(model, context_length = found, "context length detected");
        self.learned()
            .context_lengths
            .insert(model.to_string(), found);
        Some(found)
    }
}

impl Provider for OpenAiCompat {
    fn chat<'a>(
        &'a self,
        request: ChatRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(self.within_deadline(self.run(request, on_event)))
    }

    fn context_length<'a>(&'a self, model: &'a str) -> BoxFuture<'a, Option<u64>> {
        Box::pin(self.detect_context_length(model))
    }

    fn switch_to_json_tools(&self, model: &str) -> bool {
        if self.tool_mode_for(model) != ToolMode::Auto {
            return false;
        }
        self.settle_tool_mode(model, ToolMode::Json);
        true
    }
}

/// `error` with every secret of `config` replaced by `***`.
pub(crate) fn redact_error(config: &OpenAiConfig, error: LlmError) -> LlmError {
    let r = |text: String| config.redact(&text);
    match error {
        LlmError::Connect { url, message } => LlmError::Connect {
            url: r(url),
            message: r(message),
        },
        LlmError::Http { status, message } => LlmError::Http {
            status,
            message: r(message),
        },
        LlmError::ContextOverflow { status, message } => LlmError::ContextOverflow {
            status,
            message: r(message),
        },
        LlmError::Stream(message) => LlmError::Stream(r(message)),
        LlmError::Protocol(message) => LlmError::Protocol(r(message)),
        LlmError::Timeout(message) => LlmError::Timeout(r(message)),
        LlmError::CallTimeout { secs } => LlmError::CallTimeout { secs },
        LlmError::Cancelled => LlmError::Cancelled,
        LlmError::AnswerTooLarge { limit } => LlmError::AnswerTooLarge { limit },
    }
}

/// The HTTP client for `config`'s endpoint: `headers` (the credentials) and the configured
/// extra headers sent with every request, all marked sensitive, and the connect timeout. Fails
/// on a base URL that is not `http(s)://…` or a header that cannot be sent.
pub(crate) fn http_client(
    config: &OpenAiConfig,
    mut headers: HeaderMap,
) -> Result<reqwest::Client, ConfigError> {
    let parsed = url::Url::parse(&config.base_url).map_err(|e| ConfigError::BaseUrl {
        url: config.base_url.clone(),
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ConfigError::BaseUrl {
            url: config.base_url.clone(),
            reason: format!("the scheme must be http or https, not {}", parsed.scheme()),
        });
    }
    for (name, value) in &config.extra_headers {
        let header = |reason: String| ConfigError::Header {
            name: name.clone(),
            reason,
        };
        let key = HeaderName::from_bytes(name.as_bytes()).map_err(|e| header(e.to_string()))?;
        let mut value = HeaderValue::from_str(value.expose())
            .map_err(|_| header("the value has characters a header cannot carry".into()))?;
        value.set_sensitive(true);
        headers.insert(key, value);
    }
    let mut builder = reqwest::Client::builder()
        .default_headers(headers)
        .connect_timeout(config.connect_timeout);
    if parsed.scheme() == "http" {
        // A plain-HTTP endpoint needs no TLS roots: loading and parsing the system's
        // certificates is most of a client's memory and start-up cost.
        builder = builder.tls_certs_only([]);
    }
    builder
        .build()
        .map_err(|e| ConfigError::Client(describe(&e)))
}

/// `value` as a header value: visible ASCII and spaces as they are, every other byte
/// percent-encoded (a movement may be named in any script).
pub(crate) fn header_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod header_tests {
    use super::header_value;

    #[test]
    fn a_header_value_is_visible_ascii_whatever_the_name() {
        assert_eq!(header_value("review-2 step"), "review-2 step");
        assert_eq!(
            header_value("レビュー"),
            "%E3%83%AC%E3%83%93%E3%83%A5%E3%83%BC"
        );
        assert_eq!(header_value("50%\n"), "50%25%0A");
        assert!(reqwest::header::HeaderValue::from_str(&header_value("計画\r\n")).is_ok());
    }
}
