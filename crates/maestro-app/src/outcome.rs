//! How a run, and the job it is, ended: one family of types for every caller of the run path
//! (the worker, `maestro run` and its resume, replay, the children of a local run, the server).

use std::path::PathBuf;

use maestro_engine::{Divergence, EngineError};
use maestro_protocol::{EndReason, RunStatus, Usage};
use maestro_store::StoreError;

use crate::models::ModelError;
use crate::pieces::PieceError;
use crate::toolbox::{RequiredMcp, ToolboxError};

/// How one run ended, as the run path reports it once its end is recorded.
#[derive(Debug)]
pub enum RunOutcome {
    /// The run reached an end or a park, and its job says so (a replay: the record was driven
    /// again to the same end).
    Ended(RunSummary),
    /// The run could not start, or could not go on; the job was failed, or queued again to be
    /// tried later when `requeued`.
    Failed {
        /// What went wrong.
        error: RunError,
        /// The job went back to the queue (an attempt is left and the failure may pass).
        requeued: bool,
    },
    /// The lease was lost or the job cancelled elsewhere: this process wrote nothing more.
    Fenced {
        /// Why writing stopped.
        why: String,
    },
    /// Stopped for a hand-back (a worker shutting down) and released: the next claim resumes it.
    HandedBack,
}

/// The end of a run that ended (or parked) on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The run's id: its job's id.
    pub run_id: String,
    /// How it ended.
    pub status: RunStatus,
    /// The user-visible result: `complete.result`, the last movement's answer, or the question.
    pub result: String,
    /// Why it ended other than by the model's normal outcome.
    pub reason: Option<EndReason>,
    /// The run directory on this host.
    pub run_dir: PathBuf,
    /// The tokens the run's model calls used (those of earlier attempts included).
    pub usage: Usage,
    /// Recorded model answers reused instead of asked again (a resume or a replay).
    pub reused_answers: usize,
    /// Recorded tool results reused instead of run again (a resume or a replay).
    pub reused_tool_results: usize,
}

