//! The core file tools, all confined to the job workspace: `Read`, `Write`, `Edit`, `Glob`,
//! `Grep`.

mod files;
mod search;

pub(crate) use files::{EditTool, ReadTool, WriteTool};
pub(crate) use search::{GlobTool, GrepTool};

use crate::ToolOutput;
use crate::workspace::Workspace;

/// Opens the context's workspace, or explains why it cannot be used.
pub fn open_workspace(ctx: &crate::ToolContext) -> Result<Workspace, ToolOutput> {
    Workspace::open(&ctx.workspace).map_err(|e| ToolOutput::error(e.to_string()))
}

/// Runs blocking work off the async runtime; a panic inside becomes a tool error.
pub async fn blocking<F>(f: F) -> ToolOutput
where
    F: FnOnce() -> ToolOutput + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(out) => out,
        Err(e) => ToolOutput::error(format!("the tool failed internally: {e}")),
    }
}

/// Runs blocking file work off the async runtime. The regular-file helpers never block on a
/// FIFO, so the thread returns; a panic inside becomes an I/O error.
pub async fn off_runtime<T, F>(f: F) -> Result<T, crate::regular_file::OpenError>
where
    F: FnOnce() -> Result<T, crate::regular_file::OpenError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(crate::regular_file::OpenError::Io(std::io::Error::other(
            e.to_string(),
        )))
    })
}
