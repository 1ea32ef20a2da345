//! Resuming a run from its recorded events, cut at every point a crash could leave it: recorded
//! answers and tool results are reused, completed movements are not redone, the one call in
//! flight is handled as documented, and `seq` stays gapless. Also `Engine::replay`: a finished
//! run driven again from its record with no model call and no tool run.

use crate::support;

use std::sync::Arc;

use maestro_engine::{
    CallPurpose, Engine, EventRecord, JsonlLog, RunEnd, RunEvent, RunRecord, RunSpec, read_events,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{Condition, Dialect, Piece};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use serde_json::json;
use support::*;

fn engine_for(server: &ScriptedLlm) -> Engine {
    let config = OpenAiConfig::new(server.base_url())
        .with_retry(fast_retries())
        .with_tool_mode(ToolMode::Native);
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompat::new(config).unwrap());
    Engine::new(
        provider,
        Registry::builtin(ToolsConfig::default()),
        engine_config(),
    )
}

/// research (edit) writes a file, reads it back, moves on; write completes.
fn writing_piece() -> Piece {
    let mut research = mv("research", vec![rule("facts gathered", "write")]);
    research.edit = true;
    research.allowed_tools = vec!["Read".into(), "Write".into()];
    piece(
        Dialect::Maestro,
        vec![
            research,
            mv("write", vec![rule("needs more facts", "research")]),
        ],
    )
}

fn writing_turns() -> Vec<Turn> {
    vec![
        Turn::tool_call(
            "Write",
            json!({"file_path": "output/facts.md", "content": "cardamom\n"}),
        ),
        Turn::tool_call("Read", json!({"file_path": "output/facts.md"})),
        Turn::tool_call("transition", json!({"next": "write"})),
        Turn::tool_call(
            "complete",
            json!({"status": "success", "result": "The cookbook is written."}),
        ),
    ]
}

fn notes(record: &RunRecord) {
    std::fs::write(
        record.workspace.join("input/notes.txt"),
        "the secret ingredient is cardamom\n",
    )
    .unwrap();
}

struct Resumed {
    end: RunEnd,
    events: Vec<EventRecord>,
    requests: usize,
    record: RunRecord,
}

/// Runs `piece` to the end once, for its record.
async fn full_run(piece: &Piece, turns: Vec<Turn>) -> (Vec<EventRecord>, tempfile::TempDir) {
    let server = ScriptedLlm::start(turns).await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    notes(&record);
    let path = record.events_path();
    engine_for(&server)
        .run(
            Arc::new(piece.clone()),
            "Write the cookbook.",
            record,
            vec![],
        )
        .await
        .unwrap();
    (read_events(&path).unwrap(), dir)
}

/// Resumes from `history` in a fresh copy of the run directory, against a server holding
/// `turns`.
async fn resume(piece: &Piece, history: &[EventRecord], turns: Vec<Turn>) -> Resumed {
    let server = ScriptedLlm::start(turns).await;
    let dir = tempfile::tempdir().unwrap();
    let run_id = history
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::RunStarted { run_id, .. } => Some(run_id.clone()),
            _ => None,
        })
        .unwrap_or_else(maestro_engine::new_run_id);
    let record = RunRecord::open(&dir.path().join("runs"), &run_id, None).unwrap();
    notes(&record);
    let log = JsonlLog::rewrite(&record.events_path(), history).unwrap();
    let mut spec = RunSpec::new(
        Arc::new(piece.clone()),
        "Write the cookbook.",
        record.clone(),
    );
    spec.logs = vec![Arc::new(log)];
    spec.history = history.to_vec();
    let end = engine_for(&server).run_spec(spec).await.unwrap();
    let events = read_events(&record.events_path()).unwrap();
    std::mem::forget(dir);
    Resumed {
        end,
        events,
        requests: server.requests().len(),
        record,
    }
}

fn answers_in(history: &[EventRecord]) -> usize {
    history
        .iter()
        .filter(|r| matches!(r.event, RunEvent::LlmResponse { .. }))
        .count()
}

