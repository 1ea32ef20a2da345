//! The LLM gateway as the `maestro` binary runs it, over real HTTP on 127.0.0.1: mounted at
//! `/v1` by `maestro serve` when `gateway.enabled` is set (its metrics in the server's), its
//! usage recorded in the store and read back by `maestro gateway usage`, and the upstream's key
//! in neither the log nor the store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

mod support;

use support::jobs::{Project, stderr};

const UPSTREAM_KEY: &str = "sk-gateway-test-5b1c9e";

#[tokio::test(flavor = "multi_thread")]
async fn serve_mounts_the_gateway_at_v1_and_its_usage_reads_back_without_the_key_anywhere() {
    let llm =
        ScriptedLlm::start([Turn::text("Hello through the gateway.").with_usage(20, 6)]).await;
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        format!(
            "llm:\n  tool_mode: native\n  models:\n    some-model: {{price: {{input_per_mtok: 0.5, output_per_mtok: 1.5}}}}\n\
             gateway:\n  enabled: true\n  upstreams:\n    primary: {{kind: openai, base_url: \"{}\", api_key_env: GW_TEST_KEY}}\n\
             \x20 models:\n    team-model:\n      - {{upstream: primary, model: some-model}}\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let served = project.serve_with_env(
        &llm.base_url(),
        &["--no-worker"],
        &[("GW_TEST_KEY", UPSTREAM_KEY)],
    );
    let (status, answer) = served
        .post(
            "/v1/chat/completions",
            json!({"model": "team-model", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Hello through the gateway."
    );
    let sent = llm.recorded().pop().unwrap();
    assert_eq!(sent.body["model"], "some-model");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
    let (_, metrics) = served.get("/metrics").await;
    let metrics = metrics.as_str().unwrap().to_string();
    assert!(
        metrics.contains(
            r#"maestro_gateway_requests_total{upstream="primary",model="team-model",key="",status="ok"} 1"#
        ),
        "{metrics}"
    );
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    let log = served.stop().await;

    let mut usage = project.command(&["gateway", "usage", "--by", "model", "--json"]);
    usage.env("GW_TEST_KEY", UPSTREAM_KEY);
    let out = tokio::task::spawn_blocking(move || usage.output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![
            json!({"key": null, "model": "team-model", "job": null, "requests": 1,
            "prompt_tokens": 20, "completion_tokens": 6, "cost_usd": (20.0 * 0.5 + 6.0 * 1.5) / 1e6})
        ]
    );

    // The key is in neither the log nor any file of the store.
    assert!(!log.contains(UPSTREAM_KEY), "{log}");
    for entry in std::fs::read_dir(project.path().join(".maestro")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes
                    .windows(UPSTREAM_KEY.len())
                    .any(|w| w == UPSTREAM_KEY.as_bytes()),
                "{} holds the upstream key",
                path.display()
            );
        }
    }
}
