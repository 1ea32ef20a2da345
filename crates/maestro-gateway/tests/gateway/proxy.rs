//! The proxy over real HTTP on 127.0.0.1: pass-through with the model rewritten, usage metered
//! from whole answers and from streams, failover before the first byte, a cut stream ending in
//! an SSE error, bounded metric labels.

use crate::support;

use maestro_gateway::UsageStatus;
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use support::{client, closed_port, serve, sse};

fn one_upstream(url: &str) -> Value {
    json!({
        "upstreams": {"primary": {"kind": "openai", "base_url": url}},
        "models": {"team-model": [{"upstream": "primary", "model": "some-model"}]},
    })
}

#[tokio::test]
async fn a_whole_answer_passes_through_with_the_model_rewritten_and_is_metered() {
    let upstream =
        ScriptedLlm::start(
            [Turn::tool_call("Read", json!({"path": "a.rs"})).with_usage(1200, 300)],
        )
        .await;
    let gateway = serve(one_upstream(&upstream.base_url()), &["some-model"]).await;
    let request = json!({
        "model": "team-model",
        "messages": [{"role": "user", "content": "read a.rs"}],
        "tools": [{"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}],
        "response_format": {"type": "text"},
        "temperature": 0.25,
    });
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .header("X-Maestro-Job", "job-1")
        .header("X-Maestro-Movement", "plan")
        .header("Authorization", "Bearer client-secret-not-forwarded")
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    let call = &body["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "Read");
    assert_eq!(body["usage"]["prompt_tokens"], 1200);

    // The upstream got the client's body, only `model` changed, and none of its headers.
    let sent = upstream.recorded().pop().unwrap();
    let mut expected = request.clone();
    expected["model"] = json!("some-model");
    assert_eq!(sent.body, expected);
    assert_eq!(sent.header("authorization"), None);

    let records = gateway.records().await;
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.status, UsageStatus::Ok);
    assert_eq!(record.model, "team-model");
    assert_eq!(record.upstream.as_deref(), Some("primary"));
    assert_eq!(record.upstream_model.as_deref(), Some("some-model"));
    assert_eq!(
        (record.prompt_tokens, record.completion_tokens),
        (1200, 300)
    );
    // $1 per million prompt tokens, $2 per million answer tokens.
    let cost = record.cost_usd.unwrap();
    assert!((cost - (1200.0 + 600.0) / 1e6).abs() < 1e-12, "{cost}");
    assert_eq!(record.job.as_deref(), Some("job-1"));
    assert_eq!(record.movement.as_deref(), Some("plan"));
    assert_eq!(record.http_status, 200);
}

#[tokio::test]
async fn a_stream_is_metered_from_its_usage_chunk_which_the_client_sees_only_when_it_asked() {
    let upstream = ScriptedLlm::start([
        Turn::text("hello there, streamed").with_usage(40, 7),
        Turn::text("again").with_usage(41, 2),
    ])
    .await;
    let gateway = serve(one_upstream(&upstream.base_url()), &[]).await;
    let url = format!("{}/chat/completions", gateway.base_url());
    let messages = json!([{"role": "user", "content": "hi"}]);

    // Without asking: the gateway asks the upstream for usage and takes the chunk out.
    let plain = client()
        .post(&url)
        .json(&json!({"model": "team-model", "stream": true, "messages": messages}))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    let text = plain.text().await.unwrap();
    let (data, events) = sse(&text);
    assert!(events.is_empty(), "{text}");
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "hello there, streamed");
    assert!(
        chunks
            .iter()
            .all(|c| c.get("usage").is_none_or(Value::is_null)),
        "{text}"
    );
    assert_eq!(
        upstream.requests()[0]["stream_options"],
        json!({"include_usage": true})
    );

    // Asking: the usage chunk reaches the client.
    let asked = client()
        .post(&url)
        .json(
            &json!({"model": "team-model", "stream": true, "messages": messages,
            "stream_options": {"include_usage": true}}),
        )
        .send()
        .await
        .unwrap();
    let text = asked.text().await.unwrap();
    let (data, _) = sse(&text);
    let usage: Vec<Value> = data
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|c| c["usage"].is_object())
        .collect();
    assert_eq!(usage.len(), 1, "{text}");
    assert_eq!(usage[0]["usage"]["prompt_tokens"], 41);

    let records = gateway.records().await;
    let tokens: Vec<(u64, u64, UsageStatus)> = records
        .iter()
        .map(|r| (r.prompt_tokens, r.completion_tokens, r.status))
        .collect();
    assert_eq!(
        tokens,
        vec![(40, 7, UsageStatus::Ok), (41, 2, UsageStatus::Ok)]
    );
    assert_eq!(records[0].cost_usd, None, "no price, no cost");
}

