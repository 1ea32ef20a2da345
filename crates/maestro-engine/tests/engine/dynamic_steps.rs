//! TAKT dynamic selection: `dynamic_facets` (a facet pool's candidates chosen for a step) and
//! dynamic parallel steps (`parallel: {fixed, pool, selection}`). The selector is one recorded
//! agent turn whose strict JSON answer is recorded as `selection_made`; a resumed or replayed
//! run reuses both and never asks the selector again.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use maestro_engine::{
    Engine, EventRecord, JsonlLog, RunEnd, RunEvent, RunRecord, RunSpec, SelectionTarget,
    read_events,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{LoadOptions, Piece, load_file, load_str};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use serde_json::json;
use support::*;

const SELECTOR_OF_IMPLEMENT: &str = "selector of step `implement`";

/// `development-implement-dynamic`, the builtin as Maestro ships it, loaded as the root
/// workflow of a project that holds nothing else.
fn implement_dynamic() -> (tempfile::TempDir, Piece) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../maestro-piece/takt-builtins/v0.60/en/workflows/development-implement-dynamic.yaml",
    );
    let project = tempfile::tempdir().unwrap();
    let dir = project.path().join(".takt/workflows");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("development-implement-dynamic.yaml");
    std::fs::copy(&source, &copy).unwrap();
    let opts = LoadOptions {
        project_dir: Some(project.path().to_owned()),
        ..LoadOptions::default()
    };
    let piece = load_file(&copy, &opts)
        .unwrap_or_else(|f| panic!("{f}"))
        .piece;
    (project, piece)
}

/// The implementer writes its three reports and names its outcome in the same answer.
fn implemented() -> Turn {
    Turn::tool_calls([
        (
            "write_report",
            json!({"name": "coder-scope.md", "content": "# Scope\nthe login handler\n"}),
        ),
        (
            "write_report",
            json!({"name": "coder-decisions.md", "content": "# Decisions\nnone\n"}),
        ),
        (
            "write_report",
            json!({"name": "implementation-report.md", "content": "# Report\ndone\n"}),
        ),
    ])
    .with_text("The handler is implemented. [IMPLEMENT:1]")
}

fn selected_backend_and_testing() -> Turn {
    Turn::when_contains(
        SELECTOR_OF_IMPLEMENT,
        Turn::text(
            r#"{"selected_ids": ["testing", "backend"], "rationale": "a server-side change with tests"}"#,
        ),
    )
}

fn selections(events: &[EventRecord]) -> Vec<(String, SelectionTarget, u32, Vec<String>)> {
    events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::SelectionMade {
                movement,
                target,
                round,
                effective,
                ..
            } => Some((movement.clone(), *target, *round, effective.clone())),
            _ => None,
        })
        .collect()
}

/// `(movement, parent)` of every `movement_started`, in order.
fn started(events: &[EventRecord]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementStarted {
                movement, parent, ..
            } => Some((movement.clone(), parent.clone())),
            _ => None,
        })
        .collect()
}

