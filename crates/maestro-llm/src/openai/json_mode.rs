//! JSON tool mode, for models without native tool calling: tools are described in the system
//! prompt, the answer is constrained (`response_format: json_schema`) to one object
//! `{"tool": NAME, "arguments": {…}}` or `{"tool": "answer", "content": "…"}`, and that object
//! is read back into the same [`ToolCall`] a native answer would give. Tool results travel as
//! user messages, since such models often reject the `tool` role.

mod inline;

use maestro_protocol::{ToolCall, ToolSpec};
use serde_json::{Map, Value, json};

use super::answer::{RawAnswer, new_call_id};
use crate::Message;

/// The `tool` value that marks a plain answer; `final_answer` when a real tool is called `answer`.
fn answer_name(tools: &[ToolSpec]) -> &'static str {
    if tools.iter().any(|t| t.name == "answer") {
        "final_answer"
    } else {
        "answer"
    }
}

/// The `response_format` of a JSON-tool-mode request.
///
/// The schema's root is an `anyOf` with one branch per tool and one for the answer; llama.cpp's
/// grammar conversion accepts it (and `const` for the tool names), which is what constrains a
/// small model's decoding.
pub(crate) fn response_format(tools: &[ToolSpec]) -> Value {
    json!({"type": "json_schema", "json_schema": {
        "name": "tool_call_or_answer", "strict": true, "schema": schema(tools) }})
}

pub(crate) fn schema(tools: &[ToolSpec]) -> Value {
    let mut branches: Vec<Value> = tools
        .iter()
        .map(|tool| {
            json!({"type": "object",
                   "properties": {"tool": {"const": tool.name}, "arguments": arguments_schema(&tool.input_schema)},
                   "required": ["tool", "arguments"], "additionalProperties": false})
        })
        .collect();
    branches.push(json!({"type": "object",
        "properties": {"tool": {"const": answer_name(tools)}, "content": {"type": "string"}},
        "required": ["tool", "content"], "additionalProperties": false}));
    json!({"anyOf": branches})
}