fn visits(events: &[EventRecord]) -> Vec<(String, u32)> {
    events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementStarted {
                movement,
                movement_iteration,
                ..
            } => Some((movement.clone(), *movement_iteration)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_run_cut_anywhere_resumes_without_repeating_what_is_recorded() {
    let piece = writing_piece();
    let turns = writing_turns();
    let (full, _dir) = full_run(&piece, turns.clone()).await;
    assert_eq!(full.last().unwrap().event.kind(), "run_finished");
    let full_visits = visits(&full);
    // every prefix a crash could leave (at least `run_started`, never the finished run)
    for cut in 1..full.len() {
        let history = &full[..cut];
        let answered = answers_in(history);
        let resumed = resume(&piece, history, turns[answered..].to_vec()).await;
        let RunEnd::Finished(report) = &resumed.end else {
            panic!("cut at {cut}: {:?}", resumed.end);
        };
        assert_eq!(report.status.to_string(), "completed", "cut at {cut}");
        // every recorded answer was reused: only the calls without one were sent
        assert_eq!(
            resumed.requests,
            turns.len() - answered,
            "cut at {cut} ({})",
            full[cut - 1].event.kind()
        );
        // the record is one story: the prefix kept as it was, seq gapless, each visit once
        assert_eq!(&resumed.events[..cut], history, "cut at {cut}");
        assert_record_sound(&resumed.events, &report.state);
        assert_eq!(visits(&resumed.events), full_visits, "cut at {cut}");
    }
}

#[tokio::test]
async fn an_interrupted_write_is_reported_not_repeated_and_a_read_runs_again() {
    let piece = writing_piece();
    let turns = writing_turns();
    let (full, _dir) = full_run(&piece, turns.clone()).await;
    let cut_after = |tool: &str| {
        full.iter()
            .position(|r| matches!(&r.event, RunEvent::ToolCall { tool: t, .. } if t == tool))
            .unwrap()
            + 1
    };

    // the Write started, its result was never recorded
    let history = &full[..cut_after("Write")];
    let resumed = resume(&piece, history, turns[1..].to_vec()).await;
    assert!(matches!(resumed.end, RunEnd::Finished(_)));
    let write_result = resumed
        .events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::ToolResult {
                tool, ok, output, ..
            } if tool == "Write" => Some((*ok, output.clone().unwrap())),
            _ => None,
        })
        .unwrap();
    assert!(!write_result.0);
    assert!(
        write_result.1.contains("interrupted") && write_result.1.contains("effect is unknown"),
        "{}",
        write_result.1
    );
    // not run again: the fresh copy of the workspace has no file
    assert!(!resumed.record.workspace.join("output/facts.md").exists());

    // the Read started, its result was never recorded: it only reads, so it runs again
    let history = &full[..cut_after("Read")];
    let resumed = resume(&piece, history, turns[2..].to_vec()).await;
    let read_result = resumed
        .events
        .iter()
        .rev()
        .find_map(|r| match &r.event {
            RunEvent::ToolResult { tool, output, .. } if tool == "Read" => output.clone(),
            _ => None,
        })
        .unwrap();
    // the fresh workspace copy has no facts.md (the recorded Write was reused, not rerun), so
    // the re-run Read reports that; what matters is that it ran rather than being refused
    assert!(!read_result.contains("interrupted"), "{read_result}");
    assert!(matches!(resumed.end, RunEnd::Finished(_)));
}

#[tokio::test]
async fn a_model_call_in_flight_is_sent_again() {
    let piece = writing_piece();
    let turns = writing_turns();
    let (full, _dir) = full_run(&piece, turns.clone()).await;
    let second_request = full
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r.event, RunEvent::LlmRequest { .. }))
        .nth(1)
        .unwrap()
        .0;
    let history = &full[..=second_request];
    let resumed = resume(&piece, history, turns[1..].to_vec()).await;
    assert!(matches!(resumed.end, RunEnd::Finished(_)));
    assert_eq!(resumed.requests, 3);
    // one request event for the call in flight (recorded), its answer recorded once
    let requests = resumed
        .events
        .iter()
        .filter(|r| matches!(r.event, RunEvent::LlmRequest { .. }))
        .count();
    assert_eq!(requests, 4);
}

#[tokio::test]
async fn a_changed_piece_is_refused_at_the_first_difference() {
    let piece = writing_piece();
    let (full, _dir) = full_run(&piece, writing_turns()).await;
    let mut changed = piece.clone();
    changed.hash = "changed".into();
    let server = ScriptedLlm::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::open(&dir.path().join("runs"), "r1", None).unwrap();
    let mut spec = RunSpec::new(Arc::new(changed), "Write the cookbook.", record);
    spec.history = full[..5].to_vec();
    let error = engine_for(&server).run_spec(spec).await.unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("the run left its record at seq 1: the record has `run_started`"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 0);
}

