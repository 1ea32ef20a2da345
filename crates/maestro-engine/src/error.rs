//! Errors that stop a run as `failed` (everything else is an outcome, not an error).

use std::path::PathBuf;

use maestro_llm::LlmError;

use crate::end_reason::EndReason;
use crate::recorded::Divergence;

/// Why a run stopped as `failed`. Each variant keeps the error that caused it as its source.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model endpoint failed after the provider's own retries.
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// The run directory or `events.jsonl` cannot be written.
    #[error("run record: {0}")]
    Record(#[from] RecordError),
    /// The piece cannot be run as loaded (a rule points nowhere, a parallel movement is empty).
    #[error("piece: {0}")]
    Piece(#[from] UnrunnablePiece),
    /// A broken invariant of the engine itself.
    #[error("internal: {0}")]
    Internal(#[from] InternalError),
    /// A resumed or replayed run did something its record does not hold (the piece or the
    /// engine changed since it was recorded).
    #[error(transparent)]
    Diverged(#[from] Divergence),
    /// The job system failed to spawn or report a subtask.
    #[error(transparent)]
    Subtasks(#[from] crate::subtasks::SubtaskError),
    /// A model call's reservation was refused by the run's [`crate::SpendGuard`]: a cap is
    /// reached (the run ends `exceeded`), or the budget cannot be checked (the job retries).
    #[error(transparent)]
    Spend(#[from] crate::spend::SpendRefused),
}

/// The run record cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A directory of the run (`what` names it, e.g. "the run directory") cannot be created.
    #[error("cannot create {what} {}: {source}", path.display())]
    Create {
        /// Which directory it is, e.g. "the run directory".
        what: &'static str,
        /// The directory that could not be created.
        path: PathBuf,
        /// Why creating it failed (permissions, a full disk, a file in its place).
        #[source]
        source: std::io::Error,
    },
    /// `events.jsonl` cannot be opened for appending.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The `events.jsonl` file that could not be opened.
        path: PathBuf,
        /// Why opening it failed.
        #[source]
        source: std::io::Error,
    },
    /// An event cannot be appended to the durable record.
    #[error("cannot append event: {0}")]
    Append(#[source] std::io::Error),
    /// The run is no longer this writer's (its job's lease was taken over, or the job was
    /// cancelled): nothing more is written.
    #[error("{0}")]
    Fenced(String),
}

/// The piece as loaded cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum UnrunnablePiece {
    /// A rule's target is not a movement of the piece.
    #[error("a rule leads to `{movement}`, which is not a movement of piece `{piece}`")]
    UnknownMovement {
        /// The target named by the rule.
        movement: String,
        /// The piece's name.
        piece: String,
    },
    /// The movement due is a TAKT workflow step of a kind this engine does not run yet
    /// (`maestro_piece::StepKind`): the piece loaded and validated, the run stops here.
    #[error(
        "step `{movement}` is a TAKT `{kind}` step, which Maestro validates but cannot run yet; the run stops before it (see docs/dialects.md, \"TAKT workflows\")"
    )]
    UnsupportedStep {
        /// The step (or parallel sub-step) that was due.
        movement: String,
        /// The TAKT step kind, e.g. `workflow_call`.
        kind: &'static str,
    },
    /// The movement due routes on a `when(…)` state predicate, which this engine cannot
    /// evaluate yet.
    #[error(
        "step `{movement}` routes on `when({predicate})`, a TAKT state predicate Maestro validates but cannot evaluate yet; the run stops before it"
    )]
    UnsupportedCondition {
        /// The step that was due.
        movement: String,
        /// The predicate.
        predicate: String,
    },
}

/// A broken invariant of the engine.
#[derive(Debug, thiserror::Error)]
pub enum InternalError {
    /// A task panicked while it held the journal's lock, so the run state cannot be trusted.
    #[error("journal lock poisoned")]
    JournalLockPoisoned,
    /// The task that writes events to the durable logs ended before an event was committed.
    #[error("the event writer stopped")]
    WriterStopped,
    /// The runner was asked for the next movement while none was due.
    #[error("no movement is due")]
    NoMovementDue,
    /// A run that must finish (`Engine::run`, a replay) parked or asked to be retried instead.
    #[error("the run ended without a terminal status")]
    NoTerminalStatus,
    /// The task running a sub-movement panicked or was aborted.
    #[error("a sub-movement of `{parent}` crashed: {source}")]
    SubMovementCrashed {
        /// The parallel movement the sub-movement ran under.
        parent: String,
        /// The task's panic or cancellation.
        #[source]
        source: tokio::task::JoinError,
    },
    /// A transcript message cannot be serialised.
    #[error("transcript: {0}")]
    Transcript(#[source] serde_json::Error),
}

impl EngineError {
    /// True for failures of the infrastructure rather than of the run: the endpoint cannot be
    /// reached or keeps misbehaving (after the client's own retries; see
    /// [`LlmError::is_infrastructure`]). A job retries those later.
    pub fn is_infrastructure(&self) -> bool {
        match self {
            EngineError::Llm(e) => e.is_infrastructure(),
            EngineError::Subtasks(crate::subtasks::SubtaskError::Failed(_)) => true,
            EngineError::Spend(crate::spend::SpendRefused::Unavailable(_)) => true,
            _ => false,
        }
    }

    /// The short reason recorded in `run_finished.reason`.
    pub fn reason(&self) -> EndReason {
        match self {
            EngineError::Llm(e) => EndReason::LlmError(e.to_string()),
            EngineError::Record(e) => EndReason::RecordError(e.to_string()),
            EngineError::Piece(e) => EndReason::PieceError(e.to_string()),
            EngineError::Internal(e) => EndReason::InternalError(e.to_string()),
            EngineError::Diverged(e) => EndReason::RecordError(e.to_string()),
            EngineError::Subtasks(e) => EndReason::SubtaskError(e.to_string()),
            EngineError::Spend(crate::spend::SpendRefused::Exceeded { cap, .. }) => {
                EndReason::Budget(cap.clone())
            }
            EngineError::Spend(e @ crate::spend::SpendRefused::Unavailable(_)) => {
                EndReason::InternalError(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_record_error_keeps_its_io_cause_and_its_words() {
        let error = EngineError::from(RecordError::Open {
            path: PathBuf::from("/runs/r1/events.jsonl"),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
        assert_eq!(
            error.to_string(),
            "run record: cannot open /runs/r1/events.jsonl: permission denied"
        );
        assert_eq!(
            error.reason().to_string(),
            "record_error: cannot open /runs/r1/events.jsonl: permission denied"
        );
        let cause = error.source().and_then(|e| e.source());
        assert!(cause.is_some_and(|e| e.is::<std::io::Error>()), "{cause:?}");
    }
}
