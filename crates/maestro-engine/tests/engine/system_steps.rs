//! TAKT v0.60 system steps, `when(…)` rules and `structured_output`, run against the scripted
//! model server: the step order, the transitions and the final status are read from the
//! recorded events.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use maestro_engine::{
    EngineConfig, EnqueueRequest, EnqueuedTask, EventRecord, JsonlLog, QueueCounts, RunEvent,
    RunRecord, RunSpec, SystemFuture, SystemHost, read_events,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{LoadOptions, Piece, load_str};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use serde_json::json;
use support::*;

fn builtin(name: &str) -> Piece {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/takt-v0.60/builtins/en/workflows")
        .join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    load_str(&text, &path, &LoadOptions::default())
        .unwrap_or_else(|f| panic!("{f}"))
        .piece
}

fn workflow(text: &str) -> Piece {
    load_str(text, Path::new("workflow.yaml"), &LoadOptions::default())
        .unwrap_or_else(|f| panic!("{f}"))
        .piece
}

/// No waiting on `delay_before_ms` in tests.
fn no_delays() -> EngineConfig {
    EngineConfig {
        max_step_delay_ms: Some(0),
        ..engine_config()
    }
}

/// Top-level steps in the order they started.
fn order(events: &[EventRecord]) -> Vec<String> {
    events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementStarted {
                movement,
                parent: None,
                ..
            } => Some(movement.clone()),
            _ => None,
        })
        .collect()
}

/// `(step, next, via)` of every finished top-level step.
fn transitions(events: &[EventRecord]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                next,
                via,
                parent: None,
                ..
            } => Some((
                movement.clone(),
                next.clone(),
                serde_json::to_value(via)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )),
            _ => None,
        })
        .collect()
}

fn followup(action: &str) -> Turn {
    Turn::text(format!(
        "I looked at the code base.\n```json\n{}\n```",
        json!({
            "action": action,
            "title": "Handle empty input in the parser",
            "type": "bug",
            "scope": "parser",
            "summary": "The parser panics on empty input.",
            "goals": ["Empty input parses to an empty document"],
            "acceptance_criteria": ["A test feeds empty input", "No panic"],
            "labels": [],
            "issue": {"create": true}
        })
    ))
}