fn reviewers() -> Piece {
    let mut parent = mv(
        "reviewers",
        vec![
            rule_if(
                Condition::All(vec!["approved".into(), "All checks passed".into()]),
                Some("COMPLETE"),
            ),
            rule_if(
                Condition::Any(vec!["needs_fix".into(), "Requirements unmet".into()]),
                Some("fix"),
            ),
        ],
    );
    parent.parallel = vec![
        mv(
            "arch-review",
            vec![
                rule_if(Condition::Text("approved".into()), None),
                rule_if(Condition::Text("needs_fix".into()), None),
            ],
        ),
        mv(
            "supervise",
            vec![
                rule_if(Condition::Text("All checks passed".into()), None),
                rule_if(Condition::Text("Requirements unmet".into()), None),
            ],
        ),
    ];
    let fix = mv("fix", vec![rule("Fixed", "COMPLETE")]);
    piece(Dialect::Takt, vec![parent, fix])
}

fn reviewer_turns() -> Vec<Turn> {
    vec![
        Turn::when_contains(
            "Perform the arch-review step",
            Turn::tool_call("Read", json!({"file_path": "input/notes.txt"})),
        ),
        Turn::when_contains(
            "Perform the supervise step",
            Turn::text("Tests fail. [SUPERVISE:2]"),
        ),
        Turn::when_contains(
            "the secret ingredient",
            Turn::text("Architecture fine. [ARCH-REVIEW:1]"),
        ),
        Turn::when_contains("Perform the fix step", Turn::text("Fixed it. [FIX:1]")),
    ]
}

#[tokio::test]
async fn replay_drives_a_finished_parallel_run_with_no_calls() {
    let piece = reviewers();
    let (full, _dir) = full_run(&piece, reviewer_turns()).await;
    let status = |events: &[EventRecord]| {
        events.iter().find_map(|r| match &r.event {
            RunEvent::RunFinished { status, .. } => Some(status.to_string()),
            _ => None,
        })
    };
    assert_eq!(status(&full).as_deref(), Some("completed"));
    let server = ScriptedLlm::start(vec![]).await;
    let scratch = tempfile::tempdir().unwrap();
    let record = RunRecord::open(scratch.path(), "replay", None).unwrap();
    let report = engine_for(&server)
        .replay(Arc::new(piece.clone()), full.clone(), record)
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(server.requests().len(), 0, "replay calls no model");
    assert_eq!(report.state.history, vec!["reviewers", "fix"]);

    // a record that went elsewhere is named at its first divergence
    let mut other = reviewers();
    other.movements[1].rules = vec![rule("Fixed", "ABORT")];
    let record = RunRecord::open(scratch.path(), "replay2", None).unwrap();
    let error = engine_for(&server)
        .replay(Arc::new(other), full, record)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("the run left its record at seq"),
        "{error}"
    );
    assert!(
        error.to_string().contains("`movement_finished` of `fix`"),
        "{error}"
    );
}

#[tokio::test]
async fn a_parallel_movement_cut_midway_resumes_only_what_is_missing() {
    let piece = reviewers();
    let turns = reviewer_turns();
    let (full, _dir) = full_run(&piece, turns.clone()).await;
    for cut in 2..full.len() {
        let history = &full[..cut];
        // the turns whose answers the cut history does not hold
        let answered: Vec<String> = history
            .iter()
            .filter_map(|r| match &r.event {
                RunEvent::LlmResponse {
                    answer: Some(a), ..
                } => Some(a.content.clone()),
                _ => None,
            })
            .collect();
        let tool_answered = history.iter().any(|r| {
            matches!(&r.event, RunEvent::LlmResponse { answer: Some(a), .. } if !a.tool_calls.is_empty())
        });
        let left: Vec<Turn> = turns
            .iter()
            .enumerate()
            .filter(|(i, _)| match i {
                0 => !tool_answered,
                1 => !answered.iter().any(|a| a.contains("SUPERVISE")),
                2 => !answered.iter().any(|a| a.contains("ARCH-REVIEW")),
                _ => !answered.iter().any(|a| a.contains("FIX")),
            })
            .map(|(_, t)| t.clone())
            .collect();
        let expected_requests = left.len();
        let resumed = resume(&piece, history, left).await;
        let RunEnd::Finished(report) = &resumed.end else {
            panic!("cut at {cut}: {:?}", resumed.end);
        };
        assert_eq!(
            report.status.to_string(),
            "completed",
            "cut at {cut}: {:?}",
            report.reason
        );
        assert_eq!(resumed.requests, expected_requests, "cut at {cut}");
        assert_record_sound(&resumed.events, &report.state);
        let mut got = visits(&resumed.events);
        let mut want = visits(&full);
        got.sort();
        want.sort();
        assert_eq!(got, want, "cut at {cut}");
    }
}

