//! Upstreams that misbehave, each a hand-written axum server on 127.0.0.1: a stream that stalls
//! after its first chunks, a success whose body is not what was asked for, a 429 with
//! `Retry-After` and a message.

use crate::support;

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt as _;
use maestro_gateway::{GatewayConfig, UsageStatus};
use maestro_protocol::Secret;
use serde_json::{Value, json};

use support::{client, key, serve, serve_config, serve_keyed, sse};

/// Serves `app` on 127.0.0.1 and gives its OpenAI base URL (`http://…/v1`).
async fn upstream(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}/v1")
}

/// An upstream answering every chat request with `answer()`.
async fn answering(answer: fn() -> Response) -> String {
    upstream(Router::new().route(
        "/v1/chat/completions",
        post(move || async move { answer() }),
    ))
    .await
}

/// An upstream answering every chat request with `text` as a whole, well-formed answer.
async fn good() -> String {
    answering(|| {
        let body = json!({
            "id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "from the good one"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        });
        response(200, "application/json", body.to_string())
    })
    .await
}

fn response(status: u16, content_type: &str, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type).unwrap(),
    );
    response
}

fn chunk(text: &str) -> Bytes {
    let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
    Bytes::from(format!("data: {chunk}\n\n"))
}

/// A gateway over the upstreams `(name, base_url)`, tried in that order, and `extra` fields.
fn routed(upstreams: &[(&str, &str)], extra: Value) -> Value {
    let mut config = json!({
        "upstreams": upstreams.iter().map(|(name, url)| {
            (name.to_string(), json!({"kind": "openai", "base_url": url}))
        }).collect::<serde_json::Map<_, _>>(),
        "models": {"team-model": upstreams.iter().enumerate().map(|(i, (name, _))| {
            json!({"upstream": name, "model": "m", "weight": if i == 0 { 1 } else { 0 }})
        }).collect::<Vec<_>>()},
    });
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    config
}

#[tokio::test]
async fn a_stream_that_stalls_after_its_first_chunks_is_cut_after_the_idle_timeout_and_settled() {
    // Three chunks, then nothing for far longer than the idle timeout.
    let stalling = upstream(Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            let chunks = futures::stream::iter(
                ["one ", "two ", "three"].map(|t| Ok::<_, std::io::Error>(chunk(t))),
            )
            .chain(futures::stream::once(async {
                tokio::time::sleep(Duration::from_secs(120)).await;
                Ok(Bytes::from_static(b"data: [DONE]\n\n"))
            }));
            let mut response = Response::new(Body::from_stream(chunks));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }),
    ))
    .await;
    let config: GatewayConfig = serde_json::from_value(routed(
        &[("stalling", &stalling)],
        json!({"stream_idle_timeout_secs": 1}),
    ))
    .unwrap();
    let secret = "mk-stall-test-key";
    let gateway = serve_keyed(config, &[], vec![key(secret, "ci", None, Some(1_000_000))]).await;
    let started = Instant::now();
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .bearer_auth(secret)
        .json(
            &json!({"model": "team-model", "stream": true, "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}: {text}");
    let (data, events) = sse(&text);
    assert_eq!(events, ["error"], "{text}");
    assert!(!data.iter().any(|d| d == "[DONE]"), "{text}");
    let content: String = data
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(content, "one two three", "what came is passed on: {text}");
    let error: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "stream_cut");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("stalling") && message.contains("stream_idle_timeout_secs"),
        "{message}"
    );

    // The reservation is settled at once, not held until the client gives up (it is settled
    // by a task of its own: wait for it a little).
    for _ in 0..50 {
        if gateway.store.open.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reserved = gateway.store.reserved.lock().unwrap().clone();
    assert_eq!(reserved.len(), 1);
    assert!(gateway.store.open.lock().unwrap().is_empty());
    let spent = gateway.store.spent.lock().unwrap().clone();
    assert_eq!(
        spent.values().copied().collect::<Vec<_>>(),
        [reserved[0].tokens],
        "a cut stream without usage is charged its whole reservation"
    );
    let records = gateway.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, UsageStatus::Cut);
}

