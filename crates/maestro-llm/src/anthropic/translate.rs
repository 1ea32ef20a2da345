//! The Chat Completions and Messages APIs translated into each other at the JSON level, for a
//! gateway that serves OpenAI-compatible clients from an Anthropic upstream (and for
//! [`Anthropic`](super::Anthropic), which speaks the Messages API for Maestro's own calls).
//!
//! - [`chat_request_to_messages`]: an OpenAI `POST /chat/completions` body becomes a
//!   `POST /v1/messages` body;
//! - [`messages_response_to_chat`]: a Messages answer (`"type": "message"`) becomes a
//!   `chat.completion`;
//! - [`StreamTranslator`]: the Messages API's SSE events, fed one at a time, become
//!   `chat.completion.chunk` objects, the last of them carrying `usage`.
//!
//! ```
//! use maestro_llm::anthropic::translate::{StreamTranslator, chat_request_to_messages};
//! use serde_json::json;
//!
//! let request = chat_request_to_messages(&json!({
//!     "model": "claude-sonnet-4-5",
//!     "messages": [{"role": "system", "content": "Be brief."},
//!                  {"role": "user", "content": "Hi"}],
//!     "stream": true,
//! }))?;
//! assert_eq!(request["system"], "Be brief.");
//! assert_eq!(request["max_tokens"], 4096);
//!
//! let mut stream = StreamTranslator::new("team-model");
//! let chunks = stream.feed(&json!({"type": "content_block_delta", "index": 0,
//!     "delta": {"type": "text_delta", "text": "Hello"}}))?;
//! assert_eq!(chunks[0]["choices"][0]["delta"]["content"], "Hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;

use serde_json::{Map, Value, json};

/// The `max_tokens` a Messages request gets when the chat request sets neither `max_tokens`
/// nor `max_completion_tokens` (the Messages API requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Why a chat request cannot become a Messages request. The message names the field (a JSON
/// path into the request), what is wrong and what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct TranslateError {
    /// Where in the chat request, e.g. `messages[2].content[0].type`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub reason: String,
}

impl TranslateError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> TranslateError {
        TranslateError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// The Messages API's `stop_reason` as a chat completion's `finish_reason`: `end_turn`,
/// `stop_sequence` and `pause_turn` are `stop`, `max_tokens` is `length`, `tool_use` is
/// `tool_calls`, `refusal` is `content_filter`; another value is passed on as it is.
pub fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" | "pause_turn" => "stop",
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        other => other,
    }
    .to_string()
}

/// A Messages `usage` object (`input_tokens`, `output_tokens`, `cache_read_input_tokens`,
/// `cache_creation_input_tokens`) as a chat completion's `usage`. The Messages API counts
/// cached input apart from `input_tokens`; `prompt_tokens` is all the input together, and
/// `prompt_tokens_details.cached_tokens` the part read from the cache.
pub fn usage_to_chat(usage: &Value) -> Value {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let cache_read = count("cache_read_input_tokens");
    let prompt = count("input_tokens") + cache_read + count("cache_creation_input_tokens");
    let completion = count("output_tokens");
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cache_read},
    })
}

/// The text of a chat message's `content`: a string, or the `text` parts of a list joined.
fn content_text(content: &Value, field: &str) -> Result<String, TranslateError> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(text) => Ok(text.clone()),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => out.push(
                        part.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    ),
                    other => {
                        return Err(TranslateError::new(
                            format!("{field}[{i}].type"),
                            format!(
                                "a part of type {} cannot be sent here; only text parts can",
                                other.map_or_else(|| "(none)".to_string(), |t| format!("`{t}`"))
                            ),
                        ));
                    }
                }
            }
            Ok(out.join("\n"))
        }
        _ => Err(TranslateError::new(
            field,
            "must be a string or a list of content parts",
        )),
    }
}

