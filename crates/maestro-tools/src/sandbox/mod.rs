//! `Bash`: shell commands in a bubblewrap sandbox (or the hardened allowlist fallback), checked
//! against the movement's `allowed_commands` first.

mod bwrap;
mod command_line;
mod exec_capable;
mod policy;
mod process;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use maestro_protocol::ToolSpec;
use schemars::JsonSchema;
use serde::Deserialize;

pub use bwrap::probe as probe_bwrap;
pub use policy::{
    ANY_PROGRAM, INSTALL_REFUSED, PathPolicy, check as check_command, is_package_install,
};
pub use process::{Ending, Finished};

use crate::config::{BashSandboxMode, ToolsConfig};
use crate::core::open_workspace;
use crate::input::{parse_input, spec_for, truncation_marker};
use crate::workspace::Workspace;
use crate::{BoxFuture, Tool, ToolContext, ToolOutput};

#[derive(Debug, Deserialize, JsonSchema)]
pub struct BashInput {
    /// The command line to run (in the workspace directory).
    pub command: String,
    /// Time limit in milliseconds (default 120000, at most 600000).
    pub timeout: Option<u64>,
    /// A few words on what the command does, for the run log.
    pub description: Option<String>,
}

/// Which confinement a call ran under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// bubblewrap: filesystem, network, PIDs and environment confined.
    Bwrap,
    /// No bubblewrap: allowlist, path checks, scrubbed environment, time limit.
    Fallback,
}

/// `Bash`.
pub struct BashTool {
    pub config: Arc<ToolsConfig>,
}

impl Tool for BashTool {
    fn spec(&self) -> ToolSpec {
        spec_for::<BashInput>(
            "Bash",
            "Run a shell command in the sandboxed workspace (no network; only the movement's allowed programs).",
        )
    }

    fn time_limit(&self) -> Option<Duration> {
        Some(self.config.bash_max_timeout + Duration::from_secs(30))
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: BashInput = match parse_input(&self.spec(), input) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let ws = match open_workspace(ctx) {
                Ok(ws) => ws,
                Err(e) => return e,
            };
            let confinement = match confinement(self.config.bash_sandbox).await {
                Ok(c) => c,
                Err(e) => return ToolOutput::error(e),
            };
            run_bash(&self.config, ctx, &ws, &input, confinement).await
        })
    }
}

/// Decides how to confine commands under `mode`.
pub async fn confinement(mode: BashSandboxMode) -> Result<Confinement, String> {
    match mode {
        BashSandboxMode::Off => Ok(Confinement::Fallback),
        BashSandboxMode::Auto => Ok(if bwrap::probe().await.is_ok() { Confinement::Bwrap } else { Confinement::Fallback }),
        BashSandboxMode::Always => bwrap::probe().await.map(|()| Confinement::Bwrap).map_err(|e| {
            format!("Bash requires the bubblewrap sandbox (safety.bash_sandbox: always), but it is unavailable: {e}")
        }),
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
    let paths = match confinement {
        Confinement::Bwrap => None,
        Confinement::Fallback => Some(PathPolicy {
            workspace: ws,
            edit: ctx.edit,
            writable_dirs: &config.writable_dirs,
        }),
    };
    if let Err(why) = policy::check(&input.command, allowed, paths) {
        return ToolOutput::error(format!("command refused: {why}"));
    }
    let writable = match writable_dirs(ws, ctx.edit, &config.writable_dirs) {
        Ok(w) => w,
        Err(e) => return ToolOutput::error(e),
    };
    let shell: Vec<std::ffi::OsString> =
        vec!["/bin/sh".into(), "-c".into(), input.command.clone().into()];
    // Under bubblewrap the launcher's own environment and working directory are visible to the
    // command (as PID 1's), so they carry nothing but PATH and `/`.
    let (argv, env, cwd) = match confinement {
        Confinement::Bwrap => {
            let refs: Vec<&std::path::Path> = writable.iter().map(PathBuf::as_path).collect();
            let env = vec![("PATH".to_string(), bwrap::SANDBOX_PATH.to_string())];
            (
                bwrap::argv(ws, &refs, &shell),
                env,
                std::path::Path::new("/"),
            )
        }
        Confinement::Fallback => (
            shell,
            bwrap::sandbox_env(&ws.root().to_string_lossy()),
            ws.root(),
        ),
    };
    let timeout = config.bash_timeout(input.timeout);
    let job = process::Job {
        argv,
        cwd,
        env,
        timeout,
        output_cap: config.output_cap_bytes,
        max_processes: config.bash_max_processes,
        cancel: &ctx.cancel,
    };
    match process::run(job).await {
        Ok(finished) => render(finished, timeout),
        Err(e) => ToolOutput::error(format!("could not start the command: {e}")),
    }
}

/// The workspace directories mounted writable: the configured ones, only when the movement may
/// edit, each resolved (and created) inside the workspace.
fn writable_dirs(ws: &Workspace, edit: bool, dirs: &[String]) -> Result<Vec<PathBuf>, String> {
    if !edit {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for dir in dirs {
        let resolved = ws
            .resolve(dir)
            .map_err(|e| format!("writable directory `{dir}`: {e}"))?;
        if !resolved.abs.exists() {
            std::fs::create_dir_all(&resolved.abs)
                .map_err(|e| format!("cannot create `{dir}`: {e}"))?;
        }
        if resolved.abs.is_dir() {
            out.push(resolved.abs);
        }
    }
    Ok(out)
}

fn render(finished: Finished, timeout: Duration) -> ToolOutput {
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
