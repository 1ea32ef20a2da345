//! TAKT system steps (`kind: system` / `mode: system`): no model call. The step waits its
//! `delay_before_ms`, reads its `system_inputs`, runs its `effects` in order and routes on its
//! `when(…)` rules. Inputs and effect results are recorded (`system_inputs`, `effect_result`);
//! a resumed or replayed run reuses them, so an effect never runs twice for one visit.
//!
//! What Maestro answers:
//! - `task_context`: the run's task; `branch_context`: the workspace's git branch, if any;
//! - `task_queue_context`: the job queue through the run's [`SystemHost`] (an empty queue
//!   without one: a plain engine run has no queue);
//! - `pr_context`, `pr_list`, `pr_selection`, `issue_context`, `issue_list`,
//!   `issue_selection`: Maestro has no Git host, so they read as none (`exists: false`, empty
//!   lists) and a warning says so;
//! - `enqueue_task` enqueues a job through the host; without a host, or `mode: from_pr`, it is
//!   refused;
//! - `comment_pr`, `merge_pr`, `close_pr`, `sync_with_root`, `resolve_conflicts_with_ai` are
//!   refused: the run ends `failed` (`effect_refused`) naming the effect.

use std::sync::Arc;
use std::time::Duration;

use maestro_piece::Movement;
use maestro_protocol::RunStatus;
use serde_json::{Map, Value, json};

use super::rules;
use super::{EnqueueRequest, SystemHost, WorkflowState, render_field};
use crate::ctx::RunCtx;
use crate::end_reason::EndReason;
use crate::error::EngineError;
use crate::event::{OutcomeSource, RunEvent};
use crate::movement::{Ended, Step};

/// Inputs that need a Git host.
const GIT_HOST_INPUTS: &[&str] = &[
    "pr_context",
    "pr_list",
    "pr_selection",
    "issue_context",
    "issue_list",
    "issue_selection",
];

/// Runs one visit of a system step; `definition` is the step as loaded.
pub(crate) async fn visit(
    run: &Arc<RunCtx>,
    movement: &Movement,
    definition: &Value,
) -> Result<Ended, EngineError> {
    let state = run.journal.state();
    let visit_no = state.visits_of(&movement.name) + 1;
    run.emit_queued(RunEvent::MovementStarted {
        movement: movement.name.clone(),
        iteration: state.iteration + 1,
        movement_iteration: visit_no,
        parent: None,
        prompt_log: None,
    })?;
    wait_delay(run, movement).await?;
    if let Some(inputs) = definition.get("system_inputs").and_then(Value::as_array) {
        read_inputs(run, movement, inputs, &state.task, &state.workspace).await?;
    }
    if let Some(effects) = definition.get("effects").and_then(Value::as_array) {
        for effect in effects {
            if let Some(refused) = run_effect(run, movement, effect, visit_no).await? {
                return Ok(refused);
            }
        }
    }
    let response = format!("System step `{}` completed.", movement.name);
    let decided = rules::decide(run, movement, &response, None).await?;
    Ok(rules::ended(movement, response, decided))
}

/// Waits the step's `delay_before_ms` (capped by `engine.max_step_delay_ms`), cancellably.
/// A visit the record already holds past its start waited then; a replay never waits.
pub(crate) async fn wait_delay(run: &RunCtx, movement: &Movement) -> Result<(), EngineError> {
    let Some(ms) = movement.delay_before_ms.filter(|ms| *ms > 0) else {
        return Ok(());
    };
    let recorded = run
        .journal
        .recorded()
        .and_then(|r| r.next_event(&movement.name));
    if recorded.is_some() || run.verifying() {
        return Ok(());
    }
    let ms = run.config.max_step_delay_ms.map_or(ms, |cap| ms.min(cap));
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(()),
        _ = run.cancel.cancelled() => Err(EngineError::Llm(maestro_llm::LlmError::Cancelled)),
    }
}

