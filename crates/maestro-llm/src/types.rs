//! The request/response vocabulary shared by every provider.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use maestro_protocol::{ToolCall, ToolSpec, Usage};
use serde::{Deserialize, Serialize};

/// A boxed future, so [`Provider`] stays object-safe (`Arc<dyn Provider>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions that frame the whole conversation (the movement's persona and rules).
    System {
        /// The instructions' text.
        content: String,
    },
    /// A turn of the user: the task, an instruction, or a person's answer.
    User {
        /// The turn's text.
        content: String,
        /// Images shown with the text, in order (a ReadImage result, a person's upload). Empty
        /// for a text-only turn, which then travels as a plain string, as it always did.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<crate::ImagePart>,
    },
    /// A turn of the model.
    Assistant {
        /// The answer's text; may be empty when the model only called tools.
        content: String,
        /// The tools the model called in this turn, in order; empty when it called none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the assistant turn that made it.
    Tool {
        /// The id of the [`ToolCall`] this answers.
        tool_call_id: String,
        /// The tool's output as the model reads it.
        content: String,
    },
}

impl Message {
    /// A text-only user turn.
    pub fn user(content: impl Into<String>) -> Message {
        Message::User {
            content: content.into(),
            images: Vec::new(),
        }
    }
}

pub use maestro_protocol::ToolMode;

/// A structured-output constraint (`response_format: {type: json_schema}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseSchema {
    /// The schema's name, sent as `json_schema.name`.
    pub name: String,
    /// The JSON Schema the answer must match.
    pub schema: serde_json::Value,
}

/// One model call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// The model's name as the endpoint knows it.
    pub model: String,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// Tools offered for this call; empty means none.
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// Forces a JSON answer of this shape (judge calls). Tools are not offered with it.
    pub response_schema: Option<ResponseSchema>,
    /// The sampling temperature; `None` leaves it to the endpoint.
    pub temperature: Option<f32>,
    /// The most tokens the answer may have; `None` leaves it to the endpoint.
    pub max_tokens: Option<u32>,
    /// HTTP headers sent with this call only, e.g. `X-Maestro-Job` and `X-Maestro-Movement`,
    /// by which a gateway attributes the call. A value that is not visible ASCII is sent
    /// percent-encoded.
    pub headers: Vec<(String, String)>,
}

/// The assembled answer of one model call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The answer's text; may be empty when the model only called tools.
    pub content: String,
    /// The tools the model called, whole (streamed pieces already joined), in order.
    pub tool_calls: Vec<ToolCall>,
    /// The tokens the call used, from the endpoint or estimated (`usage.estimated`).
    pub usage: Usage,
    /// Why the model stopped, as the endpoint said (`stop`, `length`, `tool_calls`, …).
    pub finish_reason: Option<String>,
    /// The model the endpoint says answered (its `model` field), when it named one; a
    /// gateway or router may answer with another model than the one asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Progress reported while a call runs, for live display and the run's event stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A piece of answer text arrived.
    TextDelta(String),
    /// A retryable failure happened; the client waits `delay` and tries again.
    Retry {
        /// The attempt that failed, from 1.
        attempt: u32,
        /// How long the client waits before the next attempt.
        delay: Duration,
        /// The failure, with secrets removed.
        reason: String,
    },
    /// The endpoint refused native tools, so the request is sent again in [`ToolMode::Json`],
    /// which the provider keeps for this model from now on.
    ToolModeChanged {
        /// The mode used from now on.
        mode: ToolMode,
        /// The endpoint's refusal, with secrets removed.
        reason: String,
    },
}

