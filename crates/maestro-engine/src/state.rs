//! The run state: one serialisable value, changed only by applying [`RunEvent`]s.
//!
//! [`RunState::apply`] is pure, so replaying `events.jsonl` rebuilds the state exactly; that is
//! what a later resume (or a replay with zero model calls) stands on.

use std::collections::BTreeMap;

use maestro_piece::Dialect;
use maestro_protocol::{RunStatus, Usage};
use maestro_tools::RunScratch;
use serde::{Deserialize, Serialize};

use crate::end_reason::EndReason;
use crate::event::{EventRecord, RunEvent};
use crate::steps::WorkflowState;
use crate::steps::frame::{self, CallFrame};
use crate::subtasks::{self, SPAWN_SUBTASK, SpawnedSubtask};

/// Where a run stands.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum RunPhase {
    /// No `run_started` yet.
    #[default]
    NotStarted,
    /// Started (or resumed, or answered) and not finished.
    Running,
    /// `run_finished` was recorded (a parked `waiting_subtasks` run included).
    Finished {
        /// How the run ended.
        status: RunStatus,
        /// The run's result for the user.
        result: String,
        /// Why it ended so, when it did not simply complete.
        reason: Option<EndReason>,
    },
}

/// The piece a run belongs to; a resume checks the hash to tell the piece changed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PieceIdentity {
    /// The piece's name.
    pub name: String,
    /// Hex SHA-256 of the piece's source text.
    pub hash: String,
    /// The piece's dialect; `None` before `run_started`.
    pub dialect: Option<Dialect>,
}

