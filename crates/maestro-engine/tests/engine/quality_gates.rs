//! TAKT workflows' command quality gates: the engine runs the command in the sandbox once the
//! step ends; a failure sends the step round again with the failure as its previous response,
//! and a replay takes every outcome from the record without running the command.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use maestro_engine::{Engine, RunEvent, RunRecord};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider};
use maestro_piece::{LoadOptions, load_str};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use support::{engine_config, fast_retries, last_user_text, run};

const WORKFLOW: &str = "\
name: gated
max_steps: 6
initial_step: implement
steps:
  - name: implement
    persona: coder
    edit: true
    instruction: Build it.
    quality_gates:
      - Keep the change small.
      - type: command
        name: marker
        command: \"test -f output/marker || { echo not there yet; touch output/marker; exit 3; }\"
    rules:
      - condition: Done
        next: review
  - name: review
    persona: reviewer
    edit: false
    instruction: Review it.
    rules:
      - condition: Approved
        next: COMPLETE
";

fn gated() -> maestro_piece::Piece {
    load_str(WORKFLOW, Path::new("gated.yaml"), &LoadOptions::default())
        .unwrap_or_else(|f| panic!("{f}"))
        .piece
}

#[tokio::test]
async fn a_failing_command_gate_sends_the_step_round_again_with_its_output() {
    let piece = gated();
    assert_eq!(piece.movements[0].command_gates.len(), 1);
    let ran = run(
        piece.clone(),
        vec![
            Turn::text("Built it.\n[IMPLEMENT:1]"),
            Turn::text("Built it again.\n[IMPLEMENT:1]"),
            Turn::text("Looks right.\n[REVIEW:1]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let steps: Vec<(String, String, String)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                next,
                via,
                ..
            } => Some((movement.clone(), next.clone(), format!("{via:?}"))),
            _ => None,
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            ("implement".into(), "implement".into(), "QualityGate".into()),
            ("implement".into(), "review".into(), "Tag".into()),
            ("review".into(), "COMPLETE".into(), "Tag".into()),
        ]
    );
    let gates: Vec<(bool, String)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::QualityGateChecked { passed, output, .. } => Some((*passed, output.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(gates.len(), 2, "{gates:?}");
    assert!(
        !gates[0].0 && gates[0].1.contains("not there yet"),
        "{gates:?}"
    );
    assert!(gates[0].1.contains("exit code: 3"), "{gates:?}");
    assert!(gates[1].0, "{gates:?}");
    // The gate makes no model call: one per visit.
    let requests = ran.requests();
    assert_eq!(requests.len(), 3);
    // The text gate is shown to the model; the command gate is not (as in TAKT).
    let first = support::messages_text(&requests[0]);
    assert!(first.contains("Keep the change small."), "{first}");
    assert!(!first.contains("output/marker"), "{first}");
    // The second visit is told why it runs again.
    let second = last_user_text(&requests[1]);
    assert!(second.contains("Quality gate failed: marker"), "{second}");
    assert!(second.contains("not there yet"), "{second}");

    // `maestro replay`: every outcome from the record, the command not run again.
    let server = ScriptedLlm::start(vec![]).await;
    let provider: Arc<dyn Provider> = Arc::new(
        OpenAiCompat::new(OpenAiConfig::new(server.base_url()).with_retry(fast_retries())).unwrap(),
    );
    let engine = Engine::new(
        provider,
        Registry::builtin(ToolsConfig::default()),
        engine_config(),
    );
    let scratch = tempfile::tempdir().unwrap();
    let record = RunRecord::open(scratch.path(), "replay", None).unwrap();
    let marker = record.workspace.join("output/marker");
    assert!(marker.parent().unwrap().is_dir(), "{}", marker.display());
    let report = engine
        .replay(Arc::new(piece), ran.events.clone(), record)
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(server.requests().len(), 0, "replay calls no model");
    assert!(!marker.exists(), "replay ran the gate's command");
}
