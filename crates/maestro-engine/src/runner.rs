//! The piece runner: the state machine that takes the due movement from the run state, checks
//! the limits (`max_movements`, consecutive revisits, loop monitors), runs the movement (or its
//! parallel sub-movements, concurrently, aggregating their results) and records where it leads.
//!
//! Every decision is taken from the [`crate::RunState`] the journal holds, so a run resumed from
//! its events would continue exactly here.

use std::sync::Arc;

use maestro_llm::Message;
use maestro_piece::{Dialect, Movement, Piece, SessionMode, StepKind, Target};
use maestro_protocol::RunStatus;
use tokio::task::JoinSet;

use crate::ctx::RunCtx;
use crate::cycle::repeating_cycle;
use crate::end_reason::EndReason;
use crate::error::{EngineError, InternalError, UnrunnablePiece};
use crate::event::RunEvent;
use crate::gates;
use crate::movement::{self, Ended, Step};
use crate::prompt::{self, Visit};
use crate::scope;
use crate::state::RunState;
use crate::steps::workflow_call;

/// How the run ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finish {
    pub status: RunStatus,
    pub result: String,
    pub reason: Option<EndReason>,
}

/// Refuses a movement the engine cannot run yet: a TAKT workflow step kind other than an
/// agent, a dynamic parallel step or a system step (in the movement or one of its parallel
/// sub-movements).
fn unsupported(due: &Movement) -> Result<(), UnrunnablePiece> {
    for m in std::iter::once(due).chain(&due.parallel) {
        // A top-level workflow_call runs (`steps::workflow_call`), and so do system steps and
        // the kinds `steps::run` runs; none of them runs as a parallel sub-movement yet.
        let runs = m.kind.is_agent()
            || crate::dynamic_parallel::participants(m).is_some()
            || (std::ptr::eq(m, due)
                && (matches!(m.kind, StepKind::WorkflowCall(_) | StepKind::System(_))
                    || crate::steps::runs(&m.kind)));
        if !runs {
            return Err(UnrunnablePiece::UnsupportedStep {
                movement: m.name.clone(),
                kind: m.kind.name(),
            });
        }
    }
    Ok(())
}

/// Runs movements until the run reaches a terminal status; a called workflow's end goes
/// back to its caller (`steps::workflow_call`).
pub(crate) async fn drive(run: &Arc<RunCtx>) -> Result<Finish, EngineError> {
    loop {
        let finish = drive_workflow(run).await?;
        if let Some(finish) = workflow_call::returned(run, finish).await? {
            return Ok(finish);
        }
    }
}

