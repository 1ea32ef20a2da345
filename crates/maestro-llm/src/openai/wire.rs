//! The Chat Completions wire format: turning a [`ChatRequest`] into a request body, reading a
//! non-streamed answer, and estimating usage when the endpoint reports none.

use maestro_protocol::{ToolCall, Usage};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::{ChatRequest, LlmError, Message};

use super::answer::{RawAnswer, new_call_id};
use super::json_mode;
use super::schema_text::schema_text;

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

/// One request body, serialised once (a retry sends the same bytes again).
#[derive(Debug, Clone)]
pub(crate) struct Body {
    pub bytes: bytes::Bytes,
    /// The length of the `messages` and `tools` JSON: what a usage estimate counts.
    pub prompt_chars: usize,
}

/// The request body for `request`, written straight from it as JSON text, without building a
/// `serde_json::Value` tree first (a request is written once a model call, and the tree, with
/// every tool schema copied into it, cost more than the text). The keys come in this order:
/// `model`, `messages`, then `tools` or `response_format`, `temperature`, `max_tokens`,
/// `stream`, `stream_options`.
pub(crate) fn body(
    request: &ChatRequest,
    shape: Shape,
    transport: Transport,
) -> Result<Body, LlmError> {
    let mut out = Vec::with_capacity(1024);
    field(&mut out, "model", &request.model)?;
    let mut prompt_chars = match shape {
        Shape::JsonTools => field(
            &mut out,
            "messages",
            &json_mode::messages(&request.messages, &request.tools),
        )?,
        Shape::Plain | Shape::NativeTools | Shape::Schema => {
            let messages: Vec<WireMessage<'_>> =
                request.messages.iter().map(WireMessage::from).collect();
            field(&mut out, "messages", &messages)? - data_url_chars(&request.messages)
                + image_chars(&request.messages)
        }
    };
    match shape {
        Shape::Plain => {}
        Shape::NativeTools => {
            let schemas = request
                .tools
                .iter()
                .map(|t| schema_text(&t.input_schema))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| {
                    LlmError::Protocol(format!(
                        "the request's `tools` cannot be written as JSON: {e}"
                    ))
                })?;
            let tools: Vec<WireTool<'_>> = request
                .tools
                .iter()
                .zip(&schemas)
                .map(|(t, schema)| WireTool {
                    kind: "function",
                    function: WireFunction {
                        name: &t.name,
                        description: &t.description,
                        parameters: schema,
                    },
                })
                .collect();
            prompt_chars += field(&mut out, "tools", &tools)?;
        }
        Shape::JsonTools => {
            field(
                &mut out,
                "response_format",
                &json_mode::response_format(&request.tools),
            )?;
        }
        Shape::Schema => {
            if let Some(schema) = &request.response_schema {
                let format = json!({"type": "json_schema", "json_schema": {
                    "name": schema.name, "strict": true, "schema": schema.schema }});
                field(&mut out, "response_format", &format)?;
            }
        }
    }
    if let Some(t) = request.temperature {
        field(&mut out, "temperature", &f64::from(t))?;
    }
    if let Some(n) = request.max_tokens {
        field(&mut out, "max_tokens", &n)?;
    }
    field(&mut out, "stream", &transport.stream)?;
    if transport.stream && transport.stream_options {
        field(
            &mut out,
            "stream_options",
            &StreamOptions {
                include_usage: true,
            },
        )?;
    }
    out.push(b'}');
    Ok(Body {
        bytes: out.into(),
        prompt_chars,
    })
}

/// The length of the `data:` URLs of the images in `messages`: text on the wire that a usage
/// estimate does not count as text.
fn data_url_chars(messages: &[Message]) -> usize {
    images(messages)
        .map(|image| {
            "data:;base64,".len() + image.media_type.len() + image.data.len().div_ceil(3) * 4
        })
        .sum()
}

/// What the images in `messages` count as in a usage estimate (four characters a token; see
/// [`crate::estimated_image_tokens`]).
fn image_chars(messages: &[Message]) -> usize {
    images(messages)
        .map(|image| crate::estimated_image_tokens(image.width, image.height) as usize * 4)
        .sum()
}

fn images(messages: &[Message]) -> impl Iterator<Item = &crate::ImagePart> {
    messages.iter().flat_map(|m| match m {
        Message::User { images, .. } => images.as_slice(),
        _ => &[],
    })
}

/// Appends `"key":value` to the object being written in `out` (opening it, or after a comma),
/// and returns the length of the value's text.
fn field(out: &mut Vec<u8>, key: &str, value: &impl serde::Serialize) -> Result<usize, LlmError> {
    out.push(if out.is_empty() { b'{' } else { b',' });
    out.push(b'"');
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
    let start = out.len();
    serde_json::to_writer(&mut *out, value).map_err(|e| {
        LlmError::Protocol(format!(
            "the request's `{key}` cannot be written as JSON: {e}"
        ))
    })?;
    Ok(out.len() - start)
}

#[derive(serde::Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// A message as the Chat Completions API takes it; fields are written in this order, and the
/// `None`s of `tool_call_id` and `tool_calls` are left out.
#[derive(serde::Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    /// `null` for an assistant message that only calls tools; a list of parts for a user
    /// message with images.
    content: Option<WireContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<WireCall<'a>>>,
}

/// A message's content: a plain string, or text and image parts.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart<'a>>),
}