/// A user message's `content` as Messages content blocks (text and images).
fn user_blocks(content: &Value, field: &str) -> Result<Vec<Value>, TranslateError> {
    match content {
        Value::String(text) => Ok(text_block(text).into_iter().collect()),
        Value::Array(parts) => {
            let mut blocks = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => blocks.extend(text_block(
                        part.get("text").and_then(Value::as_str).unwrap_or_default(),
                    )),
                    Some("image_url") => {
                        let url = part
                            .pointer("/image_url/url")
                            .and_then(Value::as_str)
                            .ok_or_else(|| {
                                TranslateError::new(
                                    format!("{field}[{i}].image_url.url"),
                                    "is missing; an image part needs its URL or data: URL",
                                )
                            })?;
                        blocks.push(image_block(url));
                    }
                    other => {
                        return Err(TranslateError::new(
                            format!("{field}[{i}].type"),
                            format!(
                                "a part of type {} cannot be translated for an Anthropic \
                                 upstream; send text or image_url parts",
                                other.map_or_else(|| "(none)".to_string(), |t| format!("`{t}`"))
                            ),
                        ));
                    }
                }
            }
            Ok(blocks)
        }
        Value::Null => Ok(Vec::new()),
        _ => Err(TranslateError::new(
            field,
            "must be a string or a list of content parts",
        )),
    }
}

/// A text block, or nothing for empty text (the Messages API refuses empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// An image block: a `data:` URL becomes a base64 source, any other URL a URL source.
fn image_block(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((media_type, data)) = rest.split_once(";base64,")
    {
        return json!({"type": "image", "source":
            {"type": "base64", "media_type": media_type, "data": data}});
    }
    json!({"type": "image", "source": {"type": "url", "url": url}})
}

/// A tool call's `arguments` text as a `tool_use` block's `input`: the JSON object it holds.
/// Arguments that are not a JSON object (a model's malformed call, kept in the history) are
/// sent as `{"arguments": "<the text>"}`, since the Messages API takes only objects there.
fn tool_input(arguments: &Value) -> Value {
    match arguments {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(object @ Value::Object(_)) => object,
            _ if text.trim().is_empty() => json!({}),
            _ => json!({"arguments": text}),
        },
        object @ Value::Object(_) => object.clone(),
        Value::Null => json!({}),
        other => json!({"arguments": other.to_string()}),
    }
}

/// The conversation being built: consecutive turns of one role are merged into one message,
/// since the Messages API wants user and assistant turns to alternate.
#[derive(Default)]
struct Conversation {
    messages: Vec<Value>,
}

impl Conversation {
    fn push(&mut self, role: &str, blocks: Vec<Value>) {
        if blocks.is_empty() {
            return;
        }
        if let Some(last) = self.messages.last_mut()
            && last["role"] == role
            && let Some(content) = last["content"].as_array_mut()
        {
            content.extend(blocks);
            return;
        }
        self.messages
            .push(json!({"role": role, "content": Value::Array(blocks)}));
    }
}