/// Runs the movements of the workflow the run is in until it ends.
async fn drive_workflow(run: &Arc<RunCtx>) -> Result<Finish, EngineError> {
    loop {
        let state = run.journal.state();
        let piece = workflow_call::current(&run.piece, &state)?;
        let Some(next) = state.next.clone() else {
            return Err(InternalError::NoMovementDue.into());
        };
        let last_answer = state.previous_response.clone().unwrap_or_default();
        if state.iteration >= run.piece.max_movements {
            run.emit(RunEvent::Warning {
                movement: None,
                message: format!(
                    "max_movements ({}) reached while `{next}` was due",
                    run.piece.max_movements
                ),
            })
            .await?;
            return Ok(Finish {
                status: RunStatus::Exceeded,
                result: last_answer,
                reason: Some(EndReason::MaxMovements),
            });
        }
        let Some(due) = piece.movements.iter().find(|m| m.name == next) else {
            return Err(UnrunnablePiece::UnknownMovement {
                movement: next,
                piece: piece.name.clone(),
            }
            .into());
        };
        unsupported(due)?;
        // A movement going on after its question was answered is not a revisit.
        let due_checks = if state.answered {
            None
        } else {
            Some(due_monitor(&piece, &state, &next))
        };
        let (movement, cycle_count, loop_warning) = match due_checks {
            None => (due, 0, None),
            Some(monitor) => match monitor {
                Some(index) => {
                    let monitor = &piece.loop_monitors[index];
                    let count = state.cycle_count(index);
                    run.emit(RunEvent::LoopMonitorTriggered {
                        monitor: index,
                        cycle_count: count,
                        judge: monitor.judge.name.clone(),
                    })
                    .await?;
                    (&monitor.judge, count, None)
                }
                None => {
                    let consecutive = if state.current.as_deref() == Some(next.as_str()) {
                        state.consecutive + 1
                    } else {
                        1
                    };
                    let threshold = due
                        .max_consecutive_revisits
                        .unwrap_or(run.config.default_max_consecutive_revisits);
                    if consecutive > threshold {
                        run.emit(RunEvent::Warning {
                        movement: Some(next.clone()),
                        message: format!("`{next}` was due for the {consecutive}th time in a row (limit {threshold})"),
                    }).await?;
                        run.emit(RunEvent::LoopDetected {
                            cycle: vec![next.clone()],
                            rounds: consecutive,
                            threshold,
                        })
                        .await?;
                        return Ok(Finish {
                            status: RunStatus::Aborted,
                            result: last_answer,
                            reason: Some(EndReason::LoopDetected),
                        });
                    }
                    let mut warning = (consecutive >= 2)
                        .then(|| prompt::loop_warning(&next, consecutive, threshold));
                    if warning.is_some() {
                        run.emit(RunEvent::LoopWarning {
                            movement: next.clone(),
                            consecutive,
                            threshold,
                        })
                        .await?;
                    }
                    match check_cycle(run, &state, &next).await? {
                        CycleCheck::Clear => {}
                        CycleCheck::Warn(text) => warning = Some(text),
                        CycleCheck::Abort => {
                            return Ok(Finish {
                                status: RunStatus::Aborted,
                                result: last_answer,
                                reason: Some(EndReason::LoopDetected),
                            });
                        }
                    }
                    (due, 0, warning)
                }
            },
        };
        // The step kinds a run visits less often are boxed: a future awaited inline is stored
        // inside its caller's, so every run's task would otherwise keep room for them all.
        let ended = if let StepKind::WorkflowCall(call) = &movement.kind {
            Box::pin(workflow_call::enter(run, &state, movement, call)).await?;
            continue;
        } else if let StepKind::System(definition) = &movement.kind {
            let ended = Box::pin(crate::steps::system::visit(run, movement, definition)).await?;
            record_finished(run, movement, None, &ended, None).await?;
            ended
        } else if let Some(ended) = crate::steps::run(run, movement).await? {
            ended
        } else if let Some(participants) = crate::dynamic_parallel::participants(movement) {
            Box::pin(crate::dynamic_parallel::run(
                run,
                &piece,
                movement,
                participants,
            ))
            .await?
        } else if movement.is_parallel() {
            Box::pin(run_parallel(run, &piece, movement)).await?
        } else {
            run_visit(run, &piece, movement, None, cycle_count, loop_warning).await?
        };
        if let Some(finish) = finish_of(&ended) {
            // A question that has its answer: the movement goes on in its conversation.
            if finish.status == RunStatus::NeedsUserInput
                && !movement.is_parallel()
                && let Some(text) = run.next_answer(&movement.name)
            {
                run.emit(RunEvent::UserInput {
                    movement: movement.name.clone(),
                    text,
                })
                .await?;
                continue;
            }
            // Subtasks that ended: the movement goes on in its conversation, told how.
            if finish.status == RunStatus::WaitingSubtasks
                && let Some(children) = run.subtasks_ended(&movement.name).await?
            {
                run.emit(RunEvent::SubtasksEnded {
                    movement: movement.name.clone(),
                    children,
                })
                .await?;
                continue;
            }
            return Ok(finish);
        }
    }
}

/// What the maestro dialect's cycle detection says about running `next`.
enum CycleCheck {
    Clear,
    /// Run it, with this warning in its prompt.
    Warn(String),
    /// End the run as `loop_detected` (recorded).
    Abort,
}

