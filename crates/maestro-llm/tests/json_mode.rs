//! JSON tool mode: the request carries the schema and the tool list, the answer becomes a
//! ToolCall, tool results go back as user messages, garbage is kept as text, and `auto` probes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Events, ask, client, config, read_tool};
use maestro_llm::{Message, Provider, ToolMode};
use maestro_protocol::ToolCall;
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

#[tokio::test]
async fn a_json_answer_becomes_a_tool_call_and_the_result_goes_back_as_user_text() {
    let server = ScriptedLlm::start([
        Turn::json(json!({"tool": "Read", "arguments": {"path": "README.md"}})),
        Turn::json(json!({"tool": "answer", "content": "It is a readme."})),
    ])
    .await;
    let llm = client(config(server.base_url()).with_tool_mode(ToolMode::Json));
    let mut request = ask("What is in README.md?");
    request.tools = vec![read_tool()];
    let events = Events::default();

    let first = llm.chat(request.clone(), &events.sink()).await.unwrap();
    assert_eq!(first.content, "");
    assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
    let call = first.tool_calls[0].clone();
    assert!(call.id.starts_with("call_"), "a generated id: {}", call.id);
    assert_eq!(
        call,
        ToolCall {
            id: call.id.clone(),
            name: "Read".into(),
            arguments: r#"{"path":"README.md"}"#.into()
        }
    );
    assert_eq!(
        events.text(),
        "",
        "JSON-mode answers are not streamed as prose"
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.get("tools"), None);
    assert_eq!(sent["response_format"]["type"], json!("json_schema"));
    assert_eq!(
        sent["response_format"]["json_schema"]["strict"],
        json!(true)
    );
    let branches = sent["response_format"]["json_schema"]["schema"]["anyOf"]
        .as_array()
        .unwrap();
    let tools: Vec<&Value> = branches
        .iter()
        .map(|b| &b["properties"]["tool"]["const"])
        .collect();
    assert_eq!(tools, vec![&json!("Read"), &json!("answer")]);
    let system = sent["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("Be brief.\n\n## Tools") && system.contains("- Read: Reads a file"),
        "{system}"
    );

    request.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![call.clone()],
    });
    request.messages.push(Message::Tool {
        tool_call_id: call.id.clone(),
        content: "# Demo readme".into(),
    });
    let second = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(
        (second.content.as_str(), second.tool_calls.len()),
        ("It is a readme.", 0)
    );
    let messages = &server.requests()[1]["messages"];
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": r#"{"tool":"Read","arguments":{"path":"README.md"}}"#})
    );
    assert_eq!(
        messages[3],
        json!({"role": "user", "content": "Result of the `Read` call:\n# Demo readme"})
    );
}

#[tokio::test]
async fn a_malformed_json_answer_is_returned_as_text_not_an_error() {
    let server =
        ScriptedLlm::start([Turn::text("I think I should {\"tool\": \"Read\", \"argum")]).await;
    let llm = client(config(server.base_url()).with_tool_mode(ToolMode::Json));
    let mut request = ask("go");
    request.tools = vec![read_tool()];
    let answer = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(
        answer.content,
        "I think I should {\"tool\": \"Read\", \"argum"
    );
    assert!(answer.tool_calls.is_empty());
}

#[tokio::test]
async fn without_tools_json_mode_sends_a_plain_request() {
    let server = ScriptedLlm::start([Turn::text("plain")]).await;
    let llm = client(config(server.base_url()).with_tool_mode(ToolMode::Json));
    assert_eq!(llm.chat(ask("hi"), &|_| {}).await.unwrap().content, "plain");
    assert_eq!(server.requests()[0].get("response_format"), None);
}

#[tokio::test]
async fn auto_reads_llama_cpp_props_once_per_model() {
    let server = ScriptedLlm::builder()
        .props(json!({"chat_template_caps": {"supports_tool_calls": false}}))
        .turns([
            Turn::json(json!({"tool": "answer", "content": "a"})),
            Turn::json(json!({"tool": "answer", "content": "b"})),
        ])
        .start()
        .await;
    let llm = client(config(server.base_url()).with_tool_mode(ToolMode::Auto));
    let mut request = ask("hi");
    request.tools = vec![read_tool()];
    assert_eq!(
        llm.chat(request.clone(), &|_| {}).await.unwrap().content,
        "a"
    );
    assert_eq!(llm.chat(request, &|_| {}).await.unwrap().content, "b");
    let paths: Vec<String> = server.recorded().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        vec!["/props", "/v1/chat/completions", "/v1/chat/completions"]
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.get("response_format").is_some())
    );
}

#[tokio::test]
async fn auto_probes_with_a_dummy_tool_where_props_are_absent() {
    let server = ScriptedLlm::start([
        Turn::tool_call("probe", json!({})),
        Turn::tool_call("Read", json!({"path": "x"})),
    ])
    .await;
    let llm = client(config(server.base_url()).with_tool_mode(ToolMode::Auto));
    assert_eq!(llm.tool_mode_for("scripted-model").await, ToolMode::Native);
    let mut request = ask("hi");
    request.tools = vec![read_tool()];
    let answer = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(answer.tool_calls[0].name, "Read");
    let requests = server.requests();
    assert_eq!(requests[0]["tools"][0]["function"]["name"], json!("probe"));
    assert_eq!(requests[1]["tools"][0]["function"]["name"], json!("Read"));
    assert_eq!(requests.len(), 2, "the probe result is cached");
}

#[tokio::test]
async fn auto_picks_json_when_the_probe_is_answered_with_text() {
    let server = ScriptedLlm::start([Turn::text("I cannot call tools.")]).await;
    let llm = client(config(server.base_url()).with_tool_mode(ToolMode::Auto));
    assert_eq!(llm.tool_mode_for("scripted-model").await, ToolMode::Json);
}
