//! JSON tool mode: the request carries the schema and the tool list, the answer becomes a
//! ToolCall, tool results go back as user messages, garbage is kept as text, and `auto` settles
//! on a mode from real requests.

use crate::common;

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
    request.tools = vec![read_tool()].into();
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
    request.tools = vec![read_tool()].into();
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

/// A client in `auto` mode that remembers settled modes under `cache`.
fn auto_client(server: &ScriptedLlm, cache: &std::path::Path) -> maestro_llm::OpenAiCompat {
    client(
        config(server.base_url())
            .with_tool_mode(ToolMode::Auto)
            .with_tool_mode_cache(cache.join("tool-modes.json")),
    )
}

#[tokio::test]
async fn auto_offers_the_real_tools_first_and_a_tool_call_settles_native() {
    let server = ScriptedLlm::start([Turn::tool_call("Read", json!({"path": "x"}))]).await;
    let cache = tempfile::tempdir().unwrap();
    let auto = || auto_client(&server, cache.path());
    let llm = auto();
    assert_eq!(llm.tool_mode_for("scripted-model"), ToolMode::Auto);
    let mut request = ask("hi");
    request.tools = vec![read_tool()].into();
    let answer = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(answer.tool_calls[0].name, "Read");
    let paths: Vec<String> = server.recorded().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        vec!["/v1/chat/completions"],
        "one request, and no probe"
    );
    assert_eq!(
        server.requests()[0]["tools"][0]["function"]["name"],
        json!("Read")
    );
    assert_eq!(llm.tool_mode_for("scripted-model"), ToolMode::Native);
    assert_eq!(auto().tool_mode_for("scripted-model"), ToolMode::Native);
    assert_eq!(auto().tool_mode_for("another-model"), ToolMode::Auto);
}

#[tokio::test]
async fn auto_falls_back_to_json_once_when_the_endpoint_refuses_tools_and_remembers_it() {
    let server = ScriptedLlm::builder()
        .reject_tools()
        .turns([
            Turn::json(json!({"tool": "Read", "arguments": {"path": "a"}})),
            Turn::json(json!({"tool": "Read", "arguments": {"path": "b"}})),
        ])
        .start()
        .await;
    let cache = tempfile::tempdir().unwrap();
    let auto = || auto_client(&server, cache.path());
    let mut request = ask("hi");
    request.tools = vec![read_tool()].into();

    let events = Events::default();
    let first = auto().chat(request.clone(), &events.sink()).await.unwrap();
    assert_eq!(first.tool_calls[0].arguments, r#"{"path":"a"}"#);
    let changes = events.tool_mode_changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].0, ToolMode::Json);
    assert!(
        changes[0].1.contains("HTTP 400") && changes[0].1.contains("tools"),
        "{changes:?}"
    );
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent[0].get("tools").is_some() && sent[0].get("response_format").is_none());
    assert!(sent[1].get("tools").is_none() && sent[1].get("response_format").is_some());

    // A new client (the next run) reads the settled mode and sends JSON at once.
    let events = Events::default();
    let second = auto().chat(request.clone(), &events.sink()).await.unwrap();
    assert_eq!(second.tool_calls[0].arguments, r#"{"path":"b"}"#);
    assert_eq!(events.tool_mode_changes(), vec![]);
    let sent = server.requests();
    assert_eq!(sent.len(), 3);
    assert!(sent[2].get("tools").is_none() && sent[2].get("response_format").is_some());

    // A fixed native mode does not fall back: the refusal is the answer.
    let native = client(config(server.base_url()).with_tool_mode(ToolMode::Native));
    let error = native.chat(request, &|_| {}).await.unwrap_err();
    assert!(error.to_string().contains("HTTP 400"), "{error}");
}

#[tokio::test]
async fn a_plain_answer_settles_nothing_and_the_caller_may_switch_to_json_once() {
    let server = ScriptedLlm::start([Turn::text("I would read the file.")]).await;
    let llm = client(config(server.base_url()).with_tool_mode(ToolMode::Auto));
    let mut request = ask("hi");
    request.tools = vec![read_tool()].into();
    let answer = llm.chat(request, &|_| {}).await.unwrap();
    assert_eq!(answer.content, "I would read the file.");
    assert_eq!(llm.tool_mode_for("scripted-model"), ToolMode::Auto);
    assert!(llm.switch_to_json_tools("scripted-model"));
    assert_eq!(llm.tool_mode_for("scripted-model"), ToolMode::Json);
    assert!(!llm.switch_to_json_tools("scripted-model"));
    let native = client(config(server.base_url()).with_tool_mode(ToolMode::Native));
    assert!(!native.switch_to_json_tools("scripted-model"));
}