/// Maestro pieces have no loop monitors of their own: a cycle of movements the run keeps going
/// round is warned about in the last two rounds before the limit, and ends the run past it.
/// The limit is `max_cycle_rounds`, or the highest `max_consecutive_revisits` a movement of the
/// cycle sets, so a piece that allows a movement many visits allows its review loop as many.
/// Cycles a loop monitor watches are left to it.
async fn check_cycle(
    run: &RunCtx,
    state: &RunState,
    next: &str,
) -> Result<CycleCheck, EngineError> {
    if run.piece.dialect != Dialect::Maestro {
        return Ok(CycleCheck::Clear);
    }
    let Some(cycle) = repeating_cycle(&state.history, next, run.piece.movements.len()) else {
        return Ok(CycleCheck::Clear);
    };
    let watched = run.piece.loop_monitors.iter().any(|m| {
        m.cycle.len() == cycle.movements.len()
            && cycle.movements.iter().all(|c| m.cycle.contains(c))
    });
    if watched {
        return Ok(CycleCheck::Clear);
    }
    let threshold = run
        .piece
        .movements
        .iter()
        .filter(|m| cycle.movements.contains(&m.name))
        .filter_map(|m| m.max_consecutive_revisits)
        .fold(run.config.max_cycle_rounds, u32::max);
    if cycle.rounds > threshold {
        run.emit(RunEvent::LoopDetected {
            cycle: cycle.movements.clone(),
            rounds: cycle.rounds,
            threshold,
        })
        .await?;
        return Ok(CycleCheck::Abort);
    }
    if cycle.rounds + 1 < threshold {
        return Ok(CycleCheck::Clear);
    }
    run.emit(RunEvent::CycleWarning {
        movement: next.to_string(),
        cycle: cycle.movements.clone(),
        rounds: cycle.rounds,
        threshold,
    })
    .await?;
    Ok(CycleCheck::Warn(prompt::cycle_warning(
        &cycle.label(),
        cycle.rounds,
        threshold,
    )))
}

/// The loop monitor due before `next` runs: `next` belongs to its cycle and the cycle has
/// completed `threshold` times.
fn due_monitor(piece: &Piece, state: &RunState, next: &str) -> Option<usize> {
    piece
        .loop_monitors
        .iter()
        .enumerate()
        .find(|(i, m)| m.cycle.iter().any(|c| c == next) && state.cycle_count(*i) >= m.threshold)
        .map(|(i, _)| i)
}

/// The run's end, when the movement's step ends it.
fn finish_of(ended: &Ended) -> Option<Finish> {
    let finish = |status, reason: Option<EndReason>| Finish {
        status,
        result: ended.response.clone(),
        reason,
    };
    match &ended.step {
        Step::Go(Target::Movement(_)) | Step::Matched(_) => None,
        // A `return:` label ends a called workflow; its caller routes on the label, which the
        // movement's `movement_finished` records (`steps::workflow_call::returned`).
        Step::Go(Target::Complete | Target::Return(_)) => Some(finish(RunStatus::Completed, None)),
        Step::Go(Target::Abort) => Some(finish(RunStatus::Aborted, Some(EndReason::AbortRule))),
        Step::Go(Target::Ask) => Some(finish(RunStatus::NeedsUserInput, Some(EndReason::Ask))),
        Step::Go(Target::WaitSubtasks) => Some(finish(RunStatus::WaitingSubtasks, None)),
        Step::Finish {
            status,
            result,
            reason,
        } => Some(Finish {
            status: *status,
            result: result.clone().unwrap_or_else(|| ended.response.clone()),
            reason: reason.clone(),
        }),
    }
}

/// The label recorded as `movement_finished.next`.
fn next_label(step: &Step) -> String {
    match step {
        Step::Go(target) => target.label().to_string(),
        Step::Matched(condition) => condition.clone(),
        Step::Finish { status, .. } => match status {
            RunStatus::Completed => Target::Complete.label().into(),
            RunStatus::NeedsUserInput => Target::Ask.label().into(),
            RunStatus::Aborted | RunStatus::Exceeded => Target::Abort.label().into(),
            RunStatus::Failed => "FAIL".into(),
            RunStatus::WaitingSubtasks => Target::WaitSubtasks.label().into(),
        },
    }
}

