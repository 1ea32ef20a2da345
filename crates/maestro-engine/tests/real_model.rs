//! The model-boundary tier: a real piece against a real OpenAI-compatible server (llama.cpp with
//! a small model, see docs/engine.md) in JSON tool mode. Ignored by default, so a plain run
//! reports it as skipped; `scripts/test.sh` runs it (`--run-ignored only`) when
//! `MAESTRO_TEST_LLM_URL` is set, e.g. `MAESTRO_TEST_LLM_URL=$(bash ../shared/tools/local-llm.sh start 8088)`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "engine/support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::Arc;

use maestro_engine::{Engine, EngineConfig, RunEvent, RunRecord, read_events};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{LoadOptions, load_file};
use maestro_tools::{Registry, ToolsConfig};

#[tokio::test]
#[ignore = "needs a real model server: set MAESTRO_TEST_LLM_URL (scripts/test.sh then runs it)"]
async fn a_real_model_drives_a_piece_to_a_terminal_status() {
    let url = std::env::var("MAESTRO_TEST_LLM_URL")
        .expect("MAESTRO_TEST_LLM_URL names the real model server's …/v1 root");
    let piece = load_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/greet.yaml"),
        &LoadOptions::default(),
    )
    .unwrap()
    .piece;
    let provider: Arc<dyn Provider> =
        Arc::new(OpenAiCompat::new(OpenAiConfig::new(url).with_tool_mode(ToolMode::Json)).unwrap());
    let config = EngineConfig {
        max_iterations_per_movement: 3,
        max_tokens: Some(128),
        ..EngineConfig::new("local")
    };
    let engine = Engine::new(provider, Registry::builtin(ToolsConfig::default()), config);
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    let events_path = record.events_path();
    let report = engine
        .run(Arc::new(piece), "Say hello to Ada.", record, vec![])
        .await
        .unwrap();
    println!(
        "status {} reason {:?} result {:?}",
        report.status, report.reason, report.result
    );

    let events = read_events(&events_path).unwrap();
    support::assert_record_sound(&events, &report.state);
    let responses: Vec<u64> = events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::LlmResponse { usage, .. } => Some(usage.total_tokens),
            _ => None,
        })
        .collect();
    assert!(
        !responses.is_empty() && responses.iter().all(|t| *t > 0),
        "every real call reports usage: {responses:?}"
    );
    // a failure must be the model's doing, not the endpoint's
    assert!(
        !report
            .reason
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
            .starts_with("llm_error"),
        "{:?}",
        report.reason
    );
}