#[derive(serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: WireImageUrl },
}

#[derive(serde::Serialize)]
struct WireImageUrl {
    url: String,
}

#[derive(serde::Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireCallFunction<'a>,
}

#[derive(serde::Serialize)]
struct WireCallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(serde::Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(serde::Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    /// The tool's input schema, as text written once per schema ([`schema_text`]).
    parameters: &'a RawValue,
}

impl<'a> From<&'a Message> for WireMessage<'a> {
    fn from(message: &'a Message) -> Self {
        let plain = |role, content: &'a String| WireMessage {
            role,
            tool_call_id: None,
            content: Some(WireContent::Text(content)),
            tool_calls: None,
        };
        match message {
            Message::System { content } => plain("system", content),
            Message::User { content, images } if images.is_empty() => plain("user", content),
            Message::User { content, images } => {
                let mut parts = Vec::with_capacity(images.len() + 1);
                if !content.is_empty() {
                    parts.push(WirePart::Text { text: content });
                }
                parts.extend(images.iter().map(|image| WirePart::ImageUrl {
                    image_url: WireImageUrl {
                        url: image.data_url(),
                    },
                }));
                WireMessage {
                    role: "user",
                    tool_call_id: None,
                    content: Some(WireContent::Parts(parts)),
                    tool_calls: None,
                }
            }
            Message::Assistant {
                content,
                tool_calls,
            } if tool_calls.is_empty() => plain("assistant", content),
            Message::Assistant {
                content,
                tool_calls,
            } => WireMessage {
                role: "assistant",
                tool_call_id: None,
                content: (!content.is_empty()).then_some(WireContent::Text(content)),
                tool_calls: Some(
                    tool_calls
                        .iter()
                        .map(|c| WireCall {
                            id: &c.id,
                            kind: "function",
                            function: WireCallFunction {
                                name: &c.name,
                                arguments: &c.arguments,
                            },
                        })
                        .collect(),
                ),
            },
            Message::Tool {
                tool_call_id,
                content,
            } => WireMessage {
                role: "tool",
                tool_call_id: Some(tool_call_id),
                content: Some(WireContent::Text(content)),
                tool_calls: None,
            },
        }
    }
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
        model: value
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
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
    let cached = value
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        .min(prompt);
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total,
        cached_prompt_tokens: cached,
        estimated: false,
    })
}

/// About four characters per token: good enough for context budgeting when the endpoint is mute.
/// `prompt_chars` is the length of the request's `messages` and `tools` JSON.
pub(crate) fn estimate_usage(prompt_chars: usize, answer: &RawAnswer) -> Usage {
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
        cached_prompt_tokens: 0,
        estimated: true,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use maestro_protocol::ToolSpec;

    fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages,
            tools: tools.into(),
            temperature: Some(0.2),
            max_tokens: Some(64),
            ..ChatRequest::default()
        }
    }

    const STREAM: Transport = Transport {
        stream: true,
        stream_options: true,
    };

    #[test]
    fn assistant_tool_calls_and_tool_results_use_native_roles() {
        let messages = vec![
            Message::System {
                content: "sys".into(),
            },
            Message::user("é \"quoted\"\n"),
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
            Message::Assistant {
                content: "done".into(),
                tool_calls: vec![],
            },
        ];
        let body = body(&request(messages, vec![]), Shape::Plain, STREAM).unwrap();
        let text = std::str::from_utf8(&body.bytes).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"model":"m","messages":[{"role":"system","content":"sys"},"#,
                r#"{"role":"user","content":"é \"quoted\"\n"},"#,
                r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"Read","arguments":"{}"}}]},"#,
                r#"{"role":"tool","tool_call_id":"c1","content":"data"},"#,
                r#"{"role":"assistant","content":"done"}],"#,
                r#""temperature":0.20000000298023224,"max_tokens":64,"stream":true,"stream_options":{"include_usage":true}}"#
            )
        );
        let messages_json =
            &text[text.find('[').unwrap()..text.find("],\"temperature").unwrap() + 1];
        assert_eq!(body.prompt_chars, messages_json.len());
    }

    #[test]
    fn native_tools_carry_their_schemas_and_count_as_prompt() {
        let tool = ToolSpec {
            name: "Read".into(),
            description: "Reads a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}})
                .into(),
        };
        let ask = vec![Message::user("hi")];
        let plain = body(&request(ask.clone(), vec![]), Shape::Plain, STREAM).unwrap();
        let sent = body(
            &request(ask, vec![tool]),
            Shape::NativeTools,
            Transport {
                stream: false,
                stream_options: false,
            },
        )
        .unwrap();
        let value: Value = serde_json::from_slice(&sent.bytes).unwrap();
        let tools = json!([{"type": "function", "function": {"name": "Read", "description": "Reads a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]);
        assert_eq!(value["tools"], tools);
        assert_eq!(value["stream"], json!(false));
        assert_eq!(value.get("stream_options"), None);
        assert_eq!(
            sent.prompt_chars,
            plain.prompt_chars + tools.to_string().len()
        );
    }

    #[test]
    fn completion_parses_tool_calls_and_usage() {
        let body = r#"{"model":"served-model-7","choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
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
                    cached_prompt_tokens: 0,
                    estimated: false
                }),
                finish_reason: Some("tool_calls".into()),
                model: Some("served-model-7".into()),
            }
        );
    }
}
