//! Reading a streamed answer: SSE `data:` chunks folded into one [`RawAnswer`], tool-call
//! deltas accumulated by their `index`, the idle timeout between chunks, and the check that the
//! stream really finished (`[DONE]` or a `finish_reason`) rather than broke off.

use std::collections::BTreeMap;
use std::time::Duration;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::StreamExt;
use maestro_protocol::ToolCall;
use serde_json::Value;

use super::answer::{RawAnswer, new_call_id};
use super::retry::{Failure, describe};
use super::wire::parse_usage;
use crate::LlmError;

/// Folds stream chunks into an answer.
#[derive(Debug, Default)]
pub(crate) struct Accumulator {
    content: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<maestro_protocol::Usage>,
    finish_reason: Option<String>,
    /// The `model` the chunks named (the last one that named it).
    model: Option<String>,
    done: bool,
    /// Text and argument pieces received: the streamed token count.
    pieces: u64,
}

/// The parts of a stream chunk the answer is made of. Read field by field, borrowing the text
/// where it has no escapes; only the rare parts (`error`, `usage`, tool-call deltas) become JSON
/// trees.
#[derive(Debug, serde::Deserialize)]
struct Chunk<'a> {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default, borrow)]
    model: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
}

#[derive(Debug, serde::Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    finish_reason: Option<Value>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Debug, serde::Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Value>,
}

impl<'a> Chunk<'a> {
    /// Reads `data`. A chunk of an unexpected shape (`choices` not a list, `content` not text)
    /// is read again as a JSON tree, and what is not where an answer has it is ignored, as
    /// before; only a chunk that is not JSON at all is an error.
    fn read(data: &'a str) -> Result<Chunk<'a>, LlmError> {
        if let Ok(chunk) = serde_json::from_str::<Chunk<'a>>(data) {
            return Ok(chunk);
        }
        let mut value: Value = serde_json::from_str(data).map_err(|e| {
            LlmError::Protocol(format!(
                "a stream chunk is not JSON ({e}): {}",
                super::retry::shorten(data, 300)
            ))
        })?;
        let choice = value.pointer_mut("/choices/0").map(Value::take);
        Ok(Chunk {
            error: value.get_mut("error").map(Value::take),
            usage: value.get_mut("usage").map(Value::take),
            model: value
                .get("model")
                .and_then(Value::as_str)
                .map(|m| std::borrow::Cow::Owned(m.to_string())),
            choices: choice.map(|mut choice| {
                vec![Choice {
                    finish_reason: choice.get_mut("finish_reason").map(Value::take),
                    delta: choice.get_mut("delta").map(|delta| Delta {
                        content: delta
                            .get("content")
                            .and_then(Value::as_str)
                            .map(|s| std::borrow::Cow::Owned(s.to_string())),
                        tool_calls: delta.get_mut("tool_calls").map(Value::take),
                    }),
                }]
            }),
        })
    }
}

/// How large one answer may grow before the call is ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Bytes on the wire (the response body).
    pub bytes: usize,
    /// Streamed text and argument pieces.
    pub tokens: u64,
}

impl Limits {
    pub(crate) fn too_many_bytes(&self) -> LlmError {
        LlmError::AnswerTooLarge {
            limit: format!("{} bytes (llm.max_answer_bytes)", self.bytes),
        }
    }

