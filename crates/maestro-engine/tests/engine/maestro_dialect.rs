//! The maestro dialect end to end over real HTTP: control tools, reminders, limits, loops,
//! context thresholds, retries and the run record.

use crate::support;

use maestro_engine::{ContextLevel, EngineConfig, RunEvent};
use maestro_piece::Dialect;
use maestro_testkit::Turn;
use serde_json::json;
use support::*;

fn two_steps() -> maestro_piece::Piece {
    piece(
        Dialect::Maestro,
        vec![
            mv("research", vec![rule("facts gathered", "write")]),
            mv("write", vec![rule("needs more facts", "research")]),
        ],
    )
}

#[tokio::test]
async fn tools_transition_and_complete_carry_summary_and_lessons() {
    let ran = run(
        two_steps(),
        vec![
            Turn::tool_call("Read", json!({"file_path": "input/notes.txt"})),
            Turn::tool_call(
                "transition",
                json!({"next": "write", "summary": "Cardamom is the key.", "lessons": ["Check input/ first"]}),
            ),
            Turn::tool_call("complete", json!({"status": "success", "result": "The cookbook is written."})),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.report.result, "The cookbook is written.");
    let requests = ran.requests();
    assert_eq!(requests.len(), 3);
    // the tool really read the workspace file, and the answer went back to the model
    assert!(
        ran.request_text(1)
            .contains("the secret ingredient is cardamom"),
        "{}",
        ran.request_text(1)
    );
    // only the movement's tools plus the control tools are offered; `next` is the rules' enum
    let tools: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"Read") && tools.contains(&"transition") && tools.contains(&"complete"),
        "{tools:?}"
    );
    assert!(
        !tools.contains(&"Write") && !tools.contains(&"Bash"),
        "{tools:?}"
    );
    let transition = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "transition")
        .unwrap();
    assert_eq!(
        transition["function"]["parameters"]["properties"]["next"]["enum"],
        json!(["write"])
    );
    // the next movement's prompt carries the summary and the lesson
    let second = ran.request_text(2);
    assert!(
        second.contains("Cardamom is the key.") && second.contains("Check input/ first"),
        "{second}"
    );
    let tool_results: Vec<bool> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::ToolResult { tool, ok, .. } if tool == "Read" => Some(*ok),
            _ => None,
        })
        .collect();
    assert_eq!(tool_results, vec![true]);
    assert_eq!(
        ran.report.state.lessons,
        vec!["Check input/ first".to_string()]
    );
    // the record keeps each visit's whole conversation, tool results included
    let transcripts: Vec<String> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished { transcript, .. } => transcript.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(transcripts.len(), 2);
    let research = std::fs::read_to_string(&transcripts[0]).unwrap();
    let roles: Vec<String> = research
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["role"].to_string())
        .collect();
    assert_eq!(
        roles,
        [
            "\"system\"",
            "\"user\"",
            "\"assistant\"",
            "\"tool\"",
            "\"assistant\"",
            "\"tool\""
        ]
    );
    assert!(
        research.contains("the secret ingredient is cardamom"),
        "{research}"
    );
}

#[tokio::test]
async fn plain_text_turns_get_two_reminders_then_default_next() {
    let mut p = two_steps();
    p.movements[0].default_next = Some(target("write"));
    let ran = run(
        p,
        vec![
            Turn::text("I think we are done."),
            Turn::text("Still thinking."),
            Turn::text("Really done."),
            Turn::tool_call("complete", json!({"status": "success", "result": "ok"})),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.count("reminder"), 2);
    assert!(last_user_text(&ran.requests()[1]).contains("`transition`"));
    let via: Vec<String> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished { via, next, .. } => Some(format!("{via:?}->{next}")),
            _ => None,
        })
        .collect();
    assert_eq!(via, vec!["DefaultNext->write", "CompleteTool->COMPLETE"]);
}

