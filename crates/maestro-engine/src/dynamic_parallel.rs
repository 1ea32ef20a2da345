//! TAKT dynamic parallel steps (`parallel: {fixed, pool, selection}`): each visit, the selector
//! picks pool items, the choice is recorded (`selection_made`), and the fixed items with the
//! selected pool items (in file order) run concurrently as the sub-movements of a parallel
//! movement; the parent's rules aggregate only those (`all(…)`, `any(…)`, first match wins).
//!
//! `selection.mode: replace` (the default) runs the new selection alone on a new round;
//! `cumulative` keeps every pool item an earlier round selected. The previous round's items come
//! from the recorded events (the run state), so a resumed run sees what the first one saw.

use std::sync::Arc;

use maestro_piece::{Movement, Participants, SelectionMode};
use maestro_protocol::RunStatus;

use crate::ctx::RunCtx;
use crate::end_reason::EndReason;
use crate::error::EngineError;
use crate::event::{OutcomeSource, RunEvent, SelectionTarget};
use crate::movement::{Ended, Step};
use crate::selector::{self, Candidate, Question};
use crate::state::RunState;

/// The participants of a dynamic parallel parent, if it is one.
pub(crate) fn participants(movement: &Movement) -> Option<&Participants> {
    movement.dynamic.as_ref()?.participants.as_ref()
}

/// One visit of a dynamic parallel parent.
pub(crate) async fn run(
    run: &Arc<RunCtx>,
    piece: &Arc<maestro_piece::Piece>,
    parent: &Movement,
    participants: &Participants,
) -> Result<Ended, EngineError> {
    crate::runner::start_parallel(run, parent)?;
    let state = run.journal.state();
    let round = state.visits_of(&parent.name);
    let fixed_count = participants.fixed.min(parent.parallel.len());
    let (fixed, pool) = parent.parallel.split_at(fixed_count);
    let previous: Vec<String> = state
        .selections
        .get(&parent.name)
        .cloned()
        .unwrap_or_default();
    let question = Question {
        step: &parent.name,
        what: "pool sub-steps that run beside the fixed ones this round",
        round,
        context: context(run, &state, parent, participants, fixed, &previous),
        candidates: pool
            .iter()
            .enumerate()
            .map(|(i, sub)| Candidate {
                id: &sub.name,
                description: participants
                    .descriptions
                    .get(i)
                    .map(String::as_str)
                    .unwrap_or_default(),
            })
            .collect(),
        max_selected: None,
        guidance: participants.selector.as_ref(),
    };
    let choice = match selector::select(run, &question).await? {
        Ok(choice) => choice,
        Err(problem) => {
            return fail(
                run,
                parent,
                format!(
                    "step `{}`: the participant selector gave no valid selection, so no sub-step ran: {problem}",
                    parent.name
                ),
            )
            .await;
        }
    };
    let keep_previous = participants.mode == SelectionMode::Cumulative;
    let effective: Vec<&Movement> = pool
        .iter()
        .filter(|sub| {
            choice.selected.contains(&sub.name) || (keep_previous && previous.contains(&sub.name))
        })
        .collect();
    run.emit(RunEvent::SelectionMade {
        movement: parent.name.clone(),
        target: SelectionTarget::Participants,
        round,
        selected: choice.selected.clone(),
        effective: effective.iter().map(|m| m.name.clone()).collect(),
        rationale: choice.rationale,
    })
    .await?;
    let chosen: Vec<Movement> = fixed
        .iter()
        .chain(effective.iter().copied())
        .cloned()
        .collect();
    if chosen.is_empty() {
        return fail(
            run,
            parent,
            format!(
                "step `{}` has no fixed sub-steps and the selector chose none of the pool, so nothing can run",
                parent.name
            ),
        )
        .await;
    }
    crate::runner::run_subs(run, piece, parent, &chosen).await
}

/// The parent ends the run `failed` with `problem`, before any sub-step started.
async fn fail(run: &RunCtx, parent: &Movement, problem: String) -> Result<Ended, EngineError> {
    let ended = selector_failed(problem);
    crate::runner::finish_parallel(run, parent, &ended).await?;
    Ok(ended)
}

/// A step that cannot start because its selector gave no valid selection: the run fails.
pub(crate) fn selector_failed(problem: String) -> Ended {
    Ended {
        response: String::new(),
        via: OutcomeSource::Engine,
        rule: None,
        step: Step::Finish {
            status: RunStatus::Failed,
            result: Some(problem.clone()),
            reason: Some(EndReason::SelectorFailed(problem)),
        },
        summary: None,
        lessons: Vec::new(),
        edge_prompt: None,
        reason: None,
    }
}

fn context(
    run: &RunCtx,
    state: &RunState,
    parent: &Movement,
    participants: &Participants,
    fixed: &[Movement],
    previous: &[String],
) -> String {
    let mut text = format!("## Task\n{}\n", state.task);
    if let Some(answer) = state.previous_response.as_deref().filter(|a| !a.is_empty()) {
        let kept: String = answer
            .chars()
            .rev()
            .take(run.config.max_carried_chars)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        text.push_str(&format!("\n## The previous step's answer\n{kept}\n"));
    }
    let names: Vec<&str> = fixed.iter().map(|m| m.name.as_str()).collect();
    text.push_str(&format!(
        "\n## Fixed sub-steps (they always run)\n{}\n",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    ));
    if participants.mode == SelectionMode::Cumulative {
        text.push_str(&format!(
            "\n## Selection mode: cumulative\nPool sub-steps selected in earlier rounds keep running: {}. Choose what must be added.\n",
            if previous.is_empty() {
                "none".to_string()
            } else {
                previous.join(", ")
            }
        ));
    }
    let mut targets: Vec<String> = parent
        .parallel
        .iter()
        .flat_map(|m| m.output_contracts.iter().map(|c| c.name.clone()))
        .collect();
    targets.extend(participants.reports.iter().cloned());
    text.push_str(&reports_context(run, state, &targets));
    text
}

/// The report directory and its reports, for a selector's context.
pub(crate) fn reports_context(run: &RunCtx, state: &RunState, targets: &[String]) -> String {
    let written: Vec<&str> = state.reports.keys().map(String::as_str).collect();
    let mut text = format!(
        "\n## Report Directory\n{}\nReports written so far: {}\n",
        run.record.reports_dir().display(),
        if written.is_empty() {
            "none".to_string()
        } else {
            written.join(", ")
        }
    );
    if !targets.is_empty() {
        text.push_str(&format!(
            "Reports this step writes: {}\n",
            targets.join(", ")
        ));
    }
    text
}