/// Errors a provider reports after its own retries are spent. Messages keep the provider's own
/// text, with secrets removed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The request could not be sent: the connection failed, was refused or timed out.
    #[error("cannot reach the model endpoint {url}: {message}")]
    Connect {
        /// The URL that was called.
        url: String,
        /// Why the connection failed.
        message: String,
    },
    /// The endpoint answered with an HTTP error status.
    #[error("the model endpoint answered HTTP {status}: {message}")]
    Http {
        /// The HTTP status code.
        status: u16,
        /// The endpoint's own error text.
        message: String,
    },
    /// The endpoint refused the request because it does not fit the model's context window
    /// (HTTP 400 or 413 in the server's own words). The engine ends the movement as
    /// context-exhausted rather than failing the run.
    #[error("the model endpoint answered HTTP {status}: {message}")]
    ContextOverflow {
        /// The HTTP status code (400 or 413).
        status: u16,
        /// The endpoint's own error text.
        message: String,
    },
    /// The answer's stream ended or failed before the answer was complete.
    #[error("the model's stream broke: {0}")]
    Stream(String),
    /// The endpoint answered with something that is not a chat completion (an HTML page, a
    /// body or stream chunk that is not JSON).
    #[error("the model sent an answer that cannot be read: {0}")]
    Protocol(String),
    /// The endpoint fell silent for longer than the idle timeout (waiting for the answer's
    /// headers, or for the next chunk of its stream).
    #[error("the model call timed out: {0}")]
    Timeout(String),
    /// The whole call, retries included, took longer than `llm.call_timeout_secs`: the answer
    /// kept coming but never ended.
    #[error(
        "the model call timed out: the answer was not complete after {secs} s \
         (llm.call_timeout_secs); the model may be stuck streaming without end"
    )]
    CallTimeout {
        /// The deadline that passed, in seconds.
        secs: u64,
    },
    /// The caller cancelled the call (the run was stopped).
    #[error("the model call was cancelled")]
    Cancelled,
    /// The answer grew past a configured bound (`limit` says which, e.g. "32 MiB on the wire
    /// (llm.max_answer_bytes)"); the call was ended rather than read on.
    #[error(
        "the model's answer exceeded {limit} and was cut off; the model may be stuck repeating \
         itself (raise the limit if answers this long are expected)"
    )]
    AnswerTooLarge {
        /// The bound that was passed and the configuration key that sets it.
        limit: String,
    },
}

impl LlmError {
    /// True for a failure of the endpoint rather than of the request or of the model's answer:
    /// the endpoint cannot be reached (`Connect`), fails (HTTP 5xx, 429, 408), breaks its stream
    /// (`Stream`), falls silent past the idle timeout (`Timeout`), or answers with something
    /// that is not a chat completion (`Protocol`: an HTML page, a body that is not JSON, a
    /// stream chunk that is not JSON). The client has already retried these; a later attempt,
    /// perhaps after the endpoint restarted or on another worker, may succeed, so a job is
    /// queued again for them. The other failures would recur on the same request: a 4xx
    /// refusal, a context overflow, an answer past its size bound or the call deadline (a model
    /// running away), a cancelled call.
    pub fn is_infrastructure(&self) -> bool {
        match self {
            LlmError::Connect { .. }
            | LlmError::Stream(_)
            | LlmError::Timeout(_)
            | LlmError::Protocol(_) => true,
            LlmError::Http { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            LlmError::ContextOverflow { .. }
            | LlmError::CallTimeout { .. }
            | LlmError::Cancelled
            | LlmError::AnswerTooLarge { .. } => false,
        }
    }
}

/// A chat model endpoint.
///
/// An implementation promises: it retries what is retryable (429, 5xx, connect errors, broken
/// and idle streams) before returning an error, reporting each retry through `on_event`; it
/// accumulates streamed tool-call deltas into whole [`ToolCall`]s; it fills `usage` from the
/// endpoint or with an estimate flagged `estimated`; and it never puts a secret into an error.
pub trait Provider: Send + Sync {
    /// Sends one model call and returns its assembled answer, reporting streamed text, retries
    /// and tool-mode changes through `on_event` as they happen.
    fn chat<'a>(
        &'a self,
        request: ChatRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>>;

    /// The model's context window in tokens, when the endpoint or config says.
    fn context_length<'a>(&'a self, model: &'a str) -> BoxFuture<'a, Option<u64>>;

    /// The model answered in plain text where the caller required a tool call. A provider that
    /// is still finding out how `model` takes tools ([`ToolMode::Auto`], nothing settled yet)
    /// settles on [`ToolMode::Json`] and returns true: the caller then sends the same request
    /// again. Otherwise (a fixed mode, or tool calls already seen) it returns false and the
    /// answer stands.
    fn switch_to_json_tools(&self, model: &str) -> bool {
        let _ = model;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_failures_are_infrastructure_and_refusals_are_not() {
        let http = |status| LlmError::Http {
            status,
            message: "m".into(),
        };
        let infrastructure = [
            LlmError::Connect {
                url: "http://127.0.0.1:9/v1/chat/completions".into(),
                message: "connection refused".into(),
            },
            LlmError::Stream("connection reset".into()),
            LlmError::Timeout("no data on the stream for 200 ms (idle_timeout)".into()),
            LlmError::Protocol("the answer is not JSON".into()),
            http(500),
            http(503),
            http(429),
            http(408),
        ];
        for error in &infrastructure {
            assert!(error.is_infrastructure(), "{error:?}");
        }
        let not = [
            http(400),
            http(401),
            http(404),
            LlmError::ContextOverflow {
                status: 400,
                message: "too long".into(),
            },
            LlmError::CallTimeout { secs: 1800 },
            LlmError::Cancelled,
            LlmError::AnswerTooLarge {
                limit: "32 MiB".into(),
            },
        ];
        for error in &not {
            assert!(!error.is_infrastructure(), "{error:?}");
        }
    }
}