async fn read_inputs(
    run: &RunCtx,
    movement: &Movement,
    inputs: &[Value],
    task: &str,
    workspace: &str,
) -> Result<(), EngineError> {
    let kinds: Vec<&str> = inputs
        .iter()
        .filter_map(|i| i.get("type").and_then(Value::as_str))
        .collect();
    let hostless: Vec<String> = kinds
        .iter()
        .filter(|k| GIT_HOST_INPUTS.contains(k))
        .map(|k| format!("`{k}`"))
        .collect();
    if !hostless.is_empty() {
        run.emit(RunEvent::Warning {
            movement: Some(movement.name.clone()),
            message: format!(
                "system input(s) {} need a Git host (pull requests, issues), which Maestro does not have: they read as none (`exists: false`, empty lists)",
                hostless.join(", ")
            ),
        })
        .await?;
    }
    if kinds.contains(&"task_queue_context") && run.system.is_none() {
        run.emit(RunEvent::Warning {
            movement: Some(movement.name.clone()),
            message: "`task_queue_context` reads an empty queue: this run has no job queue (it is not a job of `maestro serve`)".to_owned(),
        })
        .await?;
    }
    let recorded = run
        .journal
        .recorded()
        .and_then(|r| r.next_event(&movement.name));
    let values = match recorded {
        Some(RunEvent::SystemInputs { inputs, .. }) => inputs,
        _ => {
            let mut values = Map::new();
            for input in inputs {
                let (Some(kind), Some(binding)) = (
                    input.get("type").and_then(Value::as_str),
                    input.get("as").and_then(Value::as_str),
                ) else {
                    continue;
                };
                let value = read_input(run.system.as_deref(), input, kind, task, workspace).await;
                values.insert(binding.to_owned(), value);
            }
            values
        }
    };
    run.emit(RunEvent::SystemInputs {
        movement: movement.name.clone(),
        inputs: values,
    })
    .await
}

async fn read_input(
    host: Option<&dyn SystemHost>,
    input: &Value,
    kind: &str,
    task: &str,
    workspace: &str,
) -> Value {
    match kind {
        "task_context" if task.is_empty() => json!({"exists": false}),
        "task_context" => json!({"exists": true, "body": task}),
        "branch_context" => match git_branch(workspace).await {
            Some(name) => json!({"exists": true, "name": name}),
            None => json!({"exists": false}),
        },
        "task_queue_context" => {
            let exclude = input
                .get("exclude_current_task")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let counts = match host {
                Some(host) => host.queue(exclude).await.unwrap_or_default(),
                None => Default::default(),
            };
            let total = counts.pending
                + counts.running
                + counts.completed
                + counts.failed
                + counts.exceeded;
            json!({
                "exists": total > 0,
                "total_count": total,
                "pending_count": counts.pending,
                "running_count": counts.running,
                "completed_count": counts.completed,
                "failed_count": counts.failed,
                "exceeded_count": counts.exceeded,
                "pr_failed_count": 0,
                "items": [],
            })
        }
        "pr_list" | "issue_list" => json!([]),
        _ => json!({"exists": false}),
    }
}

/// The branch checked out in `workspace`, when it is a git work tree on a branch.
async fn git_branch(workspace: &str) -> Option<String> {
    if workspace.is_empty() {
        return None;
    }
    let out = tokio::process::Command::new("git")
        .args(["-C", workspace, "symbolic-ref", "--short", "-q", "HEAD"])
        .output()
        .await
        .ok()?;
    let name = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !name.is_empty()).then_some(name)
}

