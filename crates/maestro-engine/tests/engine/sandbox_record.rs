//! The run record says when `Bash` runs without any sandbox.

use crate::support;

use std::sync::Arc;

use maestro_engine::{Engine, RunEvent, RunRecord, read_events};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider};
use maestro_piece::Dialect;
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{BashSandboxMode, Registry, ToolsConfig};
use serde_json::json;
use support::*;

async fn warnings_with(mode: BashSandboxMode) -> Vec<String> {
    let server = ScriptedLlm::start(vec![Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "done"}),
    )])
    .await;
    let llm = OpenAiConfig::new(server.base_url()).with_retry(fast_retries());
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompat::new(llm).unwrap());
    let tools = Registry::builtin(ToolsConfig {
        bash_sandbox: mode,
        ..ToolsConfig::default()
    });
    let engine = Engine::new(provider, tools, engine_config());
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    let events_path = record.events_path();
    let piece = piece(Dialect::Maestro, vec![mv("only", vec![])]);
    engine
        .run(Arc::new(piece), "Do it.", record, vec![])
        .await
        .unwrap();
    read_events(&events_path)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            RunEvent::Warning { message, .. } => Some(message),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_run_without_a_sandbox_says_so_in_its_record() {
    let warnings = warnings_with(BashSandboxMode::UnsafeNoSandbox).await;
    assert!(
        warnings.iter().any(|w| w.contains("NO SANDBOX")),
        "{warnings:?}"
    );
    let warnings = warnings_with(BashSandboxMode::Always).await;
    assert!(
        !warnings.iter().any(|w| w.contains("NO SANDBOX")),
        "{warnings:?}"
    );
}
