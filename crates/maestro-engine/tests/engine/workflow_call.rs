//! TAKT `workflow_call` steps over real HTTP: the called workflow's steps run in the same run,
//! named by the call stack, its result routes the calling step's rules, `max_steps` is shared
//! by the whole call tree, and `vars` reach the called workflow's prompts.

use crate::support;

use std::path::{Path, PathBuf};

use maestro_engine::{OutcomeSource, RunEvent};
use maestro_piece::{LoadOptions, Piece, load_file};
use maestro_testkit::Turn;
use serde_json::json;
use support::*;

fn builtin(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../maestro-piece/takt-builtins/v0.60/en/workflows")
        .join(format!("{name}.yaml"))
}

fn load(path: &Path) -> Piece {
    load_file(path, &LoadOptions::default())
        .unwrap_or_else(|f| panic!("{f}"))
        .piece
}

/// Writes `files` (name, text) into a fresh `workflows/` directory and loads the first.
fn workflows(files: &[(&str, &str)]) -> (tempfile::TempDir, Piece) {
    let dir = tempfile::tempdir().unwrap();
    let wf = dir.path().join("workflows");
    std::fs::create_dir_all(&wf).unwrap();
    for (name, text) in files {
        std::fs::write(wf.join(format!("{name}.yaml")), text).unwrap();
    }
    let piece = load(&wf.join(format!("{}.yaml", files[0].0)));
    (dir, piece)
}

/// A turn that writes the reports `names`, then the answer with its rule tag.
fn reported(names: &[&str], answer: &str) -> Vec<Turn> {
    vec![
        Turn::tool_calls(names.iter().map(|n| {
            (
                "write_report",
                json!({"name": n, "content": format!("# {n}\nWritten.")}),
            )
        })),
        Turn::text(answer),
    ]
}

/// The movements started, in order.
fn started(ran: &Ran) -> Vec<String> {
    ran.events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementStarted { movement, .. } => Some(movement.clone()),
            _ => None,
        })
        .collect()
}

/// `movement -> next` of every `movement_finished`, in order.
fn transitions(ran: &Ran) -> Vec<String> {
    ran.events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished { movement, next, .. } => {
                Some(format!("{movement} -> {next}"))
            }
            _ => None,
        })
        .collect()
}

/// The call events: `call <step> <workflow> [stack]` and `return <step> <result>`.
fn calls(ran: &Ran) -> Vec<String> {
    ran.events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::WorkflowCallStarted {
                movement,
                workflow,
                stack,
                initial_step,
                ..
            } => Some(format!(
                "call {movement} {workflow} at {initial_step} [{}]",
                stack.join(", ")
            )),
            RunEvent::WorkflowCallReturned {
                movement, result, ..
            } => Some(format!("return {movement} {result}")),
            _ => None,
        })
        .collect()
}

/// A parallel reviewer's two turns, matched by what its requests hold: the first writes its
/// report (its prompt names the report), the second, whose conversation holds that call,
/// answers with the tag of its `approved` rule.
fn reviewer(report: &str, tag: &str) -> Vec<Turn> {
    vec![
        Turn::when_contains(
            format!("\"name\":\"{report}\""),
            Turn::text(format!("Approved.\n[{tag}:1]")),
        ),
        Turn::when_contains(
            report,
            Turn::tool_calls([(
                "write_report",
                json!({"name": report, "content": "No finding."}),
            )]),
        ),
    ]
}

