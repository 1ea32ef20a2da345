//! `gateway:` in the configuration: the upstreams, the public model names routed to them, and
//! the checks that span fields (a route naming an unknown upstream, an empty route).

use std::collections::BTreeMap;

use maestro_protocol::Secret;
use serde::{Deserialize, Serialize};

/// `gateway:` — the LLM gateway `maestro gateway` runs and `maestro serve` mounts at `/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Mount the gateway at `/v1` in `maestro serve` (`maestro gateway` runs it either way).
    pub enabled: bool,
    /// The model servers, by name.
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// The model names clients ask for, each routed to one or more upstream models.
    pub models: BTreeMap<String, Vec<RouteTarget>>,
    /// How long an upstream that failed (connect error, 429, 5xx) is passed over, in seconds;
    /// longer when its 429 or 5xx asks so with `Retry-After` (at most 600 s).
    pub cooldown_secs: u64,
    /// How long to wait for an upstream's TCP (and TLS) connection, in seconds.
    pub connect_timeout_secs: u64,
    /// The longest a request may take at an upstream before its first byte, in seconds; a
    /// stream may then last as long as the upstream keeps sending.
    pub first_byte_timeout_secs: u64,
    /// The longest a stream may go without a chunk from its upstream once its first byte came,
    /// in seconds; past it the stream is cut (the SSE `stream_cut` error event) and recorded
    /// `cut`.
    pub stream_idle_timeout_secs: u64,
    /// The answer cap (`max_tokens`) written into a chat request that has none when its key
    /// has a budget, so that the reservation made for it bounds what it can spend.
    pub default_max_tokens: u64,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            enabled: false,
            upstreams: BTreeMap::new(),
            models: BTreeMap::new(),
            cooldown_secs: 30,
            connect_timeout_secs: 10,
            first_byte_timeout_secs: 600,
            stream_idle_timeout_secs: 60,
            default_max_tokens: 4096,
        }
    }
}

/// The API an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamKind {
    /// Any OpenAI-compatible server: OpenAI, vLLM, llama.cpp, Ollama.
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
}

/// `gateway.upstreams.<name>:` — one model server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The API it speaks.
    pub kind: UpstreamKind,
    /// The API root: for `openai` with its version segment (`https://api.openai.com/v1`), for
    /// `anthropic` without (`https://api.anthropic.com`).
    pub base_url: String,
    /// The environment variable holding its API key, read when the configuration is loaded;
    /// unset sends no key (a local server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The key in effect, read from `api_key_env` when the configuration is loaded; never in a
    /// file, never shown.
    #[serde(skip)]
    pub api_key: Option<Secret>,
    /// `anthropic` only: the `max_tokens` of a request that sets neither `max_tokens` nor
    /// `max_completion_tokens` (the Messages API requires it); unset, 4096.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// One entry of `gateway.models.<public name>:` — an upstream model that serves the public
/// name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTarget {
    /// The name of an upstream in `gateway.upstreams`.
    pub upstream: String,
    /// The model name sent to that upstream.
    pub model: String,
    /// The share of first attempts this target gets among the route's targets (default 1); 0
    /// makes it a fallback, tried only after the others failed.
    #[serde(default = "RouteTarget::default_weight")]
    pub weight: u32,
}

impl RouteTarget {
    fn default_weight() -> u32 {
        1
    }
}

/// One problem of a `gateway:` section: the field path, what is wrong, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigCheck {
    /// The field's path below the document root, e.g. `["gateway", "models", "team", "0",
    /// "upstream"]`.
    pub field: Vec<String>,
    /// What is wrong.
    pub message: String,
    /// What would make it valid.
    pub fix: String,
}

