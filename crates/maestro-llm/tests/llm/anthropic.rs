//! The Anthropic provider against a server speaking the Messages API as documented: text, a tool
//! use round trip, usage with cache counts, an error event mid-stream, a cut stream, a refused key.

use crate::common;

use std::sync::Arc;

use common::{Events, fast_retry, read_tool};
use maestro_llm::anthropic::Anthropic;
use maestro_llm::{
    ChatRequest, LlmError, Message, ModelClient, OpenAiConfig, Provider, ProviderKind,
    ResponseSchema,
};
use maestro_protocol::{Secret, ToolCall, Usage};
use maestro_testkit::{ScriptedAnthropic, Turn};
use pretty_assertions::assert_eq;
use serde_json::json;

const KEY: &str = "sk-ant-test-0123456789abcdef";

fn config(server: &ScriptedAnthropic) -> OpenAiConfig {
    OpenAiConfig::new(server.base_url())
        .with_api_key(Secret::new(KEY))
        .with_retry(fast_retry(3))
        .with_idle_timeout(std::time::Duration::from_secs(5))
}

fn client(server: &ScriptedAnthropic) -> Anthropic {
    Anthropic::new(config(server)).unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        model: "claude-test".into(),
        messages: vec![
            Message::System {
                content: "Be brief.".into(),
            },
            Message::user(text),
        ],
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn a_streamed_text_answer_with_its_usage_and_model() {
    let server = ScriptedAnthropic::builder()
        .api_key(KEY)
        .cache_tokens(100, 20)
        .turns([Turn::text("Hello there.")
            .with_usage(12, 5)
            .answered_by("claude-test-20250101")])
        .start()
        .await;
    let llm = client(&server);
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(answer.content, "Hello there.");
    assert_eq!(events.text(), "Hello there.");
    assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
    assert_eq!(answer.model.as_deref(), Some("claude-test-20250101"));
    assert_eq!(
        answer.usage,
        Usage {
            prompt_tokens: 132,
            completion_tokens: 5,
            total_tokens: 137,
            cached_prompt_tokens: 100,
            estimated: false
        }
    );
    let recorded = &server.recorded()[0];
    assert_eq!(recorded.path, "/v1/messages");
    assert_eq!(recorded.header("x-api-key"), Some(KEY));
    assert_eq!(recorded.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(recorded.header("authorization"), None);
    assert_eq!(
        recorded.body,
        json!({"model": "claude-test", "max_tokens": 4096, "system": "Be brief.",
               "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
               "stream": true})
    );
}

#[tokio::test]
async fn a_tool_use_round_trip() {
    let server = ScriptedAnthropic::start([
        Turn::tool_call("Read", json!({"path": "src/main.rs"}))
            .with_text("Let me look.")
            .with_usage(50, 20),
        Turn::text("It prints hello.").with_usage(80, 6),
    ])
    .await;
    let llm = client(&server);
    let mut request = ask("What does main do?");
    request.tools = Arc::from(vec![read_tool()]);
    request.temperature = Some(0.5);
    request.max_tokens = Some(256);
    request.headers = vec![("X-Maestro-Job".into(), "job-7".into())];
    let first = llm.chat(request.clone(), &|_| {}).await.unwrap();
    assert_eq!(first.content, "Let me look.");
    assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        first.tool_calls,
        vec![ToolCall {
            id: "toolu_scripted_1_0".into(),
            name: "Read".into(),
            arguments: r#"{"path":"src/main.rs"}"#.into(),
        }]
    );
    request.messages.push(Message::Assistant {
        content: first.content.clone(),
        tool_calls: first.tool_calls.clone(),
    });
    request.messages.push(Message::Tool {
        tool_call_id: "toolu_scripted_1_0".into(),
        content: "fn main() { println!(\"hello\"); }".into(),
    });
    let second = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(second.content, "It prints hello.");
    assert_eq!(second.usage.total_tokens, 86);

    let sent = server.requests();
    assert_eq!(
        sent[0]["tools"],
        json!([{"name": "Read", "description": "Reads a file of the workspace.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                                 "required": ["path"]}}])
    );
    assert_eq!(sent[0]["temperature"], 0.5);
    assert_eq!(sent[0]["max_tokens"], 256);
    assert_eq!(
        sent[1]["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "What does main do?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_scripted_1_0", "name": "Read",
                 "input": {"path": "src/main.rs"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_scripted_1_0",
                "content": "fn main() { println!(\"hello\"); }"}]},
        ])
    );
    assert!(
        server
            .recorded()
            .iter()
            .all(|r| r.header("x-maestro-job") == Some("job-7"))
    );
}

#[tokio::test]
async fn without_streaming_the_message_is_read_whole() {
    let server = ScriptedAnthropic::start([
        Turn::tool_call("Read", json!({"path": "a.rs"})).with_usage(9, 4)
    ])
    .await;
    let llm = Anthropic::new(config(&server).with_stream(false)).unwrap();
    let mut request = ask("read");
    request.tools = Arc::from(vec![read_tool()]);
    let answer = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(answer.tool_calls[0].arguments, r#"{"path":"a.rs"}"#);
    assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(answer.usage.total_tokens, 13);
    assert_eq!(answer.model.as_deref(), Some("claude-test"));
    assert_eq!(server.requests()[0].get("stream"), Some(&json!(false)));
}

#[tokio::test]
async fn a_judge_schema_becomes_an_instruction_and_no_usage_is_estimated() {
    let server = ScriptedAnthropic::start([Turn::json(json!({"score": 4}))]).await;
    let llm = client(&server);
    let mut request = ask("Score it.");
    request.response_schema = Some(ResponseSchema {
        name: "verdict".into(),
        schema: json!({"type": "object", "required": ["score"]}),
    });
    let answer = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(answer.content, r#"{"score":4}"#);
    assert!(answer.usage.estimated && answer.usage.prompt_tokens > 0);
    let system = server.requests()[0]["system"].as_str().unwrap().to_string();
    assert!(
        system.starts_with("Be brief.\n\n") && system.contains(r#""required":["score"]"#),
        "{system}"
    );
}

#[tokio::test]
async fn an_overloaded_error_event_is_retried_then_reported_clearly() {
    let server = ScriptedAnthropic::start([
        Turn::anthropic_error_event("overloaded_error", "Overloaded"),
        Turn::text("recovered"),
        Turn::anthropic_error_event("overloaded_error", "Overloaded"),
        Turn::anthropic_error_event("overloaded_error", "Overloaded"),
        Turn::anthropic_error_event("overloaded_error", "Overloaded"),
    ])
    .await;
    let llm = client(&server);
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(answer.content, "recovered");
    assert_eq!(events.retries().len(), 1);
    let error = llm.chat(ask("again"), &|_| {}).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the model's stream broke: the Anthropic API sent an error event mid-stream: \
         overloaded_error: Overloaded"
    );
    assert!(error.is_infrastructure());
    assert_eq!(server.remaining(), 0, "three attempts were made");
}

#[tokio::test]
async fn a_refusing_error_event_is_final() {
    let server = ScriptedAnthropic::start([Turn::anthropic_error_event(
        "invalid_request_error",
        "messages: text content blocks must be non-empty",
    )])
    .await;
    let error = client(&server).chat(ask("hi"), &|_| {}).await.unwrap_err();
    assert!(
        matches!(&error, LlmError::Http { status: 400, message } if message.contains("non-empty")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_cut_stream_is_retried_as_the_openai_client_does() {
    let server = ScriptedAnthropic::start([
        Turn::broken_stream(4),
        Turn::truncated_stream(5),
        Turn::text("complete answer").with_usage(3, 2),
    ])
    .await;
    let llm = client(&server);
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(answer.content, "complete answer");
    let retries = events.retries();
    assert_eq!(retries.len(), 2);
    assert!(
        retries
            .iter()
            .all(|r| r.2.starts_with("the model's stream broke")),
        "{retries:?}"
    );
    assert_eq!(
        retries[1].2,
        "the model's stream broke: the stream ended before message_stop"
    );
}

#[tokio::test]
async fn an_overloaded_529_is_retried_and_a_refused_key_is_a_clear_error_without_it() {
    let server = ScriptedAnthropic::builder()
        .api_key("sk-ant-the-right-one")
        .start()
        .await;
    let llm = client(&server);
    let events = Events::default();
    let error = llm.chat(ask("hi"), &events.sink()).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the model endpoint answered HTTP 401: invalid x-api-key; check the API key sent as \
         x-api-key (llm.api_key_env or MAESTRO_API_KEY)"
    );
    assert!(events.retries().is_empty(), "a refused key is not retried");
    let debug = format!("{llm:?} {error:?}");
    assert!(!debug.contains(KEY), "{debug}");

    let server = ScriptedAnthropic::start([
        Turn::http_error(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        Turn::text("ok"),
    ])
    .await;
    let events = Events::default();
    assert_eq!(
        client(&server)
            .chat(ask("hi"), &events.sink())
            .await
            .unwrap()
            .content,
        "ok"
    );
    assert_eq!(
        events.retries()[0].2,
        "the model endpoint answered HTTP 529: Overloaded"
    );
}

#[tokio::test]
async fn a_key_echoed_by_the_endpoint_is_redacted() {
    let echo = format!(
        r#"{{"type":"error","error":{{"type":"api_error","message":"bad key {KEY} here"}}}}"#
    );
    let server = ScriptedAnthropic::start([
        Turn::http_error(500, echo.clone()),
        Turn::http_error(403, echo),
    ])
    .await;
    let llm = client(&server);
    let events = Events::default();
    let error = llm.chat(ask("hi"), &events.sink()).await.unwrap_err();
    assert!(!error.to_string().contains(KEY), "{error}");
    assert!(error.to_string().contains("bad key *** here"), "{error}");
    assert!(events.retries().iter().all(|r| !r.2.contains(KEY)));
}

#[tokio::test]
async fn model_client_picks_the_api_the_configuration_names() {
    let server = ScriptedAnthropic::start([Turn::text("from anthropic")]).await;
    let llm = ModelClient::new(ProviderKind::Anthropic, config(&server)).unwrap();
    assert!(matches!(llm, ModelClient::Anthropic(_)));
    assert_eq!(
        llm.chat(ask("hi"), &|_| {}).await.unwrap().content,
        "from anthropic"
    );
    let openai = ModelClient::new(ProviderKind::default(), config(&server)).unwrap();
    assert!(matches!(openai, ModelClient::OpenAi(_)));
    assert_eq!(
        serde_json::to_value(ProviderKind::Anthropic).unwrap(),
        json!("anthropic")
    );
    assert_eq!(
        serde_json::from_value::<ProviderKind>(json!("openai")).unwrap(),
        ProviderKind::OpenAi
    );
}

#[tokio::test]
async fn a_prompt_too_long_is_a_context_overflow_and_the_window_defaults_to_200k() {
    let server = ScriptedAnthropic::start([Turn::http_error(
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
    )])
    .await;
    let llm = client(&server);
    let error = llm.chat(ask("hi"), &|_| {}).await.unwrap_err();
    assert!(
        matches!(&error, LlmError::ContextOverflow { status: 400, message } if message.contains("210000 tokens")),
        "{error:?}"
    );
    assert_eq!(llm.context_length("claude-test").await, Some(200_000));
    let configured = Anthropic::new(config(&server).with_context_length(1_000_000)).unwrap();
    assert_eq!(
        configured.context_length("claude-test").await,
        Some(1_000_000)
    );
}

#[tokio::test]
async fn a_silent_stream_times_out_and_an_endless_one_hits_the_answer_cap() {
    let server = ScriptedAnthropic::start([
        Turn::stall(std::time::Duration::from_secs(3)),
        Turn::text("after the stall"),
        Turn::endless(),
    ])
    .await;
    let llm = Anthropic::new(
        config(&server)
            .with_idle_timeout(std::time::Duration::from_millis(300))
            .with_max_answer_tokens(50),
    )
    .unwrap();
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(answer.content, "after the stall");
    assert_eq!(
        events.retries()[0].2,
        "the model call timed out: no data on the stream for 300 ms (idle_timeout)"
    );
    let error = llm.chat(ask("again"), &|_| {}).await.unwrap_err();
    assert_eq!(
        error,
        LlmError::AnswerTooLarge {
            limit: "50 tokens (llm.max_answer_tokens)".into()
        }
    );
}

#[tokio::test]
async fn an_image_part_is_sent_as_a_base64_image_block() {
    let server = ScriptedAnthropic::builder()
        .api_key(KEY)
        .turns([Turn::text("A square.")])
        .start()
        .await;
    let pixels = b"\x89PNG\r\n\x1a\n pretend pixels".to_vec();
    let request = ChatRequest {
        model: "claude-test".into(),
        messages: vec![Message::User {
            content: "What is it?".into(),
            images: vec![maestro_llm::ImagePart::new(
                "image/png",
                4,
                4,
                pixels.clone(),
            )],
        }],
        ..ChatRequest::default()
    };
    client(&server).chat(request, &|_| {}).await.unwrap();
    use base64::Engine as _;
    assert_eq!(
        server.requests()[0]["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "What is it?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                "data": base64::engine::general_purpose::STANDARD.encode(&pixels)}},
        ]}])
    );
}
