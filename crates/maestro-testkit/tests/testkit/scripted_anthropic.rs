//! The scripted Anthropic server answers as the Messages API documents: SSE events in order,
//! one `message` object without streaming, its error bodies, and a record of every request.

use maestro_testkit::{ANTHROPIC_VERSION, ScriptedAnthropic, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

async fn post(server: &ScriptedAnthropic, key: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/messages", server.base_url()))
        .header("x-api-key", key)
        .header("anthropic-version", ANTHROPIC_VERSION)
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn ask(stream: bool) -> Value {
    json!({"model": "claude-test", "max_tokens": 100, "stream": stream,
           "system": "You are terse.",
           "messages": [{"role": "user", "content": "Read a.rs"}]})
}

/// `(event name, data)` of each SSE event of a body.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|event| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in event.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            assert_eq!(
                data["type"],
                name.as_str(),
                "the event name is its data's type"
            );
            (name, data)
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_tool_call_arrives_as_the_documented_events() {
    let server = ScriptedAnthropic::builder()
        .turns([Turn::tool_call("Read", json!({"path": "a.rs"}))
            .with_text("Reading.")
            .with_usage(40, 12)])
        .cache_tokens(7, 3)
        .start()
        .await;
    let response = post(&server, "sk-ant-test", ask(true)).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = events(&response.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let start = &events[0].1["message"];
    assert_eq!(start["model"], "claude-test");
    assert_eq!(start["content"], json!([]));
    assert_eq!(
        start["usage"],
        json!({"input_tokens": 40, "cache_read_input_tokens": 7,
               "cache_creation_input_tokens": 3, "output_tokens": 1})
    );
    let text: String = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "text_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Reading.");
    assert_eq!(
        events[7].1["content_block"],
        json!({"type": "tool_use", "id": "toolu_scripted_1_0", "name": "Read", "input": {}})
    );
    let input: String = events
        .iter()
        .filter(|(_, d)| d["index"] == 1 && d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({"path": "a.rs"})
    );
    assert_eq!(
        events[12].1,
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
               "usage": {"output_tokens": 12}})
    );
    let recorded = server.recorded();
    assert_eq!(recorded[0].path, "/v1/messages");
    assert_eq!(recorded[0].header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(server.requests()[0]["system"], "You are terse.");
}

#[tokio::test]
async fn without_stream_the_answer_is_one_message() {
    let server = ScriptedAnthropic::start([
        Turn::text("Fine.").with_usage(5, 2),
        Turn::tool_call("Read", json!({"path": "b.rs"})),
    ])
    .await;
    let body: Value = post(&server, "k", ask(false)).await.json().await.unwrap();
    assert_eq!(
        body,
        json!({"id": "msg_scripted_1", "type": "message", "role": "assistant",
               "model": "claude-test", "content": [{"type": "text", "text": "Fine."}],
               "stop_reason": "end_turn", "stop_sequence": null,
               "usage": {"input_tokens": 5, "output_tokens": 2}})
    );
    let body: Value = post(&server, "k", ask(false)).await.json().await.unwrap();
    assert_eq!(
        body["content"],
        json!([{"type": "tool_use", "id": "toolu_scripted_2_0", "name": "Read", "input": {"path": "b.rs"}}])
    );
    assert_eq!(body["stop_reason"], "tool_use");
    assert!(body.get("usage").is_none(), "no usage was scripted");
}

#[tokio::test]
async fn it_refuses_what_the_api_refuses() {
    let server = ScriptedAnthropic::builder()
        .api_key("sk-ant-right")
        .turns([Turn::text("never")])
        .start()
        .await;
    let response = post(&server, "sk-ant-wrong", ask(true)).await;
    assert_eq!(response.status(), 401);
    let body = response.text().await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
    );
    assert!(!body.contains("sk-ant-wrong"));

    let mut no_max = ask(false);
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let response = post(&server, "sk-ant-right", no_max).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens")
    );

    let mut system_role = ask(false);
    system_role["messages"] = json!([{"role": "system", "content": "x"}]);
    let response = post(&server, "sk-ant-right", system_role).await;
    assert_eq!(response.status(), 400);

    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.base_url()))
        .header("x-api-key", "sk-ant-right")
        .json(&ask(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400, "anthropic-version is required");
    assert_eq!(server.remaining(), 1, "no refused request took a turn");
}

#[tokio::test]
async fn an_error_event_and_a_cut_stream_are_sent_as_scripted() {
    let server = ScriptedAnthropic::start([
        Turn::anthropic_error_event("overloaded_error", "Overloaded"),
        Turn::broken_stream(3),
    ])
    .await;
    let events_sent = events(&post(&server, "k", ask(true)).await.text().await.unwrap());
    assert_eq!(
        events_sent.last().unwrap().1,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    let response = post(&server, "k", ask(true)).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.text().await.is_err(),
        "the connection drops mid-stream"
    );
}
