//! Prompt tokens read from the endpoint's cache, as the OpenAI-compatible client reports them
//! in its usage: `usage.prompt_tokens_details.cached_tokens` of a whole answer and of a stream's
//! usage chunk, over real HTTP on 127.0.0.1.

use maestro_llm::{ChatRequest, Message, OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;

fn ask() -> ChatRequest {
    ChatRequest {
        model: "some-model".into(),
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    }
}

fn client(server: &ScriptedLlm, stream: bool) -> OpenAiCompat {
    let mut config = OpenAiConfig::new(server.base_url());
    config.stream = stream;
    config.tool_mode = ToolMode::Native;
    OpenAiCompat::new(config).unwrap()
}

#[tokio::test]
async fn a_whole_answer_reports_its_cached_prompt_tokens() {
    let server = ScriptedLlm::start([Turn::raw(
        "application/json",
        r#"{"id":"c1","object":"chat.completion","created":1,"model":"some-model",
            "choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":1200,"completion_tokens":3,"total_tokens":1203,
                     "prompt_tokens_details":{"cached_tokens":1024}}}"#,
    )])
    .await;
    let answer = client(&server, false).chat(ask(), &|_| {}).await.unwrap();
    assert_eq!(answer.content, "Hi.");
    assert_eq!(answer.usage.prompt_tokens, 1200);
    assert_eq!(answer.usage.cached_prompt_tokens, 1024);
}

#[tokio::test]
async fn a_streams_usage_chunk_reports_its_cached_prompt_tokens() {
    let server = ScriptedLlm::start([Turn::raw(
        "text/event-stream",
        concat!(
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"some-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi.\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"some-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"some-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":900,\"completion_tokens\":2,\"total_tokens\":902,\"prompt_tokens_details\":{\"cached_tokens\":512}}}\n\n",
            "data: [DONE]\n\n",
        ),
    )])
    .await;
    let answer = client(&server, true).chat(ask(), &|_| {}).await.unwrap();
    assert_eq!(answer.content, "Hi.");
    assert_eq!(
        (
            answer.usage.prompt_tokens,
            answer.usage.cached_prompt_tokens
        ),
        (900, 512)
    );
}