/// A tool's input schema as a nested subschema: self-contained (local `$ref`s inlined, no
/// `$schema` or `$defs`, see [`inline`]), and no properties beyond the declared ones unless the
/// tool says otherwise (an open object lets a small model ramble).
fn arguments_schema(input: &Value) -> Value {
    let mut schema = inline::inline_refs(input);
    if let Some(map) = schema.as_object_mut()
        && map.contains_key("properties")
        && !map.contains_key("additionalProperties")
    {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    schema
}

fn addendum(tools: &[ToolSpec]) -> String {
    let mut text = format!(
        "## Tools\nAnswer with exactly one JSON object and nothing else.\n\
         - To call a tool: {{\"tool\": \"<tool name>\", \"arguments\": {{...}}}}\n\
         - To give your answer: {{\"tool\": \"{}\", \"content\": \"<your answer>\"}}\n\
         Call one tool per answer; its result comes back in the next message.\n\nAvailable tools:\n",
        answer_name(tools)
    );
    for tool in tools {
        text.push_str(&format!(
            "- {}: {}\n  arguments schema: {}\n",
            tool.name,
            tool.description,
            arguments_schema(&tool.input_schema)
        ));
    }
    text
}

/// The conversation as sent in JSON tool mode: the tool list added to the system prompt, earlier
/// tool calls shown as the JSON the model would write, tool results as user messages, and
/// neighbouring messages of the same role merged (many chat templates demand alternation).
pub(crate) fn messages(messages: &[Message], tools: &[ToolSpec]) -> Vec<Value> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut names: Vec<(&str, &str)> = Vec::new();
    // Images by the index their message would take in `out` (before merging).
    let mut shown: Vec<(usize, &crate::ImagePart)> = Vec::new();
    for message in messages {
        let (role, content) = match message {
            Message::System { content } => ("system", content.clone()),
            Message::User { content, images } => {
                shown.extend(images.iter().map(|image| (out.len(), image)));
                ("user", content.clone())
            }
            Message::Assistant {
                content,
                tool_calls,
            } if tool_calls.is_empty() => ("assistant", content.clone()),
            Message::Assistant { tool_calls, .. } => {
                names.extend(tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str())));
                let calls: Vec<String> = tool_calls
                    .iter()
                    .map(|c| {
                        let arguments = serde_json::from_str::<Value>(&c.arguments)
                            .unwrap_or_else(|_| Value::String(c.arguments.clone()));
                        json!({"tool": c.name, "arguments": arguments}).to_string()
                    })
                    .collect();
                ("assistant", calls.join("\n"))
            }
            Message::Tool {
                tool_call_id,
                content,
            } => {
                let name = names
                    .iter()
                    .find(|(id, _)| id == tool_call_id)
                    .map(|(_, n)| *n)
                    .unwrap_or("tool");
                ("user", format!("Result of the `{name}` call:\n{content}"))
            }
        };
        let next = out.len();
        match out.last_mut() {
            Some((last_role, last)) if *last_role == role => {
                for image in shown.iter_mut().filter(|(at, _)| *at == next) {
                    image.0 = next - 1;
                }
                last.push_str("\n\n");
                last.push_str(&content);
            }
            _ => out.push((role, content)),
        }
    }
    let addendum = addendum(tools);
    match out.iter_mut().find(|(role, _)| *role == "system") {
        Some((_, system)) => {
            system.push_str("\n\n");
            system.push_str(&addendum);
        }
        None => out.insert(0, ("system", addendum)),
    }
    let system_added = usize::from(!out.iter().any(|(role, _)| *role == "system"));
    out.into_iter()
        .enumerate()
        .map(|(i, (role, content))| {
            let images: Vec<Value> = shown
                .iter()
                .filter(|(at, _)| at + system_added == i)
                .map(|(_, image)| json!({"type": "image_url", "image_url": {"url": image.data_url()}}))
                .collect();
            if images.is_empty() {
                return json!({"role": role, "content": content});
            }
            let mut parts = vec![json!({"type": "text", "text": content})];
            parts.extend(images);
            json!({"role": role, "content": parts})
        })
        .collect()
}

/// Reads a JSON-mode answer into a tool call or a plain answer. Anything unreadable is left as
/// it is (the raw text as `content`), so the engine can show the model what went wrong.
pub(crate) fn interpret(raw: RawAnswer, tools: &[ToolSpec]) -> RawAnswer {
    if !raw.tool_calls.is_empty() {
        return raw;
    }
    let Some(Value::Object(object)) = extract_json(&raw.content) else {
        return raw;
    };
    match object.get("tool").and_then(Value::as_str) {
        Some(name) if name == answer_name(tools) => match object.get("content") {
            Some(Value::String(text)) => RawAnswer {
                content: text.clone(),
                ..raw
            },
            _ => raw,
        },
        Some(name) => match tool_call(name, &object) {
            Some(call) => RawAnswer {
                content: String::new(),
                tool_calls: vec![call],
                finish_reason: Some("tool_calls".to_string()),
                ..raw
            },
            None => raw,
        },
        None => raw,
    }
}

