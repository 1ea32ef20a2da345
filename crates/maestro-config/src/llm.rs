//! `llm:` — the model endpoint: where it is, which model, the key, the tool mode, timeouts, the
//! retry policy and per-model overrides; turned into the client's [`OpenAiConfig`].

use std::collections::BTreeMap;
use std::time::Duration;

use maestro_llm::{OpenAiConfig, ProviderKind, RetryPolicy, ToolMode};
use maestro_protocol::Secret;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ConfigError;

/// The default endpoint: a local Ollama.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434/v1";

/// The default endpoint of `provider: anthropic`: the Anthropic API.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = maestro_llm::anthropic::DEFAULT_BASE_URL;

/// `llm:` in the configuration. Serialising it (for display) shows the key as `***`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Which API the endpoint speaks: `openai` (Chat Completions, the default) or `anthropic`
    /// (the Messages API).
    pub provider: ProviderKind,
    /// The API root: for `openai` including the version segment (`…/v1`), for `anthropic`
    /// without it (default [`DEFAULT_ANTHROPIC_BASE_URL`] when not set).
    pub base_url: String,
    /// The model name sent with every request. There is no default: a run without one stops
    /// with [`ConfigError::NoModel`].
    pub model: Option<String>,
    /// The name of the environment variable holding the API key (e.g. `OPENAI_API_KEY`). It is
    /// read when the configuration is loaded.
    pub api_key_env: Option<String>,
    /// The API key itself; prefer `api_key_env` so the key stays out of files. After loading it
    /// holds the key in effect, whichever way it was given.
    #[serde(
        deserialize_with = "secret_from_text",
        serialize_with = "secret_as_stars"
    )]
    pub api_key: Option<Secret>,
    /// How tools are offered to the model: `native`, `json` or `auto` (the default: native
    /// first, JSON once the endpoint or the model shows it needs it).
    pub tool_mode: ToolMode,
    /// The model's context window in tokens; unset asks the endpoint.
    pub context_length: Option<u64>,
    /// The longest silence tolerated while waiting for the model, in seconds.
    pub idle_timeout_secs: u64,
    /// The longest one model call may take in total, retries included, in seconds.
    pub call_timeout_secs: u64,
    /// The most bytes one answer may take on the wire; a longer one ends the call.
    pub max_answer_bytes: usize,
    /// The most tokens one streamed answer may carry; a longer one ends the call.
    pub max_answer_tokens: u64,
    /// How failed model calls are retried (`llm.retry`).
    pub retry: RetrySettings,
    /// Settings that apply only when `model` is the named one.
    pub models: BTreeMap<String, ModelOverrides>,
}

impl Default for LlmConfig {
    /// A local Ollama endpoint, no model, no key, `auto` tool mode and the client's own
    /// timeout and retry defaults.
    fn default() -> Self {
        let client = OpenAiConfig::new(DEFAULT_BASE_URL);
        LlmConfig {
            provider: ProviderKind::OpenAi,
            base_url: DEFAULT_BASE_URL.to_string(),
            model: None,
            api_key_env: None,
            api_key: None,
            tool_mode: ToolMode::Auto,
            context_length: None,
            idle_timeout_secs: client.idle_timeout.as_secs(),
            call_timeout_secs: client.call_timeout.as_secs(),
            max_answer_bytes: client.max_answer_bytes,
            max_answer_tokens: client.max_answer_tokens,
            retry: RetrySettings::from(client.retry),
            models: BTreeMap::new(),
        }
    }
}

/// `llm.retry:` — exponential backoff with jitter (see [`RetryPolicy`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySettings {
    /// Attempts in total, the first included; `1` disables retries.
    pub max_attempts: u32,
    /// The wait after the first failure, in milliseconds.
    pub initial_ms: u64,
    /// The longest wait, in milliseconds.
    pub max_ms: u64,
    /// Relative spread of the wait, `0.0` to `1.0`.
    pub jitter: f64,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings::from(RetryPolicy::default())
    }
}

impl From<RetryPolicy> for RetrySettings {
    fn from(policy: RetryPolicy) -> Self {
        RetrySettings {
            max_attempts: policy.max_attempts,
            initial_ms: u64::try_from(policy.initial.as_millis()).unwrap_or(u64::MAX),
            max_ms: u64::try_from(policy.max.as_millis()).unwrap_or(u64::MAX),
            jitter: policy.jitter,
        }
    }
}