#[test]
fn the_idle_timeout_defaults_to_60_seconds_and_must_be_positive() {
    assert_eq!(GatewayConfig::default().stream_idle_timeout_secs, 60);
    let config = GatewayConfig {
        stream_idle_timeout_secs: 0,
        ..GatewayConfig::default()
    };
    let checks = config.check();
    assert!(
        checks
            .iter()
            .any(|c| c.field == ["gateway", "stream_idle_timeout_secs"]),
        "{checks:?}"
    );
}

#[tokio::test]
async fn a_whole_answer_that_is_not_json_fails_over_and_with_no_other_is_a_502() {
    let html = answering(|| response(200, "text/html", "<html>proxy login</html>".into())).await;
    let good = good().await;
    let gateway = serve(routed(&[("html", &html), ("good", &good)], json!({})), &[]).await;
    let url = format!("{}/chat/completions", gateway.base_url());
    let request = json!({"model": "team-model", "messages": [{"role": "user", "content": "hi"}]});
    let answer = client().post(&url).json(&request).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "from the good one"
    );
    let records = gateway.records().await;
    assert_eq!(records[0].status, UsageStatus::Ok);
    assert_eq!(records[0].upstream.as_deref(), Some("good"));

    // Alone, it is a 502 in OpenAI's error shape.
    let gateway = serve(routed(&[("html", &html)], json!({})), &[]).await;
    let url = format!("{}/chat/completions", gateway.base_url());
    let answer = client().post(&url).json(&request).send().await.unwrap();
    assert_eq!(answer.status(), 502);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstreams_failed");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("html: HTTP 200 with a body that is not a JSON object"),
        "{message}"
    );
    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(
            r#"maestro_gateway_upstream_failures_total{upstream="html",reason="invalid"} 1"#
        ),
        "{metrics}"
    );
    let records = gateway.records().await;
    assert_eq!(records[0].status, UsageStatus::Unavailable);
    assert_eq!(records[0].http_status, 502);
}

#[tokio::test]
async fn a_stream_answered_with_something_other_than_sse_fails_over_before_a_byte_is_sent() {
    let json_answer = answering(|| {
        response(
            200,
            "application/json",
            json!({"choices": [{"message": {"content": "not a stream"}}]}).to_string(),
        )
    })
    .await;
    let streaming = answering(|| {
        let mut body = String::new();
        body.push_str(std::str::from_utf8(&chunk("streamed")).unwrap());
        body.push_str("data: [DONE]\n\n");
        response(200, "text/event-stream; charset=utf-8", body)
    })
    .await;
    let gateway = serve(
        routed(&[("plain", &json_answer), ("sse", &streaming)], json!({})),
        &[],
    )
    .await;
    let url = format!("{}/chat/completions", gateway.base_url());
    let request = json!({"model": "team-model", "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let answer = client().post(&url).json(&request).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    assert!(
        text.contains("streamed") && !text.contains("not a stream"),
        "{text}"
    );
    let records = gateway.records().await;
    assert_eq!(records[0].status, UsageStatus::Ok);
    assert_eq!(records[0].upstream.as_deref(), Some("sse"));

    let gateway = serve(routed(&[("plain", &json_answer)], json!({})), &[]).await;
    let url = format!("{}/chat/completions", gateway.base_url());
    let answer = client().post(&url).json(&request).send().await.unwrap();
    assert_eq!(answer.status(), 502);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstreams_failed");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("instead of text/event-stream"),
        "{message}"
    );
    assert_eq!(gateway.records().await[0].status, UsageStatus::Unavailable);
}

fn busy(seconds: &'static str) -> Response {
    let mut answer = response(
        429,
        "application/json",
        json!({"error": {"message": "slow down", "type": "rate_limit_error"}}).to_string(),
    );
    answer
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(seconds));
    answer
}