#[tokio::test]
async fn auto_improvement_loop_runs_its_system_steps_up_to_the_first_refused_effect() {
    let piece = builtin("auto-improvement-loop");
    let ran = run_with(piece, vec![followup("enqueue_new_task")], no_delays(), None).await;
    ran.assert_record_is_sound();
    assert_eq!(
        order(&ran.events),
        ["route_context", "plan_fresh_improvement", "enqueue_fresh"]
    );
    assert_eq!(
        transitions(&ran.events),
        [
            (
                "route_context".into(),
                "plan_fresh_improvement".into(),
                "when".into()
            ),
            (
                "plan_fresh_improvement".into(),
                "enqueue_fresh".into(),
                "when".into()
            ),
            ("enqueue_fresh".into(), "FAIL".into(), "engine".into()),
        ]
    );
    // The planner is the only model call: every rule is a `when(…)`, so no judge.
    assert_eq!(ran.requests().len(), 1);
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    let reason = reason.unwrap();
    assert!(
        reason.starts_with(
            "effect_refused: step `enqueue_fresh`: effect `enqueue_task` needs a job queue"
        ),
        "{reason}"
    );
    // What the routing read: no Git host, so no PR and no issue; an empty queue.
    let inputs = ran
        .events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::SystemInputs { movement, inputs } if movement == "route_context" => {
                Some(inputs.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(inputs["selected_pr"], json!({"exists": false}));
    assert_eq!(inputs["selected_issue"], json!({"exists": false}));
    assert_eq!(inputs["prs"], json!([]));
    assert_eq!(inputs["active_queue"]["pending_count"], 0);
    assert_eq!(inputs["task"]["body"], "Write the cookbook.");
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
            .any(|w| w.contains("`pr_list`") && w.contains("need a Git host")),
        "{warnings:?}"
    );
    // The planner's prompt had the routing context filled in, and the schema to answer with.
    let prompt = ran.request_text(0);
    assert!(prompt.contains("- open_issue_count: 0"), "{prompt}");
    assert!(!prompt.contains("{context:"), "{prompt}");
    assert!(prompt.contains("\"wait_before_next_scan\""), "{prompt}");
    // The structured output was recorded with the task TAKT derives from it.
    let value = ran
        .events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::StructuredOutput { value, .. } => Some(value.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        value["task_markdown"]
            .as_str()
            .unwrap()
            .contains("- [ ] A test feeds empty input")
    );
    assert_eq!(
        ran.count("effect_result"),
        0,
        "a refused effect has no result"
    );
}

const ROUTED: &str = r#"
name: plan-and-route
max_steps: 5
initial_step: plan
steps:
  - name: plan
    persona: planner
    instruction: Decide what to do with the pull request.
    structured_output:
      schema_ref: pr-followup-task
    rules:
      - condition: when(structured.plan.action == "prepare_merge")
        next: COMPLETE
      - condition: when(structured.plan.action == "reject_pr" || structured.plan.action == "wait_before_next_scan")
        next: ABORT
"#;

#[tokio::test]
async fn a_valid_structured_answer_routes_on_its_fields_without_a_judge_call() {
    let ran = run_with(
        workflow(ROUTED),
        vec![Turn::text(
            r#"{"action": "prepare_merge", "task_markdown": ""}"#,
        )],
        no_delays(),
        None,
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.requests().len(), 1, "only when(…) rules: no judge call");
    assert_eq!(
        transitions(&ran.events),
        [("plan".into(), "COMPLETE".into(), "when".into())]
    );
    assert_eq!(
        ran.report.state.workflow.structured["plan"]["action"],
        "prepare_merge"
    );
}

#[tokio::test]
async fn an_answer_not_valid_against_the_schema_fails_the_run_naming_the_problem() {
    let ran = run_with(
        workflow(ROUTED),
        vec![Turn::text(
            r#"{"action": "merge_now", "task_markdown": ""}"#,
        )],
        no_delays(),
        None,
    )
    .await;
    ran.assert_record_is_sound();
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    let reason = reason.unwrap();
    assert!(
        reason.starts_with("invalid_structured_output: step `plan` must answer with JSON valid against schema `pr-followup-task`"),
        "{reason}"
    );
    assert!(reason.contains("/action"), "{reason}");
    assert_eq!(ran.requests().len(), 1, "TAKT makes no second attempt");
    assert_eq!(ran.count("structured_output"), 0);
}

const LABELLED: &str = r#"
name: labelled
max_steps: 5
initial_step: plan
steps:
  - name: plan
    persona: planner
    instruction: Decide what to do with the pull request.
    structured_output:
      schema_ref: pr-followup-task
    rules:
      - condition: approved && when(structured.plan.action == "reject_pr")
        next: ABORT
      - condition: when(structured.plan.action == "wait_before_next_scan")
        next: ABORT
      - condition: approved
        next: COMPLETE
      - condition: rejected
        next: ABORT
"#;

#[tokio::test]
async fn a_label_and_a_predicate_need_both_and_the_label_is_judged_once() {
    let ran = run_with(
        workflow(LABELLED),
        vec![
            Turn::text(r#"{"action": "prepare_merge", "task_markdown": ""}"#),
            Turn::text(r#"{"rule": 1}"#),
        ],
        no_delays(),
        None,
    )
    .await;
    ran.assert_record_is_sound();
    // The judge picked `approved` (rule 1's label); rule 1's predicate does not hold, so the
    // next rule with that label decides.
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(
        ran.requests().len(),
        2,
        "the step's call and one judge call"
    );
    assert_eq!(ran.count("judge_request"), 1);
    assert_eq!(
        transitions(&ran.events),
        [("plan".into(), "COMPLETE".into(), "judge".into())]
    );
    let judge = ran.request_text(1);
    assert!(
        judge.contains("1. approved") && judge.contains("2. rejected"),
        "{judge}"
    );
}

#[tokio::test]
async fn a_predicate_over_state_the_run_does_not_hold_fails_naming_it() {
    let text = ROUTED.replace(
        "structured.plan.action == \"prepare_merge\"",
        "structured.plan.verdict == \"ok\"",
    );
    let ran = run_with(
        workflow(&text),
        vec![Turn::text(
            r#"{"action": "prepare_merge", "task_markdown": ""}"#,
        )],
        no_delays(),
        None,
    )
    .await;
    let reason = ran.status().1.unwrap();
    assert!(
        reason.starts_with("when_error: step `plan`: `when(structured.plan.verdict == \"ok\")`")
            && reason.contains("no `verdict`"),
        "{reason}"
    );
}

const REFUSING: &str = r#"
name: merge-it
max_steps: 5
initial_step: decide
steps:
  - name: decide
    mode: system
    system_inputs:
      - type: task_context
        source: current_task
        as: task
    rules:
      - condition: when(context.decide.task.exists == true)
        next: merge
  - name: merge
    mode: system
    effects:
      - type: merge_pr
        pr: 7
    rules:
      - condition: when(effect.merge.merge_pr.success == true)
        next: COMPLETE
"#;

#[tokio::test]
async fn an_effect_needing_a_git_host_ends_the_run_failed_naming_it() {
    let ran = run_with(workflow(REFUSING), vec![], no_delays(), None).await;
    ran.assert_record_is_sound();
    assert_eq!(ran.requests().len(), 0, "system steps make no model call");
    assert_eq!(order(&ran.events), ["decide", "merge"]);
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    let reason = reason.unwrap();
    assert!(
        reason.starts_with("effect_refused: step `merge`: effect `merge_pr` needs a Git host"),
        "{reason}"
    );
}

/// A job queue in memory: counts what it was asked to enqueue.
#[derive(Default)]
struct Queue {
    enqueued: Mutex<Vec<EnqueueRequest>>,
}

impl SystemHost for Queue {
    fn queue(&self, _exclude_current: bool) -> SystemFuture<'_, QueueCounts> {
        let pending = self.enqueued.lock().unwrap().len() as u64;
        Box::pin(async move {
            Ok(QueueCounts {
                pending,
                ..Default::default()
            })
        })
    }

    fn enqueue(&self, request: EnqueueRequest) -> SystemFuture<'_, EnqueuedTask> {
        let mut enqueued = self.enqueued.lock().unwrap();
        enqueued.push(request);
        let id = format!("job-{}", enqueued.len());
        Box::pin(async move { Ok(EnqueuedTask { id }) })
    }
}

const ENQUEUING: &str = r#"
name: enqueue-then-review
max_steps: 5
initial_step: enqueue
steps:
  - name: enqueue
    mode: system
    effects:
      - type: enqueue_task
        mode: new
        workflow: default
        task: "Fix the parser."
    rules:
      - condition: when(effect.enqueue.enqueue_task.success == true)
        next: count
  - name: count
    mode: system
    system_inputs:
      - type: task_queue_context
        source: current_project
        as: queue
    rules:
      - condition: when(context.count.queue.pending_count == 1)
        next: review
  - name: review
    persona: reviewer
    instruction: "Review job {effect:enqueue.enqueue_task.job_id}."
    rules:
      - condition: done
        next: COMPLETE
"#;

async fn run_spec(
    piece: &Piece,
    host: Arc<Queue>,
    turns: Vec<Turn>,
    history: &[EventRecord],
    dir: &Path,
) -> (Vec<EventRecord>, usize) {
    let server = ScriptedLlm::start(turns).await;
    let config = OpenAiConfig::new(server.base_url())
        .with_retry(fast_retries())
        .with_tool_mode(ToolMode::Native);
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompat::new(config).unwrap());
    let engine = maestro_engine::Engine::new(
        provider,
        Registry::builtin(ToolsConfig::default()),
        no_delays(),
    );
    let run_id = history
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::RunStarted { run_id, .. } => Some(run_id.clone()),
            _ => None,
        })
        .unwrap_or_else(maestro_engine::new_run_id);
    let record = RunRecord::open(&dir.join("runs"), &run_id, None).unwrap();
    let log = JsonlLog::rewrite(&record.events_path(), history).unwrap();
    let mut spec = RunSpec::new(
        Arc::new(piece.clone()),
        "Keep the parser healthy.",
        record.clone(),
    );
    spec.logs = vec![Arc::new(log)];
    spec.history = history.to_vec();
    spec.system = Some(host);
    engine.run_spec(spec).await.unwrap();
    (
        read_events(&record.events_path()).unwrap(),
        server.requests().len(),
    )
}

