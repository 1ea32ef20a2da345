//! The tool trait and the context a call runs in.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use maestro_protocol::ToolSpec;
use serde::{Deserialize, Serialize};
pub use tokio_util::sync::CancellationToken;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a tool call produced. `ok: false` carries an error the model can read and act on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub ok: bool,
    /// Text handed back to the model (already capped; see `truncated`).
    pub output: String,
    /// True when `output` was cut; the text then ends with an explicit marker.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl ToolOutput {
    pub fn ok(output: impl Into<String>) -> Self {
        ToolOutput {
            ok: true,
            output: output.into(),
            truncated: false,
        }
    }
    pub fn error(message: impl Into<String>) -> Self {
        ToolOutput {
            ok: false,
            output: message.into(),
            truncated: false,
        }
    }
}

/// One checklist item (CreateChecklist / CheckItem / GetChecklist).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ChecklistItem {
    pub text: String,
    pub done: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Tool state that belongs to the run and survives from one movement to the next. The engine
/// stores it in the run state after every tool call.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RunScratch {
    pub checklist: Vec<ChecklistItem>,
}

/// Everything a tool call may depend on. Built by the engine per movement (or by
/// `maestro tools call`), so both take the same code path.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The job workspace root; relative paths resolve against it, nothing escapes it.
    pub workspace: PathBuf,
    /// The movement's `edit` flag: Write/Edit (and writable SQLite) only when true.
    pub edit: bool,
    /// Bash allowlist of program names; `None` means the configured default.
    pub allowed_commands: Option<Vec<String>>,
    /// SSH connection ids the movement may use (`None`/empty deny all, `*` any registered).
    pub allowed_ssh_connections: Option<Vec<String>>,
    pub cancel: CancellationToken,
    pub scratch: Arc<Mutex<RunScratch>>,
}

/// A tool the model can call.
///
/// An implementation promises: it validates its own input and answers bad input with
/// `ToolOutput { ok: false, .. }` that says what to fix (never a panic); it stays inside
/// `ctx.workspace` and the movement's permissions; it stops when `ctx.cancel` fires; and it caps
/// its output, setting `truncated`.
pub trait Tool: Send + Sync {
    /// Name, one-sentence description and input JSON Schema.
    fn spec(&self) -> ToolSpec;

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, ToolOutput>;

    /// The time limit the registry applies to one call; `None` means the configured
    /// `call_timeout`. Tools that enforce their own, longer limit (Bash) return it here plus a
    /// margin so that their own, more informative timeout fires first.
    fn time_limit(&self) -> Option<std::time::Duration> {
        None
    }
}
