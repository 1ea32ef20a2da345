//! The client against a real OpenAI-compatible server (llama.cpp with SmolLM2-135M, see
//! `docs/llm.md`). They are ignored by default, so a plain run reports them as skipped;
//! `scripts/test.sh` runs them (`--run-ignored only`) when `MAESTRO_TEST_LLM_URL` names the
//! server's `…/v1` root:
//!
//! ```text
//! bash /work/shared/tools/local-llm.sh start 8088
//! MAESTRO_TEST_LLM_URL=http://127.0.0.1:8088/v1 cargo nextest run -p maestro-llm --test real_model --run-ignored only
//! ```
//!
//! The model is tiny: the tests check the plumbing (streaming, usage, schema-constrained tool
//! calls, context detection), not the quality of answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "llm/common/mod.rs"]
mod common;

use common::Events;
use maestro_llm::{ChatRequest, Message, OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_protocol::ToolSpec;
use serde_json::{Value, json};

/// The server's base URL. The tests are `#[ignore]`d, so this runs only when asked for; without
/// the variable the test fails, saying what to set.
fn server_url() -> String {
    match std::env::var("MAESTRO_TEST_LLM_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "set MAESTRO_TEST_LLM_URL (e.g. http://127.0.0.1:8088/v1) to run the real-model tests"
        ),
    }
}

fn model() -> String {
    std::env::var("MAESTRO_TEST_LLM_MODEL").unwrap_or_else(|_| "smollm2".into())
}

fn chat(text: &str) -> ChatRequest {
    ChatRequest {
        model: model(),
        messages: vec![
            Message::System {
                content: "You are a helpful assistant.".into(),
            },
            Message::user(text),
        ],
        temperature: Some(0.0),
        max_tokens: Some(48),
        ..ChatRequest::default()
    }
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Gets the current weather of a city.".into(),
        input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}).into(),
    }
}

#[tokio::test]
#[ignore = "needs a real model server: set MAESTRO_TEST_LLM_URL (scripts/test.sh then runs it)"]
async fn streams_a_real_answer_with_usage() {
    let url = server_url();
    let llm = OpenAiCompat::new(OpenAiConfig::new(url)).unwrap();
    let events = Events::default();
    let answer = llm
        .chat(chat("Say hello in one short sentence."), &events.sink())
        .await
        .unwrap();
    println!("answer: {answer:?}");
    assert!(!answer.content.trim().is_empty());
    assert!(
        events.all().len() > 1,
        "a real answer streams in several deltas"
    );
    assert_eq!(events.text(), answer.content);
    assert!(events.retries().is_empty());
    assert!(
        !answer.usage.estimated,
        "llama.cpp reports usage with stream_options.include_usage"
    );
    assert!(
        answer.usage.prompt_tokens > 10 && answer.usage.completion_tokens > 0,
        "{:?}",
        answer.usage
    );
    assert_eq!(
        answer.usage.total_tokens,
        answer.usage.prompt_tokens + answer.usage.completion_tokens
    );
}

#[tokio::test]
#[ignore = "needs a real model server: set MAESTRO_TEST_LLM_URL (scripts/test.sh then runs it)"]
async fn json_tool_mode_yields_a_parseable_tool_call() {
    let url = server_url();
    let llm = OpenAiCompat::new(OpenAiConfig::new(url).with_tool_mode(ToolMode::Json)).unwrap();
    let mut request = chat("What is the weather in Paris? Use the get_weather tool.");
    request.max_tokens = Some(120);
    request.tools = vec![weather_tool()].into();
    let answer = llm.chat(request, &|_| {}).await.unwrap();
    println!("answer: {answer:?}");
    assert_eq!(
        answer.tool_calls.len(),
        1,
        "the schema-constrained answer is a tool call: {answer:?}"
    );
    let call = &answer.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
    assert!(arguments["city"].is_string(), "{arguments}");
    assert!(call.id.starts_with("call_"));
}

#[tokio::test]
#[ignore = "needs a real model server: set MAESTRO_TEST_LLM_URL (scripts/test.sh then runs it)"]
async fn auto_mode_settles_from_the_first_real_request() {
    let url = server_url();
    let llm = OpenAiCompat::new(OpenAiConfig::new(url).with_tool_mode(ToolMode::Auto)).unwrap();
    let mut request = chat("What is the weather in Paris? Use the get_weather tool.");
    request.max_tokens = Some(120);
    request.tools = vec![weather_tool()].into();
    let events = Events::default();
    let answer = llm.chat(request, &events.sink()).await.unwrap();
    let changes = events.tool_mode_changes();
    println!("answer: {answer:?}; tool-mode changes: {changes:?}");
    let expected = match (changes.as_slice(), answer.tool_calls.is_empty()) {
        ([], false) => ToolMode::Native,
        ([], true) => ToolMode::Auto,
        ([(mode, _)], _) => *mode,
        (more, _) => panic!("the mode changes at most once: {more:?}"),
    };
    assert_eq!(llm.tool_mode_for(&model()), expected);
}

#[tokio::test]
#[ignore = "needs a real model server: set MAESTRO_TEST_LLM_URL (scripts/test.sh then runs it)"]
async fn context_length_comes_from_props() {
    let url = server_url();
    let props: Value = reqwest::get(url.trim_end_matches("/v1").to_string() + "/props")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let slot_ctx = props["default_generation_settings"]["n_ctx"]
        .as_u64()
        .unwrap();
    let llm = OpenAiCompat::new(OpenAiConfig::new(url)).unwrap();
    let detected = llm.context_length(&model()).await;
    println!(
        "detected context length: {detected:?} (slots: {})",
        props["total_slots"]
    );
    // local-llm.sh starts `-c 8192 -np 2`: 8192 tokens shared by 2 slots, 4096 usable per request.
    assert_eq!(detected, Some(slot_ctx));
    assert!(
        slot_ctx * props["total_slots"].as_u64().unwrap_or(1) == 8192 || slot_ctx == 8192,
        "{slot_ctx}"
    );
}

#[tokio::test]
#[ignore = "needs a real model server: set MAESTRO_TEST_LLM_URL (scripts/test.sh then runs it)"]
async fn calls_one_after_another_need_no_retry() {
    // Calls share kept-alive connections, which the server closes after a few requests or an
    // idle while; a call that meets such a connection is sent again at once, not retried.
    let llm = OpenAiCompat::new(OpenAiConfig::new(server_url())).unwrap();
    let events = Events::default();
    for call in 0..16u64 {
        let mut request = chat("Say yes.");
        request.max_tokens = Some(4);
        let answer = llm.chat(request, &events.sink()).await.unwrap();
        assert!(
            answer.usage.completion_tokens > 0,
            "call {call}: {answer:?}"
        );
        // Pauses of 0 to 300 ms, as between the calls of a run that runs tools.
        tokio::time::sleep(std::time::Duration::from_millis(call % 4 * 100)).await;
    }
    assert_eq!(events.retries(), vec![]);
}