/// An OpenAI-compatible chat request (`POST /chat/completions` body) as a Messages API request
/// (`POST /v1/messages` body).
///
/// - `system` and `developer` messages become the top-level `system` (joined by a blank line);
///   `user` messages become user turns (text and `image_url` parts, a `data:` URL as a base64
///   image); `assistant` messages become assistant turns with a `tool_use` block per tool call
///   (its `arguments` parsed into `input`); `tool` messages become `tool_result` blocks in a
///   user turn. Consecutive turns of one role are merged, so turns alternate.
/// - `tools` (`type: function`) become `{name, description, input_schema}`; `tool_choice`
///   `auto`/`none`/`required`/a named function becomes `auto`/`none`/`any`/`tool`;
///   `parallel_tool_calls: false` sets `disable_parallel_tool_use`.
/// - `max_completion_tokens` or `max_tokens` becomes `max_tokens` ([`DEFAULT_MAX_TOKENS`] when
///   neither is set); `temperature` (capped at 1, the Messages API's highest), `top_p`,
///   `stop` (as `stop_sequences`), `stream` and `user` (as `metadata.user_id`) are carried over.
/// - `response_format` `json_object` or `json_schema` (which the Messages API lacks) becomes
///   an instruction at the end of `system` to answer with JSON only (of that schema).
/// - Other fields (`stream_options`, `seed`, `logprobs`, penalties, …) are dropped: the
///   Messages stream always reports usage.
///
/// Fails on what cannot be translated: `n` above 1, a message role or content part the
/// Messages API has no counterpart for, a tool that is not a function, a request with no
/// user or assistant message.
pub fn chat_request_to_messages(request: &Value) -> Result<Value, TranslateError> {
    let Some(request) = request.as_object() else {
        return Err(TranslateError::new(
            "(body)",
            "a chat request must be a JSON object",
        ));
    };
    if let Some(n) = request.get("n").and_then(Value::as_u64)
        && n > 1
    {
        return Err(TranslateError::new(
            "n",
            format!("an Anthropic upstream gives one answer per request, not {n}; send n: 1"),
        ));
    }
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| TranslateError::new("messages", "is missing or not a list"))?;
    let mut system = Vec::new();
    let mut conversation = Conversation::default();
    for (i, message) in messages.iter().enumerate() {
        let field = format!("messages[{i}]");
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        let content = message.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => {
                let text = content_text(content, &format!("{field}.content"))?;
                if !text.is_empty() {
                    system.push(text);
                }
            }
            "user" => {
                conversation.push("user", user_blocks(content, &format!("{field}.content"))?);
            }
            "assistant" => {
                let text = content_text(content, &format!("{field}.content"))?;
                let mut blocks: Vec<Value> = text_block(&text).into_iter().collect();
                for (j, call) in message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            TranslateError::new(
                                format!("{field}.tool_calls[{j}].function.name"),
                                "is missing; every tool call needs the name of its tool",
                            )
                        })?;
                    let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
                    blocks.push(json!({"type": "tool_use", "id": id, "name": name,
                        "input": tool_input(call.pointer("/function/arguments").unwrap_or(&Value::Null))}));
                }
                conversation.push("assistant", blocks);
            }
            "tool" => {
                let id = message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        TranslateError::new(
                            format!("{field}.tool_call_id"),
                            "is missing; a tool message answers the tool call of that id",
                        )
                    })?;
                let text = content_text(content, &format!("{field}.content"))?;
                conversation.push(
                    "user",
                    vec![json!({"type": "tool_result", "tool_use_id": id, "content": text})],
                );
            }
            other => {
                return Err(TranslateError::new(
                    format!("{field}.role"),
                    format!(
                        "`{other}` cannot be translated for an Anthropic upstream; use system, \
                         developer, user, assistant or tool"
                    ),
                ));
            }
        }
    }
    if conversation.messages.is_empty() {
        return Err(TranslateError::new(
            "messages",
            "holds no user or assistant message; the Messages API needs at least one",
        ));
    }
    match request.get("response_format") {
        Some(format) if format["type"] == "json_object" => {
            system.push("Answer with one JSON object and nothing else.".to_string());
        }
        Some(format) if format["type"] == "json_schema" => {
            let schema = format
                .pointer("/json_schema/schema")
                .cloned()
                .unwrap_or_else(|| json!({}));
            system.push(format!(
                "Answer with one JSON value that matches this JSON Schema, and nothing else \
                 (no prose, no code fence):\n{schema}"
            ));
        }
        _ => {}
    }

    let mut out = Map::new();
    out.insert(
        "model".into(),
        request.get("model").cloned().unwrap_or(Value::Null),
    );
    let max_tokens = request
        .get("max_completion_tokens")
        .and_then(Value::as_u64)
        .or_else(|| request.get("max_tokens").and_then(Value::as_u64))
        .unwrap_or(DEFAULT_MAX_TOKENS);
    out.insert("max_tokens".into(), json!(max_tokens));
    if !system.is_empty() {
        out.insert("system".into(), json!(system.join("\n\n")));
    }
    out.insert("messages".into(), Value::Array(conversation.messages));
    if let Some(tools) = request.get("tools").and_then(Value::as_array)
        && !tools.is_empty()
    {
        out.insert("tools".into(), Value::Array(translate_tools(tools)?));
        if let Some(choice) = tool_choice(request)? {
            out.insert("tool_choice".into(), choice);
        }
    }
    if let Some(t) = request.get("temperature").and_then(Value::as_f64) {
        out.insert("temperature".into(), json!(t.clamp(0.0, 1.0)));
    }
    if let Some(p) = request.get("top_p").filter(|p| p.is_number()) {
        out.insert("top_p".into(), p.clone());
    }
    match request.get("stop") {
        Some(Value::String(stop)) => {
            out.insert("stop_sequences".into(), json!([stop]));
        }
        Some(Value::Array(stops)) if !stops.is_empty() => {
            out.insert("stop_sequences".into(), Value::Array(stops.clone()));
        }
        _ => {}
    }
    if let Some(user) = request.get("user").and_then(Value::as_str) {
        out.insert("metadata".into(), json!({"user_id": user}));
    }
    if let Some(stream) = request.get("stream").and_then(Value::as_bool) {
        out.insert("stream".into(), json!(stream));
    }
    Ok(Value::Object(out))
}

