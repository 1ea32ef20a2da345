//! The model-boundary tier for the gateway: the official `openai` Python client through the
//! gateway to a real OpenAI-compatible server (llama.cpp with a small model, see
//! docs/engine.md). Ignored by default, so a plain run reports it as skipped;
//! `scripts/test.sh` runs it (`--run-ignored only`) when `MAESTRO_TEST_LLM_URL` is set, e.g.
//! `MAESTRO_TEST_LLM_URL=$(bash scripts/local-llm.sh start 8088)`. Embeddings are asked for
//! only when the server answers `/embeddings` itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "gateway/support/mod.rs"]
mod support;

use maestro_gateway::UsageStatus;
use serde_json::json;

use support::python::run_client;
use support::{client, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real model server: set MAESTRO_TEST_LLM_URL (scripts/test.sh then runs it)"]
async fn the_openai_python_client_talks_to_a_real_model_through_the_gateway() {
    let url = std::env::var("MAESTRO_TEST_LLM_URL")
        .expect("MAESTRO_TEST_LLM_URL names the real model server's …/v1 root");
    let url = url.trim_end_matches('/').to_string();
    let embeds = client()
        .post(format!("{url}/embeddings"))
        .json(&json!({"model": "local", "input": "hello"}))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    let gateway = serve(
        json!({
            "upstreams": {"local": {"kind": "openai", "base_url": url}},
            "models": {
                "team-model": [{"upstream": "local", "model": "local"}],
                "embedder": [{"upstream": "local", "model": "local"}],
            },
        }),
        &[],
    )
    .await;
    let embed_model = if embeds { "embedder" } else { "" };
    let seen = run_client(&gateway.base_url(), &["team-model", embed_model, ""]).await;
    println!("{seen:#}");
    assert!(
        seen["chat"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{seen}"
    );
    assert!(
        seen["chat"]["prompt_tokens"]
            .as_u64()
            .is_some_and(|t| t > 0),
        "{seen}"
    );
    assert!(
        seen["stream"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{seen}"
    );
    assert_eq!(seen["stream"]["usage_chunks"], 0, "{seen}");
    assert!(
        seen["stream_usage"].as_u64().is_some_and(|t| t > 0),
        "{seen}"
    );
    if embeds {
        assert_eq!(seen["embeddings"]["count"], 2, "{seen}");
    }
    let records = gateway.records().await;
    assert!(
        records.iter().all(|r| r.status == UsageStatus::Ok),
        "{records:?}"
    );
    assert!(
        records
            .iter()
            .filter(|r| r.endpoint == "chat")
            .all(|r| r.completion_tokens > 0),
        "every streamed and whole answer of the real server is metered: {records:?}"
    );
}
