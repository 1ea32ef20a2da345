//! The official `openai` Python package through the gateway to scripted upstreams over real
//! HTTP: chat with and without streaming, tool calls (whole and streamed), embeddings, a stream
//! cut by the upstream (the client raises), an unknown model (the client's NotFoundError), the
//! models listed and retrieved one by one.

use crate::support;

use maestro_gateway::UsageStatus;
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::json;

use support::python::run_client;
use support::serve;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_openai_python,
    ignore = "needs the Python package openai: python3 -m pip install openai==3.51.0 (scripts/prerequisites.sh)"
)]
async fn the_openai_python_client_chats_streams_calls_tools_and_embeds_through_the_gateway() {
    let upstream = ScriptedLlm::start([
        Turn::text("Hello!").with_usage(12, 2),
        Turn::text("Hello, streamed.").with_usage(12, 4),
        Turn::text("Hello again.").with_usage(12, 3),
        Turn::tool_call("Read", json!({"path": "src/main.rs"})).with_usage(30, 9),
        Turn::tool_call("Read", json!({"path": "Cargo.toml"})).with_usage(30, 9),
    ])
    .await;
    let cutting = ScriptedLlm::start([Turn::broken_stream(1)]).await;
    let gateway = serve(
        json!({
            "upstreams": {
                "primary": {"kind": "openai", "base_url": upstream.base_url()},
                "cutting": {"kind": "openai", "base_url": cutting.base_url()},
            },
            "models": {
                "team-model": [{"upstream": "primary", "model": "some-model"}],
                "embedder": [{"upstream": "primary", "model": "embed-small"}],
                "cut-model": [{"upstream": "cutting", "model": "m"}],
            },
        }),
        &["some-model"],
    )
    .await;

    let seen = run_client(
        &gateway.base_url(),
        &["team-model", "embedder", "cut-model", "tools"],
    )
    .await;
    assert_eq!(seen["chat"]["content"], "Hello!");
    assert_eq!(seen["chat"]["prompt_tokens"], 12);
    assert_eq!(seen["stream"]["content"], "Hello, streamed.");
    assert_eq!(
        seen["stream"]["usage_chunks"], 0,
        "the usage chunk the gateway asked for is not the client's"
    );
    assert_eq!(
        seen["stream_usage"], 3,
        "the client asked for usage and got it"
    );
    assert_eq!(
        seen["tool"],
        json!({"name": "Read", "arguments": {"path": "src/main.rs"}})
    );
    assert_eq!(
        seen["stream_tool"],
        json!({"name": "Read", "arguments": {"path": "Cargo.toml"}})
    );
    assert_eq!(
        seen["embeddings"],
        json!({"count": 2, "dims": 8, "prompt_tokens": 3})
    );
    let cut = seen["cut"].as_str().unwrap();
    assert!(
        cut.starts_with("APIError: ") && cut.contains("broke off the stream"),
        "{cut}"
    );
    let unknown = seen["unknown"].as_str().unwrap();
    assert!(unknown.starts_with("NotFoundError: "), "{unknown}");
    let names = json!(["cut-model", "embedder", "team-model"]);
    assert_eq!(seen["models"], json!({"listed": names, "retrieved": names}));
    let unknown = seen["unknown_model"].as_str().unwrap();
    assert!(
        unknown.starts_with("NotFoundError: ")
            && unknown.contains("\"no-such-model\" does not exist"),
        "{unknown}"
    );

    // The client's key went nowhere.
    for request in upstream.recorded() {
        assert_eq!(request.header("authorization"), None);
    }
    let records = gateway.records().await;
    let statuses: Vec<(String, UsageStatus, u64)> = records
        .iter()
        .map(|r| (r.model.clone(), r.status, r.completion_tokens))
        .collect();
    assert_eq!(
        statuses,
        vec![
            ("team-model".to_string(), UsageStatus::Ok, 2),
            ("team-model".to_string(), UsageStatus::Ok, 4),
            ("team-model".to_string(), UsageStatus::Ok, 3),
            ("team-model".to_string(), UsageStatus::Ok, 9),
            ("team-model".to_string(), UsageStatus::Ok, 9),
            ("embedder".to_string(), UsageStatus::Ok, 0),
            ("cut-model".to_string(), UsageStatus::Cut, 0),
        ]
    );
}
