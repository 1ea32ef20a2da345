//! Image parts on the wire, over real HTTP on 127.0.0.1: a user message with images travels as
//! text and `image_url` parts with a `data:` URL; a text-only model, configured or refused by
//! its endpoint, gets the images' descriptions instead.

use crate::common;

use maestro_llm::{ChatRequest, ImagePart, Message, Provider};
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::json;

const PIXELS: &[u8] = b"\x89PNG\r\n\x1a\n pretend pixels";

fn with_image() -> ChatRequest {
    ChatRequest {
        model: "scripted-model".into(),
        messages: vec![
            Message::user("no image here"),
            Message::User {
                content: "What does it show?".into(),
                images: vec![ImagePart::new("image/png", 40, 30, PIXELS.to_vec())],
            },
        ],
        ..ChatRequest::default()
    }
}

fn data_url() -> String {
    use base64::Engine as _;
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(PIXELS)
    )
}

#[tokio::test]
async fn a_user_message_with_an_image_is_sent_as_text_and_image_url_parts() {
    let server = ScriptedLlm::start([Turn::text("A square.")]).await;
    let llm = common::client(common::config(server.base_url()));
    let answer = llm.chat(with_image(), &|_| {}).await.unwrap();
    assert_eq!(answer.content, "A square.");
    let sent = &server.requests()[0]["messages"];
    assert_eq!(sent[0], json!({"role": "user", "content": "no image here"}));
    assert_eq!(
        sent[1],
        json!({"role": "user", "content": [
            {"type": "text", "text": "What does it show?"},
            {"type": "image_url", "image_url": {"url": data_url()}},
        ]})
    );
}

#[tokio::test]
async fn a_model_configured_text_only_gets_the_description() {
    let server = ScriptedLlm::start([Turn::text("I cannot see it.")]).await;
    let llm =
        common::client(common::config(server.base_url()).with_text_only_model("scripted-model"));
    llm.chat(with_image(), &|_| {}).await.unwrap();
    let sent = &server.requests()[0]["messages"][1];
    let text = sent["content"].as_str().expect("a plain string");
    assert!(
        text.starts_with("What does it show?\n[image not shown: 40×30 px, image/png"),
        "{text}"
    );
    assert!(text.contains("cannot see images"), "{text}");
    assert!(!server.requests()[0].to_string().contains("base64"));
}

#[tokio::test]
async fn an_endpoint_that_refuses_images_is_remembered_and_sent_descriptions() {
    let server = ScriptedLlm::start([
        Turn::http_error(
            400,
            r#"{"error":{"message":"image input is not supported - hint: if this is unexpected, you may need to provide the mmproj","type":"invalid_request_error"}}"#,
        ),
        Turn::text("I cannot see it."),
        Turn::text("Still cannot."),
    ])
    .await;
    let llm = common::client(common::config(server.base_url()));
    let answer = llm.chat(with_image(), &|_| {}).await.unwrap();
    assert_eq!(answer.content, "I cannot see it.");
    assert!(llm.is_text_only("scripted-model"));
    llm.chat(with_image(), &|_| {}).await.unwrap();
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        3,
        "one refusal, then two described requests"
    );
    assert!(requests[0].to_string().contains("image_url"));
    for described in &requests[1..] {
        let text = described["messages"][1]["content"].as_str().unwrap();
        assert!(text.contains("[image not shown: 40×30 px"), "{text}");
    }
}

#[tokio::test]
async fn a_refusal_that_does_not_name_images_stays_an_error() {
    let server = ScriptedLlm::start([Turn::http_error(400, "bad temperature")]).await;
    let llm = common::client(common::config(server.base_url()));
    assert!(llm.chat(with_image(), &|_| {}).await.is_err());
    assert!(!llm.is_text_only("scripted-model"));
}
