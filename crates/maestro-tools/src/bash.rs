//! `Bash`: a shell command line checked against the movement's `allowed_commands`, then run in
//! the workspace by [`maestro_sandbox`] (bubblewrap + seccomp, or landlock + seccomp where
//! bubblewrap cannot run). See `docs/security.md` for what each mode guarantees.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use maestro_sandbox::{Confinement, Ending, Finished, PathPolicy, PathRules, RunAs};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::config::ToolsConfig;
use crate::core::open_workspace;
use crate::input::truncation_marker;
use crate::workspace::{Workspace, WorkspaceError};
use crate::{ToolContext, ToolOutput, TypedTool, WorkspaceKind};

/// The input of a `Bash` call.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BashInput {
    /// The command line to run (in the workspace directory).
    pub command: String,
    /// Time limit in milliseconds (default 120000, at most 600000).
    pub timeout: Option<u64>,
    /// A few words on what the command does, for the run log.
    pub description: Option<String>,
}

/// `Bash`.
#[derive(Debug)]
pub struct BashTool {
    /// The sandbox mode and limits, the default allowlist (`default_allowed_commands`) and the
    /// writable directories every call runs with.
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for BashTool {
    type Input = BashInput;
    const NAME: &'static str = "Bash";
    const DESCRIPTION: &'static str = "Run a shell command in the sandboxed workspace (no network; only the movement's allowed programs).";

    fn time_limit(&self) -> Option<Duration> {
        Some(self.config.bash_max_timeout + Duration::from_secs(30))
    }

    async fn run(&self, ctx: &ToolContext, input: BashInput) -> ToolOutput {
        let ws = match open_workspace(ctx) {
            Ok(ws) => ws,
            Err(e) => return e,
        };
        let confinement = match maestro_sandbox::confinement(&self.config.sandbox()).await {
            Ok(c) => c,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        run_bash(&self.config, ctx, &ws, &input, confinement).await
    }
}

/// Runs one `Bash` call under the given confinement.
pub async fn run_bash(
    config: &ToolsConfig,
    ctx: &ToolContext,
    ws: &Workspace,
    input: &BashInput,
    confinement: Confinement,
) -> ToolOutput {
    // Programs that can run other programs are handled by the policy's exec-capable table in
    // every mode, so the same allowlist applies whatever the confinement.
    let allowed: &[String] = match &ctx.allowed_commands {
        Some(list) => list,
        None => &config.default_allowed_commands,
    };
    // Inside a kernel sandbox the kernel keeps paths in; without one, the parsed command's
    // literal paths are checked too (a weak second line, which is why that mode is "unsafe").
    let may_write = ctx.writable_dirs(&config.writable_dirs);
    let rules = WorkspacePaths {
        workspace: ws,
        writable_dirs: &may_write,
    };
    let paths = match confinement {
        Confinement::Bwrap | Confinement::Landlock => None,
        Confinement::Unconfined => Some(PathPolicy {
            rules: &rules,
            edit: ctx.edit,
        }),
    };
    if let Err(why) = maestro_sandbox::check_command(&input.command, allowed, paths) {
        return ToolOutput::error(format!("command refused: {why}"));
    }
    let writable = match writable_dirs(ws, ctx.edit, &may_write) {
        Ok(w) => w,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let timeout = config.bash_timeout(input.timeout);
    // Checked before (a file that arrived by other means; handing the directories to the
    // sandbox user would clear the bits silently) and after the command.
    let mut cleared = maestro_sandbox::clear_setid(&writable);
    let python = config
        .python_env
        .as_ref()
        .and_then(|dir| maestro_sandbox::PythonEnv::new(dir).ready());
    let command = maestro_sandbox::Command {
        root: ws.root(),
        writable: &writable,
        line: &input.command,
        // In a directory the user named, a command that may write runs as its owner: handing
        // the whole directory to the sandbox user would change the owner of every file in it.
        run_as: match (ctx.workspace_kind, ctx.edit) {
            (WorkspaceKind::Named, true) => RunAs::RootOwner,
            _ => RunAs::SandboxUser,
        },
        timeout,
        cancel: &ctx.cancel,
        python_env: python.as_ref().map(|env| env.path.as_path()),
    };
    let finished = maestro_sandbox::run(&config.sandbox(), confinement, command).await;
    cleared.extend(maestro_sandbox::clear_setid(&writable));
    match finished {
        Ok(finished) => {
            let mut out = render(finished, timeout, config);
            if !cleared.is_empty() {
                let names: Vec<String> = cleared
                    .iter()
                    .map(|p| p.strip_prefix(ws.root()).unwrap_or(p).display().to_string())
                    .collect();
                tracing::warn!(files = ?names, "cleared set-user-ID/set-group-ID bits a command left in the workspace");
                out.output.push_str(&format!(
                    "\n[set-id bits are not allowed; cleared them on: {}]",
                    names.join(", ")
                ));
                out.ok = false;
            }
            out
        }
        Err(e) => ToolOutput::error(e.to_string()),
    }
}

/// The workspace's rules for the paths a command names where no kernel sandbox keeps it in:
/// reads anywhere in the workspace, writes only into `writable_dirs`.
#[derive(Debug, Clone, Copy)]
pub struct WorkspacePaths<'a> {
    /// The workspace every path must stay inside.
    pub workspace: &'a Workspace,
    /// The workspace-relative directories writes may go to (`"."` for all of it).
    pub writable_dirs: &'a [String],
}

impl PathRules for WorkspacePaths<'_> {
    fn check_read(&self, path: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.workspace.resolve(path)?;
        Ok(())
    }