#[tokio::test]
async fn without_default_next_the_run_aborts_with_no_control_outcome() {
    let ran = run(
        two_steps(),
        vec![Turn::text("a"), Turn::text("b"), Turn::text("c")],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        ("aborted".into(), Some("no_control_outcome".into()))
    );
    assert_eq!(ran.requests().len(), 3);
}

#[tokio::test]
async fn max_movements_ends_the_run_as_exceeded() {
    let mut p = two_steps();
    p.max_movements = 3;
    let ran = run(
        p,
        vec![
            Turn::tool_call("transition", json!({"next": "write"})),
            Turn::tool_call("transition", json!({"next": "research"})),
            Turn::tool_call("transition", json!({"next": "write"})),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        ("exceeded".into(), Some("max_movements".into()))
    );
    assert_eq!(ran.count("movement_started"), 3);
}

#[tokio::test]
async fn repeat_visits_are_warned_then_aborted_as_a_loop() {
    let mut retry = mv("retry", vec![rule("try again", "retry")]);
    retry.max_consecutive_revisits = Some(2);
    let ran = run(
        piece(Dialect::Maestro, vec![retry]),
        vec![
            Turn::tool_call("transition", json!({"next": "retry"})),
            Turn::tool_call("transition", json!({"next": "retry"})),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        ("aborted".into(), Some("loop_detected".into()))
    );
    assert_eq!(ran.count("loop_warning"), 1);
    assert!(!ran.request_text(0).contains("times in a row"));
    assert!(
        ran.request_text(1).contains("2 times in a row"),
        "{}",
        ran.request_text(1)
    );
}

#[tokio::test]
async fn context_pressure_prompts_then_forces_default_next() {
    let mut p = two_steps();
    p.movements[0].default_next = Some(target("write"));
    let config = EngineConfig {
        context_length: Some(1000),
        ..engine_config()
    };
    let ran = run_with(
        p,
        vec![
            Turn::tool_call("Glob", json!({"pattern": "**/*.txt"})).with_usage(860, 10),
            Turn::tool_call("Read", json!({"file_path": "input/notes.txt"})).with_usage(960, 10),
            Turn::tool_call("complete", json!({"status": "success", "result": "done"}))
                .with_usage(100, 5),
        ],
        config,
        None,
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let levels: Vec<ContextLevel> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::ContextWarning { level, .. } => Some(*level),
            _ => None,
        })
        .collect();
    assert_eq!(levels, vec![ContextLevel::Prompt, ContextLevel::Force]);
    assert!(last_user_text(&ran.requests()[1]).contains("context limit"));
    assert_eq!(ran.report.state.usage.prompt_tokens, 1920);
}

#[tokio::test]
async fn retries_are_recorded_and_the_run_completes() {
    let ran = run(
        piece(Dialect::Maestro, vec![mv("only", vec![])]),
        vec![
            Turn::http_error(429, "slow down"),
            Turn::http_error(500, "oops"),
            Turn::broken_stream(1),
            Turn::tool_call(
                "complete",
                json!({"status": "success", "result": "made it"}),
            ),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.count("llm_retry"), 3);
    assert_eq!(ran.count("llm_request"), 1);
    assert_eq!(ran.requests().len(), 4);
}

#[tokio::test]
async fn an_endpoint_that_stays_down_fails_the_run_with_its_reason() {
    let ran = run(
        piece(Dialect::Maestro, vec![mv("only", vec![])]),
        vec![Turn::http_error(401, "bad key")],
    )
    .await;
    ran.assert_record_is_sound();
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    assert!(
        reason.as_deref().unwrap_or_default().contains("401"),
        "{reason:?}"
    );
}

#[tokio::test]
async fn malformed_tool_calls_go_back_to_the_model_as_errors() {
    let ran = run(
        piece(Dialect::Maestro, vec![mv("only", vec![])]),
        vec![
            Turn::tool_call_raw("Read", "{not json"),
            Turn::tool_call("Nope", json!({})),
            Turn::tool_call("complete", json!({"status": "maybe", "result": "x"})),
            Turn::tool_call(
                "complete",
                json!({"status": "needs_user_input", "result": "Which cuisine?"}),
            ),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        ("needs_user_input".into(), Some("complete_tool".into()))
    );
    assert_eq!(ran.report.result, "Which cuisine?");
    let oks: Vec<bool> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::ToolResult { ok, .. } => Some(*ok),
            _ => None,
        })
        .collect();
    assert_eq!(oks, vec![false, false, false, true]);
    assert!(
        ran.request_text(3)
            .contains("success, aborted or needs_user_input")
    );
}

#[tokio::test]
async fn secrets_never_reach_the_run_directory() {
    let key = "sk-test-very-secret-4242";
    let ran = run_with(
        piece(Dialect::Maestro, vec![mv("only", vec![])]),
        vec![
            Turn::http_error(500, format!("upstream rejected key {key}")),
            Turn::tool_call("complete", json!({"status": "success", "result": "ok"})),
        ],
        engine_config(),
        Some(key),
    )
    .await;
    ran.assert_record_is_sound();
    let authorized = ran
        .server
        .recorded()
        .iter()
        .filter(|r| r.header("authorization") == Some(&format!("Bearer {key}")))
        .count();
    assert!(
        authorized >= 2,
        "the key is sent to the endpoint: {authorized} requests carried it"
    );
    for entry in walk(&ran.report.run_dir) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(
            !text.contains(key),
            "{} contains the API key",
            entry.display()
        );
    }
    assert!(
        std::fs::read_to_string(ran.report.run_dir.join("events.jsonl"))
            .unwrap()
            .contains("llm_retry")
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path))
        } else {
            out.push(path)
        }
    }
    out
}

