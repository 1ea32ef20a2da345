//! Streaming and plain answers against the scripted server: text, tool-call deltas, usage, and
//! the fallbacks when an endpoint refuses `stream_options` or streaming.

use crate::common;

use common::{Events, ask, client, config, read_tool};
use maestro_llm::{ChatResponse, Provider};
use maestro_protocol::{ToolCall, ToolSpec, Usage};
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::json;

#[tokio::test]
async fn streams_text_and_reports_each_delta() {
    let server = ScriptedLlm::start([Turn::text("Hello there, streaming world.")
        .with_usage(12, 7)
        .answered_by("served-model-7")])
    .await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(
        answer,
        ChatResponse {
            content: "Hello there, streaming world.".into(),
            tool_calls: vec![],
            usage: Usage {
                prompt_tokens: 12,
                completion_tokens: 7,
                total_tokens: 19,
                cached_prompt_tokens: 0,
                estimated: false
            },
            finish_reason: Some("stop".into()),
            // The model the endpoint says answered, not the one asked for.
            model: Some("served-model-7".into()),
        }
    );
    assert!(
        events.all().len() >= 2,
        "text should arrive in several deltas: {:?}",
        events.all()
    );
    assert_eq!(events.text(), "Hello there, streaming world.");
    let sent = &server.requests()[0];
    assert_eq!(sent["stream"], json!(true));
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        sent["messages"],
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    );
}