    fn check_write(&self, path: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.workspace.resolve_writable(path, self.writable_dirs)?;
        Ok(())
    }
}

/// Why a configured writable directory cannot be handed to the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum WritableDirError {
    /// The directory does not resolve inside the workspace (it escapes it, or goes through a
    /// link).
    #[error("writable directory `{dir}`: {source}")]
    Resolve {
        /// The directory as configured (`tools.writable_dirs`).
        dir: String,
        /// Why it does not resolve.
        #[source]
        source: WorkspaceError,
    },
    /// The directory did not exist and could not be created.
    #[error("cannot create `{dir}`: {source}")]
    Create {
        /// The directory as configured (`tools.writable_dirs`).
        dir: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// The workspace directories mounted writable: the configured ones, only when the movement may
/// edit, each resolved (and created) inside the workspace.
fn writable_dirs(
    ws: &Workspace,
    edit: bool,
    dirs: &[String],
) -> Result<Vec<PathBuf>, WritableDirError> {
    if !edit {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for dir in dirs {
        let resolved = ws
            .resolve(dir)
            .map_err(|source| WritableDirError::Resolve {
                dir: dir.clone(),
                source,
            })?;
        if !resolved.abs.exists() {
            std::fs::create_dir_all(&resolved.abs).map_err(|source| WritableDirError::Create {
                dir: dir.clone(),
                source,
            })?;
        }
        if resolved.abs.is_dir() {
            out.push(resolved.abs);
        }
    }
    Ok(out)
}

fn render(finished: Finished, timeout: Duration, config: &ToolsConfig) -> ToolOutput {
    let mut text = finished.output;
    if finished.truncated {
        text.push_str(&truncation_marker(text.len(), finished.total_bytes));
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let (ok, status) = match finished.ending {
        Ending::Exited(0) => (true, None),
        Ending::Exited(code) => (false, Some(format!("[exit code: {code}]"))),
        Ending::Signalled(sig) => (false, Some(format!("[killed by signal {sig}]"))),
        Ending::TimedOut => (
            false,
            Some(format!(
                "[timed out after {} ms; the command and everything it started were killed]",
                timeout.as_millis()
            )),
        ),
        Ending::MemoryLimit => (
            false,
            Some(format!(
                "[stopped: the command went over its memory limit of {} MiB (safety.bash_memory_mb)]",
                config.bash_memory_mb
            )),
        ),
        Ending::Cancelled => (
            false,
            Some("[cancelled; the command and everything it started were killed]".to_string()),
        ),
        Ending::OutputFlood => (
            false,
            Some(format!(
                "[stopped: the command wrote more than {} bytes; limit its output (e.g. `| head -n 100`)]",
                finished.total_bytes
            )),
        ),
    };
    if let Some(status) = status {
        text.push_str(&status);
    } else if text.is_empty() {
        text.push_str("(no output)");
    }
    ToolOutput {
        ok,
        output: text,
        truncated: finished.truncated,
    }
}