/// One visit of a non-parallel movement (top-level, or a sub-movement of `parent`).
async fn run_visit(
    run: &RunCtx,
    piece: &Piece,
    movement: &Movement,
    parent: Option<&str>,
    cycle_count: u32,
    loop_warning: Option<String>,
) -> Result<Ended, EngineError> {
    // `dynamic_facets`: the selector chooses before the visit starts. Its future is the
    // largest a visit awaits and few movements have one: boxed, it takes no room in every
    // run's task.
    let composed = if crate::dynamic_facets::pool(movement).is_some() {
        match Box::pin(crate::dynamic_facets::compose(run, movement)).await? {
            Ok(composed) => composed.map(Box::new),
            Err(problem) => return Ok(crate::dynamic_parallel::selector_failed(problem)),
        }
    } else {
        None
    };
    let movement = composed.as_deref().unwrap_or(movement);
    // The state as the visit starts. Built in a block of its own: a local that lives past an
    // await (even moved from) takes room in the run's task for as long as the run lasts.
    let (answer, mut started, preview) = {
        let state = run.journal.state();
        // The answer to this movement's question, or how its subtasks ended, when it goes
        // on after one.
        let answer = (state.answered && parent.is_none())
            .then(|| state.resume_message.clone())
            .flatten();
        let iteration = if parent.is_some() {
            state.iteration
        } else {
            state.iteration + 1
        };
        let started = RunEvent::MovementStarted {
            movement: movement.name.clone(),
            iteration,
            movement_iteration: state.visits_of(&movement.name) + 1,
            parent: parent.map(str::to_string),
            prompt_log: None,
        };
        let mut preview = state;
        preview.apply(&started);
        (answer, started, preview)
    };
    let visit = Visit {
        movement,
        cycle_count,
        loop_warning,
        report_dir: run.record.reports_dir().display().to_string(),
        max_carried_chars: run.config.max_carried_chars,
        review_scope: if scope::wanted(movement) {
            Some(scope::review_scope(run).await)
        } else {
            None
        },
    };
    let first = prompt::first_messages(piece, &preview, &visit);
    // What a `completion_retry` judge checks the answer against, and repeats on a retry.
    let instruction = if movement.completion_retry.is_some() {
        first.user.clone()
    } else {
        String::new()
    };
    if let RunEvent::MovementStarted { prompt_log, .. } = &mut started {
        *prompt_log = write_prompt_log(run, &preview, movement, &first).await?;
    }
    run.emit_queued(started)?;
    if !movement.companions.is_empty() && answer.is_none() {
        run.emit(RunEvent::Warning {
            movement: Some(movement.name.clone()),
            message: companions_not_run(movement),
        })
        .await?;
    }
    let asked = answer.as_ref().and_then(|_| {
        run.asked
            .lock()
            .ok()
            .and_then(|mut asked| asked.remove(&movement.name))
    });
    let messages = match (asked, answer) {
        (Some(mut conversation), Some(text)) => {
            conversation.push(Message::user(text));
            conversation
        }
        _ => session_messages(run, movement, first),
    };
    if parent.is_none() {
        crate::steps::system::wait_delay(run, movement).await?;
    }
    let (ended, messages) = movement::visit(run, movement, messages).await?;
    let (mut ended, messages) = if movement.completion_retry.is_some() {
        // Boxed: the episode's future is larger than the visit's, and only movements with a
        // `completion_retry` await it.
        Box::pin(crate::completion::episode(
            run,
            movement,
            &instruction,
            ended,
            messages,
        ))
        .await?
    } else {
        (ended, messages)
    };
    wait_or_fall_back(run, movement, parent, &mut ended).await?;
    if parent.is_none()
        && gated(&ended.step)
        && let Some(feedback) = gates::check(run, movement).await?
    {
        ended = Ended::gate_failed(&movement.name, feedback);
    }
    // A visit that parks (a question, or subtasks to wait for) keeps its conversation to go
    // on with.
    let asks = matches!(
        ended.step,
        Step::Finish {
            status: RunStatus::NeedsUserInput,
            ..
        } | Step::Go(Target::Ask | Target::WaitSubtasks)
    );
    if asks
        && parent.is_none()
        && let Ok(mut asked) = run.asked.lock()
    {
        asked.insert(movement.name.clone(), messages.clone());
    }
    let transcript = write_transcript(run, &preview, movement, &messages).await?;
    if movement.session == SessionMode::Continue
        && let Ok(mut sessions) = run.sessions.lock()
    {
        sessions.insert(movement.name.clone(), messages);
    }
    record_finished(run, movement, parent, &ended, transcript).await?;
    Ok(ended)
}