#[tokio::test]
async fn every_upstream_busy_passes_on_the_soonest_retry_after_and_their_messages() {
    let f7 = answering(|| busy("7")).await;
    let f3 = answering(|| busy("3")).await;
    let gateway = serve(routed(&[("f7", &f7), ("f3", &f3)], json!({})), &[]).await;
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .json(&json!({"model": "team-model", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    assert_eq!(
        answer
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("3")
    );
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstreams_busy");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("f7: HTTP 429: slow down") && message.contains("f3: HTTP 429: slow down"),
        "{message}"
    );
}

#[tokio::test]
async fn an_upstreams_retry_after_longer_than_the_cooldown_is_its_cooldown() {
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    let f429 = upstream(Router::new().route(
        "/v1/chat/completions",
        post(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { busy("7") }
        }),
    ))
    .await;
    let good = good().await;
    let gateway = serve(
        routed(
            &[("f429", &f429), ("good", &good)],
            json!({"cooldown_secs": 1}),
        ),
        &[],
    )
    .await;
    let url = format!("{}/chat/completions", gateway.base_url());
    let request = json!({"model": "team-model", "messages": [{"role": "user", "content": "hi"}]});
    let first = client().post(&url).json(&request).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Past `cooldown_secs` but within the upstream's 7 s: still passed over.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second = client().post(&url).json(&request).send().await.unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "f429 asked for 7 s and is still cooling down"
    );
}