impl From<RetrySettings> for RetryPolicy {
    fn from(settings: RetrySettings) -> Self {
        RetryPolicy {
            max_attempts: settings.max_attempts,
            initial: Duration::from_millis(settings.initial_ms),
            max: Duration::from_millis(settings.max_ms),
            jitter: settings.jitter,
        }
    }
}

/// `llm.models.<name>:` — what differs for one model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelOverrides {
    /// The tool mode for this model; unset keeps `llm.tool_mode`.
    pub tool_mode: Option<ToolMode>,
    /// This model's context window in tokens; unset keeps `llm.context_length`.
    pub context_length: Option<u64>,
    /// What this model's tokens cost; unset leaves the cost of its calls unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<ModelPrice>,
    /// `false` for a model that cannot take images: it reads each image's description (size,
    /// format and a note) instead. Unset sends images and relies on the endpoint, whose
    /// refusal (HTTP 400 naming images) the client remembers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<bool>,
}

/// `llm.models.<name>.price:` — US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Dollars per million prompt tokens.
    pub input_per_mtok: f64,
    /// Dollars per million answer tokens.
    pub output_per_mtok: f64,
    /// Dollars per million prompt tokens served from the endpoint's cache (the usage's
    /// `cached_prompt_tokens`: OpenAI's `prompt_tokens_details.cached_tokens`, Anthropic's
    /// `cache_read_input_tokens`); unset prices them as `input_per_mtok`. Tokens written to
    /// Anthropic's cache (`cache_creation_input_tokens`) are priced as input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<f64>,
}

impl ModelPrice {
    /// The cost in US dollars of a call that used `usage`.
    pub fn cost_usd(&self, usage: &maestro_protocol::Usage) -> f64 {
        let cached = usage.cached_prompt_tokens.min(usage.prompt_tokens);
        let uncached = usage.prompt_tokens - cached;
        (uncached as f64 * self.input_per_mtok
            + cached as f64 * self.cached_input_per_mtok.unwrap_or(self.input_per_mtok)
            + usage.completion_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

impl LlmConfig {
    /// The model to use, or the error a run reports when none is configured.
    pub fn require_model(&self) -> Result<&str, ConfigError> {
        self.model
            .as_deref()
            .filter(|m| !m.is_empty())
            .ok_or(ConfigError::NoModel)
    }

    /// The overrides for the configured model, if it has any.
    fn overrides(&self) -> ModelOverrides {
        self.model
            .as_ref()
            .and_then(|m| self.models.get(m))
            .copied()
            .unwrap_or_default()
    }

    /// The price of `model`'s tokens, when `llm.models.<model>.price` sets one.
    pub fn price(&self, model: &str) -> Option<ModelPrice> {
        self.models.get(model).and_then(|m| m.price)
    }

    /// The tool mode in effect for the configured model.
    pub fn effective_tool_mode(&self) -> ToolMode {
        self.overrides().tool_mode.unwrap_or(self.tool_mode)
    }

    /// The context length in effect for the configured model.
    pub fn effective_context_length(&self) -> Option<u64> {
        self.overrides().context_length.or(self.context_length)
    }

    /// The client configuration: endpoint, key, tool mode and context length (per-model
    /// overrides applied), timeouts, answer caps and retry policy; everything else keeps
    /// [`OpenAiConfig::new`]'s defaults.
    pub fn to_openai_config(&self) -> OpenAiConfig {
        let mut config = OpenAiConfig::new(self.base_url.clone())
            .with_tool_mode(self.effective_tool_mode())
            .with_idle_timeout(Duration::from_secs(self.idle_timeout_secs))
            .with_call_timeout(Duration::from_secs(self.call_timeout_secs))
            .with_max_answer_bytes(self.max_answer_bytes)
            .with_max_answer_tokens(self.max_answer_tokens)
            .with_retry(self.retry.into());
        if let Some(key) = &self.api_key {
            config = config.with_api_key(key.clone());
        }
        if let Some(tokens) = self.effective_context_length() {
            config = config.with_context_length(tokens);
        }
        for (model, overrides) in &self.models {
            if overrides.vision == Some(false) {
                config = config.with_text_only_model(model.clone());
            }
        }
        config
    }
}

fn secret_from_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(Secret::new))
}

fn secret_as_stars<S: Serializer>(secret: &Option<Secret>, s: S) -> Result<S::Ok, S::Error> {
    match secret {
        Some(_) => s.serialize_str("***"),
        None => s.serialize_none(),
    }
}
