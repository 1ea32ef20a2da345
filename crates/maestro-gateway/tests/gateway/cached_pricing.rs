//! Prompt tokens read from an upstream's cache are priced at `cached_input_per_mtok`: from an
//! OpenAI-compatible upstream's `prompt_tokens_details.cached_tokens` and an Anthropic
//! upstream's `cache_read_input_tokens`, whole and streamed, over real HTTP on 127.0.0.1.

use crate::support;

use maestro_gateway::UsageStatus;
use maestro_testkit::{ScriptedAnthropic, ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use support::{client, serve};

async fn chat(base_url: &str, body: Value) -> String {
    let answer = client()
        .post(format!("{base_url}/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.text().await.unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[tokio::test]
async fn cached_prompt_tokens_of_either_kind_of_upstream_are_priced_at_the_cached_price() {
    let openai = ScriptedLlm::start([Turn::raw(
        "application/json",
        r#"{"id":"c1","object":"chat.completion","created":1,"model":"gpt-x",
            "choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":1200,"completion_tokens":10,"total_tokens":1210,
                     "prompt_tokens_details":{"cached_tokens":1000}}}"#,
    )])
    .await;
    // Each answer reports 10 input tokens, 100 read from the cache and 20 written to it.
    let anthropic = ScriptedAnthropic::builder()
        .cache_tokens(100, 20)
        .turns([
            Turn::text("Whole.").with_usage(10, 4),
            Turn::text("Streamed.").with_usage(10, 4),
        ])
        .start()
        .await;
    let gateway = serve(
        json!({
            "upstreams": {
                "local": {"kind": "openai", "base_url": openai.base_url()},
                "claude": {"kind": "anthropic", "base_url": anthropic.base_url()},
            },
            "models": {
                "gpt": [{"upstream": "local", "model": "gpt-x"}],
                "claude": [{"upstream": "claude", "model": "claude-x"}],
            },
        }),
        // $1 per million input tokens, $0.5 cached, $2 output.
        &["gpt-x", "claude-x"],
    )
    .await;
    let messages = json!([{"role": "user", "content": "Hi"}]);
    chat(
        &gateway.base_url(),
        json!({"model": "gpt", "messages": messages}),
    )
    .await;
    let whole: Value = serde_json::from_str(
        &chat(
            &gateway.base_url(),
            json!({"model": "claude", "messages": messages}),
        )
        .await,
    )
    .unwrap();
    assert_eq!(whole["usage"]["prompt_tokens"], 130);
    assert_eq!(
        whole["usage"]["prompt_tokens_details"]["cached_tokens"],
        100
    );
    chat(
        &gateway.base_url(),
        json!({"model": "claude", "messages": messages, "stream": true}),
    )
    .await;

    let records = gateway.records().await;
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r.status == UsageStatus::Ok));
    let costs: Vec<f64> = records.iter().map(|r| r.cost_usd.unwrap()).collect();
    // 200 uncached at $1, 1,000 cached at $0.5, 10 answer tokens at $2.
    assert!(close(costs[0], 720e-6), "{costs:?}");
    // 30 input tokens (10 plain, 20 written to the cache) at $1, 100 cached at $0.5, 4 at $2.
    assert!(close(costs[1], 88e-6), "{costs:?}");
    assert!(close(costs[2], 88e-6), "{costs:?}");
    assert_eq!(records[2].prompt_tokens, 130);
}