fn tool_call(name: &str, object: &Map<String, Value>) -> Option<ToolCall> {
    let arguments = match object.get("arguments")? {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    Some(ToolCall {
        id: new_call_id(),
        name: name.to_string(),
        arguments,
    })
}

/// The JSON object in an answer, tolerating code fences and text around it.
fn extract_json(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str(trimmed) {
        return Some(value);
    }
    let start = trimmed.find('{')?;
    let end = trimmed.rfind('}')?;
    serde_json::from_str(trimmed.get(start..=end)?).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn read_tool() -> ToolSpec {
        ToolSpec {
            name: "Read".into(),
            description: "Reads a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}).into(),
        }
    }

    #[test]
    fn schema_has_one_branch_per_tool_and_one_for_the_answer() {
        assert_eq!(
            schema(&[read_tool()]),
            json!({"anyOf": [
                {"type": "object", "properties": {"tool": {"const": "Read"}, "arguments": {
                    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
                    "additionalProperties": false}},
                 "required": ["tool", "arguments"], "additionalProperties": false},
                {"type": "object", "properties": {"tool": {"const": "answer"}, "content": {"type": "string"}},
                 "required": ["tool", "content"], "additionalProperties": false}
            ]})
        );
    }

    #[test]
    fn tool_schemas_with_defs_and_refs_are_nested_self_contained() {
        // What schemars 1.x emits for a struct with a nested struct and an enum field.
        let edit = ToolSpec {
            name: "Edit".into(),
            description: "Edits a file.".into(),
            input_schema: json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "EditInput", "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "mode": {"$ref": "#/$defs/Mode"},
                    "span": {"$ref": "#/$defs/Span", "description": "Lines to replace."}
                },
                "required": ["path", "mode"],
                "$defs": {
                    "Mode": {"type": "string", "enum": ["replace", "append"]},
                    "Span": {"type": "object", "properties": {"from": {"type": "integer"}, "to": {"type": "integer"}}}
                }
            })
            .into(),
        };
        let combined = schema(&[edit]);
        let text = combined.to_string();
        assert!(
            !text.contains("$ref") && !text.contains("$defs") && !text.contains("$schema"),
            "{text}"
        );
        assert_eq!(
            combined["anyOf"][0]["properties"]["arguments"],
            json!({
                "title": "EditInput", "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "mode": {"type": "string", "enum": ["replace", "append"]},
                    "span": {"type": "object", "description": "Lines to replace.",
                             "properties": {"from": {"type": "integer"}, "to": {"type": "integer"}}}
                },
                "required": ["path", "mode"],
                "additionalProperties": false
            })
        );
    }

    #[test]
    fn tool_results_become_user_messages_and_calls_become_json() {
        let history = vec![
            Message::System {
                content: "You are terse.".into(),
            },
            Message::user("Read a.rs"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "Read".into(),
                    arguments: r#"{"path":"a.rs"}"#.into(),
                }],
            },
            Message::Tool {
                tool_call_id: "c1".into(),
                content: "fn main() {}".into(),
            },
            Message::user("Now summarise."),
        ];
        let sent = messages(&history, &[read_tool()]);
        assert_eq!(sent.len(), 4);
        assert!(
            sent[0]["content"]
                .as_str()
                .unwrap()
                .starts_with("You are terse.\n\n## Tools")
        );
        assert_eq!(
            sent[2],
            json!({"role": "assistant", "content": r#"{"tool":"Read","arguments":{"path":"a.rs"}}"#})
        );
        assert_eq!(
            sent[3],
            json!({"role": "user", "content": "Result of the `Read` call:\nfn main() {}\n\nNow summarise."})
        );
    }

    #[test]
    fn answers_are_read_into_calls_or_text_and_garbage_is_kept() {
        let tools = [read_tool()];
        let raw = |text: &str| RawAnswer {
            content: text.into(),
            ..RawAnswer::default()
        };
        let call = interpret(
            raw("```json\n{\"tool\":\"Read\",\"arguments\":{\"path\":\"x\"}}\n```"),
            &tools,
        );
        assert_eq!(
            (
                call.tool_calls[0].name.as_str(),
                call.tool_calls[0].arguments.as_str()
            ),
            ("Read", r#"{"path":"x"}"#)
        );
        assert!(call.tool_calls[0].id.starts_with("call_"));
        assert_eq!(
            interpret(raw(r#"{"tool":"answer","content":"done"}"#), &tools).content,
            "done"
        );
        assert_eq!(
            interpret(raw(r#"{"tool": "Read", "argu"#), &tools),
            raw(r#"{"tool": "Read", "argu"#)
        );
    }
}