#[tokio::test]
async fn an_effect_runs_once_and_a_resume_after_it_reuses_its_recorded_result() {
    let piece = workflow(ENQUEUING);
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(Queue::default());
    let (events, requests) = run_spec(
        &piece,
        Arc::clone(&host),
        vec![Turn::text("Looks good.")],
        &[],
        dir.path(),
    )
    .await;
    assert_eq!(requests, 1);
    assert_eq!(order(&events), ["enqueue", "count", "review"]);
    let last = events.last().unwrap();
    assert!(
        matches!(&last.event, RunEvent::RunFinished { status, .. } if status.to_string() == "completed"),
        "{last:?}"
    );
    {
        let enqueued = host.enqueued.lock().unwrap();
        assert_eq!(enqueued.len(), 1);
        assert_eq!(enqueued[0].task, "Fix the parser.");
        assert_eq!(enqueued[0].piece.as_deref(), Some("default"));
    }

    // The worker dies right after the effect's result was recorded: the resumed run reuses it.
    let cut = events
        .iter()
        .position(|r| matches!(r.event, RunEvent::EffectResult { .. }))
        .unwrap();
    let fresh = Arc::new(Queue::default());
    fresh
        .enqueued
        .lock()
        .unwrap()
        .push(host.enqueued.lock().unwrap()[0].clone());
    let dir2 = tempfile::tempdir().unwrap();
    let (resumed, requests) = run_spec(
        &piece,
        Arc::clone(&fresh),
        vec![Turn::text("Looks good.")],
        &events[..=cut],
        dir2.path(),
    )
    .await;
    assert_eq!(fresh.enqueued.lock().unwrap().len(), 1, "no second job");
    assert_eq!(requests, 1);
    assert_eq!(
        resumed
            .iter()
            .filter(|r| matches!(r.event, RunEvent::EffectResult { .. }))
            .count(),
        1
    );
    assert_eq!(order(&resumed), ["enqueue", "count", "review"]);
    let review_prompt = resumed.iter().find_map(|r| match &r.event {
        RunEvent::RunFinished { status, .. } => Some(status.to_string()),
        _ => None,
    });
    assert_eq!(review_prompt.as_deref(), Some("completed"));
}

#[tokio::test]
async fn a_replay_of_auto_improvement_loop_makes_no_model_call_and_ends_the_same() {
    let piece = builtin("auto-improvement-loop");
    let ran = run_with(
        piece.clone(),
        vec![followup("enqueue_new_task")],
        no_delays(),
        None,
    )
    .await;
    let silent = ScriptedLlm::start(vec![]).await;
    let config = OpenAiConfig::new(silent.base_url())
        .with_retry(fast_retries())
        .with_tool_mode(ToolMode::Native);
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompat::new(config).unwrap());
    let engine = maestro_engine::Engine::new(
        provider,
        Registry::builtin(ToolsConfig::default()),
        no_delays(),
    );
    let scratch = tempfile::tempdir().unwrap();
    let record = RunRecord::open(scratch.path(), "replay", None).unwrap();
    let report = engine
        .replay(Arc::new(piece), ran.events.clone(), record)
        .await
        .unwrap();
    assert_eq!(silent.requests().len(), 0, "replay calls no model");
    assert_eq!(report.status.to_string(), "failed");
    assert_eq!(report.reason, ran.report.reason);
    assert_eq!(report.state.workflow, ran.report.state.workflow);
}
