//! The model endpoint as configured: its client, and which model a run uses when none is named.

use std::path::PathBuf;

use maestro_config::Config;
use maestro_llm::{LlmError, ModelClient};

/// Why no usable model was found.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The client could not be built from the configuration.
    #[error(transparent)]
    Client(#[from] maestro_llm::ConfigError),
    /// Nothing answers at the endpoint.
    #[error("{}", unreachable(base_url, cause))]
    Unreachable {
        /// The endpoint's API root (`llm.base_url`).
        base_url: String,
        /// The connection error (not a `#[source]`: the message already says what to do, and
        /// the CLI prints the chain).
        cause: LlmError,
    },
    /// Listing the endpoint's models failed otherwise.
    #[error(
        "no model: set llm.model, MAESTRO_MODEL or --model (listing the models at {base_url} \
         failed: {cause})"
    )]
    ListFailed {
        /// The endpoint's API root (`llm.base_url`).
        base_url: String,
        /// Shown in the message, so not also a `#[source]`.
        cause: LlmError,
    },
    /// The endpoint lists no model.
    #[error("no model: set llm.model, MAESTRO_MODEL or --model ({base_url} lists no models)")]
    NoneServed {
        /// The endpoint's API root (`llm.base_url`).
        base_url: String,
    },
    /// The endpoint lists several models and none was chosen.
    #[error("no model: set llm.model, MAESTRO_MODEL or --model; {base_url} serves: {}", served.join(", "))]
    Ambiguous {
        /// The endpoint's API root (`llm.base_url`).
        base_url: String,
        /// The models it lists.
        served: Vec<String>,
    },
    /// The chosen model is not among those the endpoint lists.
    #[error(
        "the model `{model}` is not served by {base_url}; it serves: {}. Choose one with \
         --model, the piece's `model`, MAESTRO_MODEL or llm.model",
        served.join(", ")
    )]
    NotServed {
        /// The model that was asked for.
        model: String,
        /// The endpoint's API root (`llm.base_url`).
        base_url: String,
        /// The models it lists.
        served: Vec<String>,
    },
}

/// Where `tool_mode: auto` remembers, per endpoint and model, the mode it settled on:
/// `~/.maestro/cache/tool-modes.json`.
pub fn tool_mode_cache() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(".maestro/cache/tool-modes.json"))
}

/// The model endpoint's client, as configured: the API `llm.provider` names (Chat
/// Completions or the Anthropic Messages API) with `llm`'s endpoint, key, timeouts and retries.
pub fn client(config: &Config) -> Result<ModelClient, ModelError> {
    let mut settings = config.llm.to_openai_config();
    settings.tool_mode_cache = tool_mode_cache();
    Ok(ModelClient::new(config.llm.provider, settings)?)
}

/// A model the endpoint does not list (`GET /v1/models`) stops the run before it starts, with
/// what the endpoint serves. An endpoint that cannot list its models is not held to this.
pub async fn ensure_served(config: &Config, model: &str) -> Result<(), ModelError> {
    match check_served(config, model).await {
        Err(ModelError::Unreachable { .. }) => Ok(()),
        checked => checked,
    }
}

/// [`ensure_served`], except that an endpoint that does not answer at all is
/// [`ModelError::Unreachable`]: a worker waits for it rather than starting a run that can only
/// fail.
pub async fn check_served(config: &Config, model: &str) -> Result<(), ModelError> {
    let listed = client(config)?.list_models().await;
    allow_aliases(config, judge_served(&config.llm.base_url, model, listed))
}

/// The Anthropic API lists dated model ids (`claude-sonnet-4-5-20250929`) and also answers to
/// aliases it does not list (`claude-sonnet-4-5`): a model missing from its list is not refused
/// here (the API itself says `not_found_error` for a name it does not know).
pub(crate) fn allow_aliases(
    config: &Config,
    judged: Result<(), ModelError>,
) -> Result<(), ModelError> {
    match judged {
        Err(ModelError::NotServed { .. })
            if config.llm.provider == maestro_config::ProviderKind::Anthropic =>
        {
            Ok(())
        }
        judged => judged,
    }
}