/// Everything a run knows between two side effects.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunState {
    /// The run's id, as `run_started` gave it.
    pub run_id: String,
    /// The piece the run belongs to.
    pub piece: PieceIdentity,
    /// The task the run was given.
    pub task: String,
    /// Where the run stands: not started, running, or finished.
    pub phase: RunPhase,
    /// The piece's `max_movements`: top-level movements the run may start.
    pub max_movements: u32,
    /// The top-level movement running, or the last one that ran.
    pub current: Option<String>,
    /// The top-level movement due next (the initial one before anything ran).
    pub next: Option<String>,
    /// Top-level movements started.
    pub iteration: u32,
    /// Visits per movement (sub-movements included).
    pub visits: BTreeMap<String, u32>,
    /// How many times in a row the current top-level movement has been entered.
    pub consecutive: u32,
    /// Top-level movements finished, in order (loop monitors look at its tail).
    pub history: Vec<String>,
    /// Completed cycles per loop monitor, by monitor index.
    pub cycle_counts: BTreeMap<usize, u32>,
    /// Lessons the top-level movements gave `transition`, oldest first; carried into every
    /// later prompt.
    pub lessons: Vec<String>,
    /// The last top-level movement's answer: the next one's `{previous_response}`.
    pub previous_response: Option<String>,
    /// Feedback carried to the next movement (`transition.summary`).
    pub feedback: Option<String>,
    /// Graph: the edge prompt for the next role.
    pub edge_prompt: Option<String>,
    /// Tokens used by every model call of the run so far, added up.
    pub usage: Usage,
    /// Report name → path, as written.
    pub reports: BTreeMap<String, String>,
    /// The tools' state for the run (the checklist), as the last change left it.
    pub scratch: RunScratch,
    /// Every answer people gave to the run's questions, oldest first (`{user_inputs}`).
    pub user_inputs: Vec<String>,
    /// The due movement was answered (`user_input`): it goes on in its conversation, and the
    /// loop checks do not count it as a revisit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answered: bool,
    /// What the answered movement's conversation goes on with: the answer, or how its
    /// subtasks ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_message: Option<String>,
    /// The subtasks the run spawned, in the order their spawns were recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subtasks: Vec<SpawnedSubtask>,
    /// The ids of the subtasks whose ends the run was told (`subtasks_ended`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subtasks_reported: Vec<String>,
    /// The run directory, as `run_started` recorded it.
    pub run_dir: String,
    /// The root the tools work in, as `run_started` recorded it.
    pub workspace: String,
    /// The cycle of each loop monitor of the piece (of the called workflow, inside a call).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub monitors: Vec<Vec<String>>,
    /// TAKT workflow calls in progress, outermost first. Inside a call, `next`, `current`,
    /// `consecutive`, `history` and the loop-monitor counts are the called workflow's; each
    /// frame keeps its caller's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallFrame>,
    /// TAKT workflow calls entered so far in the run.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_entered: u32,
    /// The pool sub-steps each dynamic parallel step ran on its last round, by step
    /// (`selection_made`); a `cumulative` selection keeps them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub selections: BTreeMap<String, Vec<String>>,
    /// TAKT workflows: system-step inputs, effect results and structured outputs.
    #[serde(default, skip_serializing_if = "WorkflowState::is_empty")]
    pub workflow: WorkflowState,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl RunState {
    /// Rebuilds a state from recorded events.
    pub fn replay<'a>(records: impl IntoIterator<Item = &'a EventRecord>) -> Self {
        let mut state = RunState::default();
        for record in records {
            state.apply(&record.event);
        }
        state
    }

    /// True once `run_finished` was recorded (and no answer or resume reopened the run).
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, RunPhase::Finished { .. })
    }

    /// Visits of `movement` so far.
    pub fn visits_of(&self, movement: &str) -> u32 {
        self.visits.get(movement).copied().unwrap_or(0)
    }

    /// The ids of the subtasks spawned and not reported yet: what `WAIT_SUBTASKS` waits for.
    pub fn pending_subtasks(&self) -> Vec<String> {
        self.subtasks
            .iter()
            .map(|s| s.id.clone())
            .filter(|id| !self.subtasks_reported.contains(id))
            .collect()
    }

    /// Completed cycles of loop monitor `index`.
    pub fn cycle_count(&self, index: usize) -> u32 {
        self.cycle_counts.get(&index).copied().unwrap_or(0)
    }

    /// Applies one event. Pure: the same events always give the same state.
    pub fn apply(&mut self, event: &RunEvent) {
        match event {
            RunEvent::RunStarted {
                run_id,
                piece,
                dialect,
                piece_hash,
                task,
                max_movements,
                initial_movement,
                run_dir,
                workspace,
                loop_monitors,
                ..
            } => {
                self.monitors = loop_monitors.clone();
                self.run_id = run_id.clone();
                self.piece = PieceIdentity {
                    name: piece.clone(),
                    hash: piece_hash.clone(),
                    dialect: Some(*dialect),
                };
                self.task = task.clone();
                self.max_movements = *max_movements;
                self.next = Some(initial_movement.clone());
                self.run_dir = run_dir.clone();
                self.workspace = workspace.clone();
                self.phase = RunPhase::Running;
            }
            RunEvent::MovementStarted {
                movement,
                iteration,
                parent,
                ..
            } => {
                *self.visits.entry(movement.clone()).or_default() += 1;
                if parent.is_none() {
                    self.answered = false;
                    self.resume_message = None;
                    self.iteration = *iteration;
                    if self.current.as_deref() == Some(movement.as_str()) {
                        self.consecutive += 1;
                    } else {
                        self.consecutive = 1;
                    }
                    self.current = Some(movement.clone());
                    self.next = None;
                }
            }
            RunEvent::LlmResponse { usage, .. } => self.usage.add(usage),
            RunEvent::ReportWritten { name, path, .. } => {
                self.reports.insert(name.clone(), path.clone());
            }
            RunEvent::ScratchUpdated { scratch, .. } => self.scratch = scratch.clone(),
            RunEvent::MovementFinished {
                movement,
                next,
                parent,
                response,
                summary,
                lessons,
                edge_prompt,
                ..
            } => {
                if parent.is_some() {
                    return;
                }
                self.history.push(movement.clone());
                self.count_cycles(movement);
                self.previous_response = Some(response.clone());
                self.feedback = summary.clone();
                self.lessons.extend(lessons.iter().cloned());
                self.edge_prompt = edge_prompt.clone();
                self.next = Some(next.clone());
            }
            RunEvent::SelectionMade {
                movement,
                target: crate::event::SelectionTarget::Participants,
                effective,
                ..
            } => {
                self.selections.insert(movement.clone(), effective.clone());
            }
            RunEvent::LoopMonitorTriggered { monitor, .. } => {
                self.cycle_counts.insert(*monitor, 0);
            }
            RunEvent::RunFinished {
                status,
                result,
                reason,
            } => {
                self.phase = RunPhase::Finished {
                    status: *status,
                    result: result.clone(),
                    reason: reason.clone(),
                };
                self.next = None;
            }
            RunEvent::RunResumed { .. } => self.phase = RunPhase::Running,
            RunEvent::SystemInputs { .. }
            | RunEvent::EffectResult { .. }
            | RunEvent::StructuredOutput { .. } => self.workflow.apply(event),
            RunEvent::UserInput { movement, text } => {
                self.user_inputs.push(text.clone());
                self.next = Some(movement.clone());
                self.answered = true;
                self.resume_message = Some(text.clone());
                self.phase = RunPhase::Running;
            }
            RunEvent::SubtasksEnded { movement, children } => {
                self.subtasks_reported
                    .extend(children.iter().map(|c| c.id.clone()));
                self.next = Some(movement.clone());
                self.answered = true;
                self.resume_message = Some(subtasks::ended_message(children));
                self.phase = RunPhase::Running;
            }
            RunEvent::ToolResult {
                tool,
                ok: true,
                output: Some(output),
                ..
            } if tool == SPAWN_SUBTASK => {
                if let Ok(spawned) = serde_json::from_str::<SpawnedSubtask>(output)
                    && !self.subtasks.iter().any(|s| s.id == spawned.id)
                {
                    self.subtasks.push(spawned);
                }
            }
            RunEvent::WorkflowCallStarted {
                movement,
                workflow,
                initial_step,
                loop_monitors,
                vars,
                ..
            } => frame::enter(self, movement, workflow, initial_step, loop_monitors, vars),
            RunEvent::WorkflowCallReturned { .. } => frame::leave(self),
            RunEvent::LlmRequest { .. }
            | RunEvent::TeamLeaderPlanned { .. }
            | RunEvent::ArpeggioBatchFailed { .. }
            | RunEvent::LlmRetry { .. }
            | RunEvent::ToolCall { .. }
            | RunEvent::ToolResult { .. }
            | RunEvent::JudgeRequest { .. }
            | RunEvent::ContextWarning { .. }
            | RunEvent::Reminder { .. }
            | RunEvent::LoopWarning { .. }
            | RunEvent::ToolModeChanged { .. }
            | RunEvent::CycleWarning { .. }
            | RunEvent::LoopDetected { .. }
            | RunEvent::QualityGateChecked { .. }
            | RunEvent::SelectionMade { .. }
            | RunEvent::Warning { .. } => {}
        }
    }

    /// A monitor counts one cycle each time the history ends with its whole cycle; a movement
    /// outside the cycle restarts the count.
    fn count_cycles(&mut self, finished: &str) {
        for (index, cycle) in self.monitors.iter().enumerate() {
            if !cycle.iter().any(|m| m == finished) {
                self.cycle_counts.insert(index, 0);
            } else if self.history.ends_with(cycle) {
                *self.cycle_counts.entry(index).or_default() += 1;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::event::OutcomeSource;
    use pretty_assertions::assert_eq;

    fn started(m: &str, iteration: u32) -> RunEvent {
        RunEvent::MovementStarted {
            movement: m.into(),
            iteration,
            movement_iteration: 1,
            parent: None,
            prompt_log: None,
        }
    }

    fn finished(m: &str, next: &str) -> RunEvent {
        RunEvent::MovementFinished {
            movement: m.into(),
            next: next.into(),
            via: OutcomeSource::Tag,
            parent: None,
            rule: Some(1),
            response: format!("{m} done"),
            summary: None,
            lessons: vec![format!("lesson from {m}")],
            edge_prompt: None,
            reason: None,
            transcript: None,
        }
    }

    #[test]
    fn cycles_count_whole_passes_and_reset_outside_the_cycle() {
        let mut state = RunState {
            monitors: vec![vec!["review".into(), "fix".into()]],
            ..RunState::default()
        };
        let mut i = 0;
        for (m, next) in [
            ("plan", "review"),
            ("review", "fix"),
            ("fix", "review"),
            ("review", "fix"),
            ("fix", "review"),
        ] {
            i += 1;
            state.apply(&started(m, i));
            state.apply(&finished(m, next));
        }
        assert_eq!(state.cycle_count(0), 2);
        assert_eq!(state.lessons.len(), 5);
        assert_eq!(state.previous_response.as_deref(), Some("fix done"));
        assert_eq!(state.next.as_deref(), Some("review"));
        state.apply(&started("other", 6));
        state.apply(&finished("other", "review"));
        assert_eq!(state.cycle_count(0), 0);
    }

    #[test]
    fn consecutive_visits_count_only_repeats_in_a_row() {
        let mut state = RunState::default();
        for (i, m) in ["a", "a", "b", "b", "b"].iter().enumerate() {
            state.apply(&started(m, i as u32 + 1));
        }
        assert_eq!(
            (state.consecutive, state.visits_of("b"), state.iteration),
            (3, 3, 5)
        );
    }
}
