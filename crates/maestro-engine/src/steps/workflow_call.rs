//! TAKT `workflow_call` steps: the called workflow (loaded with the call's arguments, inside
//! the step's [`maestro_piece::WorkflowCall`]) runs in the same run. Its steps are movements
//! named by the call stack (`develop/plan`, `develop/implement/implement`), so their visits,
//! sessions and logs never mix with the caller's. The call step itself makes no model call
//! and uses no iteration: `workflow_call_started` enters the callee, and when the callee ends
//! (`COMPLETE`, `ABORT` or a `return:` label) `workflow_call_returned` hands the result to the
//! calling step, whose first rule naming it decides where the caller goes.
//!
//! Everything is read from the run state: which workflow runs is the stack of
//! [`CallFrame`](crate::steps::frame::CallFrame)s the recorded events built, so a resumed or
//! replayed run finds itself inside the same call.

use std::collections::BTreeMap;
use std::sync::Arc;

use maestro_piece::{Condition, Facet, Movement, Piece, StepKind, Target, WorkflowCall};
use maestro_protocol::RunStatus;

use crate::ctx::RunCtx;
use crate::end_reason::EndReason;
use crate::error::{EngineError, UnrunnablePiece};
use crate::event::{OutcomeSource, RunEvent};
use crate::runner::Finish;
use crate::state::RunState;

/// What `{var:name}` renders to when no call declared `name`.
const UNSPECIFIED: &str = "unspecified";

/// The workflow the run is in: the piece itself, or, inside calls, the innermost called
/// workflow with its steps, rule targets and loop monitors named by the call stack and its
/// `{var:…}` placeholders rendered. Its `max_movements` is the root's: the root owns the
/// budget.
pub(crate) fn current(root: &Arc<Piece>, state: &RunState) -> Result<Arc<Piece>, EngineError> {
    let mut piece: &Piece = root;
    let mut prefix = String::new();
    for frame in &state.calls {
        let local = local_name(&prefix, &frame.movement);
        let call = piece
            .movements
            .iter()
            .find(|m| m.name == local)
            .and_then(|m| match &m.kind {
                StepKind::WorkflowCall(call) => Some(call),
                _ => None,
            })
            .ok_or_else(|| UnrunnablePiece::UnknownMovement {
                movement: frame.movement.clone(),
                piece: piece.name.clone(),
            })?;
        piece = &call.callee;
        prefix = frame.movement.clone();
    }
    let vars = state.calls.last().map(|f| &f.vars);
    if prefix.is_empty() && !mentions_vars(piece) {
        return Ok(Arc::clone(root));
    }
    let empty = BTreeMap::new();
    Ok(Arc::new(qualified(
        piece,
        &prefix,
        vars.unwrap_or(&empty),
        root.max_movements,
    )))
}

/// The workflow a run is in inside the calls `callers`: the `workflow_call` steps from the
/// root down (`["develop"]` for the step `develop/plan`). It is what the run has there: the
/// called workflow with its steps named by the call stack, its `{var:…}` placeholders rendered
/// with the calls' `vars`, and the root's `max_movements`; with no callers, the root itself.
/// `Err(n)`: `callers[n]` is no `workflow_call` step of the workflow the callers before it
/// reach.
pub fn called_workflow(root: &Piece, callers: &[&str]) -> Result<Piece, usize> {
    let mut piece = root;
    let mut vars = BTreeMap::new();
    for (n, caller) in callers.iter().enumerate() {
        let call = piece
            .movements
            .iter()
            .find(|m| m.name == *caller)
            .and_then(|m| match &m.kind {
                StepKind::WorkflowCall(call) => Some(call),
                _ => None,
            })
            .ok_or(n)?;
        vars.extend(call.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        piece = &call.callee;
    }
    if callers.is_empty() && !mentions_vars(piece) {
        return Ok(root.clone());
    }
    Ok(qualified(
        piece,
        &callers.join("/"),
        &vars,
        root.max_movements,
    ))
}

/// `name` (named by the call stack) without the stack's `prefix`.
fn local_name<'a>(prefix: &str, name: &'a str) -> &'a str {
    if prefix.is_empty() {
        return name;
    }
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(name)
}

