//! `Read`, `Write` and `Edit`: reading with line ranges, and exact-match editing limited to the
//! writable directories of movements that may edit.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{off_runtime, open_workspace};
use crate::config::ToolsConfig;
use crate::input::capped;
use crate::regular_file::{self, Access, Create, OpenError};
use crate::workspace::ResolvedPath;
use crate::{ToolContext, ToolOutput, TypedTool};

/// Lines `Read` returns when the call gives no `limit`.
const DEFAULT_READ_LINES: usize = 2000;
/// Longer lines are cut so one minified file cannot fill the context.
const MAX_LINE_CHARS: usize = 2000;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ReadInput {
    /// Path of the file, relative to the workspace root (e.g. `input/data.csv`).
    pub file_path: String,
    /// 1-based line number to start reading from.
    pub offset: Option<u64>,
    /// Maximum number of lines to return (default 2000).
    pub limit: Option<u64>,
}

/// `Read`: a text file's lines, numbered like `cat -n`.
pub(crate) struct ReadTool {
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for ReadTool {
    type Input = ReadInput;
    const NAME: &'static str = "Read";
    const DESCRIPTION: &'static str = "Read a text file from the workspace, with line numbers; use offset and limit for long files.";

    async fn run(&self, ctx: &ToolContext, input: ReadInput) -> ToolOutput {
        let ws = match open_workspace(ctx) {
            Ok(ws) => ws,
            Err(e) => return e,
        };
        let path = match ws.resolve(&input.file_path) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        if path.abs.is_dir() {
            return ToolOutput::error(format!(
                "`{}` is a directory; use Glob to list files",
                path.display()
            ));
        }
        let abs = path.abs.clone();
        let bytes = match off_runtime(move || regular_file::read(&abs)).await {
            Ok(b) => b,
            Err(OpenError::NotFound) => {
                return ToolOutput::error(format!(
                    "`{}` does not exist; use Glob to find files",
                    path.display()
                ));
            }
            Err(e) => {
                return ToolOutput::error(e.explain(&path.display(), "Read", Access::Read));
            }
        };
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return ToolOutput::error(format!(
                "`{}` is a binary file ({} bytes); Read shows text files only",
                path.display(),
                bytes.len()
            ));
        }
        let text = String::from_utf8_lossy(&bytes);
        let start = input.offset.unwrap_or(1).max(1) as usize;
        let limit = input
            .limit
            .map(|l| l as usize)
            .unwrap_or(DEFAULT_READ_LINES)
            .max(1);
        let total_lines = text.lines().count();
        if total_lines == 0 {
            return ToolOutput::ok(format!("`{}` is empty", path.display()));
        }
        if start > total_lines {
            return ToolOutput::error(format!(
                "offset {start} is past the end of `{}` ({total_lines} lines)",
                path.display()
            ));
        }
        let mut out = String::new();
        for (i, line) in text.lines().enumerate().skip(start - 1).take(limit) {
            let line = match line.char_indices().nth(MAX_LINE_CHARS) {
                Some((cut, _)) => format!(
                    "{}… [line cut at {MAX_LINE_CHARS} characters]",
                    &line[..cut]
                ),
                None => line.to_string(),
            };
            out.push_str(&format!("{:>6}\t{line}\n", i + 1));
        }
        let end = (start - 1 + limit).min(total_lines);
        if end < total_lines {
            out.push_str(&format!(
                "[showing lines {start}-{end} of {total_lines}; call Read with offset {} to continue]\n",
                end + 1
            ));
        }
        capped(out, self.config.output_cap_bytes)
    }
}

/// Refuses `tool` in a movement that may not edit files.
fn require_edit(ctx: &ToolContext, tool: &str) -> Result<(), ToolOutput> {
    if ctx.edit {
        Ok(())
    } else {
        Err(ToolOutput::error(format!(
            "this movement cannot edit files (edit: false); {tool} is not available"
        )))
    }
}

