//! Cost caps: before each model call the run reserves the call's worst case from its job tree's
//! budget through a [`SpendGuard`], and settles it to the real usage after the answer. The guard
//! belongs to the job system (the engine knows no store); a run without one spends unchecked.

use std::future::Future;
use std::pin::Pin;

use maestro_llm::{ChatRequest, Message};
use maestro_protocol::{CallPurpose, ToolSpec, Usage};

/// A boxed future of a [`SpendGuard`] method.
pub type SpendFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One model call about to be made, as the guard prices it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendAsk {
    /// The movement making the call.
    pub movement: String,
    /// What the call is for (a movement's turn, a judge, the classifier).
    pub purpose: CallPurpose,
    /// The model asked for.
    pub model: String,
    /// The prompt's estimated tokens (4 characters a token, tools' descriptions and schemas
    /// included), as the context check estimates them.
    pub prompt_tokens: u64,
    /// The request's `max_tokens`; `None`: the guard takes the client's own cap on an answer.
    pub max_answer_tokens: Option<u32>,
}

/// A reservation the guard made, to settle or release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendTicket {
    /// The guard's name for the reservation; opaque to the engine.
    pub id: String,
    /// The answer cap the reservation was made for, when the guard lowered the call's own so
    /// that it fits what the budget has left: the call is sent with it as `max_tokens`, so its
    /// answer cannot pass what was reserved. `None`: the call goes as asked.
    pub answer_cap: Option<u32>,
}

impl SpendTicket {
    /// A reservation of the call as asked.
    pub fn new(id: impl Into<String>) -> SpendTicket {
        SpendTicket {
            id: id.into(),
            answer_cap: None,
        }
    }
}

/// Why a call may not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpendRefused {
    /// The call's worst case does not fit a cap: the run ends `exceeded`, reason
    /// `budget: <cap>`.
    #[error("{message}")]
    Exceeded {
        /// The cap, as configured: `max_total_tokens` or `max_cost_usd`.
        cap: String,
        /// What the cap is and how much of it is gone, for the run's record.
        message: String,
    },
    /// The budget could not be read or written (the store is down): the job is retried later.
    #[error("the budget cannot be checked: {0}")]
    Unavailable(String),
}

/// The job system's side of cost caps, for one run.
pub trait SpendGuard: Send + Sync {
    /// Reserves the worst case of the call `ask` describes, or refuses it.
    fn reserve(&self, ask: SpendAsk) -> SpendFuture<'_, Result<SpendTicket, SpendRefused>>;

    /// The call was answered by `model` with `usage`: the reservation becomes what it spent.
    fn settle(&self, ticket: SpendTicket, model: String, usage: Usage) -> SpendFuture<'_, ()>;

    /// The call failed or was cancelled: the reservation is given back.
    fn release(&self, ticket: SpendTicket) -> SpendFuture<'_, ()>;
}

/// The estimated tokens of a conversation and the tools offered with it: 4 characters a token,
/// and each image as [`maestro_llm::estimated_image_tokens`] says (one token per 750 pixels,
/// at least 85).
pub(crate) fn estimated_tokens(messages: &[Message], tools: &[ToolSpec]) -> u64 {
    let image_tokens: u64 = messages
        .iter()
        .flat_map(|m| match m {
            Message::User { images, .. } => images.as_slice(),
            _ => &[],
        })
        .map(|image| maestro_llm::estimated_image_tokens(image.width, image.height))
        .sum();
    let chars: usize = messages
        .iter()
        .map(|m| match m {
            Message::System { content }
            | Message::User { content, .. }
            | Message::Tool { content, .. } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.arguments.len() + c.name.len())
                        .sum::<usize>()
            }
        })
        .sum::<usize>()
        + tools
            .iter()
            .map(|t| t.description.len() + t.input_schema.to_string().len())
            .sum::<usize>();
    (chars / 4) as u64 + image_tokens
}

/// What a guard is asked about `request`.
pub(crate) fn ask_for(movement: &str, purpose: CallPurpose, request: &ChatRequest) -> SpendAsk {
    let mut prompt_tokens = estimated_tokens(&request.messages, &request.tools);
    if let Some(schema) = &request.response_schema {
        prompt_tokens += (serde_json::to_string(schema).map_or(0, |s| s.len()) / 4) as u64;
    }
    SpendAsk {
        movement: movement.to_string(),
        purpose,
        model: request.model.clone(),
        prompt_tokens,
        max_answer_tokens: request.max_tokens,
    }
}