#[tokio::test]
async fn backend_runs_development_core_and_its_calls_to_completed() {
    let piece = load(&builtin("backend"));
    let turns = [
        // The dynamic reviewers' selector picks nothing from the pool (security-review).
        vec![Turn::when_contains(
            "selected_ids",
            Turn::text(
                r#"{"selected_ids": [], "rationale": "A small change with no security surface."}"#,
            ),
        )],
        reviewer("architect-review.md", "ARCH-REVIEW"),
        reviewer("testing-review.md", "TESTING-REVIEW"),
        reviewer("coding-review.md", "CODING-REVIEW"),
        reviewer("ai-antipattern-review.md", "AI-ANTIPATTERN-REVIEW-2ND"),
        reported(&["plan.md"], "The plan.\n[PLAN:1]"),
        reported(&["test-report.md"], "Tests written.\n[WRITE_TESTS:1]"),
        reported(
            &[
                "coder-scope.md",
                "coder-decisions.md",
                "implementation-report.md",
            ],
            "Implemented.\n[IMPLEMENT:1]",
        ),
        reported(
            &["review-resolution.md"],
            "Nothing to act on.\n[REVIEW-ADJUDICATION:2]",
        ),
        reported(&["review-resolution.md"], "Approved.\n[FINAL-GATE:1]"),
    ]
    .concat();
    let ran = run(piece, turns).await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        ("completed".into(), None),
        "{:?}",
        transitions(&ran)
    );
    let suite = "develop/peer-review/initial-reviewers";
    let reviewers = format!("{suite}/reviewers");
    let mut started = started(&ran);
    // The parallel reviewers start in any order; the rest is sequential.
    started[4..8].sort();
    assert_eq!(
        started,
        [
            "develop/plan".to_string(),
            "develop/write_tests".into(),
            "develop/implement/implement".into(),
            reviewers.clone(),
            format!("{suite}/ai-antipattern-review-2nd"),
            format!("{suite}/arch-review"),
            format!("{suite}/coding-review"),
            format!("{suite}/testing-review"),
            "develop/peer-review/review-adjudication".into(),
            "develop/peer-review/final-gate".into(),
        ]
    );
    assert_eq!(
        calls(&ran),
        [
            "call develop development-core at develop/plan [develop]",
            "call develop/implement development-implement at develop/implement/implement [develop, develop/implement]",
            "return develop/implement COMPLETE",
            "call develop/peer-review peer-review at develop/peer-review/initial-reviewers [develop, develop/peer-review]",
            "call develop/peer-review/initial-reviewers peer-review-suite-base at develop/peer-review/initial-reviewers/reviewers [develop, develop/peer-review, develop/peer-review/initial-reviewers]",
            "return develop/peer-review/initial-reviewers COMPLETE",
            "return develop/peer-review COMPLETE",
            "return develop COMPLETE",
        ]
    );
    let mut transitions = transitions(&ran);
    transitions[4..8].sort();
    assert_eq!(
        transitions,
        [
            "develop/plan -> develop/write_tests".to_string(),
            "develop/write_tests -> develop/implement".into(),
            "develop/implement/implement -> COMPLETE".into(),
            "develop/implement -> develop/peer-review".into(),
            format!("{suite}/ai-antipattern-review-2nd -> approved"),
            format!("{suite}/arch-review -> approved"),
            format!("{suite}/coding-review -> approved"),
            format!("{suite}/testing-review -> approved"),
            format!("{reviewers} -> COMPLETE"),
            "develop/peer-review/initial-reviewers -> develop/peer-review/review-adjudication"
                .into(),
            "develop/peer-review/review-adjudication -> develop/peer-review/final-gate".into(),
            "develop/peer-review/final-gate -> COMPLETE".into(),
            "develop/peer-review -> COMPLETE".into(),
            "develop -> COMPLETE".into(),
        ]
    );
    // Two calls for each step with reports (the reports, then the tagged answer), one for the
    // selector; the call steps and the routing of their results make none.
    assert_eq!(ran.requests().len(), 2 * 3 + 1 + 2 * 4 + 2 * 2);
    // The selection is recorded: nothing from the pool.
    let selected: Vec<&Vec<String>> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::SelectionMade { effective, .. } => Some(effective),
            _ => None,
        })
        .collect();
    assert_eq!(selected, [&Vec::<String>::new()]);
    // Iterations count the executable steps only: plan, write_tests, implement, reviewers,
    // adjudication, final gate.
    assert_eq!(ran.report.state.iteration, 6);
    assert!(ran.report.state.calls.is_empty());
    // The plan step's fragment brought its persona and instruction; `all_steps.rules` reached
    // its prompt, with `{var:review_mode}` rendered as `unspecified`.
    let first = ran.request_text(0);
    assert!(first.contains("When reporting a finding, follow these rules."));
    assert!(first.contains("Only for `unspecified`, treat"), "{first}");
    assert!(!first.contains("{var:"));
    // Each step tags with its own name, as in TAKT.
    assert!(first.contains("[PLAN:1]"), "{first}");
}