/// Opens the workspace and resolves `file_path` inside the configured writable directories.
fn writable_path(
    ctx: &ToolContext,
    config: &ToolsConfig,
    file_path: &str,
) -> Result<ResolvedPath, ToolOutput> {
    open_workspace(ctx)?
        .resolve_writable(file_path, &ctx.writable_dirs(&config.writable_dirs))
        .map_err(|e| ToolOutput::error(e.to_string()))
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct WriteInput {
    /// Path of the file to create or overwrite, relative to the workspace root (e.g. `output/report.md`).
    pub file_path: String,
    /// The complete new content of the file.
    pub content: String,
}

/// `Write`: creates or overwrites a file under the writable directories.
pub(crate) struct WriteTool {
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for WriteTool {
    type Input = WriteInput;
    const NAME: &'static str = "Write";
    const DESCRIPTION: &'static str =
        "Create or overwrite a file in the workspace's output directory with the given content.";

    async fn run(&self, ctx: &ToolContext, input: WriteInput) -> ToolOutput {
        if let Err(e) = require_edit(ctx, "Write") {
            return e;
        }
        let path = match writable_path(ctx, &self.config, &input.file_path) {
            Ok(p) => p,
            Err(e) => return e,
        };
        if path.abs.is_dir() {
            return ToolOutput::error(format!(
                "`{}` is a directory; give a file path",
                path.display()
            ));
        }
        if let Some(parent) = path.abs.parent()
            && let Err(e) = tokio::fs::create_dir_all(parent).await
        {
            return ToolOutput::error(format!(
                "cannot create the directory for `{}`: {e}",
                path.display()
            ));
        }
        let existed = path.abs.exists();
        let (abs, len) = (path.abs.clone(), input.content.len());
        let written = off_runtime(move || {
            regular_file::write(&abs, input.content.as_bytes(), Create::OrTruncate)
        })
        .await;
        match written {
            Ok(()) => ToolOutput::ok(format!(
                "{} `{}` ({len} bytes)",
                if existed { "overwrote" } else { "created" },
                path.display(),
            )),
            Err(e) => ToolOutput::error(e.explain(&path.display(), "Write", Access::Write)),
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct EditInput {
    /// Path of the file to edit, relative to the workspace root.
    pub file_path: String,
    /// The exact text to replace (must match the file exactly, including whitespace).
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: Option<bool>,
}

/// `Edit`: exact-match replacement in a file under the writable directories.
pub(crate) struct EditTool {
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for EditTool {
    type Input = EditInput;
    const NAME: &'static str = "Edit";
    const DESCRIPTION: &'static str =
        "Replace an exact string in a workspace file (unique unless replace_all is true).";

    async fn run(&self, ctx: &ToolContext, input: EditInput) -> ToolOutput {
        if let Err(e) = require_edit(ctx, "Edit") {
            return e;
        }
        if input.old_string.is_empty() {
            return ToolOutput::error(
                "old_string is empty; give the exact text to replace (use Write to create a file)",
            );
        }
        if input.old_string == input.new_string {
            return ToolOutput::error(
                "old_string and new_string are identical; nothing would change",
            );
        }
        let path = match writable_path(ctx, &self.config, &input.file_path) {
            Ok(p) => p,
            Err(e) => return e,
        };
        let abs = path.abs.clone();
        let text = match off_runtime(move || regular_file::read_to_string(&abs)).await {
            Ok(t) => t,
            Err(OpenError::NotFound) => {
                return ToolOutput::error(format!(
                    "`{}` does not exist; use Write to create it",
                    path.display()
                ));
            }
            Err(e @ OpenError::Io(_)) => {
                return ToolOutput::error(format!("cannot read `{}` as text: {e}", path.display()));
            }
            Err(e) => {
                return ToolOutput::error(e.explain(&path.display(), "Edit", Access::Read));
            }
        };
        let count = text.matches(&input.old_string).count();
        let replace_all = input.replace_all.unwrap_or(false);
        let new_text = match (count, replace_all) {
            (0, _) => {
                return ToolOutput::error(format!(
                    "old_string was not found in `{}`; Read the file and copy the text exactly, including whitespace",
                    path.display()
                ));
            }
            (1, _) | (_, true) => text.replace(&input.old_string, &input.new_string),
            (n, false) => {
                return ToolOutput::error(format!(
                    "old_string occurs {n} times in `{}`; include more surrounding text to make it unique, or set replace_all to true",
                    path.display()
                ));
            }
        };
        let abs = path.abs.clone();
        let written =
            off_runtime(move || regular_file::write(&abs, new_text.as_bytes(), Create::OrTruncate))
                .await;
        match written {
            Ok(()) => ToolOutput::ok(format!(
                "replaced {count} occurrence{} in `{}`",
                if count == 1 { "" } else { "s" },
                path.display()
            )),
            Err(e) => ToolOutput::error(e.explain(&path.display(), "Edit", Access::Write)),
        }
    }
}