    fn too_many_tokens(&self) -> LlmError {
        LlmError::AnswerTooLarge {
            limit: format!("{} tokens (llm.max_answer_tokens)", self.tokens),
        }
    }
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl Accumulator {
    /// Applies one `data:` payload and returns the text it added, if any. An `error` payload
    /// (some servers report failures mid-stream that way) becomes an error.
    pub(crate) fn apply(&mut self, data: &str) -> Result<Option<String>, LlmError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(None);
        }
        let chunk = Chunk::read(data)?;
        if let Some(error) = chunk.error {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string);
            return Err(LlmError::Stream(
                message.unwrap_or_else(|| error.to_string()),
            ));
        }
        if let Some(usage) = chunk.usage.as_ref().and_then(parse_usage) {
            self.usage = Some(usage);
        }
        if self.model.is_none() {
            self.model = chunk.model.filter(|m| !m.is_empty()).map(String::from);
        }
        let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) else {
            return Ok(None);
        };
        if let Some(reason) = choice.finish_reason.as_ref().and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        let Some(delta) = choice.delta else {
            return Ok(None);
        };
        for call in delta
            .tool_calls
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.apply_tool_delta(call);
        }
        match delta.content {
            Some(text) if !text.is_empty() => {
                self.pieces += 1;
                self.content.push_str(&text);
                Ok(Some(text.into_owned()))
            }
            _ => Ok(None),
        }
    }

    fn apply_tool_delta(&mut self, call: &Value) {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let index = match call.get("index").and_then(Value::as_u64) {
            Some(index) => index,
            // Servers that omit `index` send one call after another: a new id starts a new call.
            None => match id {
                Some(id) if !self.calls.values().any(|c| c.id.as_deref() == Some(id)) => {
                    self.calls.len() as u64
                }
                _ => self.calls.keys().next_back().copied().unwrap_or(0),
            },
        };
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = id {
            entry.id = Some(id.to_string());
        }
        let function = call.get("function");
        if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
            // Some servers repeat the whole name in every delta; others split it.
            if entry.name != name {
                entry.name.push_str(name);
            }
        }
        match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(part)) => {
                entry.arguments.push_str(part);
                self.pieces += 1;
            }
            Some(other) if !other.is_null() => {
                entry.arguments.push_str(&other.to_string());
                self.pieces += 1;
            }
            _ => {}
        }
    }

    /// Whether the endpoint said it had finished (`[DONE]` or a `finish_reason`).
    pub(crate) fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    pub(crate) fn finish(self) -> RawAnswer {
        RawAnswer {
            content: self.content,
            tool_calls: self
                .calls
                .into_values()
                .map(|c| ToolCall {
                    id: c.id.unwrap_or_else(new_call_id),
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            usage: self.usage,
            finish_reason: self.finish_reason,
            model: self.model,
        }
    }
}

/// The response body, ended with [`BodyError::TooLarge`] once it passes `limit` bytes (before
/// the SSE parser buffers it: an event that never ends must not grow memory either).
fn bounded_body(
    response: reqwest::Response,
    limit: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, BodyError>> {
    let mut seen = 0usize;
    response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| BodyError::Transport(describe(&e)))?;
        seen = seen.saturating_add(chunk.len());
        if seen > limit {
            return Err(BodyError::TooLarge);
        }
        Ok(chunk)
    })
}

/// Reads a plain (not SSE) response body as text: at most `limits.bytes`, with no gap longer
/// than `idle` between its pieces.
pub(crate) async fn read_body(
    response: reqwest::Response,
    idle: Duration,
    limits: Limits,
) -> Result<String, Failure> {
    let retry = |error| Failure::Retryable {
        error,
        retry_after: None,
    };
    let mut body = std::pin::pin!(bounded_body(response, limits.bytes));
    let mut bytes = Vec::new();
    loop {
        match tokio::time::timeout(idle, body.next()).await {
            Err(_) => {
                return Err(retry(LlmError::Timeout(format!(
                    "the answer did not arrive within {} ms (idle_timeout)",
                    idle.as_millis()
                ))));
            }
            Ok(None) => break,
            Ok(Some(Err(BodyError::TooLarge))) => {
                return Err(Failure::Final(limits.too_many_bytes()));
            }
            Ok(Some(Err(BodyError::Transport(e)))) => return Err(retry(LlmError::Stream(e))),
            Ok(Some(Ok(chunk))) => bytes.extend_from_slice(&chunk),
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("{0}")]
    Transport(String),
    #[error("the answer is too large")]
    TooLarge,
}

/// How long a stream that said it is done may take to end.
const DRAIN_AFTER_DONE: Duration = Duration::from_millis(20);

/// Reads an SSE response to its end. Every gap longer than `idle` between chunks, a transport
/// error, a chunk that cannot be read, or an end before `[DONE]`/`finish_reason` is a retryable
/// failure; an answer past `limits` is a final one.
pub(crate) async fn read(
    response: reqwest::Response,
    idle: Duration,
    limits: Limits,
    on_text: &(dyn Fn(&str) + Send + Sync),
) -> Result<RawAnswer, Failure> {
    read_with(response, idle, limits, Accumulator::default(), on_text).await
}

/// How the events of one stream are folded into an answer: the Chat Completions chunks
/// ([`Accumulator`]), or another API's events translated into them.
pub(crate) trait Fold {
    /// Applies one event's `data:` payload and returns the text it added, if any. An event that
    /// cannot be read, or that reports a failure, is an error sorted into retryable or final.
    fn apply_event(&mut self, data: &str) -> Result<Option<String>, Failure>;
    /// The text and argument pieces received so far: the streamed token count.
    fn pieces(&self) -> u64;
    /// The stream said it is over: nothing further is read.
    fn done(&self) -> bool;
    /// The answer is whole; a stream that ends before this broke off.
    fn is_complete(&self) -> bool;
    /// What a stream that ended before [`Fold::is_complete`] lacked, for the error.
    fn incomplete(&self) -> &'static str;
    /// The answer.
    fn finish(self) -> RawAnswer;
}

impl Fold for Accumulator {
    fn apply_event(&mut self, data: &str) -> Result<Option<String>, Failure> {
        // An unreadable chunk is a broken stream, retried like one.
        self.apply(data).map_err(|error| Failure::Retryable {
            error,
            retry_after: None,
        })
    }

    fn pieces(&self) -> u64 {
        self.pieces
    }

    fn done(&self) -> bool {
        self.done
    }

    fn is_complete(&self) -> bool {
        Accumulator::is_complete(self)
    }

    fn incomplete(&self) -> &'static str {
        "the stream ended before [DONE] or a finish_reason"
    }

    fn finish(self) -> RawAnswer {
        Accumulator::finish(self)
    }
}

