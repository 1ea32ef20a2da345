//! Configuration of the OpenAI-compatible client: endpoint, credentials, tool mode, timeouts
//! and the retry policy.

use std::path::PathBuf;
use std::time::Duration;

use maestro_protocol::Secret;

use crate::ToolMode;

/// [`OpenAiConfig::call_timeout`] by default: 30 minutes, room for a slow local model's longest
/// answer.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// [`OpenAiConfig::max_answer_bytes`] by default: 32 MiB on the wire, about 200,000 streamed
/// tokens of SSE framing, or a plain answer far longer than any context window.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;
/// [`OpenAiConfig::max_answer_tokens`] by default.
pub const DEFAULT_MAX_ANSWER_TOKENS: u64 = 65_536;

/// How an [`OpenAiCompat`](super::OpenAiCompat) endpoint is reached and how hard it is retried.
///
/// Build it with [`OpenAiConfig::new`] and adjust the public fields (or the `with_*` methods):
///
/// ```
/// use std::time::Duration;
/// use maestro_llm::{OpenAiConfig, ToolMode};
/// use maestro_protocol::Secret;
///
/// let config = OpenAiConfig::new("http://127.0.0.1:11434/v1")
///     .with_api_key(Secret::new("sk-local"))
///     .with_tool_mode(ToolMode::Auto)
///     .with_idle_timeout(Duration::from_secs(300));
/// assert_eq!(config.retry.max_attempts, 6);
/// ```
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// The API root including the version segment, e.g. `http://127.0.0.1:8088/v1`. Requests go
    /// to `{base_url}/chat/completions` and `{base_url}/models`; llama.cpp's `/props` and
    /// Ollama's `/api/show` are looked up beside it (the `/v1` removed).
    pub base_url: String,
    /// Sent as `Authorization: Bearer …`; never printed, logged or put into an error.
    pub api_key: Option<Secret>,
    /// How tools are offered to the model. [`ToolMode::Auto`] starts with native tools and
    /// settles on a mode from the model's first answers (see [`ToolMode::Auto`]).
    pub tool_mode: ToolMode,
    /// Where [`ToolMode::Auto`] remembers the mode it settled on, per endpoint and model (a JSON
    /// file), so that later clients use it from their first request. `None` remembers it for
    /// this client only.
    pub tool_mode_cache: Option<PathBuf>,
    /// The longest silence tolerated while waiting for response headers or the next stream
    /// chunk (for a non-streaming call: for the whole answer). Then the attempt is retried.
    pub idle_timeout: Duration,
    /// The longest wait for the TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// The longest one model call may take in total, retries and their waits included. The
    /// idle timeout alone never ends an answer that trickles in forever; this does.
    pub call_timeout: Duration,
    /// The most bytes one answer may take on the wire (the response body, SSE framing
    /// included). A longer answer ends the call with [`LlmError::AnswerTooLarge`](crate::LlmError::AnswerTooLarge),
    /// so an answer that never ends cannot grow memory without bound.
    pub max_answer_bytes: usize,
    /// The most tokens one streamed answer may carry, counted as the text and tool-call
    /// argument pieces streamed (servers stream one token per piece). A longer answer ends the
    /// call with [`LlmError::AnswerTooLarge`](crate::LlmError::AnswerTooLarge).
    pub max_answer_tokens: u64,
    /// Backoff between attempts on retryable failures.
    pub retry: RetryPolicy,
    /// The model's context window in tokens. When set it wins over anything the endpoint says.
    pub context_length: Option<u64>,
    /// Ask for a streamed (SSE) answer. The client falls back to a plain answer by itself when
    /// the endpoint rejects streaming, and remembers that.
    pub stream: bool,
    /// Models that cannot take images (`llm.models.<name>.vision: false`): their requests carry
    /// each image's description instead ([`ImagePart::description`](crate::ImagePart::description)).
    /// A model the endpoint refuses images for (HTTP 400 naming images) is treated so from then
    /// on without being listed here.
    pub text_only_models: Vec<String>,
    /// Further headers sent with every request (e.g. `OpenAI-Organization`, `api-key`). Values
    /// are secrets: they are redacted from errors like the API key.
    pub extra_headers: Vec<(String, Secret)>,
}