fn translate_tools(tools: &[Value]) -> Result<Vec<Value>, TranslateError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            if tool.get("type").and_then(Value::as_str) != Some("function") {
                return Err(TranslateError::new(
                    format!("tools[{i}].type"),
                    "only `function` tools can be translated for an Anthropic upstream",
                ));
            }
            let function = &tool["function"];
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    TranslateError::new(format!("tools[{i}].function.name"), "is missing")
                })?;
            let mut out = json!({"name": name,
                "input_schema": function.get("parameters").cloned()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}}))});
            if let Some(description) = function.get("description").and_then(Value::as_str) {
                out["description"] = json!(description);
            }
            Ok(out)
        })
        .collect()
}

fn tool_choice(request: &Map<String, Value>) -> Result<Option<Value>, TranslateError> {
    let mut choice = match request.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(mode)) => Some(match mode.as_str() {
            "auto" => json!({"type": "auto"}),
            "none" => json!({"type": "none"}),
            "required" => json!({"type": "any"}),
            other => {
                return Err(TranslateError::new(
                    "tool_choice",
                    format!(
                        "`{other}` is not a tool choice; use auto, none, required or a named function"
                    ),
                ));
            }
        }),
        Some(named) => {
            let name = named
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    TranslateError::new(
                        "tool_choice.function.name",
                        "is missing; name the function the model must call",
                    )
                })?;
            Some(json!({"type": "tool", "name": name}))
        }
    };
    if request.get("parallel_tool_calls") == Some(&Value::Bool(false)) {
        let choice = choice.get_or_insert_with(|| json!({"type": "auto"}));
        if choice["type"] != "none" {
            choice["disable_parallel_tool_use"] = json!(true);
        }
    }
    Ok(choice)
}

fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// A Messages API answer (`{"type": "message", "content": [...], "stop_reason", "usage"}`) as
/// a `chat.completion` naming `model` (the model the client asked for): text blocks joined into
/// `message.content` (`null` when the answer only calls tools), `tool_use` blocks as
/// `message.tool_calls` (their `input` serialised into `arguments`), the stop reason through
/// [`finish_reason`], usage through [`usage_to_chat`]. Other blocks (thinking) are left out.
pub fn messages_response_to_chat(response: &Value, model: &str) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in response
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => calls.push(json!({
                "id": block["id"], "type": "function",
                "function": {"name": block["name"],
                             "arguments": block.get("input").unwrap_or(&json!({})).to_string()},
            })),
            _ => {}
        }
    }
    let mut message = json!({"role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let finish = response
        .get("stop_reason")
        .and_then(Value::as_str)
        .map(finish_reason);
    let mut out = json!({
        "id": response.get("id").cloned().unwrap_or_else(|| json!("msg")),
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
    });
    if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
        out["usage"] = usage_to_chat(usage);
    }
    out
}

/// An `error` event of a Messages stream: the API's error `type` (e.g. `overloaded_error`) and
/// its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Anthropic API sent an error event mid-stream: {kind}: {message}")]
pub struct StreamError {
    /// The error's `type`: `overloaded_error`, `api_error`, `rate_limit_error`, …
    pub kind: String,
    /// The error's `message`.
    pub message: String,
}

impl StreamError {
    /// True for the errors the API documents as passing (`overloaded_error`, `api_error`,
    /// `rate_limit_error`, the HTTP 529, 500 and 429 of a stream already under way): the same
    /// request may succeed when sent again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "overloaded_error" | "api_error" | "rate_limit_error"
        )
    }
}