#[tokio::test]
async fn a_return_label_routes_the_calling_steps_rule() {
    // development-implement returns `need_replan`; development-core's `implement` step routes
    // it to `replan`, which aborts; backend's `develop` routes that ABORT to ABORT.
    let piece = load(&builtin("backend"));
    let turns = [
        reported(&["plan.md"], "The plan.\n[PLAN:1]"),
        reported(&["test-report.md"], "Tests written.\n[WRITE_TESTS:1]"),
        reported(
            &[
                "coder-scope.md",
                "coder-decisions.md",
                "implementation-report.md",
            ],
            "Blocked.\n[IMPLEMENT:3]",
        ),
        reported(&["plan.md"], "Nothing can be done.\n[REPLAN:3]"),
    ]
    .concat();
    let ran = run(piece, turns).await;
    ran.assert_record_is_sound();
    assert_eq!(
        started(&ran),
        [
            "develop/plan",
            "develop/write_tests",
            "develop/implement/implement",
            "develop/replan"
        ]
    );
    assert_eq!(
        transitions(&ran),
        [
            "develop/plan -> develop/write_tests",
            "develop/write_tests -> develop/implement",
            "develop/implement/implement -> need_replan",
            "develop/implement -> develop/replan",
            "develop/replan -> ABORT",
            "develop -> ABORT",
        ]
    );
    assert_eq!(
        calls(&ran)
            .iter()
            .filter(|c| c.starts_with("return"))
            .collect::<Vec<_>>(),
        [
            "return develop/implement need_replan",
            "return develop ABORT"
        ]
    );
    let via: Vec<(String, OutcomeSource, Option<usize>)> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                via,
                rule,
                ..
            } if movement == "develop" || movement == "develop/implement" => {
                Some((movement.clone(), *via, *rule))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        via,
        [
            ("develop/implement".into(), OutcomeSource::Returned, Some(2)),
            ("develop".into(), OutcomeSource::Returned, Some(2)),
        ]
    );
    assert_eq!(ran.requests().len(), 8);
    assert_eq!(ran.status(), ("aborted".into(), Some("abort_rule".into())));
    assert!(ran.report.state.calls.is_empty());
}

const PARENT: &str = "\
name: parent
max_steps: MAX
initial_step: plan
steps:
  - name: plan
    persona: planner
    edit: false
    instruction: Plan the change.
    rules:
      - condition: Planned
        next: build
  - name: build
    kind: workflow_call
    call: child
    vars:
      review_mode: follow_up
    rules:
      - condition: COMPLETE
        next: wrap-up
      - condition: blocked
        next: ABORT
      - condition: ABORT
        next: ABORT
  - name: wrap-up
    persona: planner
    edit: false
    instruction: Sum up.
    rules:
      - condition: Done
        next: COMPLETE
";

const CHILD: &str = "\
name: child
subworkflow:
  callable: true
  returns: [blocked]
initial_step: write
steps:
  - name: write
    persona: coder
    edit: true
    instruction: Write it in {var:review_mode} mode for {var:tier}.
    rules:
      - condition: Written
        next: check
  - name: check
    persona: coder
    edit: false
    instruction: Check it.
    rules:
      - condition: Good
        next: COMPLETE
      - condition: Cannot go on
        return: blocked
";