#[tokio::test]
async fn calls_one_after_another_reuse_one_connection() {
    // A stream read to its end ([DONE], then the body's end) gives its connection back: the
    // next call does not open another one.
    let server = ScriptedLlm::start([
        Turn::text("one").with_usage(3, 1),
        Turn::text("two"),
        Turn::text("three").with_usage(3, 1),
    ])
    .await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    for expected in ["one", "two", "three"] {
        let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
        assert_eq!(answer.content, expected);
    }
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn interleaved_tool_call_deltas_are_assembled_by_index() {
    let server = ScriptedLlm::start([Turn::tool_calls([
        ("Read", json!({"path": "src/lib.rs"})),
        ("Grep", json!({"pattern": "fn main", "path": "."})),
        ("Bash", json!({"command": "cargo test --workspace"})),
    ])
    .with_text("Looking around.")])
    .await;
    let llm = client(config(server.base_url()));
    let mut request = ask("explore");
    request.tools = vec![read_tool()].into();
    let answer = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(answer.content, "Looking around.");
    assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        answer.tool_calls,
        vec![
            ToolCall {
                id: "call_1_0".into(),
                name: "Read".into(),
                arguments: r#"{"path":"src/lib.rs"}"#.into()
            },
            ToolCall {
                id: "call_1_1".into(),
                name: "Grep".into(),
                arguments: r#"{"pattern":"fn main","path":"."}"#.into()
            },
            ToolCall {
                id: "call_1_2".into(),
                name: "Bash".into(),
                arguments: r#"{"command":"cargo test --workspace"}"#.into()
            },
        ]
    );
    assert_eq!(
        server.requests()[0]["tools"],
        json!([{"type": "function", "function": {
            "name": "Read", "description": "Reads a file of the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}])
    );
}

#[tokio::test]
async fn usage_is_estimated_when_the_endpoint_reports_none() {
    let server = ScriptedLlm::start([Turn::text("abcdefgh")]).await;
    let llm = client(config(server.base_url()));
    let answer = llm.chat(ask("hi"), &|_| {}).await.unwrap();
    assert!(answer.usage.estimated);
    assert_eq!(
        answer.usage.completion_tokens, 2,
        "8 characters are about 2 tokens"
    );
    assert!(answer.usage.prompt_tokens > 0);
    assert_eq!(answer.usage.total_tokens, answer.usage.prompt_tokens + 2);
}

#[tokio::test]
async fn non_streaming_config_sends_stream_false_and_reads_the_whole_answer() {
    let server =
        ScriptedLlm::start([Turn::tool_call("Read", json!({"path": "a"})).with_usage(3, 4)]).await;
    let llm = client(config(server.base_url()).with_stream(false));
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(
        answer.tool_calls,
        vec![ToolCall {
            id: "call_1_0".into(),
            name: "Read".into(),
            arguments: r#"{"path":"a"}"#.into()
        }]
    );
    assert_eq!(
        answer.usage,
        Usage {
            prompt_tokens: 3,
            completion_tokens: 4,
            total_tokens: 7,
            cached_prompt_tokens: 0,
            estimated: false
        }
    );
    let sent = &server.requests()[0];
    assert_eq!(
        (sent["stream"].clone(), sent.get("stream_options")),
        (json!(false), None)
    );
}

#[tokio::test]
async fn refused_stream_options_are_dropped_and_remembered() {
    let server = ScriptedLlm::builder()
        .reject_stream_options()
        .turns([Turn::text("one"), Turn::text("two")])
        .start()
        .await;
    let llm = client(config(server.base_url()));
    assert_eq!(llm.chat(ask("a"), &|_| {}).await.unwrap().content, "one");
    assert_eq!(llm.chat(ask("b"), &|_| {}).await.unwrap().content, "two");
    let options: Vec<bool> = server
        .requests()
        .iter()
        .map(|r| r.get("stream_options").is_some())
        .collect();
    assert_eq!(
        options,
        vec![true, false, false],
        "refused once, then never sent again"
    );
    assert!(server.requests().iter().all(|r| r["stream"] == json!(true)));
}

#[tokio::test]
async fn refused_streaming_falls_back_to_plain_answers_and_remembers() {
    let server = ScriptedLlm::builder()
        .reject_streaming()
        .turns([Turn::text("plain one"), Turn::text("plain two")])
        .start()
        .await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    assert_eq!(
        llm.chat(ask("a"), &events.sink()).await.unwrap().content,
        "plain one"
    );
    assert_eq!(
        events.text(),
        "plain one",
        "a plain answer is still reported as text"
    );
    assert_eq!(
        llm.chat(ask("b"), &|_| {}).await.unwrap().content,
        "plain two"
    );
    let streams: Vec<bool> = server
        .requests()
        .iter()
        .map(|r| r["stream"].as_bool().unwrap())
        .collect();
    assert_eq!(streams, vec![true, false, false]);
}

#[tokio::test]
async fn response_schema_requests_carry_json_schema_and_no_tools() {
    let server = ScriptedLlm::start([Turn::json(json!({"rule": 2}))]).await;
    let llm = client(config(server.base_url()));
    let mut request = ask("which rule?");
    request.tools = vec![ToolSpec {
        name: "X".into(),
        description: "x".into(),
        input_schema: json!({}).into(),
    }]
    .into();
    request.response_schema = Some(maestro_llm::ResponseSchema {
        name: "judge".into(),
        schema: json!({"type": "object", "properties": {"rule": {"type": "integer"}}, "required": ["rule"]}),
    });
    let answer = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&answer.content).unwrap(),
        json!({"rule": 2})
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.get("tools"), None);
    assert_eq!(
        sent["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "judge", "strict": true,
            "schema": {"type": "object", "properties": {"rule": {"type": "integer"}}, "required": ["rule"]}}})
    );
}

#[tokio::test]
async fn concurrent_callers_are_routed_by_message_content() {
    let server = ScriptedLlm::start([
        Turn::when_contains("ARCH-REVIEW", Turn::text("architecture ok")),
        Turn::when_contains("SEC-REVIEW", Turn::text("security ok")),
    ])
    .await;
    let llm = client(config(server.base_url()));
    let (sec, arch) = tokio::join!(
        llm.chat(ask("SEC-REVIEW please"), &|_| {}),
        llm.chat(ask("ARCH-REVIEW please"), &|_| {})
    );
    assert_eq!(
        (sec.unwrap().content, arch.unwrap().content),
        ("security ok".into(), "architecture ok".into())
    );
    assert_eq!(server.remaining(), 0);
}