#[tokio::test]
async fn a_prompt_that_cannot_fit_the_window_is_not_sent() {
    let config = EngineConfig {
        context_length: Some(50),
        ..engine_config()
    };
    let ran = run_with(
        piece(Dialect::Maestro, vec![mv("only", vec![])]),
        vec![],
        config,
        None,
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        ("aborted".into(), Some("context_exhausted".into()))
    );
    assert!(ran.requests().is_empty());
}

#[tokio::test]
async fn ending_without_a_required_report_is_refused_once() {
    let mut p = two_steps();
    p.movements[0].output_contracts = vec![maestro_piece::OutputContract {
        name: "facts.md".into(),
        label: None,
        format: None,
    }];
    let ran = run(
        p,
        vec![
            Turn::tool_call("transition", json!({"next": "write"})),
            Turn::tool_call(
                "write_report",
                json!({"name": "facts.md", "content": "- cardamom"}),
            ),
            Turn::tool_call("transition", json!({"next": "write"})),
            Turn::tool_call("complete", json!({"status": "success", "result": "ok"})),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let results: Vec<(String, bool)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::ToolResult { tool, ok, .. } => Some((tool.clone(), *ok)),
            _ => None,
        })
        .collect();
    let expected = [
        ("transition", false),
        ("write_report", true),
        ("transition", true),
        ("complete", true),
    ];
    assert_eq!(results, expected.map(|(t, ok)| (t.to_string(), ok)));
    assert!(ran.request_text(1).contains("facts.md"));
    let report = ran.report.run_dir.join("reports/facts.md");
    assert_eq!(std::fs::read_to_string(report).unwrap(), "- cardamom");
}

fn go(next: &str) -> Turn {
    Turn::tool_call("transition", json!({"next": next}))
}

