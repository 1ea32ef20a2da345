//! A misbehaving model server: answers that never end (fast or slow), and 200 answers that
//! cannot be read. Each call must end with a clear error, or recover within its retries, and
//! never read without bound.

use crate::common;

use std::time::{Duration, Instant};

use common::{Events, ask, client, config, fast_retry};
use maestro_llm::{LlmError, OpenAiCompat, Provider};
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;

const MIB: usize = 1024 * 1024;

/// The error a call that must fail ends with.
async fn failure(llm: &OpenAiCompat, text: &str) -> LlmError {
    llm.chat(ask(text), &Events::default().sink())
        .await
        .unwrap_err()
}

#[tokio::test]
async fn an_endless_stream_ends_at_the_byte_cap_with_a_clear_error() {
    let server = ScriptedLlm::start([Turn::endless()]).await;
    let llm = client(
        config(server.base_url())
            .with_max_answer_bytes(MIB)
            // The byte cap, not the token cap, is under test here.
            .with_max_answer_tokens(u64::MAX),
    );
    let started = Instant::now();
    let error = failure(&llm, "sing").await;
    assert_eq!(
        error,
        LlmError::AnswerTooLarge {
            limit: "1048576 bytes (llm.max_answer_bytes)".into()
        }
    );
    assert!(
        error.to_string().starts_with(
            "the model's answer exceeded 1048576 bytes (llm.max_answer_bytes) and was cut off"
        ),
        "{error}"
    );
    // Final at once: the same request would run away again.
    assert_eq!(server.requests().len(), 1);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_stopped(&server).await;
}

/// The client hung up at its cap: the server's count stops growing, at what the client read
/// plus what the loopback socket buffers held (a few MiB), instead of running on for ever.
async fn assert_stopped(server: &ScriptedLlm) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = server.bytes_sent();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.bytes_sent(), sent, "the server is still sending");
    assert!(sent < 24 * MIB, "the server sent {sent} bytes");
}

#[tokio::test]
async fn an_endless_stream_ends_at_the_token_cap() {
    let server = ScriptedLlm::start([Turn::endless()]).await;
    let llm = client(config(server.base_url()).with_max_answer_tokens(1_000));
    let error = failure(&llm, "sing").await;
    assert_eq!(
        error,
        LlmError::AnswerTooLarge {
            limit: "1000 tokens (llm.max_answer_tokens)".into()
        }
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_endless_plain_answer_ends_at_the_byte_cap() {
    let server = ScriptedLlm::start([Turn::endless()]).await;
    let llm = client(
        config(server.base_url())
            .with_stream(false)
            .with_max_answer_bytes(MIB),
    );
    let error = failure(&llm, "sing").await;
    assert!(
        matches!(error, LlmError::AnswerTooLarge { .. }),
        "{error:?}"
    );
    assert_stopped(&server).await;
}

#[tokio::test]
async fn a_slow_endless_stream_ends_at_the_call_deadline() {
    // A chunk every 100 ms never trips the 5 s idle timeout.
    let server = ScriptedLlm::start([Turn::endless_every(Duration::from_millis(100))]).await;
    let llm = client(config(server.base_url()).with_call_timeout(Duration::from_secs(2)));
    let started = Instant::now();
    let error = failure(&llm, "sing").await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(
        error.to_string(),
        "the model call timed out: the answer was not complete after 2 s \
         (llm.call_timeout_secs); the model may be stuck streaming without end"
    );
}

#[tokio::test]
async fn a_stream_chunk_that_is_not_json_is_retried() {
    let server = ScriptedLlm::start([
        Turn::raw(
            "text/event-stream",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n\
             data: {this is not json\n\n",
        ),
        Turn::text("recovered"),
    ])
    .await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(answer.content, "recovered");
    let retries = events.retries();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(
        retries[0].2.contains("a stream chunk is not JSON"),
        "{retries:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_html_page_with_status_200_is_retried() {
    let page = "<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>";
    let server = ScriptedLlm::start([Turn::raw("text/html", page), Turn::text("recovered")]).await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(answer.content, "recovered");
    assert_eq!(events.retries().len(), 1);
}

#[tokio::test]
async fn unreadable_answers_spend_the_same_retry_budget() {
    let page = "<html>maintenance</html>";
    let server = ScriptedLlm::start([
        Turn::raw("text/html", page),
        Turn::raw("text/html", page),
        Turn::raw("text/html", page),
    ])
    .await;
    let llm = client(config(server.base_url()).with_retry(fast_retry(3)));
    let error = failure(&llm, "hi").await;
    assert!(matches!(error, LlmError::Protocol(_)), "{error:?}");
    assert_eq!(server.requests().len(), 3);
}