#[tokio::test]
async fn a_run_stopped_by_its_user_goes_on_past_its_recorded_end() {
    let piece = writing_piece();
    let turns = writing_turns();
    let (full, _dir) = full_run(&piece, turns.clone()).await;
    let cut = full
        .iter()
        .position(|r| r.event.kind() == "movement_finished")
        .unwrap()
        + 1;
    let mut history = full[..cut].to_vec();
    history.push(EventRecord {
        seq: cut as u64 + 1,
        ts: "2026-11-23T00:00:00Z".into(),
        event: RunEvent::RunFinished {
            status: maestro_protocol::RunStatus::Failed,
            result: String::new(),
            reason: Some(maestro_engine::EndReason::Cancelled),
        },
    });
    let resumed = resume(&piece, &history, turns[3..].to_vec()).await;
    let RunEnd::Finished(report) = &resumed.end else {
        panic!("{:?}", resumed.end);
    };
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(resumed.requests, 1);
    let kinds: Vec<&str> = resumed.events[cut..]
        .iter()
        .map(|r| r.event.kind())
        .collect();
    assert_eq!(
        &kinds[..3],
        &["run_finished", "run_resumed", "movement_started"]
    );
    assert_eq!(
        maestro_engine::RunState::replay(&resumed.events),
        report.state,
        "the record read in order ends where the run did"
    );
}

/// Resumes `history` with `answers`, writing into the same run directory each round.
async fn answer_round(
    piece: &Piece,
    history: &[EventRecord],
    answers: &[&str],
    turns: Vec<Turn>,
    runs: &std::path::Path,
) -> (RunEnd, Vec<EventRecord>, Vec<serde_json::Value>) {
    let server = ScriptedLlm::start(turns).await;
    let run_id = history
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::RunStarted { run_id, .. } => Some(run_id.clone()),
            _ => None,
        })
        .unwrap();
    let record = RunRecord::open(runs, &run_id, None).unwrap();
    let log = JsonlLog::rewrite(&record.events_path(), history).unwrap();
    let mut spec = RunSpec::new(Arc::new(piece.clone()), "Plan the dinner.", record.clone());
    spec.logs = vec![Arc::new(log)];
    spec.history = history.to_vec();
    spec.answers = answers.iter().map(|a| a.to_string()).collect();
    let end = engine_for(&server).run_spec(spec).await.unwrap();
    (
        end,
        read_events(&record.events_path()).unwrap(),
        server.requests(),
    )
}

#[tokio::test]
async fn questions_answered_later_go_on_in_the_same_movement_and_conversation() {
    let mut plan = mv("plan", vec![rule("planned", "COMPLETE")]);
    plan.instruction = Some(facet("Plan the dinner. Answers so far: {user_inputs}"));
    let piece = piece(Dialect::Maestro, vec![plan]);
    let ask = |q: &str| {
        Turn::tool_call(
            "complete",
            json!({"status": "needs_user_input", "result": q}),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    // round 0: the run asks
    let server = ScriptedLlm::start(vec![ask("Which cuisine?")]).await;
    let record = RunRecord::create(&runs, None).unwrap();
    let path = record.events_path();
    let report = engine_for(&server)
        .run(Arc::new(piece.clone()), "Plan the dinner.", record, vec![])
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "needs_user_input");
    assert_eq!(report.result, "Which cuisine?");
    let round0 = read_events(&path).unwrap();

    // round 1: answered; the model asks again
    let (end, round1, requests) = answer_round(
        &piece,
        &round0,
        &["Italian"],
        vec![ask("How many guests?")],
        &runs,
    )
    .await;
    let RunEnd::Finished(report) = end else {
        panic!()
    };
    assert_eq!(
        (report.status.to_string(), report.result.as_str()),
        ("needs_user_input".into(), "How many guests?")
    );
    assert_eq!(requests.len(), 1, "the first question is not asked again");
    assert_eq!(last_user_text(&requests[0]), "Italian");

    // round 2 (another process: only the record and both answers): the run completes
    let (end, round2, requests) = answer_round(
        &piece,
        &round1,
        &["Italian", "Six"],
        vec![Turn::tool_call(
            "complete",
            json!({"status": "success", "result": "Lasagne for six."}),
        )],
        &runs,
    )
    .await;
    let RunEnd::Finished(report) = end else {
        panic!()
    };
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(report.state.user_inputs, vec!["Italian", "Six"]);
    assert_eq!(requests.len(), 1);
    // the final request carries the whole conversation: both questions, both answers
    // (the questions are the arguments of the model's `complete` calls)
    let text = requests[0]["messages"].to_string();
    for part in ["Which cuisine?", "Italian", "How many guests?", "Six"] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
    let seqs: Vec<u64> = round2.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=round2.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        maestro_engine::RunState::replay(&round2).user_inputs,
        vec!["Italian", "Six"]
    );
}

