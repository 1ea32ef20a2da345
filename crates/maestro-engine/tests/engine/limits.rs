//! Limits at the agent loop, over real HTTP: tool calls per answer, the iteration cap in the
//! record, and errors that would echo a huge argument back to the model.

use crate::support;

use maestro_engine::{EngineConfig, OutcomeSource, ReminderKind, RunEvent};
use maestro_piece::Dialect;
use maestro_testkit::Turn;
use serde_json::{Value, json};
use support::*;

fn one_step() -> maestro_piece::Piece {
    piece(
        Dialect::Maestro,
        vec![mv("research", vec![rule("facts gathered", "research")])],
    )
}

fn complete() -> Turn {
    Turn::tool_call("complete", json!({"status": "success", "result": "done"}))
}

/// The `tool` messages of a chat request, in order.
fn tool_messages(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn only_the_first_tool_calls_of_an_answer_run_and_the_model_is_told() {
    let reads = (0..2_000).map(|_| ("Read", json!({"file_path": "input/notes.txt"})));
    let config = EngineConfig {
        max_tool_calls_per_answer: 5,
        ..engine_config()
    };
    let ran = run_with(
        one_step(),
        vec![Turn::tool_calls(reads), complete()],
        config,
        None,
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.count("tool_call"), 5 + 1, "{:?}", ran.kinds());
    assert_eq!(ran.count("tool_result"), 5 + 1);
    let second = &ran.requests()[1];
    // Only the calls that ran stay in the conversation, each with its result.
    let assistant = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["tool_calls"].as_array().unwrap().len(), 5);
    assert_eq!(tool_messages(second).len(), 5);
    let told = last_user_text(second);
    assert_eq!(
        told,
        "Your last answer asked for 2000 tool calls. Only the first 5 were run (their results \
         are above); the other 1995 were not run. Ask for what you still need in your next \
         answer, at most 5 tool calls per answer."
    );
    let reminder = ran
        .events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::Reminder { kind, message, .. } => Some((*kind, message.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(reminder, (ReminderKind::ToolCallLimit, told));
}

#[tokio::test]
async fn a_movement_cut_off_by_the_iteration_cap_says_so_in_the_record() {
    let mut research = mv("research", vec![rule("facts gathered", "write")]);
    research.default_next = Some(target("write"));
    let write = mv("write", vec![rule("written", "research")]);
    let config = EngineConfig {
        max_iterations_per_movement: 2,
        ..engine_config()
    };
    let read = || Turn::tool_call("Read", json!({"file_path": "input/notes.txt"}));
    let ran = run_with(
        piece(Dialect::Maestro, vec![research, write]),
        vec![read(), read(), complete()],
        config,
        None,
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let finished: Vec<(String, OutcomeSource, Option<String>)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                via,
                reason,
                ..
            } => Some((
                movement.clone(),
                *via,
                reason.as_ref().map(ToString::to_string),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        finished,
        vec![
            (
                "research".to_string(),
                OutcomeSource::DefaultNext,
                Some("max_iterations".to_string())
            ),
            ("write".to_string(), OutcomeSource::CompleteTool, None),
        ]
    );
    let research_line = ran
        .events
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .find(|v| v["type"] == "movement_finished")
        .unwrap();
    assert_eq!(research_line["reason"], "max_iterations", "{research_line}");
    assert_eq!(research_line["via"], "default_next");
}

#[tokio::test]
async fn an_error_about_a_huge_argument_quotes_it_cut() {
    let huge = "x".repeat(1_000_000);
    // No context window: the megabyte arguments themselves must not end the movement here.
    let config = EngineConfig {
        context_length: None,
        ..engine_config()
    };
    let ran = run_with(
        one_step(),
        vec![
            // `limit` must be a number: the error quotes the string it got.
            Turn::tool_call(
                "Read",
                json!({"file_path": "input/notes.txt", "limit": huge}),
            ),
            // A control tool whose wrong value is echoed in the refusal.
            Turn::tool_call("transition", json!({"next": huge})),
            complete(),
        ],
        config,
        None,
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let third = &ran.requests()[2];
    let errors = tool_messages(third);
    assert_eq!(errors.len(), 2, "{errors:?}");
    for error in &errors {
        assert!(error.starts_with("error: "), "{error}");
        assert!(
            error.chars().count() < 1_100,
            "{} chars",
            error.chars().count()
        );
    }
    assert!(
        errors[0].contains("invalid type: string \"xxx") && errors[0].contains("Expected fields:"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].contains("characters not shown")
            && errors[1].ends_with("choose one of: research"),
        "{}",
        errors[1]
    );
}
