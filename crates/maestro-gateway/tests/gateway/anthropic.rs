//! `kind: anthropic` upstreams over real HTTP on 127.0.0.1: OpenAI chat requests translated to
//! a scripted server speaking the Messages API (its documented SSE events), and its answers
//! translated back, whole and streamed, with tool calls, usage, failover and cut streams.

use crate::support;

use maestro_gateway::UsageStatus;
use maestro_testkit::{ScriptedAnthropic, ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use support::client;
use support::python::run_client;

const KEY_VAR: &str = "MAESTRO_GATEWAY_TEST_ANTHROPIC_KEY";
const KEY: &str = "sk-ant-test-key-7f3a";

/// A gateway with one Anthropic upstream `claude` (its key read from [`KEY_VAR`]) serving
/// `team-model` as `claude-x`, priced.
async fn gateway_over(upstream: &ScriptedAnthropic, extra: Value) -> support::Served {
    let mut upstream_config =
        json!({"kind": "anthropic", "base_url": upstream.base_url(), "api_key_env": KEY_VAR});
    for (k, v) in extra.as_object().into_iter().flatten() {
        upstream_config[k] = v.clone();
    }
    let mut config: maestro_gateway::GatewayConfig = serde_json::from_value(json!({
        "upstreams": {"claude": upstream_config},
        "models": {"team-model": [{"upstream": "claude", "model": "claude-x"}]},
    }))
    .unwrap();
    config
        .read_keys(|var| (var == KEY_VAR).then(|| KEY.to_string()))
        .unwrap();
    support::serve_config(config, &["claude-x"]).await
}

/// The `data:` payloads of an SSE body, and its `event: error` payloads apart.
fn sse_data(body: &str) -> (Vec<String>, Vec<Value>) {
    let mut data = Vec::new();
    let mut errors = Vec::new();
    for event in body.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let payload = event
            .lines()
            .find_map(|l| l.strip_prefix("data:"))
            .unwrap_or("")
            .trim()
            .to_string();
        if event.lines().any(|l| l == "event: error") {
            errors.push(serde_json::from_str(&payload).unwrap());
        } else {
            data.push(payload);
        }
    }
    (data, errors)
}

async fn post(gateway: &support::Served, path: &str, body: Value) -> reqwest::Response {
    client()
        .post(format!("{}{path}", gateway.base_url()))
        .header("authorization", "Bearer sk-client-side")
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_chat_request_is_translated_to_the_messages_api_and_its_answer_back() {
    let upstream = ScriptedAnthropic::builder()
        .api_key(KEY)
        .turns([Turn::text("Hello there.").with_usage(21, 4)])
        .start()
        .await;
    let gateway = gateway_over(&upstream, json!({})).await;
    let answer = post(
        &gateway,
        "/chat/completions",
        json!({"model": "team-model", "temperature": 0.2, "stop": ["END"],
               "messages": [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Say hello."}]}),
    )
    .await;
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello there.");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["prompt_tokens"], 21);
    assert_eq!(body["usage"]["completion_tokens"], 4);

    let sent = &upstream.requests()[0];
    assert_eq!(sent["model"], "claude-x");
    assert_eq!(sent["system"], "Be brief.");
    assert_eq!(
        sent["max_tokens"], 4096,
        "the Messages API requires max_tokens"
    );
    assert_eq!(sent["temperature"], 0.2);
    assert_eq!(sent["stop_sequences"], json!(["END"]));
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}])
    );
    let recorded = &upstream.recorded()[0];
    assert_eq!(recorded.path, "/v1/messages");
    assert_eq!(recorded.header("x-api-key"), Some(KEY));
    assert_eq!(recorded.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        recorded.header("authorization"),
        None,
        "the client's key goes nowhere"
    );

    let records = gateway.records().await;
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.status, UsageStatus::Ok);
    assert_eq!(record.upstream.as_deref(), Some("claude"));
    assert_eq!(record.upstream_model.as_deref(), Some("claude-x"));
    assert_eq!((record.prompt_tokens, record.completion_tokens), (21, 4));
    // $1 per million prompt tokens, $2 per million answer tokens.
    assert!((record.cost_usd.unwrap() - 29e-6).abs() < 1e-12);
}