/// Runs (or reuses from the record) one effect; `Some` ends the visit (a refused effect).
async fn run_effect(
    run: &RunCtx,
    movement: &Movement,
    effect: &Value,
    visit_no: u32,
) -> Result<Option<Ended>, EngineError> {
    let kind = effect.get("type").and_then(Value::as_str).unwrap_or("");
    let recorded = run
        .journal
        .recorded()
        .and_then(|r| r.next_event(&movement.name));
    let result = match recorded {
        Some(RunEvent::EffectResult {
            effect: recorded_kind,
            result,
            ..
        }) if recorded_kind == kind => result,
        _ => {
            let state = run.journal.state().workflow;
            match live_effect(run, movement, kind, effect, &state, visit_no).await? {
                Ok(result) => result,
                Err(refusal) => return Ok(Some(refused(refusal))),
            }
        }
    };
    run.emit(RunEvent::EffectResult {
        movement: movement.name.clone(),
        effect: kind.to_owned(),
        result,
    })
    .await?;
    Ok(None)
}

/// Carries out an effect: its result, or why it is refused.
async fn live_effect(
    run: &RunCtx,
    movement: &Movement,
    kind: &str,
    effect: &Value,
    state: &WorkflowState,
    visit_no: u32,
) -> Result<Result<Value, String>, EngineError> {
    let step = &movement.name;
    if kind != "enqueue_task" {
        return Ok(Err(format!(
            "step `{step}`: effect `{kind}` needs a Git host (pull requests, merges, its remote branches), which Maestro does not have; Maestro validates it but cannot carry it out. Route around the step, or do it by hand"
        )));
    }
    let field = |name: &str| -> Result<Option<Value>, String> {
        match effect.get(name) {
            Some(Value::String(text)) => render_field(text, state)
                .map(Some)
                .map_err(|e| format!("step `{step}`: effect `enqueue_task`, field `{name}`: {e}")),
            other => Ok(other.cloned()),
        }
    };
    let Some(host) = run.system.as_deref() else {
        return Ok(Err(format!(
            "step `{step}`: effect `enqueue_task` needs a job queue, and this run has none; run the workflow as a job (`maestro serve`, `POST /api/jobs`) to enqueue its tasks"
        )));
    };
    if effect.get("mode").and_then(Value::as_str) == Some("from_pr") {
        return Ok(Err(format!(
            "step `{step}`: effect `enqueue_task` with `mode: from_pr` works on a pull request, which needs a Git host Maestro does not have"
        )));
    }
    let task = match field("task") {
        Ok(Some(Value::String(t))) if !t.trim().is_empty() => t,
        Ok(_) => {
            return Ok(Err(format!(
                "step `{step}`: effect `enqueue_task` needs a non-empty `task`"
            )));
        }
        Err(e) => return Ok(Err(e)),
    };
    let ignored: Vec<String> = ["base_branch", "worktree", "issue", "issue_number"]
        .iter()
        .filter(|k| effect.get(**k).is_some())
        .map(|k| format!("`{k}`"))
        .collect();
    if !ignored.is_empty() {
        run.emit(RunEvent::Warning {
            movement: Some(step.clone()),
            message: format!(
                "effect `enqueue_task`: {} need a Git host and are left out; the job runs the task in its own workspace",
                ignored.join(", ")
            ),
        })
        .await?;
    }
    let title: String = task
        .lines()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .unwrap_or("enqueued task")
        .chars()
        .take(80)
        .collect();
    let request = EnqueueRequest {
        key: format!(
            "{}/{step}/{visit_no}/enqueue_task",
            run.journal.state().run_id
        ),
        task,
        piece: effect
            .get("workflow")
            .and_then(Value::as_str)
            .map(str::to_owned),
        title,
    };
    Ok(Ok(match host.enqueue(request).await {
        Ok(job) => json!({"success": true, "failed": false, "task_name": job.id, "job_id": job.id}),
        Err(e) => json!({"success": false, "failed": true, "error": run.redact(&e)}),
    }))
}

fn refused(why: String) -> Ended {
    Ended {
        response: String::new(),
        via: OutcomeSource::Engine,
        rule: None,
        step: Step::Finish {
            status: RunStatus::Failed,
            result: None,
            reason: Some(EndReason::EffectRefused(why)),
        },
        summary: None,
        lessons: Vec::new(),
        edge_prompt: None,
        reason: None,
    }
}