#[tokio::test]
async fn max_steps_is_shared_by_the_call_tree_and_the_call_step_uses_no_iteration() {
    // plan, write, check: three executable steps; the call step is not one of them.
    let (_dir, piece) = workflows(&[("parent", &PARENT.replace("MAX", "3")), ("child", CHILD)]);
    let ran = run(
        piece,
        vec![
            Turn::text("Planned.\n[PLAN:1]"),
            Turn::text("Written.\n[WRITE:1]"),
            Turn::text("Good.\n[CHECK:1]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(started(&ran), ["plan", "build/write", "build/check"]);
    assert_eq!(
        transitions(&ran),
        [
            "plan -> build",
            "build/write -> build/check",
            "build/check -> COMPLETE",
            "build -> wrap-up",
        ]
    );
    assert_eq!(
        ran.status(),
        ("exceeded".into(), Some("max_movements".into()))
    );
    assert_eq!(ran.requests().len(), 3);

    // One more step of budget and the same path completes: four executable steps.
    let (_dir, piece) = workflows(&[("parent", &PARENT.replace("MAX", "4")), ("child", CHILD)]);
    let ran = run(
        piece,
        vec![
            Turn::text("Planned.\n[PLAN:1]"),
            Turn::text("Written.\n[WRITE:1]"),
            Turn::text("Good.\n[CHECK:1]"),
            Turn::text("Done.\n[WRAP-UP:1]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(
        started(&ran),
        ["plan", "build/write", "build/check", "wrap-up"]
    );
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.report.state.iteration, 4);
    assert_eq!(ran.report.state.history, ["plan", "build", "wrap-up"]);
    // The call's vars reach the called workflow's prompt; a missing one is `unspecified`.
    let write = last_user_text(&ran.requests()[1]);
    assert!(
        write.contains("Write it in follow_up mode for unspecified."),
        "{write}"
    );
}

/// `called_workflow` gives the workflow a run is in inside a call, as the run has it: its
/// steps named by the call stack, the call's vars rendered, the root's step budget.
#[test]
fn called_workflow_is_the_callee_as_a_run_has_it() {
    let (_dir, piece) = workflows(&[("parent", &PARENT.replace("MAX", "4")), ("child", CHILD)]);
    let root = maestro_engine::called_workflow(&piece, &[]).unwrap();
    assert_eq!(root, piece);
    let child = maestro_engine::called_workflow(&piece, &["build"]).unwrap();
    assert_eq!(child.name, "child");
    assert_eq!(child.max_movements, 4);
    assert_eq!(child.initial_movement, "build/write");
    assert_eq!(child.movement_names(), ["build/write", "build/check"]);
    let write = child.movement("build/write").unwrap();
    assert_eq!(
        write.instruction.as_ref().unwrap().text,
        "Write it in follow_up mode for unspecified."
    );
    // `plan` calls nothing, `nothing` is no step: the index of the caller that is not a call.
    assert_eq!(maestro_engine::called_workflow(&piece, &["plan"]), Err(0));
    assert_eq!(
        maestro_engine::called_workflow(&piece, &["build", "write"]),
        Err(1)
    );
    assert_eq!(
        maestro_engine::called_workflow(&piece, &["nothing"]),
        Err(0)
    );
}

#[tokio::test]
async fn a_called_workflows_return_label_ends_the_call_with_the_callers_rule() {
    let (_dir, piece) = workflows(&[("parent", &PARENT.replace("MAX", "10")), ("child", CHILD)]);
    let ran = run(
        piece,
        vec![
            Turn::text("Planned.\n[PLAN:1]"),
            Turn::text("Written.\n[WRITE:1]"),
            Turn::text("It cannot work.\n[CHECK:2]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(
        transitions(&ran),
        [
            "plan -> build",
            "build/write -> build/check",
            "build/check -> blocked",
            "build -> ABORT",
        ]
    );
    assert_eq!(
        calls(&ran),
        [
            "call build child at build/write [build]",
            "return build blocked"
        ]
    );
    assert_eq!(ran.status(), ("aborted".into(), Some("abort_rule".into())));
}

#[test]
fn a_call_cycle_is_a_load_error_at_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let wf = dir.path().join("workflows");
    std::fs::create_dir_all(&wf).unwrap();
    std::fs::write(
        wf.join("ping.yaml"),
        "\
name: ping
subworkflow:
  callable: true
steps:
  - name: again
    kind: workflow_call
    call: pong
    rules:
      - condition: COMPLETE
        next: COMPLETE
",
    )
    .unwrap();
    std::fs::write(
        wf.join("pong.yaml"),
        "\
name: pong
subworkflow:
  callable: true
steps:
  - name: back
    kind: workflow_call
    call: ping
    rules:
      - condition: COMPLETE
        next: COMPLETE
",
    )
    .unwrap();
    let failed = load_file(&wf.join("ping.yaml"), &LoadOptions::default()).unwrap_err();
    let e = &failed.errors[0];
    assert_eq!((e.path.as_str(), e.line), ("steps[0].call", 7));
    assert!(
        e.message
            .contains("workflow call cycle: ping -> pong -> ping"),
        "{}",
        e.message
    );
}

#[test]
fn the_piece_hash_covers_every_called_workflow() {
    let (dir, piece) = workflows(&[("parent", &PARENT.replace("MAX", "10")), ("child", CHILD)]);
    let parent = dir.path().join("workflows/parent.yaml");
    assert_eq!(load(&parent).hash, piece.hash, "the hash is stable");
    std::fs::write(
        dir.path().join("workflows/child.yaml"),
        CHILD.replace("Check it.", "Check it twice."),
    )
    .unwrap();
    assert_ne!(
        load(&parent).hash,
        piece.hash,
        "a resume must see that a called workflow changed"
    );
}

/// `default-mini` on a model whose window its first prompt does not fit: the engine ends
/// `develop/plan`, and the run ends with the callee's reason, not the caller's `ABORT` rule.
async fn default_mini_on_a_small_window() -> Ran {
    let config = maestro_engine::EngineConfig {
        context_length: Some(4_096),
        ..engine_config()
    };
    run_with(load(&builtin("default-mini")), vec![], config, None).await
}

#[tokio::test]
async fn a_callee_cut_by_the_engine_ends_the_run_with_its_reason() {
    let ran = default_mini_on_a_small_window().await;
    ran.assert_record_is_sound();
    assert!(ran.requests().is_empty());
    assert_eq!(
        calls(&ran),
        [
            "call develop mini-core at develop/plan [develop]",
            "return develop ABORT",
        ]
    );
    assert_eq!(
        ran.status(),
        ("aborted".into(), Some("context_exhausted".into())),
        "{:?}",
        transitions(&ran)
    );
}

#[tokio::test]
async fn a_replay_of_a_context_exhausted_call_ends_the_same_way_with_no_call() {
    let ran = default_mini_on_a_small_window().await;
    assert_eq!(ran.status().0, "aborted");
    assert_eq!(ran.count("context_warning"), 1);
    // The replay's engine does not know the window (it was detected at run time), or is
    // configured with another one, and its scratch directory is elsewhere: the window and the
    // decision not to send the prompt come from the record.
    for context_length in [None, Some(100_000)] {
        let settled = maestro_testkit::ScriptedLlm::start([]).await;
        let provider: std::sync::Arc<dyn maestro_llm::Provider> = std::sync::Arc::new(
            maestro_llm::OpenAiCompat::new(maestro_llm::OpenAiConfig::new(settled.base_url()))
                .unwrap(),
        );
        let engine = maestro_engine::Engine::new(
            provider,
            maestro_tools::Registry::builtin(maestro_tools::ToolsConfig::default()),
            maestro_engine::EngineConfig {
                context_length,
                ..engine_config()
            },
        );
        let scratch = tempfile::tempdir().unwrap();
        let deeper = scratch
            .path()
            .join("a/much/longer/scratch/directory/than/the/run/had/at/its/time");
        std::fs::create_dir_all(&deeper).unwrap();
        let record = maestro_engine::RunRecord::open(&deeper, "replay", None).unwrap();
        let report = engine
            .replay(
                std::sync::Arc::new(load(&builtin("default-mini"))),
                ran.events.clone(),
                record,
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.status.to_string(), "aborted");
        assert_eq!(settled.requests().len(), 0);
    }
}