/// What one content block of the stream is.
#[derive(Debug, Clone, Copy)]
enum Block {
    Text,
    /// A `tool_use` block: its index among the answer's tool calls.
    Tool(usize),
    /// Thinking and other blocks a chat completion has no place for.
    Other,
}

/// Turns a Messages API stream into `chat.completion.chunk` objects, one event at a time.
///
/// Feed it each event's JSON (`data:`) in order with [`feed`](Self::feed) (or the raw text with
/// [`feed_str`](Self::feed_str)); each call returns the chunks to send on:
///
/// - `message_start`: a chunk with `delta: {role: assistant, content: ""}`;
/// - `content_block_start` of a `tool_use` block: a chunk opening the tool call (`index`, `id`,
///   `type: function`, `function: {name, arguments: ""}`);
/// - `content_block_delta`: `text_delta` as `delta.content`, `input_json_delta` as the tool
///   call's next `function.arguments` piece;
/// - `message_delta`: a chunk with an empty delta and the `finish_reason`;
/// - `message_stop`: the last chunk, `choices: []` with the whole `usage` (input and cache
///   counts from `message_start`, the final counts from `message_delta`), as an OpenAI stream
///   with `stream_options.include_usage` ends (left out when the stream reported no usage);
/// - `ping`, `content_block_stop`, other blocks' deltas and event types not known: nothing;
/// - `error`: [`StreamError`].
///
/// [`is_complete`](Self::is_complete) tells whether `message_stop` came: a stream that ends
/// without it was cut off.
#[derive(Debug, Clone)]
pub struct StreamTranslator {
    model: String,
    answered_by: Option<String>,
    id: String,
    created: i64,
    blocks: HashMap<u64, Block>,
    tools: usize,
    usage: Map<String, Value>,
    finish_reason: Option<String>,
    complete: bool,
}

impl StreamTranslator {
    /// A translator whose chunks name `model` (the model the client asked for).
    pub fn new(model: impl Into<String>) -> StreamTranslator {
        StreamTranslator {
            model: model.into(),
            answered_by: None,
            id: "msg".into(),
            created: unix_now(),
            blocks: HashMap::new(),
            tools: 0,
            usage: Map::new(),
            finish_reason: None,
            complete: false,
        }
    }

    /// Whether `message_stop` has been fed: the answer is whole.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The model the API says answered (`message_start`'s `message.model`), once it came.
    pub fn answered_by(&self) -> Option<&str> {
        self.answered_by.as_deref()
    }

