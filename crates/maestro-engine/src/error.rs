//! Errors that stop a run as `failed` (everything else is an outcome, not an error).

use maestro_llm::LlmError;

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
    pub fn reason(&self) -> String {
        match self {
            EngineError::Llm(e) => format!("llm_error: {e}"),
            EngineError::Record(e) => format!("record_error: {e}"),
            EngineError::Piece(e) => format!("piece_error: {e}"),
            EngineError::Internal(e) => format!("internal_error: {e}"),
        }
    }
}
