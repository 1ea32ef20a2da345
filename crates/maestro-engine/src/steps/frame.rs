//! Workflow calls in the run state: while a called workflow runs, the caller's own place
//! (its current step, revisit count, history and loop-monitor counts) is kept in a
//! [`CallFrame`], and the state's fields describe the called workflow. A leaf below the
//! state: it knows the state's fields and the events, nothing of the runner.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::state::RunState;

/// A workflow call in progress.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CallFrame {
    /// The calling step, named by the call stack (`develop`, `develop/implement`).
    pub movement: String,
    /// The called workflow's name.
    pub workflow: String,
    /// The `vars` the called workflow sees.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// The caller's step running when the call began (the calling step itself).
    pub current: Option<String>,
    /// The caller's count of visits in a row.
    pub consecutive: u32,
    /// The caller's finished steps.
    pub history: Vec<String>,
    /// The caller's loop monitors' counts.
    pub cycle_counts: BTreeMap<usize, u32>,
    /// The caller's loop monitors' cycles.
    pub monitors: Vec<Vec<String>>,
}

/// `workflow_call_started`: the calling step counts as a visit of the caller (no iteration),
/// the caller's place is kept, and the called workflow starts afresh at its first step.
pub(crate) fn enter(
    state: &mut RunState,
    movement: &str,
    workflow: &str,
    initial_step: &str,
    loop_monitors: &[Vec<String>],
    vars: &BTreeMap<String, String>,
) {
    *state.visits.entry(movement.to_owned()).or_default() += 1;
    state.calls_entered += 1;
    state.answered = false;
    state.resume_message = None;
    if state.current.as_deref() == Some(movement) {
        state.consecutive += 1;
    } else {
        state.consecutive = 1;
    }
    state.calls.push(CallFrame {
        movement: movement.to_owned(),
        workflow: workflow.to_owned(),
        vars: vars.clone(),
        current: Some(movement.to_owned()),
        consecutive: state.consecutive,
        history: std::mem::take(&mut state.history),
        cycle_counts: std::mem::take(&mut state.cycle_counts),
        monitors: std::mem::replace(&mut state.monitors, loop_monitors.to_vec()),
    });
    state.current = None;
    state.consecutive = 0;
    state.next = Some(initial_step.to_owned());
}

/// `workflow_call_returned`: the caller's place comes back; the calling step's
/// `movement_finished` that follows says where the caller goes.
pub(crate) fn leave(state: &mut RunState) {
    let Some(frame) = state.calls.pop() else {
        return;
    };
    state.current = frame.current;
    state.consecutive = frame.consecutive;
    state.history = frame.history;
    state.cycle_counts = frame.cycle_counts;
    state.monitors = frame.monitors;
    state.next = None;
}