#[tokio::test]
async fn max_tokens_is_the_requests_else_the_upstreams_configured_default() {
    let upstream = ScriptedAnthropic::start([
        Turn::text("a").with_usage(1, 1),
        Turn::text("b").with_usage(1, 1),
    ])
    .await;
    let gateway = gateway_over(&upstream, json!({"max_tokens": 777})).await;
    let messages = json!([{"role": "user", "content": "Hi"}]);
    for body in [
        json!({"model": "team-model", "messages": messages}),
        json!({"model": "team-model", "messages": messages, "max_completion_tokens": 55}),
    ] {
        assert_eq!(
            post(&gateway, "/chat/completions", body).await.status(),
            200
        );
    }
    let sent: Vec<Value> = upstream
        .requests()
        .iter()
        .map(|r| r["max_tokens"].clone())
        .collect();
    assert_eq!(sent, vec![json!(777), json!(55)]);
}

#[tokio::test]
async fn a_streamed_answer_becomes_chat_completion_chunks_with_usage_and_done() {
    let upstream = ScriptedAnthropic::start([
        Turn::text("Hello, streamed world.").with_usage(30, 6),
        Turn::text("Quiet.").with_usage(30, 2),
    ])
    .await;
    let gateway = gateway_over(&upstream, json!({})).await;
    let messages = json!([{"role": "user", "content": "Stream please."}]);

    // The client asks for usage: it gets the usage chunk before [DONE].
    let answer = post(
        &gateway,
        "/chat/completions",
        json!({"model": "team-model", "messages": messages, "stream": true,
               "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(answer.status(), 200);
    assert!(
        answer.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let (data, errors) = sse_data(&answer.text().await.unwrap());
    assert_eq!(errors, Vec::<Value>::new());
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello, streamed world.");
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec![&json!("stop")]);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], 30);
    assert_eq!(usage["usage"]["completion_tokens"], 6);

    // The client did not ask: no usage chunk, yet the tokens are counted.
    let answer = post(
        &gateway,
        "/chat/completions",
        json!({"model": "team-model", "messages": messages, "stream": true}),
    )
    .await;
    let (data, _) = sse_data(&answer.text().await.unwrap());
    assert_eq!(data.last().unwrap(), "[DONE]");
    assert!(
        data.iter().all(|d| !d.contains("\"usage\"")),
        "no usage chunk the client did not ask for: {data:?}"
    );
    assert_eq!(upstream.requests()[0]["stream"], true);

    let records = gateway.records().await;
    let seen: Vec<(UsageStatus, u64, u64)> = records
        .iter()
        .map(|r| (r.status, r.prompt_tokens, r.completion_tokens))
        .collect();
    assert_eq!(
        seen,
        vec![(UsageStatus::Ok, 30, 6), (UsageStatus::Ok, 30, 2)]
    );
    assert!(gateway.metrics().await.contains(
        "maestro_gateway_tokens_total{upstream=\"claude\",model=\"team-model\",key=\"\",kind=\"completion\"} 8"
    ));
}

#[tokio::test]
async fn tool_calls_and_tool_results_are_translated_both_ways_whole_and_streamed() {
    let upstream = ScriptedAnthropic::start([
        Turn::tool_call("Read", json!({"path": "src/main.rs"})).with_usage(40, 9),
        Turn::tool_call("Read", json!({"path": "Cargo.toml"})).with_usage(40, 9),
    ])
    .await;
    let gateway = gateway_over(&upstream, json!({})).await;
    let tools = json!([{"type": "function", "function": {"name": "Read",
        "description": "Reads a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]);
    // A conversation that already holds a tool call and its result.
    let messages = json!([
        {"role": "user", "content": "Read the files."},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "toolu_1", "type": "function",
            "function": {"name": "Read", "arguments": "{\"path\":\"README.md\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "# Readme"},
    ]);

    let answer = post(
        &gateway,
        "/chat/completions",
        json!({"model": "team-model", "messages": messages, "tools": tools,
               "tool_choice": "required"}),
    )
    .await;
    let body: Value = answer.json().await.unwrap();
    let message = &body["choices"][0]["message"];
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    let call = &message["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "Read");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"path": "src/main.rs"}));

    let sent = &upstream.requests()[0];
    assert_eq!(
        sent["tools"],
        json!([{"name": "Read", "description": "Reads a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}])
    );
    assert_eq!(sent["tool_choice"], json!({"type": "any"}));
    assert_eq!(
        sent["messages"][1],
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
               "name": "Read", "input": {"path": "README.md"}}]})
    );
    assert_eq!(
        sent["messages"][2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
               "content": "# Readme"}]})
    );

    let answer = post(
        &gateway,
        "/chat/completions",
        json!({"model": "team-model", "messages": messages, "tools": tools, "stream": true}),
    )
    .await;
    let (data, errors) = sse_data(&answer.text().await.unwrap());
    assert_eq!(errors, Vec::<Value>::new());
    let (mut name, mut arguments, mut id) = (String::new(), String::new(), String::new());
    let mut finish = None;
    for chunk in data.iter().filter(|d| *d != "[DONE]") {
        let chunk: Value = serde_json::from_str(chunk).unwrap();
        for call in chunk["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert_eq!(call["index"], 0);
            id.push_str(call["id"].as_str().unwrap_or_default());
            name.push_str(call["function"]["name"].as_str().unwrap_or_default());
            arguments.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
        if let Some(reason) = chunk["choices"][0]["finish_reason"].as_str() {
            finish = Some(reason.to_string());
        }
    }
    assert_eq!(name, "Read");
    assert!(id.starts_with("toolu_"), "{id}");
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({"path": "Cargo.toml"})
    );
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    let records = gateway.records().await;
    assert_eq!(records.len(), 2);
    assert!(
        records
            .iter()
            .all(|r| r.status == UsageStatus::Ok && r.completion_tokens == 9)
    );
}

#[tokio::test]
async fn an_overloaded_anthropic_upstream_fails_over_to_the_next_one_and_cools_down() {
    let overloaded = ScriptedAnthropic::start([
        Turn::http_error(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        Turn::raw(
            "text/event-stream",
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        ),
    ])
    .await;
    let second = ScriptedAnthropic::start([
        Turn::text("From the second.").with_usage(5, 3),
        Turn::text("Streamed from the second.").with_usage(5, 4),
    ])
    .await;
    let config = serde_json::from_value(json!({
        "upstreams": {
            "first": {"kind": "anthropic", "base_url": overloaded.base_url()},
            "second": {"kind": "anthropic", "base_url": second.base_url()},
        },
        "models": {"team-model": [
            {"upstream": "first", "model": "claude-a"},
            {"upstream": "second", "model": "claude-b", "weight": 0},
        ]},
        "cooldown_secs": 0,
    }))
    .unwrap();
    let gateway = support::serve_config(config, &[]).await;
    let messages = json!([{"role": "user", "content": "Hi"}]);
    let answer = post(
        &gateway,
        "/chat/completions",
        json!({"model": "team-model", "messages": messages}),
    )
    .await;
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "From the second.");
    // An `error` event before the first chunk reached the client fails over too.
    let answer = post(
        &gateway,
        "/chat/completions",
        json!({"model": "team-model", "messages": messages, "stream": true}),
    )
    .await;
    let (data, errors) = sse_data(&answer.text().await.unwrap());
    assert_eq!(errors, Vec::<Value>::new());
    assert_eq!(data.last().unwrap(), "[DONE]");
    assert_eq!(overloaded.requests().len(), 2);
    assert_eq!(second.requests()[0]["model"], "claude-b");

    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(
            "maestro_gateway_upstream_failures_total{upstream=\"first\",reason=\"status_5xx\"} 2"
        ),
        "{metrics}"
    );
    let records = gateway.records().await;
    let seen: Vec<(Option<String>, UsageStatus)> = records
        .iter()
        .map(|r| (r.upstream.clone(), r.status))
        .collect();
    assert_eq!(
        seen,
        vec![
            (Some("second".into()), UsageStatus::Ok),
            (Some("second".into()), UsageStatus::Ok)
        ]
    );
}

#[tokio::test]
async fn a_stream_cut_or_an_error_event_after_the_first_chunk_ends_with_an_sse_error() {
    let upstream = ScriptedAnthropic::start([
        Turn::broken_stream(4),
        Turn::truncated_stream(4),
        Turn::raw(
            "text/event-stream",
            concat!(
                "event: message_start\n",
                "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-x\",\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n",
                "event: content_block_start\n",
                "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
                "event: content_block_delta\n",
                "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me \"}}\n\n",
                "event: error\n",
                "data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            ),
        ),
    ])
    .await;
    let gateway = gateway_over(&upstream, json!({})).await;
    let messages = json!([{"role": "user", "content": "Hi"}]);
    let mut details = Vec::new();
    for _ in 0..3 {
        let answer = post(
            &gateway,
            "/chat/completions",
            json!({"model": "team-model", "messages": messages, "stream": true}),
        )
        .await;
        assert_eq!(answer.status(), 200);
        let (data, errors) = sse_data(&answer.text().await.unwrap());
        assert!(
            !data.iter().any(|d| d == "[DONE]"),
            "a cut stream has no [DONE]: {data:?}"
        );
        assert!(!data.is_empty(), "the first chunks reached the client");
        assert_eq!(errors.len(), 1, "{data:?}");
        assert_eq!(errors[0]["error"]["code"], "stream_cut");
        details.push(errors[0]["error"]["message"].as_str().unwrap().to_string());
    }
    assert!(
        details
            .iter()
            .all(|d| d.starts_with("the upstream claude broke off the stream")),
        "{details:?}"
    );
    assert!(details[1].contains("message_stop"), "{}", details[1]);
    assert!(
        details[2].contains("overloaded_error: Overloaded"),
        "{}",
        details[2]
    );
    let records = gateway.records().await;
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r.status == UsageStatus::Cut));
    assert_eq!(
        records[2].prompt_tokens, 7,
        "what the stream reported counts"
    );
}

#[tokio::test]
async fn embeddings_are_refused_for_an_anthropic_target_or_served_by_one_that_can() {
    let upstream = ScriptedAnthropic::start([]).await;
    let openai = ScriptedLlm::start([]).await;
    let config = serde_json::from_value(json!({
        "upstreams": {
            "claude": {"kind": "anthropic", "base_url": upstream.base_url()},
            "local": {"kind": "openai", "base_url": openai.base_url()},
        },
        "models": {
            "team-model": [{"upstream": "claude", "model": "claude-x"}],
            "mixed": [{"upstream": "claude", "model": "claude-x"},
                      {"upstream": "local", "model": "embed-small", "weight": 0}],
        },
    }))
    .unwrap();
    let gateway = support::serve_config(config, &[]).await;
    let answer = post(
        &gateway,
        "/embeddings",
        json!({"model": "team-model", "input": "one two"}),
    )
    .await;
    assert_eq!(answer.status(), 400);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "endpoint_unsupported");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("claude") && message.contains("no embeddings"),
        "{message}"
    );
    assert_eq!(upstream.recorded().len(), 0, "nothing was sent to it");

    let answer = post(
        &gateway,
        "/embeddings",
        json!({"model": "mixed", "input": "one two"}),
    )
    .await;
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_request_the_messages_api_cannot_take_is_a_400_naming_the_upstream_and_field() {
    let upstream = ScriptedAnthropic::start([]).await;
    let gateway = gateway_over(&upstream, json!({})).await;
    let answer = post(
        &gateway,
        "/chat/completions",
        json!({"model": "team-model", "n": 3, "messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(answer.status(), 400);
    let body: Value = answer.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("upstream claude") && message.contains("n: "),
        "{message}"
    );
    assert_eq!(upstream.recorded().len(), 0);
    // The upstream's own refusal reaches the client in OpenAI's shape.
    let refusing = ScriptedAnthropic::builder()
        .api_key("another")
        .start()
        .await;
    let gateway = gateway_over(&refusing, json!({})).await;
    let answer = post(
        &gateway,
        "/chat/completions",
        json!({"model": "team-model", "messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(answer.status(), 401);
    let text = answer.text().await.unwrap();
    assert!(!text.contains(KEY), "the key is never shown: {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("upstream claude refused the request (HTTP 401): invalid x-api-key"),
        "{body}"
    );
    let records = gateway.records().await;
    assert_eq!(records[0].status, UsageStatus::Rejected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_openai_python,
    ignore = "needs the Python package openai: python3 -m pip install openai==3.51.0 (scripts/prerequisites.sh)"
)]
async fn the_openai_python_client_chats_streams_and_calls_tools_through_an_anthropic_upstream() {
    let upstream = ScriptedAnthropic::builder()
        .api_key(KEY)
        .turns([
            Turn::text("Hello!").with_usage(12, 2),
            Turn::text("Hello, streamed.").with_usage(12, 4),
            Turn::text("Hello again.").with_usage(12, 3),
            Turn::tool_call("Read", json!({"path": "src/main.rs"})).with_usage(30, 9),
            Turn::tool_call("Read", json!({"path": "Cargo.toml"})).with_usage(30, 9),
        ])
        .start()
        .await;
    let cutting = ScriptedAnthropic::start([Turn::broken_stream(3)]).await;
    let overloaded = ScriptedAnthropic::start([Turn::http_error(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    )])
    .await;
    let mut config: maestro_gateway::GatewayConfig = serde_json::from_value(json!({
        "upstreams": {
            "overloaded": {"kind": "anthropic", "base_url": overloaded.base_url()},
            "claude": {"kind": "anthropic", "base_url": upstream.base_url(), "api_key_env": KEY_VAR},
            "cutting": {"kind": "anthropic", "base_url": cutting.base_url()},
        },
        "models": {
            "team-model": [{"upstream": "overloaded", "model": "claude-a"},
                           {"upstream": "claude", "model": "claude-x", "weight": 0}],
            "cut-model": [{"upstream": "cutting", "model": "claude-x"}],
        },
    }))
    .unwrap();
    config
        .read_keys(|var| (var == KEY_VAR).then(|| KEY.to_string()))
        .unwrap();
    let gateway = support::serve_config(config, &["claude-x"]).await;

    let seen = run_client(
        &gateway.base_url(),
        &["team-model", "", "cut-model", "tools"],
    )
    .await;
    assert_eq!(seen["chat"]["content"], "Hello!");
    assert_eq!(seen["chat"]["prompt_tokens"], 12);
    assert_eq!(seen["stream"]["content"], "Hello, streamed.");
    assert_eq!(seen["stream"]["usage_chunks"], 0);
    assert_eq!(seen["stream_usage"], 3);
    assert_eq!(
        seen["tool"],
        json!({"name": "Read", "arguments": {"path": "src/main.rs"}})
    );
    assert_eq!(
        seen["stream_tool"],
        json!({"name": "Read", "arguments": {"path": "Cargo.toml"}})
    );
    let cut = seen["cut"].as_str().unwrap();
    assert!(
        cut.starts_with("APIError: ") && cut.contains("broke off the stream"),
        "{cut}"
    );
    assert_eq!(overloaded.requests().len(), 1, "the 529 failed over once");

    let records = gateway.records().await;
    let statuses: Vec<(String, Option<String>, UsageStatus, u64)> = records
        .iter()
        .map(|r| {
            (
                r.model.clone(),
                r.upstream.clone(),
                r.status,
                r.completion_tokens,
            )
        })
        .collect();
    let claude = Some("claude".to_string());
    assert_eq!(
        statuses,
        vec![
            ("team-model".into(), claude.clone(), UsageStatus::Ok, 2),
            ("team-model".into(), claude.clone(), UsageStatus::Ok, 4),
            ("team-model".into(), claude.clone(), UsageStatus::Ok, 3),
            ("team-model".into(), claude.clone(), UsageStatus::Ok, 9),
            ("team-model".into(), claude, UsageStatus::Ok, 9),
            (
                "cut-model".into(),
                Some("cutting".into()),
                UsageStatus::Cut,
                0
            ),
        ]
    );
    assert!(records[..5].iter().all(|r| r.cost_usd.is_some()));
}

#[test]
fn max_tokens_is_refused_on_an_openai_upstream_and_when_zero() {
    for (kind, max_tokens, expected) in [
        (
            "openai",
            100,
            "is read only for `kind: anthropic` upstreams",
        ),
        ("anthropic", 0, "must be at least 1"),
    ] {
        let config: maestro_gateway::GatewayConfig = serde_json::from_value(json!({
            "upstreams": {"u": {"kind": kind, "base_url": "http://127.0.0.1:9", "max_tokens": max_tokens}},
            "models": {"m": [{"upstream": "u", "model": "x"}]},
        }))
        .unwrap();
        let checks = config.check();
        assert_eq!(checks.len(), 1, "{checks:?}");
        assert_eq!(
            checks[0].field,
            ["gateway", "upstreams", "u", "max_tokens"].map(String::from)
        );
        assert_eq!(checks[0].message, expected);
    }
}
