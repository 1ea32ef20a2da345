//! `ToolMode::Auto`: finding out once per model whether the endpoint calls tools natively.
//!
//! llama.cpp says so in `/props` (`chat_template_caps.supports_tool_calls`). Elsewhere a tiny
//! request offers a dummy tool: a tool call back means native; a refusal (HTTP 4xx) or a plain
//! text answer means JSON mode.

use std::time::Duration;

use serde_json::{Value, json};

use super::context::{Endpoints, fetch_json};
use crate::ToolMode;

/// The mode to use for `model`, or `None` when the endpoint could not be asked (then nothing is
/// cached and the next call asks again).
pub(crate) async fn probe(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    model: &str,
    timeout: Duration,
) -> Option<ToolMode> {
    let props = fetch_json(client, &format!("{}/props", endpoints.root), None, timeout).await;
    if let Some(native) = props
        .as_ref()
        .and_then(|p| p.pointer("/chat_template_caps/supports_tool_calls"))
        .and_then(Value::as_bool)
    {
        return Some(if native {
            ToolMode::Native
        } else {
            ToolMode::Json
        });
    }
    let body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "Call the tool `probe` with no arguments."}],
        "tools": [{"type": "function", "function": {
            "name": "probe", "description": "Checks that tool calling works.",
            "parameters": {"type": "object", "properties": {}}}}],
        "max_tokens": 64,
        "stream": false,
    });
    let url = format!("{}/chat/completions", endpoints.base);
    let response = tokio::time::timeout(timeout, client.post(&url).json(&body).send())
        .await
        .ok()?
        .ok()?;
    let status = response.status().as_u16();
    if status == 429 || status >= 500 {
        return None;
    }
    if (400..500).contains(&status) {
        return Some(ToolMode::Json);
    }
    let answer: Value = tokio::time::timeout(timeout, response.json())
        .await
        .ok()?
        .ok()?;
    let called = answer
        .pointer("/choices/0/message/tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|calls| !calls.is_empty());
    Some(if called {
        ToolMode::Native
    } else {
        ToolMode::Json
    })
}
