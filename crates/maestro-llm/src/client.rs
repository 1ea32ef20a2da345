//! [`ModelClient`]: the client of whichever API the configuration names ([`ProviderKind`]), so
//! that the application builds one value and the engine sees only a [`Provider`].

use serde::{Deserialize, Serialize};

use crate::anthropic::Anthropic;
use crate::{
    BoxFuture, ChatRequest, ChatResponse, ConfigError, LlmError, OpenAiCompat, OpenAiConfig,
    Provider, StreamEvent,
};

/// Which API the model endpoint speaks (`llm.provider`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProviderKind {
    /// The Chat Completions API (OpenAI, vLLM, llama.cpp server, Ollama, a gateway):
    /// [`OpenAiCompat`].
    #[default]
    #[serde(rename = "openai")]
    OpenAi,
    /// The Anthropic Messages API: [`Anthropic`].
    #[serde(rename = "anthropic")]
    Anthropic,
}

/// The client of one model endpoint, of either API.
// One value per configuration, kept behind an `Arc`: the size of its variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ModelClient {
    /// A Chat Completions endpoint.
    OpenAi(OpenAiCompat),
    /// The Anthropic Messages API.
    Anthropic(Anthropic),
}

impl ModelClient {
    /// Builds the client `kind` names from `config`; nothing is contacted yet.
    pub fn new(kind: ProviderKind, config: OpenAiConfig) -> Result<ModelClient, ConfigError> {
        Ok(match kind {
            ProviderKind::OpenAi => ModelClient::OpenAi(OpenAiCompat::new(config)?),
            ProviderKind::Anthropic => ModelClient::Anthropic(Anthropic::new(config)?),
        })
    }

    /// The model ids the endpoint serves, in its order.
    pub async fn list_models(&self) -> Result<Vec<String>, LlmError> {
        match self {
            ModelClient::OpenAi(client) => client.list_models().await,
            ModelClient::Anthropic(client) => client.list_models().await,
        }
    }

    /// One vector per text of `inputs`, from the endpoint's `/v1/embeddings` with `model`. The
    /// Anthropic Messages API has no embeddings: that is an error saying so.
    pub async fn embeddings(
        &self,
        model: &str,
        inputs: &[String],
    ) -> Result<Vec<Vec<f32>>, LlmError> {
        match self {
            ModelClient::OpenAi(client) => client.embeddings(model, inputs).await,
            ModelClient::Anthropic(client) => Err(LlmError::Http {
                status: 404,
                message: format!(
                    "{}: the Anthropic Messages API has no embeddings; set \
                     `knowledge.embedding_model` only with an OpenAI-compatible endpoint",
                    client.config().base_url
                ),
            }),
        }
    }

    /// The configuration this client was built from.
    pub fn config(&self) -> &OpenAiConfig {
        match self {
            ModelClient::OpenAi(client) => client.config(),
            ModelClient::Anthropic(client) => client.config(),
        }
    }

    fn provider(&self) -> &dyn Provider {
        match self {
            ModelClient::OpenAi(client) => client,
            ModelClient::Anthropic(client) => client,
        }
    }
}

impl Provider for ModelClient {
    fn chat<'a>(
        &'a self,
        request: ChatRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        self.provider().chat(request, on_event)
    }

    fn context_length<'a>(&'a self, model: &'a str) -> BoxFuture<'a, Option<u64>> {
        self.provider().context_length(model)
    }

    fn switch_to_json_tools(&self, model: &str) -> bool {
        self.provider().switch_to_json_tools(model)
    }
}
