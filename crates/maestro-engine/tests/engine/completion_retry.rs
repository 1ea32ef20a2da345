//! TAKT workflows' `completion_retry`: a fresh judge checks each answer against the step's
//! instruction; an incomplete one is retried in the same conversation with the retry
//! instruction and the gaps, within `max_retry`, and a replay goes through the same episode
//! with no model call.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use maestro_engine::{CallPurpose, Engine, RunEvent, RunRecord};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider};
use maestro_piece::{LoadOptions, load_str};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use support::{engine_config, fast_retries, last_user_text, run};

fn workflow(max_retry: u32) -> maestro_piece::Piece {
    load_str(
        &format!(
            "\
name: thorough
initial_step: review
steps:
  - name: review
    persona: reviewer
    edit: false
    instruction: Review every caller of the changed function.
    completion_retry:
      retry_instruction: review-completion-retry
      max_retry: {max_retry}
    rules:
      - condition: Approved
        next: COMPLETE
      - condition: Needs a fix
        next: ABORT
"
        ),
        Path::new("thorough.yaml"),
        &LoadOptions::default(),
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .piece
}

const GAP: &str = r#"{"complete": false, "reason": "one caller was not read", "missing_obligations": [{"kind": "changed_target_gap", "contract_family": "parse", "path": "src/cli.rs", "reason": "the caller in the CLI was not inspected"}]}"#;
const DONE: &str =
    r#"{"complete": true, "reason": "every caller was read", "missing_obligations": []}"#;

fn purposes(ran: &support::Ran) -> Vec<CallPurpose> {
    ran.events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::LlmRequest { purpose, .. } => Some(*purpose),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_incomplete_answer_is_retried_with_the_gaps_until_the_judge_finds_it_complete() {
    let piece = workflow(2);
    assert_eq!(
        piece.movements[0]
            .completion_retry
            .as_ref()
            .unwrap()
            .max_retry,
        2
    );
    let ran = run(
        piece.clone(),
        vec![
            Turn::text("Looked at the library callers.\n[REVIEW:1]"),
            Turn::text(GAP),
            Turn::text("Also read src/cli.rs: fine.\n[REVIEW:1]"),
            Turn::text(DONE),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(
        purposes(&ran),
        [
            CallPurpose::Movement,
            CallPurpose::CompletionJudge,
            CallPurpose::Movement,
            CallPurpose::CompletionJudge
        ]
    );
    let requests = ran.requests();
    // The judge sees the instruction and the answer, in a fresh conversation of its own.
    let judged = support::messages_text(&requests[1]);
    assert!(
        judged.contains("Review every caller of the changed function."),
        "{judged}"
    );
    assert!(
        judged.contains("Looked at the library callers."),
        "{judged}"
    );
    assert_eq!(requests[1]["messages"].as_array().unwrap().len(), 2);
    // The retry goes on in the step's conversation, told the retry instruction and the gap.
    let retry = last_user_text(&requests[2]);
    assert!(retry.contains("src/cli.rs"), "{retry}");
    assert!(retry.contains("[changed_target_gap] parse"), "{retry}");
    assert!(
        support::messages_text(&requests[2]).contains("Looked at the library callers."),
        "the retry continues the conversation"
    );
    // The final answer is the one that routes and is carried on.
    let finished: Vec<String> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished { response, .. } => Some(response.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 1);
    assert!(finished[0].contains("Also read src/cli.rs"), "{finished:?}");

    // `maestro replay`: the same episode from the record, no model call.
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
    let report = engine
        .replay(Arc::new(piece), ran.events.clone(), record)
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(server.requests().len(), 0);
}

#[tokio::test]
async fn retries_stop_at_max_retry_and_a_garbled_decision_ends_the_episode() {
    // max_retry 1: one retry, then the latest answer stands, with a warning naming the gap.
    let ran = run(
        workflow(1),
        vec![
            Turn::text("First look.\n[REVIEW:1]"),
            Turn::text(GAP),
            Turn::text("Second look.\n[REVIEW:2]"),
            Turn::text(GAP),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.requests().len(), 4);
    let (status, _) = ran.status();
    assert_eq!(
        status, "aborted",
        "the last answer's rule (Needs a fix) routes"
    );
    let warnings: Vec<String> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::Warning { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("max_retry (1) reached") && w.contains("src/cli.rs")),
        "{warnings:?}"
    );

    // A judge answer that is not a decision: no retry, the answer stands.
    let ran = run(
        workflow(3),
        vec![
            Turn::text("Looked.\n[REVIEW:1]"),
            Turn::text("I think it is mostly fine."),
        ],
    )
    .await;
    assert_eq!(ran.requests().len(), 2);
    assert_eq!(ran.status(), ("completed".into(), None));
}