fn under(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

fn mentions_vars(piece: &Piece) -> bool {
    fn facets(m: &Movement) -> bool {
        m.persona
            .iter()
            .chain(&m.policies)
            .chain(&m.knowledge)
            .chain(&m.instruction)
            .any(|f| f.text.contains("{var:"))
            || m.parallel.iter().any(facets)
    }
    piece.movements.iter().any(facets) || piece.loop_monitors.iter().any(|l| facets(&l.judge))
}

/// A copy of `piece` as it runs under the call stack `prefix` with `vars`.
fn qualified(
    piece: &Piece,
    prefix: &str,
    vars: &BTreeMap<String, String>,
    max_movements: u32,
) -> Piece {
    let mut piece = piece.clone();
    piece.max_movements = max_movements;
    piece.initial_movement = under(prefix, &piece.initial_movement);
    for m in &mut piece.movements {
        qualify(m, prefix, vars);
    }
    for monitor in &mut piece.loop_monitors {
        for name in &mut monitor.cycle {
            *name = under(prefix, name);
        }
        qualify(&mut monitor.judge, prefix, vars);
    }
    piece
}

fn qualify(m: &mut Movement, prefix: &str, vars: &BTreeMap<String, String>) {
    m.name = under(prefix, &m.name);
    for rule in &mut m.rules {
        if let Some(Target::Movement(next)) = &mut rule.next {
            *next = under(prefix, next);
        }
    }
    if let Some(Target::Movement(next)) = &mut m.default_next {
        *next = under(prefix, next);
    }
    let render = |f: &mut Facet| f.text = render_vars(&f.text, vars);
    m.persona.iter_mut().for_each(render);
    m.policies.iter_mut().for_each(render);
    m.knowledge.iter_mut().for_each(render);
    m.instruction.iter_mut().for_each(render);
    for sub in &mut m.parallel {
        qualify(sub, prefix, vars);
    }
}

/// Replaces each `{var:name}` with the variable's value, or `unspecified`.
pub(crate) fn render_vars(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{var:") {
        let after = &rest[start + 5..];
        let Some(end) = after.find('}') else {
            break;
        };
        let name = &after[..end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        {
            out.push_str(&rest[..start + 5]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..start]);
        out.push_str(vars.get(name).map(String::as_str).unwrap_or(UNSPECIFIED));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Enters the workflow `call` of the due step `movement` (named by the call stack).
pub(crate) async fn enter(
    run: &RunCtx,
    state: &RunState,
    movement: &Movement,
    call: &WorkflowCall,
) -> Result<(), EngineError> {
    let prefix = movement.name.as_str();
    let mut vars = state
        .calls
        .last()
        .map(|f| f.vars.clone())
        .unwrap_or_default();
    vars.extend(call.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
    let stack = state
        .calls
        .iter()
        .map(|f| f.movement.clone())
        .chain([movement.name.clone()])
        .collect();
    run.emit(RunEvent::WorkflowCallStarted {
        movement: movement.name.clone(),
        workflow: call.callee.name.clone(),
        initial_step: under(prefix, &call.callee.initial_movement),
        invocation: state.calls_entered + 1,
        stack,
        loop_monitors: call
            .callee
            .loop_monitors
            .iter()
            .map(|m| m.cycle.iter().map(|c| under(prefix, c)).collect())
            .collect(),
        vars,
    })
    .await
}

/// How the workflow that just ended hands its end on. Outside any call `finish` ends the run.
/// Inside one, a completed or aborted workflow returns `COMPLETE`, its `return:` label or
/// `ABORT` to the calling step, whose rules route it (`Ok(None)`: the caller goes on); a run
/// that stopped for another reason (`max_steps`, a question, a failure) stops as it is. When
/// the caller's rule aborts on the `ABORT` of a callee the engine cut (`context_exhausted`,
/// `max_iterations`, …), the run ends with the callee's reason rather than `abort_rule`.
pub(crate) async fn returned(
    run: &RunCtx,
    mut finish: Finish,
) -> Result<Option<Finish>, EngineError> {
    loop {
        let state = run.journal.state();
        let Some(frame) = state.calls.last() else {
            return Ok(Some(finish));
        };
        let result = match finish.status {
            // The ending step's `movement_finished` recorded its target: `COMPLETE` or the
            // `return:` label.
            RunStatus::Completed => state
                .next
                .clone()
                .unwrap_or_else(|| Target::Complete.label().to_owned()),
            RunStatus::Aborted => Target::Abort.label().to_owned(),
            _ => return Ok(Some(finish)),
        };
        let response = state.previous_response.clone().unwrap_or_default();
        // A callee the engine cut (its context, its iterations, …) hands its reason on: the
        // caller's `ABORT` rule only passes that end along.
        let cut = match (&finish.status, &finish.reason) {
            (RunStatus::Aborted, Some(reason)) if engine_cut(reason) => Some(reason.clone()),
            _ => None,
        };
        run.emit(RunEvent::WorkflowCallReturned {
            movement: frame.movement.clone(),
            workflow: frame.workflow.clone(),
            result: result.clone(),
        })
        .await?;
        let state = run.journal.state();
        let caller = current(&run.piece, &state)?;
        let Some(step) = caller.movements.iter().find(|m| m.name == frame.movement) else {
            return Err(UnrunnablePiece::UnknownMovement {
                movement: frame.movement.clone(),
                piece: caller.name.clone(),
            }
            .into());
        };
        let rule = step
            .rules
            .iter()
            .enumerate()
            .find_map(|(i, r)| match &r.condition {
                Condition::Text(label) if *label == result => r.next.clone().map(|t| (i + 1, t)),
                _ => None,
            });
        let (index, target) = match rule {
            Some((index, target)) => (Some(index), target),
            None => (None, Target::Abort),
        };
        run.emit(RunEvent::MovementFinished {
            transcript: None,
            movement: step.name.clone(),
            next: target.label().to_owned(),
            via: if index.is_some() {
                OutcomeSource::Returned
            } else {
                OutcomeSource::Engine
            },
            parent: None,
            rule: index,
            response: response.clone(),
            summary: None,
            lessons: Vec::new(),
            edge_prompt: None,
            reason: index.is_none().then_some(EndReason::NoRuleMatched),
        })
        .await?;
        finish = match target {
            Target::Movement(_) => return Ok(None),
            Target::Complete | Target::Return(_) => Finish {
                status: RunStatus::Completed,
                result: response,
                reason: None,
            },
            Target::Abort => Finish {
                status: RunStatus::Aborted,
                result: response,
                reason: Some(match (index, cut) {
                    (Some(_), Some(cut)) => cut,
                    (Some(_), None) => EndReason::AbortRule,
                    (None, _) => EndReason::NoRuleMatched,
                }),
            },
            Target::Ask => Finish {
                status: RunStatus::NeedsUserInput,
                result: response,
                reason: Some(EndReason::Ask),
            },
            Target::WaitSubtasks => Finish {
                status: RunStatus::WaitingSubtasks,
                result: response,
                reason: None,
            },
        };
    }
}

/// Whether a workflow that ended with `reason` was ended by the engine rather than by its
/// model's outcome (an `ABORT` rule or the `complete` tool).
fn engine_cut(reason: &EndReason) -> bool {
    !matches!(reason, EndReason::AbortRule | EndReason::CompleteTool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vars_render_their_value_or_unspecified_and_leave_other_braces() {
        let vars = BTreeMap::from([("review_mode".to_owned(), "follow_up".to_owned())]);
        assert_eq!(
            render_vars(
                "mode {var:review_mode}, tier {var:tier}, {task}, {var:} {var:a b}",
                &vars
            ),
            "mode follow_up, tier unspecified, {task}, {var:} {var:a b}"
        );
    }
}
