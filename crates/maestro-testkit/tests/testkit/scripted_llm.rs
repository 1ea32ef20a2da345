//! The scripted server's wire format: what a client really receives.

use std::time::Duration;

use maestro_testkit::{ScriptedLlm, TempWorkspace, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

async fn post(server: &ScriptedLlm, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The JSON payloads of an SSE body, `[DONE]` as a string.
fn sse_data(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.to_string())))
        .collect()
}

#[tokio::test]
async fn tool_call_deltas_are_split_like_a_real_server() {
    let server = ScriptedLlm::start([Turn::tool_calls([
        ("Read", json!({"path": "a.rs"})),
        ("Grep", json!({"q": "x"})),
    ])
    .with_usage(10, 5)])
    .await;
    let response = post(&server, json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}, "messages": []})).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let chunks = sse_data(&response.text().await.unwrap());
    let deltas: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0").cloned())
        .collect();
    // Names first, each in its own delta with the id; then the arguments in pieces, interleaved.
    assert_eq!(
        deltas[0],
        json!({"index": 0, "id": "call_1_0", "type": "function", "function": {"name": "Read", "arguments": ""}})
    );
    assert_eq!(deltas[1]["function"]["name"], json!("Grep"));
    let indexes: Vec<u64> = deltas[2..]
        .iter()
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, vec![0, 1, 0, 1, 0, 1]);
    let read_args: String = deltas
        .iter()
        .filter(|d| d["index"] == 0)
        .filter_map(|d| d["function"]["arguments"].as_str())
        .collect();
    assert_eq!(read_args, r#"{"path":"a.rs"}"#);
    let tail = &chunks[chunks.len() - 3..];
    assert_eq!(tail[0]["choices"][0]["finish_reason"], json!("tool_calls"));
    assert_eq!(
        tail[1]["usage"],
        json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    );
    assert_eq!(tail[2], json!("[DONE]"));
}

#[tokio::test]
async fn a_non_streaming_request_gets_one_completion_object() {
    let server = ScriptedLlm::start([Turn::text("hello").with_usage(1, 2)]).await;
    let body: Value = post(&server, json!({"model": "m", "messages": []}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body,
        json!({"id": "chatcmpl-scripted-1", "object": "chat.completion", "created": 0, "model": "m",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}})
    );
}

#[tokio::test]
async fn usage_is_streamed_only_when_asked_for() {
    let server = ScriptedLlm::start([Turn::text("x").with_usage(1, 1)]).await;
    let chunks = sse_data(
        &post(&server, json!({"stream": true, "messages": []}))
            .await
            .text()
            .await
            .unwrap(),
    );
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
}

#[tokio::test]
async fn conditional_turns_match_first_and_the_rest_is_fifo() {
    let server = ScriptedLlm::start([
        Turn::text("first"),
        Turn::when_contains("REVIEW", Turn::text("review answer")),
        Turn::text("second"),
    ])
    .await;
    let say = |content: &str| json!({"messages": [{"role": "user", "content": content}]});
    let answer = |body: Value| {
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        answer(post(&server, say("plain")).await.json().await.unwrap()),
        "first"
    );
    assert_eq!(
        answer(
            post(&server, say("please REVIEW"))
                .await
                .json()
                .await
                .unwrap()
        ),
        "review answer"
    );
    assert_eq!(
        answer(post(&server, say("plain")).await.json().await.unwrap()),
        "second"
    );
    let exhausted = post(&server, say("more")).await;
    assert_eq!(exhausted.status(), 500);
    assert!(exhausted.text().await.unwrap().contains("script exhausted"));
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn http_errors_carry_retry_after_and_delays_hold_the_answer() {
    let server = ScriptedLlm::start([
        Turn::http_error(429, "slow").retry_after(3),
        Turn::text("late").with_delay(Duration::from_millis(50)),
    ])
    .await;
    let response = post(&server, json!({"messages": []})).await;
    assert_eq!(
        (
            response.status().as_u16(),
            response.headers()["retry-after"].to_str().unwrap()
        ),
        (429, "3")
    );
    let started = std::time::Instant::now();
    post(&server, json!({"messages": []})).await;
    assert!(started.elapsed() >= Duration::from_millis(50));
}

#[test]
fn temp_workspace_writes_nested_files() {
    let ws = TempWorkspace::new();
    let path = ws.write("a/b/c.txt", "x");
    assert!(path.starts_with(ws.path()) && ws.exists("a/b/c.txt"));
    assert_eq!(ws.read("a/b/c.txt"), "x");
}