impl GatewayConfig {
    /// The problems no single field's type catches: routes naming unknown upstreams, empty
    /// routes or names, URLs that are not http(s), zero timeouts.
    pub fn check(&self) -> Vec<ConfigCheck> {
        let mut found = Vec::new();
        let mut fail = |field: Vec<String>, message: String, fix: String| {
            found.push(ConfigCheck {
                field,
                message,
                fix,
            })
        };
        let path = |rest: &[&str]| -> Vec<String> {
            std::iter::once("gateway")
                .chain(rest.iter().copied())
                .map(str::to_string)
                .collect()
        };
        for (name, upstream) in &self.upstreams {
            let url = &upstream.base_url;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                fail(
                    path(&["upstreams", name, "base_url"]),
                    format!("{url:?} is not an http(s) URL"),
                    match upstream.kind {
                        UpstreamKind::Openai => {
                            "give the API root with its version segment, e.g. http://127.0.0.1:8088/v1"
                        }
                        UpstreamKind::Anthropic => {
                            "give the API root, e.g. https://api.anthropic.com"
                        }
                    }
                    .into(),
                );
            }
            if upstream.max_tokens == Some(0) {
                fail(
                    path(&["upstreams", name, "max_tokens"]),
                    "must be at least 1".into(),
                    "give the number of answer tokens a request may use, or remove the field"
                        .into(),
                );
            }
            if upstream.max_tokens.is_some() && upstream.kind == UpstreamKind::Openai {
                fail(
                    path(&["upstreams", name, "max_tokens"]),
                    "is read only for `kind: anthropic` upstreams".into(),
                    "remove it; an OpenAI-compatible upstream takes the request's own max_tokens"
                        .into(),
                );
            }
            if upstream.api_key_env.as_deref() == Some("") {
                fail(
                    path(&["upstreams", name, "api_key_env"]),
                    "the variable name is empty".into(),
                    "name the environment variable holding the key, or remove the field".into(),
                );
            }
        }
        let known: Vec<&str> = self.upstreams.keys().map(String::as_str).collect();
        for (public, targets) in &self.models {
            if targets.is_empty() {
                fail(
                    path(&["models", public]),
                    "the route lists no upstream model".into(),
                    "add at least one `{upstream: NAME, model: MODEL}`, or remove the route".into(),
                );
            }
            for (index, target) in targets.iter().enumerate() {
                let index = index.to_string();
                if !self.upstreams.contains_key(&target.upstream) {
                    fail(
                        path(&["models", public, &index, "upstream"]),
                        format!(
                            "names the upstream {:?}, which is not configured",
                            target.upstream
                        ),
                        if known.is_empty() {
                            "declare it under gateway.upstreams".into()
                        } else {
                            format!(
                                "use one of {} or declare it under gateway.upstreams",
                                known.join(", ")
                            )
                        },
                    );
                }
                if target.model.is_empty() {
                    fail(
                        path(&["models", public, &index, "model"]),
                        "the model name is empty".into(),
                        "name the model the upstream serves".into(),
                    );
                }
            }
            if !targets.is_empty() && targets.iter().all(|t| t.weight == 0) {
                fail(
                    path(&["models", public]),
                    "every target has weight 0, so none is ever tried first".into(),
                    "give at least one target a positive weight (the default is 1)".into(),
                );
            }
        }
        for (field, value) in [
            ("connect_timeout_secs", self.connect_timeout_secs),
            ("first_byte_timeout_secs", self.first_byte_timeout_secs),
            ("stream_idle_timeout_secs", self.stream_idle_timeout_secs),
        ] {
            if value == 0 {
                fail(
                    path(&[field]),
                    "must be at least 1".into(),
                    "give a number of seconds".into(),
                );
            }
        }
        found
    }

    /// Reads each upstream's `api_key_env` through `env`. Fails with the upstream's name and
    /// the variable when one is not set.
    pub fn read_keys(&mut self, env: impl Fn(&str) -> Option<String>) -> Result<(), ConfigCheck> {
        for (name, upstream) in &mut self.upstreams {
            let Some(var) = upstream.api_key_env.as_deref().filter(|v| !v.is_empty()) else {
                continue;
            };
            match env(var).filter(|v| !v.is_empty()) {
                Some(key) => upstream.api_key = Some(Secret::new(key)),
                None => {
                    return Err(ConfigCheck {
                        field: vec![
                            "gateway".into(),
                            "upstreams".into(),
                            name.clone(),
                            "api_key_env".into(),
                        ],
                        message: format!("names the environment variable {var}, which is not set"),
                        fix: format!(
                            "export {var}=<the upstream's API key>, or remove api_key_env for a server that needs no key"
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