/// Whether `model` is among the models `listed` (the answer to `GET /v1/models` at `base`): an
/// endpoint that cannot list its models is not held to it, one that does not answer is
/// [`ModelError::Unreachable`].
pub(crate) fn judge_served(
    base: &str,
    model: &str,
    listed: Result<Vec<String>, LlmError>,
) -> Result<(), ModelError> {
    let served = match listed {
        Ok(served) => served,
        // An endpoint that takes the connection and then says nothing is as good as none: the
        // run would only wait for it, call after call.
        Err(cause @ (LlmError::Connect { .. } | LlmError::Timeout(_))) => {
            return Err(ModelError::Unreachable {
                base_url: base.to_string(),
                cause,
            });
        }
        Err(_) => return Ok(()),
    };
    // Ollama lists `qwen3:latest` and answers to `qwen3`.
    let listed = |id: &String| id == model || id.strip_suffix(":latest") == Some(model);
    if served.is_empty() || served.iter().any(listed) {
        return Ok(());
    }
    Err(ModelError::NotServed {
        model: model.to_string(),
        base_url: base.to_string(),
        served,
    })
}

/// With no model configured anywhere, the endpoint's only model is used; several (or none) is an
/// error that lists what the endpoint serves.
pub async fn served_model(config: &Config) -> Result<String, ModelError> {
    let listed = client(config)?.list_models().await;
    only_model(&config.llm.base_url, listed)
}

/// The only model in `listed` (the answer to `GET /v1/models` at `base`).
pub(crate) fn only_model(
    base: &str,
    listed: Result<Vec<String>, LlmError>,
) -> Result<String, ModelError> {
    let base_url = base.to_string();
    let models = listed.map_err(|cause| match cause {
        LlmError::Connect { .. } => ModelError::Unreachable {
            base_url: base_url.clone(),
            cause,
        },
        cause => ModelError::ListFailed {
            base_url: base_url.clone(),
            cause,
        },
    })?;
    match models.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(ModelError::NoneServed { base_url }),
        several => Err(ModelError::Ambiguous {
            base_url,
            served: several.to_vec(),
        }),
    }
}

/// [`ModelError::Unreachable`]'s text: how to get an endpoint when none answers, and what the
/// endpoint did when it took the connection but said nothing.
fn unreachable(base: &str, cause: &LlmError) -> String {
    match cause {
        LlmError::Timeout(what) => format!(
            "the model endpoint at {base} took the connection but did not answer in time ({what}); check \
             that it is an OpenAI-compatible server that is not stuck, or give another with \
             --llm-base-url or MAESTRO_LLM_BASE_URL"
        ),
        _ => no_endpoint(base),
    }
}

/// The one line a user needs when nothing answers at `base`.
pub fn no_endpoint(base: &str) -> String {
    format!(
        "no model endpoint answers at {base}; start the small local model with \
         `export MAESTRO_LLM_BASE_URL=$(bash scripts/local-llm.sh start)` from the Maestro source \
         tree, or give your endpoint with --llm-base-url or MAESTRO_LLM_BASE_URL"
    )
}

/// Whether nothing answers at the configured endpoint at all (after a failed run, to say how to
/// get one).
pub async fn endpoint_unreachable(config: &Config) -> bool {
    let Ok(provider) = client(config) else {
        return false;
    };
    // A refused connection says so at once; an endpoint that holds the connection without a
    // word is not waited for here (this only picks the advice printed after a failed run).
    matches!(
        tokio::time::timeout(std::time::Duration::from_secs(2), provider.list_models()).await,
        Ok(Err(LlmError::Connect { .. }))
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use maestro_config::ProviderKind;
    use maestro_testkit::{ScriptedAnthropic, ScriptedLlm};

    use super::*;

    const DATED: &str = "claude-sonnet-4-5-20250929";

    #[tokio::test]
    async fn a_model_the_list_lacks_is_refused_except_by_the_anthropic_api() {
        let openai = ScriptedLlm::builder().model_id(DATED).start().await;
        let mut config = Config::default();
        config.llm.base_url = openai.base_url();
        let clients = crate::clients::ModelClients::default();
        let refused = clients.check_served(&config, "claude-sonnet-4-5").await;
        assert!(
            matches!(&refused, Err(ModelError::NotServed { served, .. }) if served == &[DATED]),
            "{refused:?}"
        );

        // The Anthropic API lists dated ids and answers to aliases it does not list.
        let anthropic = ScriptedAnthropic::builder().models([DATED]).start().await;
        config.llm.provider = ProviderKind::Anthropic;
        config.llm.base_url = anthropic.base_url();
        assert_eq!(
            client(&config).unwrap().list_models().await.unwrap(),
            [DATED]
        );
        clients
            .check_served(&config, "claude-sonnet-4-5")
            .await
            .unwrap();
        check_served(&config, "claude-sonnet-4-5").await.unwrap();
        assert_eq!(served_model(&config).await.unwrap(), DATED);
        assert!(
            anthropic.recorded().iter().all(|r| r.path == "/v1/models"),
            "only the list was asked for"
        );
    }
}
