//! [`RawAnswer`], what one attempt read from the endpoint, and the tool-call ids given to calls
//! that came without one. A leaf: the wire format, SSE accumulation and JSON tool mode all
//! produce or read it.

use maestro_protocol::{ToolCall, Usage};

/// What one attempt read from the endpoint, before JSON tool mode interprets it.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct RawAnswer {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    /// The `model` the endpoint named in its answer.
    pub model: Option<String>,
}

/// A tool-call id for answers that carry none (JSON tool mode, some local servers).
pub(crate) fn new_call_id() -> String {
    format!("call_{:016x}", rand::random::<u64>())
}
