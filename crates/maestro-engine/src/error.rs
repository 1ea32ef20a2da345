//! Errors that stop a run as `failed` (everything else is an outcome, not an error).

use maestro_llm::LlmError;

use crate::end_reason::EndReason;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// The model endpoint failed after the provider's own retries.
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// The run directory or `events.jsonl` cannot be written.
    #[error("run record: {0}")]
    Record(String),
    /// The piece cannot be run as loaded (a rule points nowhere, a parallel movement is empty).
    #[error("piece: {0}")]
    Piece(String),
    #[error("internal: {0}")]
    Internal(String),
}

impl EngineError {
    /// The short reason recorded in `run_finished.reason`.
    pub fn reason(&self) -> EndReason {
        match self {
            EngineError::Llm(e) => EndReason::LlmError(e.to_string()),
            EngineError::Record(e) => EndReason::RecordError(e.clone()),
            EngineError::Piece(e) => EndReason::PieceError(e.clone()),
            EngineError::Internal(e) => EndReason::InternalError(e.clone()),
        }
    }
}