#[tokio::test]
async fn a_cycle_of_two_movements_is_warned_then_aborted_with_the_cycle_recorded() {
    let mut p = piece(
        Dialect::Maestro,
        vec![
            mv("draft", vec![rule("drafted", "check")]),
            mv("check", vec![rule("needs another draft", "draft")]),
        ],
    );
    p.max_movements = 30;
    let turns = ["check", "draft"].repeat(6).into_iter().map(go).collect();
    let ran = run(p, turns).await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        ("aborted".into(), Some("loop_detected".into()))
    );
    // Round 5 of draft → check is not started: 8 movements, 8 calls.
    assert_eq!(ran.requests().len(), 8);
    let detected: Vec<&RunEvent> = ran
        .events
        .iter()
        .map(|r| &r.event)
        .filter(|e| e.kind() == "loop_detected")
        .collect();
    assert_eq!(
        detected,
        vec![&RunEvent::LoopDetected {
            cycle: vec!["draft".into(), "check".into()],
            rounds: 5,
            threshold: 4,
        }]
    );
    // The warning names the cycle in the prompts of rounds 3 and 4, not before.
    let warning = "The run keeps going round the movements draft → check → draft: this is round 3 \
                   (the limit is 4).";
    assert!(!ran.request_text(3).contains("keeps going round"));
    assert!(
        ran.request_text(4).contains(warning),
        "{}",
        ran.request_text(4)
    );
    assert!(
        ran.request_text(7)
            .contains("this is round 4 (the limit is 4)")
    );
    assert_eq!(ran.count("cycle_warning"), 4);
}

#[tokio::test]
async fn a_review_loop_of_a_few_rounds_completes() {
    let p = piece(
        Dialect::Maestro,
        vec![
            mv("implement", vec![rule("implemented", "review")]),
            mv(
                "review",
                vec![rule("changes needed", "fix"), rule("approved", "COMPLETE")],
            ),
            mv("fix", vec![rule("fixed", "review")]),
        ],
    );
    let mut turns: Vec<Turn> = ["review", "fix", "review", "fix", "review"]
        .into_iter()
        .map(go)
        .collect();
    turns.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "Approved after two fixes."}),
    ));
    let ran = run(p, turns).await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.report.result, "Approved after two fixes.");
    assert_eq!(ran.count("loop_detected"), 0);
}

#[tokio::test]
async fn a_plain_answer_under_auto_tool_mode_goes_again_in_json_mode_once() {
    let server = maestro_testkit::ScriptedLlm::start([
        Turn::text("I would now write the cookbook."),
        Turn::json(
            json!({"tool": "complete", "arguments": {"status": "success", "result": "Written."}}),
        ),
    ])
    .await;
    let ran = run_against(
        server,
        two_steps(),
        engine_config(),
        None,
        maestro_llm::ToolMode::Auto,
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let requests = ran.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].get("tools").is_some());
    assert!(requests[1].get("tools").is_none() && requests[1].get("response_format").is_some());
    // The same request went again: the plain answer is not part of it, and no reminder either.
    assert!(!ran.request_text(1).contains("I would now write"));
    assert_eq!(ran.count("reminder"), 0);
    let changed: Vec<&RunEvent> = ran
        .events
        .iter()
        .map(|r| &r.event)
        .filter(|e| e.kind() == "tool_mode_changed")
        .collect();
    assert_eq!(
        changed,
        vec![&RunEvent::ToolModeChanged {
            movement: "research".into(),
            model: "scripted-model".into(),
            mode: maestro_llm::ToolMode::Json,
            reason: "the model answered in plain text where a control tool was required".into(),
        }]
    );
    assert_eq!(ran.count("llm_request"), 2);
}

