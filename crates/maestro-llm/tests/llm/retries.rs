//! Retries at the model boundary: 429 with Retry-After, 5xx, broken and idle streams, connect
//! errors, and what is final.

use crate::common;

use std::time::Duration;

use common::{Events, ask, client, config, fast_retry};
use maestro_llm::{LlmError, OpenAiConfig, Provider, RetryPolicy};
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;

#[tokio::test]
async fn a_429_waits_as_long_as_retry_after_says() {
    let server = ScriptedLlm::start([
        Turn::http_error(429, r#"{"error":{"message":"rate limited, slow down"}}"#).retry_after(1),
        Turn::text("finally"),
    ])
    .await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(answer.content, "finally");
    assert_eq!(
        events.retries(),
        vec![(
            1,
            Duration::from_secs(1),
            "the model endpoint answered HTTP 429: rate limited, slow down".to_string()
        )]
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_with_growing_backoff() {
    let server = ScriptedLlm::start([
        Turn::http_error(500, "internal error"),
        Turn::http_error(503, "overloaded"),
        Turn::http_error(502, "bad gateway"),
        Turn::text("recovered"),
    ])
    .await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    assert_eq!(
        llm.chat(ask("hi"), &events.sink()).await.unwrap().content,
        "recovered"
    );
    let delays: Vec<(u32, Duration)> = events
        .retries()
        .into_iter()
        .map(|(a, d, _)| (a, d))
        .collect();
    // fast_retry: 5 ms doubling, capped at 20 ms, no jitter.
    assert_eq!(
        delays,
        vec![
            (1, Duration::from_millis(5)),
            (2, Duration::from_millis(10)),
            (3, Duration::from_millis(20))
        ]
    );
}

#[tokio::test]
async fn a_stream_broken_before_done_is_retried_and_text_restarts() {
    let server = ScriptedLlm::start([Turn::broken_stream(2), Turn::text("complete answer")]).await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    let answer = llm.chat(ask("hi"), &events.sink()).await.unwrap();
    assert_eq!(answer.content, "complete answer");
    // What streamed before the break was reported; after the Retry event the answer starts over.
    assert_eq!(events.text(), "this answer bcomplete answer");
    let retries = events.retries();
    assert_eq!(retries.len(), 1);
    assert!(
        retries[0].2.starts_with("the model's stream broke"),
        "{}",
        retries[0].2
    );
}

#[tokio::test]
async fn a_stream_ending_in_good_order_but_before_done_is_retried() {
    let server = ScriptedLlm::start([Turn::truncated_stream(3), Turn::text("whole")]).await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    assert_eq!(
        llm.chat(ask("hi"), &events.sink()).await.unwrap().content,
        "whole"
    );
    let reasons: Vec<String> = events.retries().into_iter().map(|r| r.2).collect();
    assert_eq!(
        reasons,
        vec![
            "the model's stream broke: the stream ended before [DONE] or a finish_reason"
                .to_string()
        ]
    );
}

#[tokio::test]
async fn a_truncated_plain_answer_is_retried() {
    let server = ScriptedLlm::start([Turn::broken_stream(0), Turn::text("ok")]).await;
    let llm = client(config(server.base_url()).with_stream(false));
    let events = Events::default();
    assert_eq!(
        llm.chat(ask("hi"), &events.sink()).await.unwrap().content,
        "ok"
    );
    assert_eq!(events.retries().len(), 1);
}

#[tokio::test]
async fn exhausted_retries_return_the_providers_own_message() {
    let server = ScriptedLlm::start((0..3).map(|_| {
        Turn::http_error(
            503,
            r#"{"error":{"message":"model is loading, try later","code":503}}"#,
        )
    }))
    .await;
    let llm = client(config(server.base_url()).with_retry(fast_retry(3)));
    let events = Events::default();
    let error = llm.chat(ask("hi"), &events.sink()).await.unwrap_err();
    assert_eq!(
        error,
        LlmError::Http {
            status: 503,
            message: "model is loading, try later".into()
        }
    );
    assert_eq!(events.retries().len(), 2, "3 attempts means 2 retries");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn an_exhausted_script_fails_loudly() {
    let server = ScriptedLlm::start([]).await;
    let llm = client(config(server.base_url()).with_retry(fast_retry(2)));
    let error = llm.chat(ask("hi"), &|_| {}).await.unwrap_err();
    match error {
        LlmError::Http {
            status: 500,
            message,
        } => assert!(message.starts_with("script exhausted"), "{message}"),
        other => panic!("expected HTTP 500 script exhausted, got {other:?}"),
    }
}

#[tokio::test]
async fn a_400_is_final() {
    let server = ScriptedLlm::start([
        Turn::http_error(
            400,
            r#"{"error":{"message":"'messages' must contain at least one entry"}}"#,
        ),
        Turn::text("never reached"),
    ])
    .await;
    let llm = client(config(server.base_url()));
    let events = Events::default();
    let error = llm.chat(ask("hi"), &events.sink()).await.unwrap_err();
    assert_eq!(
        error,
        LlmError::Http {
            status: 400,
            message: "'messages' must contain at least one entry".into()
        }
    );
    assert!(events.retries().is_empty());
    assert_eq!(server.remaining(), 1);
}

#[tokio::test]
async fn an_idle_stream_times_out_and_is_retried() {
    let server =
        ScriptedLlm::start([Turn::stall(Duration::from_secs(10)), Turn::text("awake")]).await;
    let llm = client(config(server.base_url()).with_idle_timeout(Duration::from_millis(200)));
    let events = Events::default();
    assert_eq!(
        llm.chat(ask("hi"), &events.sink()).await.unwrap().content,
        "awake"
    );
    let retries = events.retries();
    assert_eq!(retries.len(), 1);
    assert_eq!(
        retries[0].2,
        "the model call timed out: no data on the stream for 200 ms (idle_timeout)"
    );
}

#[tokio::test]
async fn an_endpoint_that_never_answers_gives_a_timeout_error() {
    let server = ScriptedLlm::start([
        Turn::stall(Duration::from_secs(10)),
        Turn::stall(Duration::from_secs(10)),
    ])
    .await;
    let llm = client(
        config(server.base_url())
            .with_stream(false)
            .with_idle_timeout(Duration::from_millis(150))
            .with_retry(fast_retry(2)),
    );
    let error = llm.chat(ask("hi"), &|_| {}).await.unwrap_err();
    assert!(
        matches!(&error, LlmError::Timeout(m) if m.contains("idle_timeout")),
        "{error:?}"
    );
}

#[tokio::test]
async fn connect_errors_are_retried_then_reported() {
    // Bind and drop a listener to get a loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let llm = client(OpenAiConfig::new(url.clone()).with_retry(fast_retry(3)));
    let events = Events::default();
    let error = llm.chat(ask("hi"), &events.sink()).await.unwrap_err();
    match error {
        LlmError::Connect { url: got, .. } => assert_eq!(got, format!("{url}/chat/completions")),
        other => panic!("expected a connect error, got {other:?}"),
    }
    assert_eq!(events.retries().len(), 2);
}

#[tokio::test]
async fn a_context_overflow_in_each_servers_words_is_typed() {
    let cases = [
        (
            400,
            r#"{"error":{"code":400,"message":"request (4173 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error"}}"#,
            "request (4173 tokens) exceeds the available context size (4096 tokens), try increasing it",
        ),
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.","code":"context_length_exceeded"}}"#,
            "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.",
        ),
        (
            400,
            r#"{"error":{"code":"context_length_exceeded"}}"#,
            r#"{"error":{"code":"context_length_exceeded"}}"#,
        ),
        (
            413,
            r#"{"error":"the input length exceeds the context length"}"#,
            "the input length exceeds the context length",
        ),
    ];
    for (status, body, message) in cases {
        let server =
            ScriptedLlm::start([Turn::http_error(status, body), Turn::text("never reached")]).await;
        let llm = client(config(server.base_url()));
        let events = Events::default();
        let error = llm.chat(ask("hi"), &events.sink()).await.unwrap_err();
        assert_eq!(
            error,
            LlmError::ContextOverflow {
                status,
                message: message.into()
            },
            "{body}"
        );
        assert!(events.retries().is_empty());
        assert_eq!(server.remaining(), 1);
    }
}

/// A minimal HTTP/1.1 endpoint that keeps connections alive, answers every request with a plain
/// JSON answer, and hangs up without a word on the requests whose number (1-based, over all
/// connections) is in `hang_up_on`. Returns its base URL and the per-connection request counts.
async fn keep_alive_endpoint(
    hang_up_on: &'static [usize],
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<usize>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let per_connection = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let total = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counts = per_connection.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let index = {
                let mut counts = counts.lock().unwrap();
                counts.push(0);
                counts.len() - 1
            };
            let (counts, total) = (counts.clone(), total.clone());
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                loop {
                    // Read one request: headers, then Content-Length bytes of body.
                    let head_end = loop {
                        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            break at + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while buffer.len() < head_end + length {
                        let mut chunk = [0u8; 4096];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buffer.drain(..head_end + length);
                    counts.lock().unwrap()[index] += 1;
                    let number = total.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    if hang_up_on.contains(&number) {
                        return; // dropping the socket closes it with no answer
                    }
                    let body = format!(
                        r#"{{"choices":[{{"index":0,"message":{{"role":"assistant","content":"answer {number}"}},"finish_reason":"stop"}}]}}"#
                    );
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, per_connection)
}

#[tokio::test]
async fn a_kept_alive_connection_closed_by_the_endpoint_is_resent_at_once_without_a_retry() {
    // The second request goes out on the first call's kept-alive connection, which the endpoint
    // closes without answering, as llama.cpp's server does with connections it has let go.
    let (url, connections) = keep_alive_endpoint(&[2]).await;
    let llm = client(
        OpenAiConfig::new(url)
            .with_stream(false)
            .with_retry(RetryPolicy {
                initial: Duration::from_secs(30),
                ..fast_retry(6)
            }),
    );
    let events = Events::default();
    assert_eq!(
        llm.chat(ask("one"), &events.sink()).await.unwrap().content,
        "answer 1"
    );
    let second = tokio::time::timeout(
        Duration::from_secs(10),
        llm.chat(ask("two"), &events.sink()),
    )
    .await
    .expect("resent at once, not after the 30 s backoff")
    .unwrap();
    assert_eq!(second.content, "answer 3");
    assert_eq!(events.retries(), vec![], "a resend is not a retry");
    assert_eq!(*connections.lock().unwrap(), vec![2, 1]);
}

#[tokio::test]
async fn a_connection_closed_twice_in_a_row_is_an_ordinary_retry() {
    let (url, connections) = keep_alive_endpoint(&[2, 3]).await;
    let llm = client(
        OpenAiConfig::new(url)
            .with_stream(false)
            .with_retry(fast_retry(6)),
    );
    let events = Events::default();
    llm.chat(ask("one"), &events.sink()).await.unwrap();
    let second = llm.chat(ask("two"), &events.sink()).await.unwrap();
    assert_eq!(second.content, "answer 4");
    let retries = events.retries();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!((retries[0].0, retries[0].1), (1, Duration::from_millis(5)));
    assert!(
        retries[0]
            .2
            .contains("connection closed before message completed"),
        "{retries:?}"
    );
    assert_eq!(*connections.lock().unwrap(), vec![2, 1, 1]);
}

/// A raw endpoint on 127.0.0.1 that reads each request's head and then writes `reply` (or, for
/// `None`, holds the connection open without a byte). Returns its base URL.
async fn raw_endpoint(reply: Option<&'static str>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut chunk = [0u8; 4096];
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                    }
                }
                match reply {
                    Some(reply) => {
                        let _ = socket.write_all(reply.as_bytes()).await;
                        let _ = socket.shutdown().await;
                    }
                    // Hangs until the client gives up and closes the connection.
                    None => {
                        while let Ok(n) = socket.read(&mut [0u8; 4096]).await {
                            if n == 0 {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn an_endpoint_that_hangs_past_the_idle_timeout_is_an_infrastructure_failure() {
    let url = raw_endpoint(None).await;
    for stream in [true, false] {
        let llm = client(
            OpenAiConfig::new(url.clone())
                .with_stream(stream)
                .with_idle_timeout(Duration::from_millis(200))
                .with_retry(fast_retry(2)),
        );
        let events = Events::default();
        let error = llm.chat(ask("hi"), &events.sink()).await.unwrap_err();
        assert!(
            matches!(&error, LlmError::Timeout(m) if m.contains("(idle_timeout)")),
            "{error:?}"
        );
        assert!(error.is_infrastructure(), "{error:?}");
        assert_eq!(events.retries().len(), 1, "retried by the client first");
    }
}

#[tokio::test]
async fn an_endpoint_that_answers_garbage_is_an_infrastructure_failure() {
    let not_json = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\
                    connection: close\r\n\r\n<html>oops</html>";
    let not_a_stream = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: \
                        close\r\n\r\ndata: {this is not json\n\nnor this\n\n";
    let not_http = "SSH-2.0-OpenSSH_9.6\r\nProtocol mismatch.\r\n";
    for (reply, what) in [
        (not_json, "the answer is not JSON"),
        (not_a_stream, "a stream chunk is not JSON"),
        (not_http, "cannot reach the model endpoint"),
    ] {
        let url = raw_endpoint(Some(reply)).await;
        let llm = client(OpenAiConfig::new(url).with_retry(fast_retry(2)));
        let events = Events::default();
        let error = llm.chat(ask("hi"), &events.sink()).await.unwrap_err();
        assert!(error.to_string().contains(what), "{error:?}");
        assert!(error.is_infrastructure(), "{error:?}");
        assert_eq!(
            events.retries().len(),
            1,
            "retried by the client first: {error:?}"
        );
    }
}