/// `(movement, next)` of every top-level `movement_finished`, in order.
fn transitions(events: &[EventRecord]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                next,
                parent: None,
                ..
            } => Some((movement.clone(), next.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn development_implement_dynamic_runs_with_the_selected_facets_only() {
    let (_project, piece) = implement_dynamic();
    let ran = run(piece, vec![selected_backend_and_testing(), implemented()]).await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    // one selector call, one call of the step: the tag routes without a judge
    assert_eq!(ran.requests().len(), 2);
    assert!(ran.request_text(0).contains(SELECTOR_OF_IMPLEMENT));
    let selector_tools: Vec<String> = ran.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    // Read, Glob and Grep (and the registry's own documentation reader): nothing that writes
    assert_eq!(
        selector_tools,
        ["Read", "Glob", "Grep", "ReadToolDoc"],
        "read-only tools"
    );
    // the selection is recorded before the step starts, in pool order
    assert_eq!(
        selections(&ran.events),
        vec![(
            "implement".into(),
            SelectionTarget::Facets,
            1,
            vec!["backend".into(), "testing".into()]
        )]
    );
    let selection = ran
        .events
        .iter()
        .position(|r| r.event.kind() == "selection_made")
        .unwrap();
    let start = ran
        .events
        .iter()
        .position(|r| r.event.kind() == "movement_started")
        .unwrap();
    assert!(selection < start);
    assert_eq!(started(&ran.events), vec![("implement".into(), None)]);
    assert_eq!(
        transitions(&ran.events),
        vec![("implement".into(), "COMPLETE".into())]
    );
    // the chosen candidates' knowledge joined the fixed facets; the others stayed out
    let prompt = ran.request_text(1);
    assert!(
        prompt.contains("# Architecture Knowledge"),
        "fixed knowledge"
    );
    assert!(prompt.contains("# Backend Expertise"), "selected `backend`");
    assert!(
        prompt.contains("# Unit Testing Knowledge"),
        "selected `testing`"
    );
    assert!(
        !prompt.contains("# React Knowledge"),
        "`frontend` not selected"
    );
    assert!(
        !prompt.contains("# Browser Boundary Security Knowledge"),
        "`security` not selected"
    );
}

#[tokio::test]
async fn a_garbage_selector_answer_fails_the_step_before_it_starts() {
    let (_project, piece) = implement_dynamic();
    let ran = run(
        piece,
        vec![
            Turn::when_contains(
                SELECTOR_OF_IMPLEMENT,
                Turn::text("Backend and testing look right to me."),
            ),
            implemented(),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    let reason = reason.unwrap();
    assert!(
        reason.starts_with("selector_failed: step `implement`: the facet selector for pool `coding-facets` gave no valid selection: the selector's answer is not a JSON object"),
        "{reason}"
    );
    assert!(
        reason.contains("Backend and testing look right"),
        "{reason}"
    );
    assert_eq!(ran.requests().len(), 1, "no fallback, no retry, no step");
    assert!(started(&ran.events).is_empty());
    assert!(selections(&ran.events).is_empty());

    // an id outside the pool is refused the same way
    let (_project, piece) = implement_dynamic();
    let ran = run(
        piece,
        vec![Turn::when_contains(
            SELECTOR_OF_IMPLEMENT,
            Turn::text(r#"{"selected_ids": ["mobile"], "rationale": "apps"}"#),
        )],
    )
    .await;
    let reason = ran.status().1.unwrap();
    assert!(
        reason.contains("`selected_ids` names `mobile`, which is not a candidate; the candidates: frontend, backend, testing, security"),
        "{reason}"
    );
}

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

async fn full_run(piece: &Piece, turns: Vec<Turn>) -> (Vec<EventRecord>, tempfile::TempDir) {
    let server = ScriptedLlm::start(turns).await;
    let dir = tempfile::tempdir().unwrap();
    let record = RunRecord::create(&dir.path().join("runs"), None).unwrap();
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

/// Resumes `history` in a fresh run directory against a server serving `turns`; returns how
/// it ended, its events and the requests the server got.
async fn resume(
    piece: &Piece,
    history: &[EventRecord],
    turns: Vec<Turn>,
) -> (
    RunEnd,
    Vec<EventRecord>,
    Vec<serde_json::Value>,
    tempfile::TempDir,
) {
    let server = ScriptedLlm::start(turns).await;
    let dir = tempfile::tempdir().unwrap();
    let run_id = history
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::RunStarted { run_id, .. } => Some(run_id.clone()),
            _ => None,
        })
        .unwrap();
    let record = RunRecord::open(&dir.path().join("runs"), &run_id, None).unwrap();
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
    (end, events, server.requests(), dir)
}

#[tokio::test]
async fn a_resume_after_the_selection_never_asks_the_selector_again_and_replay_calls_nothing() {
    let (_project, piece) = implement_dynamic();
    let turns = vec![selected_backend_and_testing(), implemented()];
    let (full, _dir) = full_run(&piece, turns.clone()).await;
    assert_eq!(full.last().unwrap().event.kind(), "run_finished");
    let selection = full
        .iter()
        .position(|r| r.event.kind() == "selection_made")
        .unwrap();
    // every cut from the selector's answer on: the step's turn is the only call left
    let answered = full
        .iter()
        .position(|r| matches!(r.event, RunEvent::LlmResponse { .. }))
        .unwrap();
    for cut in answered + 1..full.len() {
        let history = &full[..cut];
        let calls_recorded = history
            .iter()
            .filter(|r| matches!(r.event, RunEvent::LlmResponse { .. }))
            .count();
        let (end, events, requests, _dir) =
            resume(&piece, history, turns[calls_recorded..].to_vec()).await;
        let RunEnd::Finished(report) = &end else {
            panic!("cut at {cut}: {end:?}");
        };
        assert_eq!(report.status.to_string(), "completed", "cut at {cut}");
        assert!(
            requests
                .iter()
                .all(|r| !messages_text(r).contains(SELECTOR_OF_IMPLEMENT)),
            "cut at {cut}: the selector was asked again"
        );
        assert_eq!(requests.len(), 2 - calls_recorded, "cut at {cut}");
        assert_eq!(selections(&events), selections(&full), "cut at {cut}");
        assert_eq!(&events[..cut], history, "cut at {cut}");
        assert_record_sound(&events, &report.state);
        if cut > selection {
            // the recorded choice stands even where the model would now choose otherwise
            assert!(
                events[selection..]
                    .iter()
                    .any(|r| r.event.kind() == "selection_made")
            );
        }
    }
    // a replay of the whole record asks nothing at all
    let server = ScriptedLlm::start(vec![]).await;
    let scratch = tempfile::tempdir().unwrap();
    let record = RunRecord::open(scratch.path(), "replay", None).unwrap();
    let report = engine_for(&server)
        .replay(Arc::new(piece.clone()), full.clone(), record)
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "completed");
    assert_eq!(server.requests().len(), 0, "replay calls no model");
}

/// A small root workflow with the dynamic parallel step of the builtin reviews: one fixed
/// reviewer, three in the pool, and a fix step that sends the work back for a new round.
fn reviewers(mode: &str) -> Piece {
    let source = format!(
        "\
name: dynamic-review
max_steps: 10
initial_step: reviewers
steps:
  - name: reviewers
    parallel:
      fixed:
        - name: arch-review
          persona: architecture-reviewer
          edit: false
          instruction: Review the architecture.
          rules:
            - condition: approved
            - condition: needs_fix
      pool:
        - name: frontend-review
          description: Review UI and component changes
          persona: frontend-reviewer
          edit: false
          instruction: Review the frontend.
          rules:
            - condition: approved
            - condition: needs_fix
        - name: backend-review
          description: Review API and persistence changes
          persona: backend-reviewer
          edit: false
          instruction: Review the backend.
          rules:
            - condition: approved
            - condition: needs_fix
        - name: security-review
          description: Review authentication and secrets handling
          persona: security-reviewer
          edit: false
          instruction: Review security.
          rules:
            - condition: approved
            - condition: needs_fix
      selection:
        mode: {mode}
    rules:
      - condition: all(\"approved\")
        next: COMPLETE
      - condition: any(\"needs_fix\")
        next: fix
  - name: fix
    persona: coder
    edit: true
    instruction: Fix what the reviewers found.
    rules:
      - condition: Fixed
        next: reviewers
"
    );
    load_str(
        &source,
        Path::new("dynamic-review.yaml"),
        &LoadOptions::default(),
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .piece
}

const SELECTOR_OF_REVIEWERS: &str = "selector of step `reviewers`";

/// Round 1 selects the frontend reviewer, who asks for a fix; round 2 selects the backend
/// reviewer; everyone who runs in round 2 approves.
fn review_turns() -> Vec<Turn> {
    let say = |step: &str, text: &str| Turn::when_contains(step, Turn::text(text));
    vec![
        say(
            SELECTOR_OF_REVIEWERS,
            r#"{"selected_ids": ["frontend-review"], "rationale": "the change is in the UI"}"#,
        ),
        say("Review the architecture.", "Fine. [ARCH-REVIEW:1]"),
        say(
            "Review the frontend.",
            "A prop is untyped. [FRONTEND-REVIEW:2]",
        ),
        say("Fix what the reviewers found.", "Typed it. [FIX:1]"),
        say(
            SELECTOR_OF_REVIEWERS,
            r#"{"selected_ids": ["backend-review"], "rationale": "the fix touched the API"}"#,
        ),
        say("Review the architecture.", "Fine. [ARCH-REVIEW:1]"),
        say("Review the frontend.", "Fine now. [FRONTEND-REVIEW:1]"),
        say("Review the backend.", "Fine. [BACKEND-REVIEW:1]"),
    ]
}

/// The sub-steps started under `reviewers` on each of its visits.
fn rounds(events: &[EventRecord]) -> Vec<Vec<String>> {
    let mut rounds: Vec<Vec<String>> = Vec::new();
    for (movement, parent) in started(events) {
        match parent.as_deref() {
            None if movement == "reviewers" => rounds.push(Vec::new()),
            Some("reviewers") => rounds.last_mut().unwrap().push(movement),
            _ => {}
        }
    }
    for round in &mut rounds {
        round.sort();
    }
    rounds
}

#[tokio::test]
async fn replace_runs_only_the_new_selection_on_a_new_round() {
    let ran = run(reviewers("replace"), review_turns()).await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(
        transitions(&ran.events),
        vec![
            ("reviewers".into(), "fix".into()),
            ("fix".into(), "reviewers".into()),
            ("reviewers".into(), "COMPLETE".into()),
        ]
    );
    assert_eq!(
        rounds(&ran.events),
        vec![
            vec!["arch-review".to_string(), "frontend-review".into()],
            vec!["arch-review".to_string(), "backend-review".into()],
        ],
        "security-review never ran; frontend-review left in round 2"
    );
    let participants = |round| {
        (
            "reviewers".to_string(),
            SelectionTarget::Participants,
            round,
        )
    };
    let made: Vec<_> = selections(&ran.events)
        .into_iter()
        .map(|(m, t, r, e)| ((m, t, r), e))
        .collect();
    assert_eq!(
        made,
        vec![
            (participants(1), vec!["frontend-review".to_string()]),
            (participants(2), vec!["backend-review".to_string()]),
        ]
    );
    // selectors 2, reviews 2 + 2, fix 1; tags route, no judge
    assert_eq!(ran.requests().len(), 7);
    // the second round's selector is told it is a new round
    let second = ran
        .requests()
        .iter()
        .filter(|r| messages_text(r).contains(SELECTOR_OF_REVIEWERS))
        .nth(1)
        .map(messages_text)
        .unwrap();
    assert!(second.contains("a new round (visit 2)"), "{second}");
    assert!(
        second.contains("`security-review`: Review authentication"),
        "{second}"
    );
}

#[tokio::test]
async fn cumulative_keeps_the_earlier_rounds_selection_running() {
    let ran = run(reviewers("cumulative"), review_turns()).await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(
        rounds(&ran.events),
        vec![
            vec!["arch-review".to_string(), "frontend-review".into()],
            vec![
                "arch-review".to_string(),
                "backend-review".into(),
                "frontend-review".into()
            ],
        ]
    );
    let effective: Vec<Vec<String>> = selections(&ran.events)
        .into_iter()
        .map(|(_, _, _, e)| e)
        .collect();
    assert_eq!(
        effective,
        vec![
            vec!["frontend-review".to_string()],
            vec!["frontend-review".to_string(), "backend-review".into()],
        ],
        "in pool order"
    );
    assert_eq!(ran.requests().len(), 8);
    let second = ran
        .requests()
        .iter()
        .filter(|r| messages_text(r).contains(SELECTOR_OF_REVIEWERS))
        .nth(1)
        .map(messages_text)
        .unwrap();
    assert!(
        second.contains("keep running: frontend-review"),
        "the selector hears of the earlier selection: {second}"
    );
    assert_eq!(
        ran.report.state.selections.get("reviewers"),
        Some(&vec![
            "frontend-review".to_string(),
            "backend-review".into()
        ])
    );
}

#[tokio::test]
async fn a_selector_answer_naming_no_pool_item_fails_before_any_reviewer_starts() {
    let ran = run(
        reviewers("replace"),
        vec![Turn::when_contains(
            SELECTOR_OF_REVIEWERS,
            Turn::text(
                r#"{"selected_ids": ["frontend-review", "frontend-review"], "rationale": "x"}"#,
            ),
        )],
    )
    .await;
    ran.assert_record_is_sound();
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    let reason = reason.unwrap();
    assert!(
        reason.contains("step `reviewers`: the participant selector gave no valid selection, so no sub-step ran: `selected_ids` names `frontend-review` twice"),
        "{reason}"
    );
    assert_eq!(ran.requests().len(), 1);
    assert_eq!(started(&ran.events), vec![("reviewers".into(), None)]);
    assert_eq!(
        transitions(&ran.events),
        vec![("reviewers".into(), "FAIL".into())]
    );
}

/// A dynamic parallel step whose pool item has its own facet pool.
fn security_reviewers() -> Piece {
    let source = "\
name: dynamic-security-review
max_steps: 5
initial_step: reviewers
facet_pools:
  security:
    candidates:
      - id: web
        description: Browser and HTTP input
        knowledge: security-web
      - id: cli
        description: Local processes and files
        knowledge: security-local
steps:
  - name: reviewers
    parallel:
      fixed:
        - name: arch-review
          persona: architecture-reviewer
          edit: false
          instruction: Review the architecture.
          rules:
            - condition: approved
            - condition: needs_fix
      pool:
        - name: security-review
          description: Review authentication and secrets handling
          persona: security-reviewer
          edit: false
          knowledge: security
          dynamic_facets:
            pool: security
            max_selected: 1
          instruction: Review security.
          rules:
            - condition: approved
            - condition: needs_fix
    rules:
      - condition: all(\"approved\")
        next: COMPLETE
      - condition: any(\"needs_fix\")
        next: ABORT
";
    load_str(
        source,
        Path::new("dynamic-security-review.yaml"),
        &LoadOptions::default(),
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .piece
}

const SELECTOR_OF_SECURITY: &str = "selector of step `security-review`";

#[tokio::test]
async fn a_chosen_pool_items_facet_selector_runs_before_any_sub_step_starts() {
    let say = |needle: &str, text: &str| Turn::when_contains(needle, Turn::text(text));
    let ran = run(
        security_reviewers(),
        vec![
            say(
                SELECTOR_OF_REVIEWERS,
                r#"{"selected_ids": ["security-review"], "rationale": "login code"}"#,
            ),
            say(
                SELECTOR_OF_SECURITY,
                r#"{"selected_ids": ["web"], "rationale": "an HTTP handler"}"#,
            ),
            say("Review the architecture.", "Fine. [ARCH-REVIEW:1]"),
            say("Review security.", "Fine. [SECURITY-REVIEW:1]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.requests().len(), 4);
    assert_eq!(
        selections(&ran.events),
        vec![
            (
                "reviewers".into(),
                SelectionTarget::Participants,
                1,
                vec!["security-review".into()]
            ),
            (
                "security-review".into(),
                SelectionTarget::Facets,
                1,
                vec!["web".into()]
            ),
        ]
    );
    let last_selection = ran
        .events
        .iter()
        .rposition(|r| r.event.kind() == "selection_made")
        .unwrap();
    let first_sub = ran
        .events
        .iter()
        .position(|r| {
            matches!(
                &r.event,
                RunEvent::MovementStarted {
                    parent: Some(_),
                    ..
                }
            )
        })
        .unwrap();
    assert!(
        last_selection < first_sub,
        "every selector before any sub-step"
    );
    let security = ran
        .requests()
        .iter()
        .map(messages_text)
        .find(|t| t.contains("Review security.") && !t.contains(SELECTOR_OF_SECURITY))
        .unwrap();
    assert!(security.contains("# Browser Boundary Security Knowledge"));
    assert!(!security.contains("# Local Process, Path, Terminal"));
    let arch = ran
        .requests()
        .iter()
        .map(messages_text)
        .find(|t| t.contains("Review the architecture."))
        .unwrap();
    assert!(!arch.contains("# Browser Boundary Security Knowledge"));
}

#[tokio::test]
async fn a_facet_selection_over_max_selected_stops_every_sibling_before_it_starts() {
    let say = |needle: &str, text: &str| Turn::when_contains(needle, Turn::text(text));
    let ran = run(
        security_reviewers(),
        vec![
            say(
                SELECTOR_OF_REVIEWERS,
                r#"{"selected_ids": ["security-review"], "rationale": "login code"}"#,
            ),
            say(
                SELECTOR_OF_SECURITY,
                r#"{"selected_ids": ["web", "cli"], "rationale": "both"}"#,
            ),
            say("Review the architecture.", "Fine. [ARCH-REVIEW:1]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    assert!(
        reason.as_deref().unwrap().contains(
            "step `security-review`: the facet selector for pool `security` gave no valid selection: `selected_ids` names 2 candidates; `max_selected` allows 1"
        ),
        "{reason:?}"
    );
    assert_eq!(ran.requests().len(), 2, "no reviewer was asked");
    assert_eq!(started(&ran.events), vec![("reviewers".into(), None)]);
}