/// Why a run could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The piece is missing or broken, or the classifier could not choose one.
    #[error(transparent)]
    Piece(#[from] PieceError),
    /// The model is not served, or the endpoint does not answer.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The configuration does not make a run (no model, a bad engine setting).
    #[error("the configuration does not make a run")]
    Config(#[source] maestro_config::ConfigError),
    /// The tools of the configuration cannot be set up.
    #[error("the tools cannot be set up ({0})")]
    Tools(#[source] ToolboxError),
    /// An MCP server the piece requires is not configured or did not start.
    #[error("piece `{piece}` cannot run: {problem}")]
    RequiredMcp {
        /// The piece's name.
        piece: String,
        /// Which server, and why (in the message, so not also a `#[source]`).
        problem: RequiredMcp,
    },
    /// The store failed while the run was read or prepared.
    #[error("reading the job's {what} failed")]
    Store {
        /// What was read.
        what: &'static str,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// The job's stored events are not events this version reads.
    #[error("the job's stored events cannot be read")]
    Events(#[source] serde_json::Error),
    /// The run has no `run_started` event to take its piece from.
    #[error("run {0} has no `run_started` event")]
    NotStarted(String),
    /// The endpoint became unreachable while the run went on (after the client's retries).
    #[error("the model endpoint failed: {0}")]
    Endpoint(String),
    /// The job's input files could not be laid out in the run's workspace.
    #[error(transparent)]
    Inputs(crate::files::InputError),
    /// A broken invariant of this crate (a run's task panicked).
    #[error("internal: {0}")]
    Internal(String),
    /// The engine stopped: the run record could not be written, the piece cannot run as loaded,
    /// or a replay diverged.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A cost cap applies that the run cannot count (no price for its model), or the job's
    /// budget cannot be read.
    #[error(transparent)]
    Budget(#[from] crate::budget::BudgetError),
    /// The run was cancelled (Ctrl-C, SIGTERM) while it was being prepared, before it started.
    #[error("cancelled before the run started")]
    Cancelled,
}

impl RunError {
    /// True when the failure may pass (the endpoint or the store is down): the job is worth
    /// another attempt. Everything else fails the same way every time.
    pub fn is_transient(&self) -> bool {
        match self {
            RunError::Model(ModelError::Unreachable { .. }) => true,
            RunError::Piece(PieceError::Classify(maestro_engine::ClassifyError::Spend(
                maestro_engine::SpendRefused::Unavailable(_),
            ))) => true,
            RunError::Piece(PieceError::Classify(maestro_engine::ClassifyError::Llm(e))) => {
                e.is_infrastructure()
            }
            RunError::Store { .. } | RunError::Endpoint(_) | RunError::Inputs(_) => true,
            RunError::Budget(crate::budget::BudgetError::Store { .. }) => true,
            RunError::Piece(PieceError::Store(e)) => !e.is_unusable(),
            RunError::Engine(EngineError::Record(_)) => true,
            _ => false,
        }
    }

    /// The reason a job that failed so records.
    pub fn end_reason(&self) -> EndReason {
        let text = match self {
            // The connection error names the URL and the cause; the CLI's advice on starting a
            // local model is not for a job's reason.
            RunError::Model(ModelError::Unreachable { cause, .. }) => cause.to_string(),
            _ => crate::error_chain(self),
        };
        match self {
            RunError::Piece(PieceError::Classify(maestro_engine::ClassifyError::Spend(
                maestro_engine::SpendRefused::Exceeded { cap, .. },
            ))) => EndReason::Budget(cap.clone()),
            RunError::Piece(PieceError::Classify(maestro_engine::ClassifyError::Spend(
                maestro_engine::SpendRefused::Unavailable(_),
            ))) => EndReason::RecordError(text),
            RunError::Piece(PieceError::Classify(_))
            | RunError::Model(_)
            | RunError::Endpoint(_) => EndReason::LlmError(text),
            RunError::Piece(PieceError::Store(_)) => EndReason::RecordError(text),
            RunError::Piece(_)
            | RunError::RequiredMcp { .. }
            | RunError::Tools(_)
            | RunError::Config(_)
            | RunError::Budget(crate::budget::BudgetError::NoPrice { .. })
            | RunError::NotStarted(_) => EndReason::PieceError(text),
            RunError::Budget(crate::budget::BudgetError::Store { .. }) => {
                EndReason::RecordError(text)
            }
            RunError::Store { .. } | RunError::Events(_) | RunError::Inputs(_) => {
                EndReason::RecordError(text)
            }
            RunError::Engine(EngineError::Llm(_)) => EndReason::LlmError(text),
            RunError::Engine(EngineError::Piece(_)) => EndReason::PieceError(text),
            RunError::Engine(EngineError::Subtasks(_)) => EndReason::SubtaskError(text),
            RunError::Engine(EngineError::Spend(maestro_engine::SpendRefused::Exceeded {
                cap,
                ..
            })) => EndReason::Budget(cap.clone()),
            RunError::Engine(EngineError::Spend(_)) => EndReason::InternalError(text),
            RunError::Internal(_)
            | RunError::Engine(EngineError::Internal(_) | EngineError::Diverged(_)) => {
                EndReason::InternalError(text)
            }
            RunError::Engine(EngineError::Record(_)) => EndReason::RecordError(text),
            RunError::Cancelled => EndReason::Cancelled,
        }
    }

    /// The divergence, when a replay (or a resume) did something its record does not hold.
    pub fn divergence(&self) -> Option<&Divergence> {
        match self {
            RunError::Engine(EngineError::Diverged(d)) => Some(d),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use maestro_llm::LlmError;
    use maestro_store::JobId;

    /// The decision the one run path makes for every failure: try again later (the job goes
    /// back to the queue while attempts are left) or fail now, and the reason it records.
    #[test]
    fn a_failure_that_may_pass_is_retried_and_any_other_fails_with_its_reason() {
        let unreachable = RunError::Model(ModelError::Unreachable {
            base_url: "http://127.0.0.1:9/v1".into(),
            cause: LlmError::Connect {
                url: "http://127.0.0.1:9/v1/chat/completions".into(),
                message: "connection refused".into(),
            },
        });
        assert!(unreachable.is_transient());
        let reason = unreachable.end_reason();
        assert_eq!(reason.code(), "llm_error");
        // The job's reason is the connection's error, not the CLI's advice on starting a model.
        assert!(!reason.to_string().contains("local-llm.sh"), "{reason}");

        // The store failing while a run is read (its events, the answers to its questions)
        // does not start the run without them: it is tried again.
        let store = RunError::Store {
            what: "answers",
            source: maestro_store::StoreError::NoSuchJob(JobId::new()),
        };
        assert!(store.is_transient());
        assert_eq!(store.end_reason().code(), "record_error");

        // A classifier that cannot reach the endpoint may pass; one that finds nothing will not.
        let classifier_down = RunError::Piece(PieceError::Classify(
            maestro_engine::ClassifyError::Llm(LlmError::Connect {
                url: "u".into(),
                message: "refused".into(),
            }),
        ));
        assert!(classifier_down.is_transient());
        assert_eq!(classifier_down.end_reason().code(), "llm_error");
        let no_pieces = RunError::Piece(PieceError::Classify(
            maestro_engine::ClassifyError::NoPieces,
        ));
        assert!(!no_pieces.is_transient());

        let missing = RunError::Piece(PieceError::NotFound {
            given: "nope".into(),
            searched: vec!["pieces".into()],
            known: vec!["explore".into()],
            skipped: Vec::new(),
        });
        assert!(!missing.is_transient());
        let reason = missing.end_reason();
        assert_eq!(reason.code(), "piece_error");
        assert!(reason.to_string().contains("`nope`"), "{reason}");

        let mcp = RunError::RequiredMcp {
            piece: "p".into(),
            problem: crate::toolbox::RequiredMcp::NotStarted {
                server: "fs".into(),
            },
        };
        assert!(!mcp.is_transient());
        assert_eq!(mcp.end_reason().code(), "piece_error");
    }
}