#[tokio::test]
async fn an_upstreams_error_message_never_carries_its_key() {
    let leaky = answering(|| {
        response(
            503,
            "application/json",
            json!({"error": {"message": "overloaded; your key sk-upstream-secret-1234567890 is fine; token sk-other-0123456789abcdef"}})
                .to_string(),
        )
    })
    .await;
    let mut config: GatewayConfig =
        serde_json::from_value(routed(&[("leaky", &leaky)], json!({}))).unwrap();
    config.upstreams.get_mut("leaky").unwrap().api_key =
        Some(Secret::new("sk-upstream-secret-1234567890".to_string()));
    let gateway = serve_config(config, &[]).await;
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .json(&json!({"model": "team-model", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 502);
    assert!(answer.headers().get("retry-after").is_none());
    let body: Value = answer.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("leaky: HTTP 503: overloaded"), "{message}");
    assert!(
        !message.contains("secret") && !message.contains("sk-other"),
        "{message}"
    );
}

#[tokio::test]
async fn a_long_upstream_message_is_trimmed() {
    let wordy = answering(|| {
        response(
            500,
            "application/json",
            json!({"error": {"message": "x ".repeat(1000)}}).to_string(),
        )
    })
    .await;
    let gateway = serve(routed(&[("wordy", &wordy)], json!({})), &[]).await;
    let body: Value = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .json(&json!({"model": "team-model", "messages": []}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    let kept = message.matches("x ").count() + message.matches("x…").count();
    assert!((140..=160).contains(&kept), "{kept}: {message}");
}

#[tokio::test]
async fn answers_charged_their_whole_reservation_are_recorded_with_what_was_charged() {
    // A stream that ends without [DONE] (cut), a stream that stalls while the client goes away
    // (abandoned), and whole answers without a readable `usage`: none says what it spent.
    let cut = answering(|| {
        let body = String::from_utf8(chunk("half an answer").to_vec()).unwrap();
        response(200, "text/event-stream", body)
    })
    .await;
    let stalling = upstream(Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            let chunks = futures::stream::once(async { Ok::<_, std::io::Error>(chunk("one")) })
                .chain(futures::stream::once(async {
                    tokio::time::sleep(Duration::from_secs(120)).await;
                    Ok(Bytes::from_static(b"data: [DONE]\n\n"))
                }));
            let mut response = Response::new(Body::from_stream(chunks));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }),
    ))
    .await;
    let no_usage = answering(|| {
        let body = json!({"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": "stop"}]});
        response(200, "application/json", body.to_string())
    })
    .await;
    let odd_usage = answering(|| {
        let body = json!({"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": "many"}});
        response(200, "application/json", body.to_string())
    })
    .await;
    let config: GatewayConfig = serde_json::from_value(json!({
        "upstreams": {
            "cut": {"kind": "openai", "base_url": cut},
            "stalling": {"kind": "openai", "base_url": stalling},
            "no-usage": {"kind": "openai", "base_url": no_usage},
            "odd-usage": {"kind": "openai", "base_url": odd_usage},
        },
        "models": {
            "cut-model": [{"upstream": "cut", "model": "m"}],
            "stall-model": [{"upstream": "stalling", "model": "m"}],
            "quiet-model": [{"upstream": "no-usage", "model": "m"}],
            "odd-model": [{"upstream": "odd-usage", "model": "m"}],
        },
    }))
    .unwrap();
    let secret = "mk-charged-in-full-key";
    let gateway = serve_keyed(
        config,
        &["m"],
        vec![key(secret, "ci", None, Some(1_000_000))],
    )
    .await;
    let ask = |model: &str, stream: bool| {
        client()
            .post(format!("{}/chat/completions", gateway.base_url()))
            .bearer_auth(secret)
            .json(&json!({"model": model, "stream": stream, "max_tokens": 100,
                "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let answer = ask("cut-model", true).await.unwrap();
    assert_eq!(answer.status(), 200);
    let (_, events) = sse(&answer.text().await.unwrap());
    assert_eq!(events, ["error"]);
    for model in ["quiet-model", "odd-model"] {
        let answer = ask(model, false).await.unwrap();
        assert_eq!(answer.status(), 200, "{model}");
    }
    // The client reads the first chunk and goes away.
    let answer = ask("stall-model", true).await.unwrap();
    let mut body = answer.bytes_stream();
    body.next().await.unwrap().unwrap();
    drop(body);

    // Every reservation settles (by tasks of their own: wait for them a little).
    for _ in 0..250 {
        if gateway.store.reserved.lock().unwrap().len() == 4
            && gateway.store.open.lock().unwrap().is_empty()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gateway.store.open.lock().unwrap().is_empty());
    let reserved = gateway.store.reserved.lock().unwrap().clone();
    // "hi": 8 tokens of JSON and the chat template's 56, and max_tokens 100.
    assert!(
        reserved.iter().all(|r| r.tokens == 64 + 100),
        "{reserved:?}"
    );
    let spent: u64 = gateway.store.spent.lock().unwrap().values().sum();
    assert_eq!(spent, 4 * 164, "each is charged its whole reservation");

    let records = gateway.records().await;
    let mut seen: Vec<(String, UsageStatus)> = records
        .iter()
        .map(|r| (r.model.clone(), r.status))
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        [
            ("cut-model".to_string(), UsageStatus::Cut),
            ("odd-model".to_string(), UsageStatus::Ok),
            ("quiet-model".to_string(), UsageStatus::Ok),
            ("stall-model".to_string(), UsageStatus::Abandoned),
        ]
    );
    for record in &records {
        // The record says what the ledger charged, and that it is an estimate.
        assert_eq!(
            (record.prompt_tokens, record.completion_tokens),
            (64, 100),
            "{record:?}"
        );
        // $1 per million prompt tokens, $2 per million answer tokens.
        let cost = record.cost_usd.unwrap();
        assert!((cost - (64.0 + 200.0) / 1e6).abs() < 1e-12, "{record:?}");
        let json = serde_json::to_value(record).unwrap();
        assert_eq!(json["estimated"], true, "{json}");
    }
    let recorded: u64 = records
        .iter()
        .map(|r| r.prompt_tokens + r.completion_tokens)
        .sum();
    assert_eq!(recorded, spent, "usage and ledger agree");
}
