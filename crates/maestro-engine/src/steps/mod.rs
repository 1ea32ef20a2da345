//! TAKT workflow step kinds other than an agent that the engine runs itself: each reads its
//! definition from the step's [`StepKind`], makes its model calls through the run's client
//! (recorded and keyed so that a resume reuses them), and ends in an [`Ended`] the runner treats
//! like any other movement's. Workflow calls (`workflow_call`, `frame`), `when(…)` rules,
//! `structured_output` and system steps (`rules`, `when`, `structured`, `system`, over the
//! recorded [`WorkflowState`]) live here too.

use std::sync::Arc;

use maestro_piece::{Movement, StepKind};
use maestro_protocol::RunStatus;

use crate::ctx::RunCtx;
use crate::end_reason::EndReason;
use crate::error::EngineError;
use crate::event::{OutcomeSource, RunEvent};
use crate::judge::decide_rule;
use crate::movement::{Ended, Step};
use crate::state::RunState;

mod arpeggio;
mod csv;
pub(crate) mod frame;
pub(crate) mod rules;
pub(crate) mod structured;
pub(crate) mod system;
mod team_leader;
pub(crate) mod when;
mod workflow;
pub(crate) mod workflow_call;

pub use workflow::{
    EnqueueRequest, EnqueuedTask, QueueCounts, SystemFuture, SystemHost, WorkflowState,
};
pub(crate) use workflow::{render_field, render_instruction};

/// True for the step kinds this module runs.
pub(crate) fn runs(kind: &StepKind) -> bool {
    matches!(kind, StepKind::TeamLeader(_) | StepKind::Arpeggio(_))
}

/// Runs `movement` when its kind is one of this module's; `None` for every other kind.
pub(crate) async fn run(
    run: &Arc<RunCtx>,
    movement: &Movement,
) -> Result<Option<Ended>, EngineError> {
    let ended = match &movement.kind {
        // Boxed: see `runner::drive_workflow`.
        StepKind::TeamLeader(definition) => {
            Box::pin(team_leader::run(run, movement, definition)).await?
        }
        StepKind::Arpeggio(definition) => {
            Box::pin(arpeggio::run(run, movement, definition)).await?
        }
        _ => return Ok(None),
    };
    crate::runner::record_finished(run, movement, None, &ended, None).await?;
    Ok(Some(ended))
}

/// Records the start of a top-level step and returns the state its prompts are built from
/// (the start applied).
fn start(run: &RunCtx, movement: &Movement) -> Result<RunState, EngineError> {
    let state = run.journal.state();
    let started = RunEvent::MovementStarted {
        movement: movement.name.clone(),
        iteration: state.iteration + 1,
        movement_iteration: state.visits_of(&movement.name) + 1,
        parent: None,
        prompt_log: None,
    };
    let mut preview = state;
    preview.apply(&started);
    run.emit_queued(started)?;
    Ok(preview)
}

/// The step's rules read its combined answer (tags, the only rule, then the judge).
async fn route(run: &RunCtx, movement: &Movement, response: String) -> Result<Ended, EngineError> {
    Ok(match decide_rule(run, movement, &response, None).await? {
        Some((index, via)) => Ended::by_rule(movement, response, via, index),
        None => Ended::no_rule_matched(response),
    })
}

/// The step ends the run as `failed` for `reason` (recorded with the step's end).
fn failed(response: String, reason: EndReason) -> Ended {
    Ended {
        response,
        via: OutcomeSource::Engine,
        rule: None,
        step: Step::Finish {
            status: RunStatus::Failed,
            result: None,
            reason: Some(reason.clone()),
        },
        summary: None,
        lessons: vec![],
        edge_prompt: None,
        reason: Some(reason),
    }
}