/// [`read`] with the stream's events folded by `acc`.
pub(crate) async fn read_with<F: Fold>(
    response: reqwest::Response,
    idle: Duration,
    limits: Limits,
    mut acc: F,
    on_text: &(dyn Fn(&str) + Send + Sync),
) -> Result<RawAnswer, Failure> {
    let retry = |error| Failure::Retryable {
        error,
        retry_after: None,
    };
    let mut events = bounded_body(response, limits.bytes).eventsource();
    loop {
        let next = match tokio::time::timeout(idle, events.next()).await {
            Err(_) => {
                return Err(retry(LlmError::Timeout(format!(
                    "no data on the stream for {} ms (idle_timeout)",
                    idle.as_millis()
                ))));
            }
            Ok(next) => next,
        };
        let event = match next {
            None => break,
            Some(Err(EventStreamError::Transport(BodyError::TooLarge))) => {
                return Err(Failure::Final(limits.too_many_bytes()));
            }
            Some(Err(e)) => return Err(retry(LlmError::Stream(describe(&e)))),
            Some(Ok(event)) => event,
        };
        if event.data.trim().is_empty() {
            continue;
        }
        if let Some(text) = acc.apply_event(&event.data)? {
            on_text(&text);
        }
        if acc.pieces() > limits.tokens {
            return Err(Failure::Final(limits.too_many_tokens()));
        }
        if acc.done() {
            // Read on to the body's end, which follows at once: only a response read to its
            // end gives its connection back to the pool, and otherwise the next call opens a
            // new one. An endpoint that keeps the stream open after saying it is done is let
            // go after a moment.
            let _ = tokio::time::timeout(DRAIN_AFTER_DONE, async {
                while let Some(Ok(_)) = events.next().await {}
            })
            .await;
            break;
        }
    }
    if !acc.is_complete() {
        return Err(retry(LlmError::Stream(acc.incomplete().to_string())));
    }
    Ok(acc.finish())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn interleaved_tool_call_deltas_are_joined_by_index() {
        let mut acc = Accumulator::default();
        let chunks = [
            r#"{"model":"served-model-7","choices":[{"delta":{"role":"assistant","content":"Let me "}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"Read","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"Grep","arguments":"{\"pat"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"tern\":\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.rs\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}"#,
            "[DONE]",
        ];
        for chunk in chunks {
            acc.apply(chunk).unwrap();
        }
        let answer = acc.finish();
        assert_eq!(answer.model.as_deref(), Some("served-model-7"));
        assert_eq!(answer.content, "Let me ");
        assert_eq!(
            answer.tool_calls,
            vec![
                ToolCall {
                    id: "a".into(),
                    name: "Read".into(),
                    arguments: r#"{"path":"a.rs"}"#.into()
                },
                ToolCall {
                    id: "b".into(),
                    name: "Grep".into(),
                    arguments: r#"{"pattern":"x"}"#.into()
                },
            ]
        );
        assert_eq!(answer.usage.map(|u| u.total_tokens), Some(11));
    }

    #[test]
    fn an_error_chunk_is_a_stream_error() {
        let mut acc = Accumulator::default();
        assert_eq!(
            acc.apply(r#"{"error":{"message":"model crashed"}}"#),
            Err(LlmError::Stream("model crashed".into()))
        );
    }

    #[test]
    fn chunks_of_odd_shapes_add_what_is_where_an_answer_has_it() {
        let mut acc = Accumulator::default();
        // Escaped text, then content that is not text, then choices that are not a list, then
        // a finishing chunk whose content is a list: the text parts are kept, the rest ignored.
        let chunks = [
            r#"{"choices":[{"delta":{"content":"a \"quoted\"\nline"}}]}"#,
            r#"{"choices":[{"delta":{"content":42}}]}"#,
            r#"{"choices":"none","usage":null}"#,
            r#"{"choices":[{"delta":{"content":[1]},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        ];
        let added: Vec<Option<String>> = chunks.iter().map(|c| acc.apply(c).unwrap()).collect();
        assert_eq!(
            added,
            vec![Some("a \"quoted\"\nline".into()), None, None, None]
        );
        assert!(acc.is_complete());
        let answer = acc.finish();
        assert_eq!(answer.content, "a \"quoted\"\nline");
        assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
        assert_eq!(answer.usage.map(|u| u.total_tokens), Some(5));
        let mut acc = Accumulator::default();
        assert!(matches!(acc.apply("{oops"), Err(LlmError::Protocol(m)) if m.contains("not JSON")));
    }
}