#[tokio::test]
async fn an_upstream_answering_500_fails_over_to_the_next_which_answers() {
    let a = ScriptedLlm::start([Turn::http_error(500, "upstream A is down")]).await;
    let b = ScriptedLlm::start([
        Turn::text("B answers").with_usage(10, 3),
        Turn::text("B again").with_usage(10, 2),
    ])
    .await;
    let gateway = serve(
        json!({
            "upstreams": {
                "a": {"kind": "openai", "base_url": a.base_url()},
                "b": {"kind": "openai", "base_url": b.base_url()},
            },
            "models": {"team-model": [
                {"upstream": "a", "model": "model-a"},
                {"upstream": "b", "model": "model-b", "weight": 0},
            ]},
            "cooldown_secs": 600,
        }),
        &[],
    )
    .await;
    let url = format!("{}/chat/completions", gateway.base_url());
    let request = json!({"model": "team-model", "messages": [{"role": "user", "content": "hi"}]});
    let answer = client().post(&url).json(&request).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "B answers");
    assert_eq!(a.requests().len(), 1);
    assert_eq!(b.requests()[0]["model"], "model-b");

    // A cools down: the next request goes to B at once.
    let again = client().post(&url).json(&request).send().await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(
        a.requests().len(),
        1,
        "A is passed over while it cools down"
    );

    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(
            r#"maestro_gateway_upstream_failures_total{upstream="a",reason="status_5xx"} 1"#
        ),
        "{metrics}"
    );
    let records = gateway.records().await;
    let upstreams: Vec<_> = records
        .iter()
        .map(|r| r.upstream.clone().unwrap())
        .collect();
    assert_eq!(upstreams, ["b", "b"]);
}