/// A parallel movement: its sub-movements run concurrently, then the parent's rules read their
/// results (`all()` / `any()` first).
async fn run_parallel(
    run: &Arc<RunCtx>,
    piece: &Arc<Piece>,
    parent: &Movement,
) -> Result<Ended, EngineError> {
    start_parallel(run, parent)?;
    run_subs(run, piece, parent, &parent.parallel).await
}

/// Records the start of a parallel parent's visit.
pub(crate) fn start_parallel(run: &RunCtx, parent: &Movement) -> Result<(), EngineError> {
    let state = run.journal.state();
    run.emit_queued(RunEvent::MovementStarted {
        movement: parent.name.clone(),
        iteration: state.iteration + 1,
        movement_iteration: state.visits_of(&parent.name) + 1,
        parent: None,
        prompt_log: None,
    })
}

/// Records the end of a parallel parent's visit.
pub(crate) async fn finish_parallel(
    run: &RunCtx,
    parent: &Movement,
    ended: &Ended,
) -> Result<(), EngineError> {
    record_finished(run, parent, None, ended, None).await
}

/// Runs `subs` (the parent's sub-movements, or the ones a selector chose) concurrently, then
/// the parent's rules read their results. Every `dynamic_facets` selector of the subs runs
/// first; an invalid selection fails the parent before any sub-movement starts.
pub(crate) async fn run_subs(
    run: &Arc<RunCtx>,
    piece: &Arc<Piece>,
    parent: &Movement,
    subs: &[Movement],
) -> Result<Ended, EngineError> {
    let mut ready = Vec::with_capacity(subs.len());
    for sub in subs {
        match crate::dynamic_facets::compose(run, sub).await? {
            Ok(composed) => ready.push(composed.unwrap_or_else(|| sub.clone())),
            Err(problem) => {
                let ended = crate::dynamic_parallel::selector_failed(problem);
                finish_parallel(run, parent, &ended).await?;
                return Ok(ended);
            }
        }
    }
    let subs = ready;
    let mut tasks = JoinSet::new();
    for (index, sub) in subs.iter().enumerate() {
        let run = Arc::clone(run);
        let piece = Arc::clone(piece);
        let sub = sub.clone();
        let parent_name = parent.name.clone();
        tasks.spawn(async move {
            (
                index,
                run_visit(&run, &piece, &sub, Some(&parent_name), 0, None).await,
            )
        });
    }
    let mut results: Vec<Option<Ended>> = vec![None; subs.len()];
    let mut failure = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((index, Ok(ended))) => results[index] = Some(ended),
            Ok((_, Err(e))) => {
                failure.get_or_insert(e);
            }
            Err(e) => {
                failure.get_or_insert(EngineError::from(InternalError::SubMovementCrashed {
                    parent: parent.name.clone(),
                    source: e,
                }));
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    // TAKT: a sub-step that failed counts as its `error` label for `any()` / `all()`.
    let takt = run.piece.dialect == Dialect::Takt;
    let mut sub_results: Vec<Option<String>> = Vec::with_capacity(results.len());
    for (sub, result) in subs.iter().zip(&results) {
        let step = result.as_ref().map(|e| &e.step);
        sub_results.push(match step {
            Some(Step::Matched(condition)) => Some(condition.clone()),
            Some(step) if takt && let Some(reason) = failed_sub(step) => {
                run.emit(RunEvent::Warning {
                    movement: Some(parent.name.clone()),
                    message: format!(
                        "sub-step `{}` failed ({reason}): it counts as `{}` for the aggregate rules of `{}`",
                        sub.name,
                        crate::outcome::FAILED_SUB_LABEL,
                        parent.name
                    ),
                })
                .await?;
                Some(crate::outcome::FAILED_SUB_LABEL.to_string())
            }
            _ => None,
        });
    }
    let combined = subs
        .iter()
        .zip(&results)
        .map(|(sub, r)| {
            format!(
                "## {}\n{}",
                sub.name,
                r.as_ref().map(|e| e.response.as_str()).unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    // A sub-movement's failing command gate sends the whole parallel movement round again.
    let mut failed_gate = None;
    for (sub, result) in subs.iter().zip(&results) {
        if result.as_ref().is_some_and(|r| gated(&r.step))
            && let Some(feedback) = gates::check(run, sub).await?
        {
            failed_gate = Some(format!(
                "Parallel sub-step quality gate failed: {}\n\n{feedback}",
                sub.name
            ));
            break;
        }
    }
    let mut ended = match failed_gate {
        Some(feedback) => Ended::gate_failed(&parent.name, feedback),
        None => {
            let decided =
                crate::steps::rules::decide(run, parent, &combined, Some(&sub_results)).await?;
            crate::steps::rules::ended(parent, combined, decided)
        }
    };
    wait_or_fall_back(run, parent, Some(&parent.name), &mut ended).await?;
    record_finished(run, parent, None, &ended, None).await?;
    Ok(ended)
}

/// Why a parallel sub-step failed, when it did: the engine ended its visit as `aborted` or
/// `failed` (its iterations or context used up, an invalid structured answer, a predicate that
/// could not be evaluated, …). An answer that matched none of its rules is not a failure: as in
/// TAKT, it fails `all()` and is skipped by `any()`.
fn failed_sub(step: &Step) -> Option<&EndReason> {
    match step {
        Step::Finish {
            status: RunStatus::Aborted | RunStatus::Failed,
            reason: Some(reason),
            ..
        } if *reason != EndReason::NoRuleMatched => Some(reason),
        _ => None,
    }
}

/// Why a step's companion reviewers do not run: TAKT runs them only when its `runtime.yaml`
/// sets `companion.enabled: true`, off by default, and their follow-up loop has no bound of its
/// own; Maestro keeps to that default.
fn companions_not_run(movement: &Movement) -> String {
    format!(
        "the companion reviewers of `{}` ({}) are not run: TAKT runs companions only when its runtime.yaml sets `companion.enabled: true` (off by default), and Maestro keeps that default; the step runs without them (see docs/dialects.md, \"TAKT workflows\")",
        movement.name,
        movement
            .companions
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Whether a visit that ended this way has its command quality gates run: it ended on a rule
/// (TAKT checks gates before it resolves the transition), not on a question, a wait or an error.
fn gated(step: &Step) -> bool {
    match step {
        Step::Go(Target::Ask | Target::WaitSubtasks) | Step::Finish { .. } => false,
        Step::Go(_) | Step::Matched(_) => true,
    }
}

/// `WAIT_SUBTASKS` waits when the run is a top-level movement's with subtasks pending; otherwise
/// (subtasks off, none spawned, or a parallel movement or sub-movement, which has no one
/// conversation to go on with) it takes the movement's `default_next`, the specification's
/// fallback, and without one the run ends `wait_subtasks_unsupported`.
async fn wait_or_fall_back(
    run: &RunCtx,
    movement: &Movement,
    parent: Option<&str>,
    ended: &mut Ended,
) -> Result<(), EngineError> {
    if ended.step != Step::Go(Target::WaitSubtasks) {
        return Ok(());
    }
    let why = if run.subtasks.is_none() {
        "subtasks are not available to this run"
    } else if parent.is_some() || movement.is_parallel() {
        "a parallel movement cannot wait for subtasks"
    } else if run.journal.state().pending_subtasks().is_empty() {
        "no subtask is running"
    } else {
        return Ok(());
    };
    match &movement.default_next {
        Some(fallback) => {
            run.emit(RunEvent::Warning {
                movement: Some(movement.name.clone()),
                message: format!(
                    "{why}: WAIT_SUBTASKS takes default_next `{}`",
                    fallback.label()
                ),
            })
            .await?;
            ended.step = Step::Go(fallback.clone());
            ended.via = crate::event::OutcomeSource::DefaultNext;
        }
        None => {
            ended.step = Step::Finish {
                status: RunStatus::Aborted,
                result: None,
                reason: Some(EndReason::WaitSubtasksUnsupported),
            };
        }
    }
    ended.reason = Some(EndReason::WaitSubtasksUnsupported);
    Ok(())
}

pub(crate) async fn record_finished(
    run: &RunCtx,
    movement: &Movement,
    parent: Option<&str>,
    ended: &Ended,
    transcript: Option<String>,
) -> Result<(), EngineError> {
    run.emit_queued(RunEvent::MovementFinished {
        transcript,
        movement: movement.name.clone(),
        next: next_label(&ended.step),
        via: ended.via,
        parent: parent.map(str::to_string),
        rule: ended.rule,
        response: ended.response.clone(),
        summary: ended.summary.clone(),
        lessons: ended.lessons.clone(),
        edge_prompt: ended.edge_prompt.clone(),
        reason: ended.reason.clone(),
    })
}

/// The conversation a visit starts from: a fresh one, or for `session: continue` the earlier
/// visit's conversation with the new instruction appended.
fn session_messages(
    run: &RunCtx,
    movement: &Movement,
    first: maestro_piece::prompt::Prompt,
) -> Vec<Message> {
    if movement.session == SessionMode::Continue
        && let Some(mut earlier) = run
            .sessions
            .lock()
            .ok()
            .and_then(|s| s.get(&movement.name).cloned())
    {
        earlier.push(Message::user(first.user));
        return earlier;
    }
    vec![
        Message::System {
            content: first.system,
        },
        Message::user(first.user),
    ]
}

/// Writes the visit's whole conversation under `logs/` (JSON lines, secrets removed) and
/// returns the path for `movement_finished`, so the record holds every answer and tool result,
/// not only their sizes.
pub(crate) async fn write_transcript(
    run: &RunCtx,
    state: &RunState,
    movement: &Movement,
    messages: &[Message],
) -> Result<Option<String>, EngineError> {
    let name = format!(
        "{:03}-{}-{}.transcript.jsonl",
        state.iteration,
        movement.name.replace(['/', '\\'], "_"),
        state.visits_of(&movement.name)
    );
    let path = run.record.logs_dir().join(name);
    let mut text = String::new();
    for message in messages {
        let line = serde_json::to_string(message).map_err(InternalError::Transcript)?;
        text.push_str(&run.redact(&line));
        text.push('\n');
    }
    match std::fs::write(&path, text) {
        Ok(()) => Ok(Some(path.display().to_string())),
        Err(e) => {
            run.emit(RunEvent::Warning {
                movement: Some(movement.name.clone()),
                message: format!("cannot write the transcript {}: {e}", path.display()),
            })
            .await?;
            Ok(None)
        }
    }
}

/// Writes the visit's full first messages under `logs/` and returns the path for the event.
pub(crate) async fn write_prompt_log(
    run: &RunCtx,
    state: &RunState,
    movement: &Movement,
    prompt: &maestro_piece::prompt::Prompt,
) -> Result<Option<String>, EngineError> {
    let name = format!(
        "{:03}-{}-{}.prompt.md",
        state.iteration,
        movement.name.replace(['/', '\\'], "_"),
        state.visits_of(&movement.name)
    );
    let path = run.record.logs_dir().join(name);
    let text = format!(
        "# System\n\n{}\n\n# User\n\n{}\n",
        prompt.system, prompt.user
    );
    match std::fs::write(&path, text) {
        Ok(()) => Ok(Some(path.display().to_string())),
        Err(e) => {
            run.emit(RunEvent::Warning {
                movement: Some(movement.name.clone()),
                message: format!("cannot write the prompt log {}: {e}", path.display()),
            })
            .await?;
            Ok(None)
        }
    }
}
