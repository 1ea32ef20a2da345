//! The Chat Completions wire format: turning a [`ChatRequest`] into a request body, reading a
//! non-streamed answer, and estimating usage when the endpoint reports none.

use maestro_protocol::{ToolCall, Usage};
use serde_json::{Value, json};

use crate::{ChatRequest, LlmError, Message};

use super::answer::{RawAnswer, new_call_id};
use super::json_mode;

/// How the tools (if any) of one request travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// No tools and no schema: a plain chat call.
    Plain,
    /// The `tools` parameter.
    NativeTools,
    /// Tools described in the system prompt, answer constrained by a JSON schema.
    JsonTools,
    /// `response_format: json_schema` from [`ChatRequest::response_schema`]; tools not offered.
    Schema,
}

/// Switches that change per attempt: the endpoint may have refused streaming or `stream_options`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transport {
    pub stream: bool,
    pub stream_options: bool,
}

pub(crate) fn body(request: &ChatRequest, shape: Shape, transport: Transport) -> Value {
    let messages = match shape {
        Shape::JsonTools => json_mode::messages(&request.messages, &request.tools),
        Shape::Plain | Shape::NativeTools | Shape::Schema => native_messages(&request.messages),
    };
    let mut body = json!({ "model": request.model, "messages": messages });
    let map = match body.as_object_mut() {
        Some(map) => map,
        None => return body,
    };
    match shape {
        Shape::Plain => {}
        Shape::NativeTools => {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.input_schema }})
                })
                .collect();
            map.insert("tools".into(), Value::Array(tools));
        }
        Shape::JsonTools => {
            map.insert(
                "response_format".into(),
                json_mode::response_format(&request.tools),
            );
        }
        Shape::Schema => {
            if let Some(schema) = &request.response_schema {
                map.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": {
                        "name": schema.name, "strict": true, "schema": schema.schema }}),
                );
            }
        }
    }
    if let Some(t) = request.temperature {
        map.insert("temperature".into(), json!(t));
    }
    if let Some(n) = request.max_tokens {
        map.insert("max_tokens".into(), json!(n));
    }
    map.insert("stream".into(), json!(transport.stream));
    if transport.stream && transport.stream_options {
        map.insert("stream_options".into(), json!({"include_usage": true}));
    }
    body
}

fn native_messages(messages: &[Message]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| match m {
            Message::System { content } => json!({"role": "system", "content": content}),
            Message::User { content } => json!({"role": "user", "content": content}),
            Message::Assistant {
                content,
                tool_calls,
            } if tool_calls.is_empty() => {
                json!({"role": "assistant", "content": content})
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect();
                let content = if content.is_empty() {
                    Value::Null
                } else {
                    json!(content)
                };
                json!({"role": "assistant", "content": content, "tool_calls": calls})
            }
            Message::Tool {
                tool_call_id,
                content,
            } => {
                json!({"role": "tool", "tool_call_id": tool_call_id, "content": content})
            }
        })
        .collect()
}

/// Reads a non-streamed `chat.completion` object.
pub(crate) fn parse_completion(body: &str) -> Result<RawAnswer, LlmError> {
    let value: Value = serde_json::from_str(body).map_err(|e| {
        LlmError::Protocol(format!(
            "the answer is not JSON ({e}): {}",
            super::retry::shorten(body, 300)
        ))
    })?;
    let choice = value.pointer("/choices/0").ok_or_else(|| {
        LlmError::Protocol(format!(
            "the answer has no choices: {}",
            super::retry::shorten(body, 300)
        ))
    })?;
    let message = choice.get("message").cloned().unwrap_or(Value::Null);
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut tool_calls = Vec::new();
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function").cloned().unwrap_or(Value::Null);
        let arguments = match function.get("arguments") {
            Some(Value::String(s)) => s.clone(),
            Some(other) if !other.is_null() => other.to_string(),
            _ => String::new(),
        };
        tool_calls.push(ToolCall {
            id: call
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(new_call_id),
            name: function
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            arguments,
        });
    }
    Ok(RawAnswer {
        content,
        tool_calls,
        usage: value.get("usage").and_then(parse_usage),
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

pub(crate) fn parse_usage(value: &Value) -> Option<Usage> {
    let prompt = value.get("prompt_tokens")?.as_u64()?;
    let completion = value
        .get("completion_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let total = value
        .get("total_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(prompt + completion);
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total,
        estimated: false,
    })
}

/// About four characters per token: good enough for context budgeting when the endpoint is mute.
/// The length of `value` as JSON text, counted without building the text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

pub(crate) fn estimate_usage(sent: &Value, answer: &RawAnswer) -> Usage {
    let prompt_chars = sent.get("messages").map(json_len).unwrap_or(0)
        + sent.get("tools").map(json_len).unwrap_or(0);
    let completion_chars = answer.content.len()
        + answer
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>();
    let prompt = prompt_chars.div_ceil(4) as u64;
    let completion = completion_chars.div_ceil(4) as u64;
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        estimated: true,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn json_len_is_the_length_of_the_text() {
        let value = serde_json::json!({"messages": [{"role": "user", "content": "é \"quoted\"\n"}], "n": 1.5});
        assert_eq!(json_len(&value), value.to_string().len());
        assert_eq!(json_len(&Value::Null), 4);
    }

    #[test]
    fn assistant_tool_calls_and_tool_results_use_native_roles() {
        let messages = vec![
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "Read".into(),
                    arguments: "{}".into(),
                }],
            },
            Message::Tool {
                tool_call_id: "c1".into(),
                content: "data".into(),
            },
        ];
        assert_eq!(
            Value::Array(native_messages(&messages)),
            json!([
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "data"}
            ])
        );
    }

    #[test]
    fn completion_parses_tool_calls_and_usage() {
        let body = r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
            {"id":"a","type":"function","function":{"name":"Grep","arguments":"{\"q\":1}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#;
        assert_eq!(
            parse_completion(body).unwrap(),
            RawAnswer {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "a".into(),
                    name: "Grep".into(),
                    arguments: r#"{"q":1}"#.into()
                }],
                usage: Some(Usage {
                    prompt_tokens: 7,
                    completion_tokens: 3,
                    total_tokens: 10,
                    estimated: false
                }),
                finish_reason: Some("tool_calls".into()),
            }
        );
    }
}