    /// The `finish_reason` the stream gave (from `message_delta`), if it came yet.
    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// The usage reported so far, as a chat completion's `usage`; `None` before any came.
    pub fn usage(&self) -> Option<Value> {
        (!self.usage.is_empty()).then(|| usage_to_chat(&Value::Object(self.usage.clone())))
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
               "model": self.model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})
    }

    fn merge_usage(&mut self, usage: Option<&Value>) {
        for (key, value) in usage.and_then(Value::as_object).into_iter().flatten() {
            if value.is_u64() {
                self.usage.insert(key.clone(), value.clone());
            }
        }
    }

    /// Translates one event given as the text of its `data:` field. Text that is not JSON is
    /// an error naming it.
    pub fn feed_str(&mut self, data: &str) -> Result<Vec<Value>, StreamError> {
        let event: Value = serde_json::from_str(data).map_err(|e| StreamError {
            kind: "invalid_event".into(),
            message: format!("an event's data is not JSON ({e}): {data}"),
        })?;
        self.feed(&event)
    }

    /// Translates one event (its `data:` JSON; its `type` says which event it is).
    pub fn feed(&mut self, event: &Value) -> Result<Vec<Value>, StreamError> {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                let message = &event["message"];
                if let Some(id) = message.get("id").and_then(Value::as_str) {
                    self.id = id.to_string();
                }
                if let Some(model) = message.get("model").and_then(Value::as_str) {
                    self.answered_by = Some(model.to_string());
                }
                self.merge_usage(message.get("usage"));
                Ok(vec![
                    self.chunk(json!({"role": "assistant", "content": ""}), None),
                ])
            }
            "content_block_start" => {
                let block = &event["content_block"];
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        self.blocks.insert(index, Block::Text);
                        let text = block["text"].as_str().unwrap_or_default();
                        Ok(if text.is_empty() {
                            Vec::new()
                        } else {
                            vec![self.chunk(json!({"content": text}), None)]
                        })
                    }
                    Some("tool_use") => {
                        let call = self.tools;
                        self.tools += 1;
                        self.blocks.insert(index, Block::Tool(call));
                        // A block that starts with its input whole carries it here.
                        let arguments = match block.get("input") {
                            Some(Value::Object(input)) if !input.is_empty() => {
                                Value::Object(input.clone()).to_string()
                            }
                            _ => String::new(),
                        };
                        Ok(vec![self.chunk(
                            json!({"tool_calls": [{"index": call, "id": block["id"],
                                "type": "function",
                                "function": {"name": block["name"], "arguments": arguments}}]}),
                            None,
                        )])
                    }
                    _ => {
                        self.blocks.insert(index, Block::Other);
                        Ok(Vec::new())
                    }
                }
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                let block = self.blocks.get(&index).copied();
                match (delta.get("type").and_then(Value::as_str), block) {
                    (Some("text_delta"), Some(Block::Text) | None) => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        Ok(vec![self.chunk(json!({"content": text}), None)])
                    }
                    (Some("input_json_delta"), Some(Block::Tool(call))) => {
                        let part = delta["partial_json"].as_str().unwrap_or_default();
                        if part.is_empty() {
                            return Ok(Vec::new());
                        }
                        Ok(vec![self.chunk(
                            json!({"tool_calls": [{"index": call, "function": {"arguments": part}}]}),
                            None,
                        )])
                    }
                    _ => Ok(Vec::new()),
                }
            }
            "message_delta" => {
                self.merge_usage(event.get("usage"));
                let reason = event
                    .pointer("/delta/stop_reason")
                    .and_then(Value::as_str)
                    .map(finish_reason);
                let Some(reason) = reason else {
                    return Ok(Vec::new());
                };
                self.finish_reason = Some(reason.clone());
                Ok(vec![self.chunk(json!({}), Some(&reason))])
            }
            "message_stop" => {
                self.complete = true;
                // The API always reports usage; a stream that reported none gets no usage
                // chunk rather than one of zeros, so the reader can tell and estimate.
                Ok(self
                    .usage()
                    .map(|usage| {
                        json!({"id": self.id, "object": "chat.completion.chunk",
                            "created": self.created, "model": self.model, "choices": [],
                            "usage": usage})
                    })
                    .into_iter()
                    .collect())
            }
            "error" => {
                let error = &event["error"];
                Err(StreamError {
                    kind: error["type"].as_str().unwrap_or("error").to_string(),
                    message: error["message"]
                        .as_str()
                        .map_or_else(|| error.to_string(), str::to_string),
                })
            }
            // `ping`, `content_block_stop`, and event types added later.
            _ => Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn a_chat_request_becomes_a_messages_request() {
        let request = json!({
            "model": "claude-x",
            "messages": [
                {"role": "system", "content": "You review code."},
                {"role": "developer", "content": [{"type": "text", "text": "Be terse."}]},
                {"role": "user", "content": "Read a.rs"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "Read", "arguments": "{\"path\":\"a.rs\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "Grep", "arguments": "{\"pattern\":"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "fn main() {}"},
                {"role": "tool", "tool_call_id": "call_2", "content": "bad arguments"},
                {"role": "user", "content": [{"type": "text", "text": "Now judge."},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            ],
            "tools": [{"type": "function", "function": {"name": "Read", "description": "Reads a file.",
                       "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
            "tool_choice": "required",
            "parallel_tool_calls": false,
            "max_completion_tokens": 300,
            "temperature": 1.7,
            "stop": "END",
            "stream": true,
            "stream_options": {"include_usage": true},
            "user": "alice",
            "seed": 7,
        });
        let out = chat_request_to_messages(&request).unwrap();
        assert_eq!(
            out,
            json!({
                "model": "claude-x",
                "max_tokens": 300,
                "system": "You review code.\n\nBe terse.",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Read a.rs"}]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "call_1", "name": "Read", "input": {"path": "a.rs"}},
                        {"type": "tool_use", "id": "call_2", "name": "Grep",
                         "input": {"arguments": "{\"pattern\":"}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "fn main() {}"},
                        {"type": "tool_result", "tool_use_id": "call_2", "content": "bad arguments"},
                        {"type": "text", "text": "Now judge."},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                ],
                "tools": [{"name": "Read", "input_schema": {"type": "object",
                           "properties": {"path": {"type": "string"}}}, "description": "Reads a file."}],
                "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
                "temperature": 1.0,
                "stop_sequences": ["END"],
                "metadata": {"user_id": "alice"},
                "stream": true,
            })
        );
    }

    #[test]
    fn max_tokens_defaults_and_named_tool_choice_and_response_format() {
        let out = chat_request_to_messages(&json!({
            "model": "m",
            "messages": [{"role": "user", "content": "Score it."}],
            "tools": [{"type": "function", "function": {"name": "Score"}}],
            "tool_choice": {"type": "function", "function": {"name": "Score"}},
            "max_tokens": 12,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s",
                "schema": {"type": "object", "required": ["score"]}}},
        }))
        .unwrap();
        assert_eq!(out["max_tokens"], 12);
        assert_eq!(out["tool_choice"], json!({"type": "tool", "name": "Score"}));
        assert_eq!(
            out["tools"][0]["input_schema"],
            json!({"type": "object", "properties": {}})
        );
        let system = out["system"].as_str().unwrap();
        assert!(
            system.contains(r#"{"type":"object","required":["score"]}"#),
            "{system}"
        );
        let plain =
            chat_request_to_messages(&json!({"messages": [{"role": "user", "content": "hi"}]}))
                .unwrap();
        assert_eq!(plain["max_tokens"], DEFAULT_MAX_TOKENS);
        assert!(plain.get("system").is_none() && plain.get("tools").is_none());
    }

    #[test]
    fn what_cannot_be_translated_is_named_with_its_field() {
        let error = |request: Value| chat_request_to_messages(&request).unwrap_err();
        assert_eq!(
            error(json!({"messages": [{"role": "user", "content": "a"}], "n": 3})).field,
            "n"
        );
        let e = error(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "input_audio", "input_audio": {}}]}]}));
        assert_eq!(e.field, "messages[0].content[1].type");
        assert!(e.reason.contains("`input_audio`"), "{e}");
        assert_eq!(
            error(json!({"messages": [{"role": "function", "content": "a"}]})).field,
            "messages[0].role"
        );
        assert_eq!(
            error(json!({"messages": [{"role": "tool", "content": "a"}]})).field,
            "messages[0].tool_call_id"
        );
        assert_eq!(
            error(json!({"messages": [{"role": "system", "content": "a"}]})).field,
            "messages"
        );
        assert_eq!(
            error(json!({"messages": [{"role": "user", "content": "a"}],
                         "tools": [{"type": "retrieval"}]}))
            .field,
            "tools[0].type"
        );
        assert_eq!(error(json!([])).field, "(body)");
    }

    #[test]
    fn a_messages_answer_becomes_a_chat_completion() {
        let answer = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.rs"}},
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 20, "output_tokens": 9,
                      "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5},
        });
        let mut chat = messages_response_to_chat(&answer, "team-model");
        assert!(chat["created"].as_i64().unwrap() > 1_700_000_000);
        chat["created"] = json!(0);
        assert_eq!(
            chat,
            json!({
                "id": "msg_1", "object": "chat.completion", "created": 0, "model": "team-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Reading it.",
                    "tool_calls": [{"id": "toolu_1", "type": "function",
                        "function": {"name": "Read", "arguments": "{\"path\":\"a.rs\"}"}}]},
                    "finish_reason": "tool_calls", "logprobs": null}],
                "usage": {"prompt_tokens": 125, "completion_tokens": 9, "total_tokens": 134,
                          "prompt_tokens_details": {"cached_tokens": 100}},
            })
        );
        let only_tools = messages_response_to_chat(
            &json!({"content": [{"type": "tool_use", "id": "t", "name": "X", "input": {}}],
                    "stop_reason": "max_tokens"}),
            "m",
        );
        assert_eq!(only_tools["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(only_tools["choices"][0]["finish_reason"], "length");
        assert!(only_tools.get("usage").is_none());
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        for (stop, finish) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("pause_turn", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
            ("something_new", "something_new"),
        ] {
            assert_eq!(finish_reason(stop), finish);
        }
    }

    /// The documented stream of an answer with text and a tool call, as `data:` payloads.
    fn documented_stream() -> Vec<Value> {
        vec![
            json!({"type": "message_start", "message": {"id": "msg_7", "type": "message",
                "role": "assistant", "content": [], "model": "claude-x", "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 472, "output_tokens": 2,
                "cache_read_input_tokens": 30, "cache_creation_input_tokens": 0}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Okay"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ", reading."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use",
                "id": "toolu_01", "name": "Read", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"a.rs\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"output_tokens": 89}}),
            json!({"type": "message_stop"}),
        ]
    }

    #[test]
    fn a_stream_becomes_chunks_with_incremental_arguments_and_usage_last() {
        let mut translator = StreamTranslator::new("team-model");
        let mut chunks = Vec::new();
        for event in documented_stream() {
            assert!(!translator.is_complete());
            chunks.extend(translator.feed(&event).unwrap());
        }
        assert!(translator.is_complete());
        let views: Vec<Value> = chunks
            .iter()
            .map(|c| {
                assert_eq!(c["object"], "chat.completion.chunk");
                assert_eq!(c["model"], "team-model");
                assert_eq!(c["id"], "msg_7");
                match c.get("usage") {
                    Some(usage) => json!({"usage": usage, "choices": c["choices"]}),
                    None => c["choices"][0].clone(),
                }
            })
            .collect();
        assert_eq!(
            views,
            vec![
                json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}),
                json!({"index": 0, "delta": {"content": "Okay"}, "finish_reason": null}),
                json!({"index": 0, "delta": {"content": ", reading."}, "finish_reason": null}),
                json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "toolu_01", "type": "function",
                    "function": {"name": "Read", "arguments": ""}}]}, "finish_reason": null}),
                json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": "}}]}, "finish_reason": null}),
                json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"a.rs\"}"}}]}, "finish_reason": null}),
                json!({"index": 0, "delta": {}, "finish_reason": "tool_calls"}),
                json!({"choices": [], "usage": {"prompt_tokens": 502, "completion_tokens": 89,
                    "total_tokens": 591, "prompt_tokens_details": {"cached_tokens": 30}}}),
            ]
        );
        assert_eq!(translator.finish_reason(), Some("tool_calls"));
        assert_eq!(translator.answered_by(), Some("claude-x"));
    }

    #[test]
    fn a_stream_that_reported_no_usage_ends_without_a_usage_chunk() {
        let mut translator = StreamTranslator::new("m");
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_2", "content": []}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        ];
        for event in &events {
            translator.feed(event).unwrap();
        }
        assert_eq!(translator.usage(), None);
        assert!(
            translator
                .feed(&json!({"type": "message_stop"}))
                .unwrap()
                .is_empty()
        );
        assert!(translator.is_complete());
    }

    #[test]
    fn an_error_event_is_a_stream_error_and_a_cut_stream_is_incomplete() {
        let mut translator = StreamTranslator::new("m");
        for event in documented_stream().into_iter().take(4) {
            translator.feed(&event).unwrap();
        }
        assert!(!translator.is_complete());
        let error = translator
            .feed_str(r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#)
            .unwrap_err();
        assert_eq!(error.kind, "overloaded_error");
        assert!(error.is_transient());
        assert!(error.to_string().contains("Overloaded"), "{error}");
        let refused = StreamError {
            kind: "invalid_request_error".into(),
            message: "x".into(),
        };
        assert!(!refused.is_transient());
        assert_eq!(
            translator.feed_str("{oops").unwrap_err().kind,
            "invalid_event"
        );
        // Unknown event types are passed over, as the API's versioning policy asks.
        assert!(
            translator
                .feed(&json!({"type": "some_future_event"}))
                .unwrap()
                .is_empty()
        );
    }
}