#[tokio::test]
async fn wait_subtasks_without_subtasks_takes_default_next() {
    let mut plan = mv("plan", vec![rule("split into subtasks", "WAIT_SUBTASKS")]);
    plan.default_next = Some(target("write"));
    let p = piece(
        Dialect::Maestro,
        vec![plan, mv("write", vec![rule("written", "COMPLETE")])],
    );
    let ran = run(
        p,
        vec![
            Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"})),
            Turn::tool_call(
                "complete",
                json!({"status": "success", "result": "Done alone."}),
            ),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let plan_finished = ran
        .events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                next,
                via,
                reason,
                ..
            } if movement == "plan" => Some((next.clone(), *via, reason.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        plan_finished,
        (
            "write".to_string(),
            maestro_engine::OutcomeSource::DefaultNext,
            Some(maestro_engine::EndReason::WaitSubtasksUnsupported)
        )
    );
}

/// A replay follows the record's switch to JSON tool mode even when the provider has settled
/// on a mode since (here: it starts in JSON mode and would not switch again).
#[tokio::test]
async fn a_replay_switches_tool_mode_where_the_record_did() {
    let server = maestro_testkit::ScriptedLlm::start([
        Turn::text("I would now write the cookbook."),
        Turn::json(
            json!({"tool": "complete", "arguments": {"status": "success", "result": "Written."}}),
        ),
    ])
    .await;
    let ran = run_against(
        server,
        two_steps(),
        engine_config(),
        None,
        maestro_llm::ToolMode::Auto,
    )
    .await;
    assert_eq!(ran.count("tool_mode_changed"), 1);
    let settled = maestro_testkit::ScriptedLlm::start([]).await;
    let provider: std::sync::Arc<dyn maestro_llm::Provider> = std::sync::Arc::new(
        maestro_llm::OpenAiCompat::new(
            maestro_llm::OpenAiConfig::new(settled.base_url())
                .with_tool_mode(maestro_llm::ToolMode::Json),
        )
        .unwrap(),
    );
    let engine = maestro_engine::Engine::new(
        provider,
        maestro_tools::Registry::builtin(maestro_tools::ToolsConfig::default()),
        engine_config(),
    );
    let scratch = tempfile::tempdir().unwrap();
    let record = maestro_engine::RunRecord::open(scratch.path(), "replay", None).unwrap();
    let report = engine
        .replay(std::sync::Arc::new(two_steps()), ran.events.clone(), record)
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(settled.requests().len(), 0);
}

#[tokio::test]
async fn the_record_names_the_configured_model_and_the_model_that_answered() {
    let ran = run(
        two_steps(),
        vec![
            // A router behind the endpoint served this call with another model.
            Turn::tool_call("transition", json!({"next": "write"})).answered_by("routed-model-b"),
            Turn::tool_call(
                "complete",
                json!({"status": "success", "result": "The cookbook is written."}),
            ),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    let started: Vec<Option<String>> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::RunStarted { model, .. } => Some(model.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(started, vec![Some("scripted-model".to_string())]);
    let answered: Vec<(String, Option<String>)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::LlmResponse {
                movement, model, ..
            } => Some((movement.clone(), model.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        answered,
        vec![
            ("research".to_string(), Some("routed-model-b".to_string())),
            ("write".to_string(), Some("scripted-model".to_string())),
        ]
    );
}

#[tokio::test]
async fn every_call_names_its_run_and_movement_for_a_gateway() {
    let ran = run(
        two_steps(),
        vec![
            Turn::tool_call("transition", json!({"next": "write"})),
            Turn::tool_call(
                "complete",
                json!({"status": "success", "result": "The cookbook is written."}),
            ),
        ],
    )
    .await;
    let run_id = match &ran.events[0].event {
        RunEvent::RunStarted { run_id, .. } => run_id.clone(),
        other => panic!("the first event is {other:?}"),
    };
    let sent: Vec<(Option<String>, Option<String>)> = ran
        .server
        .recorded()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .map(|r| {
            (
                r.header("x-maestro-job").map(str::to_string),
                r.header("x-maestro-movement").map(str::to_string),
            )
        })
        .collect();
    // A run outside the job system is attributed to its run id.
    assert_eq!(
        sent,
        vec![
            (Some(run_id.clone()), Some("research".to_string())),
            (Some(run_id), Some("write".to_string())),
        ]
    );
}