#[tokio::test]
async fn a_refused_connection_and_a_429_fail_over_and_all_failing_is_a_502_naming_each() {
    let busy = ScriptedLlm::start([Turn::http_error(429, "slow down")]).await;
    let closed = closed_port();
    let gateway = serve(
        json!({
            "upstreams": {
                "gone": {"kind": "openai", "base_url": format!("http://{closed}/v1")},
                "busy": {"kind": "openai", "base_url": busy.base_url()},
            },
            "models": {"team-model": [
                {"upstream": "gone", "model": "m"},
                {"upstream": "busy", "model": "m", "weight": 0},
            ]},
        }),
        &[],
    )
    .await;
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .json(&json!({"model": "team-model", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 502);
    let body: Value = answer.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("gone: ") && message.contains("busy: HTTP 429"),
        "{message}"
    );
    assert_eq!(body["error"]["code"], "upstreams_failed");
    let records = gateway.records().await;
    assert_eq!(records[0].status, UsageStatus::Unavailable);
    assert_eq!(records[0].http_status, 502);
}

#[tokio::test]
async fn a_stream_cut_after_its_first_chunk_ends_in_an_sse_error_not_a_quiet_end() {
    let a = ScriptedLlm::start([Turn::broken_stream(1)]).await;
    let b = ScriptedLlm::start([Turn::text("never asked")]).await;
    let gateway = serve(
        json!({
            "upstreams": {
                "a": {"kind": "openai", "base_url": a.base_url()},
                "b": {"kind": "openai", "base_url": b.base_url()},
            },
            "models": {"team-model": [
                {"upstream": "a", "model": "model-a"},
                {"upstream": "b", "model": "model-b", "weight": 0},
            ]},
        }),
        &[],
    )
    .await;
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .json(&json!({"model": "team-model", "stream": true,
            "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    // The first chunk went out: the status is sent, and the end must say what happened.
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    let (data, events) = sse(&text);
    assert_eq!(events, ["error"], "{text}");
    assert!(!data.iter().any(|d| d == "[DONE]"), "{text}");
    let error: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("upstream a broke off the stream"),
        "{message}"
    );
    assert!(b.requests().is_empty(), "no failover once bytes were sent");

    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(r#"maestro_gateway_requests_total{upstream="a",model="team-model",key="",status="cut"} 1"#),
        "{metrics}"
    );
    let records = gateway.records().await;
    assert_eq!(records[0].status, UsageStatus::Cut);
}

#[tokio::test]
async fn a_stream_that_closes_cleanly_without_done_is_cut_too() {
    let a = ScriptedLlm::start([Turn::truncated_stream(2)]).await;
    let gateway = serve(one_upstream(&a.base_url()), &[]).await;
    let text = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .json(&json!({"model": "team-model", "stream": true, "messages": []}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (_, events) = sse(&text);
    assert_eq!(events, ["error"], "{text}");
    assert_eq!(gateway.records().await[0].status, UsageStatus::Cut);
}

#[tokio::test]
async fn embeddings_pass_through_and_count_their_prompt_tokens() {
    let upstream = ScriptedLlm::start([]).await;
    let gateway = serve(
        json!({
            "upstreams": {"primary": {"kind": "openai", "base_url": upstream.base_url()}},
            "models": {"embedder": [{"upstream": "primary", "model": "embed-small"}]},
        }),
        &["embed-small"],
    )
    .await;
    let answer = client()
        .post(format!("{}/embeddings", gateway.base_url()))
        .json(&json!({"model": "embedder", "input": ["one two three", "four"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    let sent = upstream.recorded().pop().unwrap();
    assert_eq!(sent.path, "/v1/embeddings");
    assert_eq!(sent.body["model"], "embed-small");
    let records = gateway.records().await;
    assert_eq!(records[0].endpoint, "embeddings");
    assert_eq!(records[0].prompt_tokens, 4);
    assert!((records[0].cost_usd.unwrap() - 4.0 / 1e6).abs() < 1e-12);
}

#[tokio::test]
async fn an_unknown_model_is_a_404_listing_the_served_ones_and_never_a_metric_label() {
    let upstream = ScriptedLlm::start([]).await;
    let gateway = serve(one_upstream(&upstream.base_url()), &[]).await;
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .json(&json!({"model": "made-up-model-7f3a", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("team-model")
    );

    let models: Value = client()
        .get(format!("{}/models", gateway.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "team-model");
    assert_eq!(models["data"].as_array().unwrap().len(), 1);

    let metrics = gateway.metrics().await;
    assert!(!metrics.contains("made-up-model-7f3a"), "{metrics}");
    assert!(metrics.contains(r#"model="(unknown)""#), "{metrics}");
    assert!(upstream.requests().is_empty());
}

#[tokio::test]
async fn a_client_error_of_the_upstream_is_passed_on_without_failover() {
    let a = ScriptedLlm::start([Turn::http_error(
        400,
        r#"{"error":{"message":"bad tools"}}"#,
    )])
    .await;
    let b = ScriptedLlm::start([Turn::text("never asked")]).await;
    let gateway = serve(
        json!({
            "upstreams": {
                "a": {"kind": "openai", "base_url": a.base_url()},
                "b": {"kind": "openai", "base_url": b.base_url()},
            },
            "models": {"team-model": [
                {"upstream": "a", "model": "m"},
                {"upstream": "b", "model": "m", "weight": 0},
            ]},
        }),
        &[],
    )
    .await;
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .json(&json!({"model": "team-model", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    assert_eq!(
        answer.text().await.unwrap(),
        r#"{"error":{"message":"bad tools"}}"#
    );
    assert!(b.requests().is_empty());
    assert_eq!(gateway.records().await[0].status, UsageStatus::Rejected);
}

#[tokio::test]
async fn every_request_of_a_burst_is_recorded_through_the_batching_writer() {
    let upstream = ScriptedLlm::builder()
        .turns((0..200).map(|_| Turn::text("ok").with_usage(1, 1)))
        .start()
        .await;
    let gateway = serve(one_upstream(&upstream.base_url()), &[]).await;
    let url = format!("{}/chat/completions", gateway.base_url());
    let http = client();
    let requests = (0..200).map(|_| {
        let http = http.clone();
        let url = url.clone();
        async move {
            http.post(&url)
                .json(&json!({"model": "team-model", "messages": []}))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    let statuses = futures::future::join_all(requests).await;
    assert!(statuses.iter().all(|s| *s == 200));
    let records = gateway.records().await;
    assert_eq!(records.len(), 200);
    let batches = gateway.store.batches.lock().unwrap().clone();
    assert_eq!(batches.iter().sum::<usize>(), 200);
}

#[tokio::test]
async fn a_body_over_the_size_limit_is_a_413_in_openai_error_shape() {
    let upstream = ScriptedLlm::start([]).await;
    let gateway = serve(one_upstream(&upstream.base_url()), &[]).await;
    // 2 MiB of prompt alone: the body, with its JSON around it, is past the limit.
    let request = json!({
        "model": "team-model",
        "messages": [{"role": "user", "content": "x".repeat(2 * 1024 * 1024)}],
    });
    for path in ["chat/completions", "embeddings"] {
        let answer = client()
            .post(format!("{}/{path}", gateway.base_url()))
            .json(&request)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 413, "{path}");
        assert_eq!(
            answer.headers()["content-type"],
            "application/json",
            "{path}"
        );
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], "request_too_large", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("2 MiB"), "{message}");
    }
    assert!(upstream.requests().is_empty());
    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(
            r#"maestro_gateway_requests_total{upstream="",model="(unknown)",key="",status="refused"} 2"#
        ),
        "{metrics}"
    );
}