impl OpenAiConfig {
    /// A configuration with the defaults of `docs/engine-semantics.md`: native tools, streaming,
    /// a 120 s idle timeout, a 10 s connect timeout, a 30 min call timeout, answers of at most
    /// 32 MiB and 65,536 tokens, and [`RetryPolicy::default`].
    pub fn new(base_url: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            api_key: None,
            tool_mode: ToolMode::Native,
            tool_mode_cache: None,
            idle_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            max_answer_tokens: DEFAULT_MAX_ANSWER_TOKENS,
            retry: RetryPolicy::default(),
            context_length: None,
            stream: true,
            extra_headers: Vec::new(),
            text_only_models: Vec::new(),
        }
    }

    /// Sets the API key sent as a bearer token ([`OpenAiConfig::api_key`]).
    pub fn with_api_key(mut self, key: Secret) -> Self {
        self.api_key = Some(key);
        self
    }

    /// Sets how tools are offered ([`OpenAiConfig::tool_mode`]).
    pub fn with_tool_mode(mut self, mode: ToolMode) -> Self {
        self.tool_mode = mode;
        self
    }

    /// Sets the file where [`ToolMode::Auto`] remembers its mode ([`OpenAiConfig::tool_mode_cache`]).
    pub fn with_tool_mode_cache(mut self, path: impl Into<PathBuf>) -> Self {
        self.tool_mode_cache = Some(path.into());
        self
    }

    /// Sets the longest silence tolerated ([`OpenAiConfig::idle_timeout`]).
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets the longest one call may take in total ([`OpenAiConfig::call_timeout`]).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets the most bytes one answer may take ([`OpenAiConfig::max_answer_bytes`]).
    pub fn with_max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = bytes;
        self
    }

    /// Sets the most tokens one streamed answer may carry ([`OpenAiConfig::max_answer_tokens`]).
    pub fn with_max_answer_tokens(mut self, tokens: u64) -> Self {
        self.max_answer_tokens = tokens;
        self
    }

    /// Sets the retry policy ([`OpenAiConfig::retry`]).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the model's context window in tokens, overriding the endpoint's ([`OpenAiConfig::context_length`]).
    pub fn with_context_length(mut self, tokens: u64) -> Self {
        self.context_length = Some(tokens);
        self
    }

    /// Asks for a streamed answer or a plain one ([`OpenAiConfig::stream`]).
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Marks `model` as unable to take images ([`OpenAiConfig::text_only_models`]).
    pub fn with_text_only_model(mut self, model: impl Into<String>) -> Self {
        self.text_only_models.push(model.into());
        self
    }

    /// Adds a header sent with every request; its value is redacted from errors ([`OpenAiConfig::extra_headers`]).
    pub fn with_header(mut self, name: impl Into<String>, value: Secret) -> Self {
        self.extra_headers.push((name.into(), value));
        self
    }

    /// Replaces every secret of this configuration found in `text` with `***`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in self
            .api_key
            .iter()
            .chain(self.extra_headers.iter().map(|(_, v)| v))
        {
            out = secret.redact(&out);
        }
        out
    }
}

/// Exponential backoff with jitter: attempt `n` (1-based) that failed waits
/// `min(initial * 2^(n-1), max)`, scaled by a random factor in `1 ± jitter`. A `Retry-After`
/// header given by the endpoint wins over the computed delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in total, the first one included. `1` disables retries.
    pub max_attempts: u32,
    /// The wait after the first failure.
    pub initial: Duration,
    /// The longest computed wait.
    pub max: Duration,
    /// The relative spread of the random factor, e.g. `0.2` for ±20 %.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    /// 6 attempts, 1 s doubling up to 30 s, ±20 % jitter.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
            jitter: 0.2,
        }
    }
}

/// A configuration the client cannot be built from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `base_url` is not an `http://` or `https://` URL.
    #[error(
        "invalid model endpoint base_url {url:?}: {reason}; expected e.g. http://127.0.0.1:11434/v1"
    )]
    BaseUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The API key, or an extra header's name or value, has characters HTTP cannot carry.
    #[error("invalid extra header {name:?}: {reason}")]
    Header {
        /// The header's name (`Authorization` for the API key); its value is never shown.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be built from these settings.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}