/// The classifier's call (`auto`) is in the run's record right after `run_started`; a resume
/// from any point after it goes through it without asking the classifier again, and a replay
/// of the whole record matches it.
#[tokio::test]
async fn the_classifiers_call_is_recorded_and_never_made_again() {
    let piece = writing_piece();
    let server = ScriptedLlm::start(
        std::iter::once(Turn::json(
            json!({"piece": piece.name, "reason": "it writes things"}),
        ))
        .chain(writing_turns())
        .collect::<Vec<_>>(),
    )
    .await;
    let config = OpenAiConfig::new(server.base_url()).with_retry(fast_retries());
    let provider = OpenAiCompat::new(config).unwrap();
    let chosen = maestro_engine::classify(
        &provider,
        "scripted-model",
        "Write the cookbook.",
        &[maestro_engine::PieceSummary::from(&piece)],
    )
    .await
    .unwrap();
    assert_eq!(chosen.piece, piece.name);

    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
    notes(&record);
    let path = record.events_path();
    let mut spec = RunSpec::new(
        Arc::new(piece.clone()),
        "Write the cookbook.",
        record.clone(),
    );
    spec.logs = vec![Arc::new(JsonlLog::append_to(&path).unwrap())];
    spec.preamble = chosen.calls;
    let end = engine_for(&server).run_spec(spec).await.unwrap();
    assert!(matches!(end, RunEnd::Finished(_)), "{end:?}");
    let full = read_events(&path).unwrap();
    let head: Vec<(&str, Option<CallPurpose>)> =
        full.iter()
            .take(3)
            .map(|r| {
                let purpose = match &r.event {
                    RunEvent::LlmRequest { purpose, .. }
                    | RunEvent::LlmResponse { purpose, .. } => Some(*purpose),
                    _ => None,
                };
                (r.event.kind(), purpose)
            })
            .collect();
    assert_eq!(
        head,
        vec![
            ("run_started", None),
            ("llm_request", Some(CallPurpose::Classifier)),
            ("llm_response", Some(CallPurpose::Classifier)),
        ]
    );
    // Its tokens count in the run's usage like any other call's.
    let classifier_tokens = match &full[2].event {
        RunEvent::LlmResponse { usage, model, .. } => {
            assert_eq!(model.as_deref(), Some("scripted-model"));
            usage.total_tokens
        }
        other => panic!("{other:?}"),
    };
    assert!(classifier_tokens > 0);
    let RunEnd::Finished(report) = end else {
        unreachable!()
    };
    let movement_tokens: u64 = full[3..]
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::LlmResponse { usage, .. } => Some(usage.total_tokens),
            _ => None,
        })
        .sum();
    assert_eq!(
        report.state.usage.total_tokens,
        classifier_tokens + movement_tokens
    );

    // Resumed from every cut after the classifier's answer: nothing recorded is written twice,
    // and the only calls made are those the cut lost (never the classifier's).
    for cut in 3..full.len() - 1 {
        let history = &full[..cut];
        let answered = answers_in(history) - 1;
        let resumed = resume(&piece, history, writing_turns()[answered..].to_vec()).await;
        let RunEnd::Finished(report) = &resumed.end else {
            panic!("cut at {cut}: {:?}", resumed.end);
        };
        assert_eq!(report.status.to_string(), "completed", "cut at {cut}");
        let classifier_calls = resumed
            .events
            .iter()
            .filter(|r| {
                matches!(
                    r.event,
                    RunEvent::LlmRequest {
                        purpose: CallPurpose::Classifier,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(classifier_calls, 1, "cut at {cut}");
        let seqs: Vec<u64> = resumed.events.iter().map(|r| r.seq).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "cut at {cut}"
        );
        assert_eq!(
            resumed.requests,
            writing_turns().len() - answered,
            "cut at {cut}: only the calls without a recorded answer were sent"
        );
    }

    // A replay of the whole record goes through the classifier's call too.
    let silent = ScriptedLlm::start(vec![]).await;
    let scratch = tempfile::tempdir().unwrap();
    let record = RunRecord::open(scratch.path(), "replay", None).unwrap();
    let report = engine_for(&silent)
        .replay(Arc::new(piece), full, record)
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(silent.requests().len(), 0);
}
