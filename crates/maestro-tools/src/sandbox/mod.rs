//! `Bash`: shell commands in a kernel sandbox — bubblewrap + seccomp, or landlock + seccomp
//! where bubblewrap cannot run — checked against the movement's `allowed_commands` first. See
//! `docs/security.md` for what each mode guarantees.

mod bwrap;
mod cgroup;
mod child;
mod command_line;
mod exec_capable;
mod landlock_fs;
mod launch;
mod policy;
mod process;
mod seccomp;
mod setid;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::OnceCell;

pub use command_line::SyntaxError;
pub use exec_capable::ExecRefusal;
pub use policy::{
    ANY_PROGRAM, INSTALL_REFUSED, PathPolicy, PolicyError, check as check_command,
    is_package_install,
};
pub use process::{Ending, Finished};

use crate::config::{BashSandboxMode, ToolsConfig};
use crate::core::open_workspace;
use crate::input::truncation_marker;
use crate::workspace::{Workspace, WorkspaceError};
use crate::{ToolContext, ToolOutput, TypedTool};

#[derive(Debug, Deserialize, JsonSchema)]
pub struct BashInput {
    /// The command line to run (in the workspace directory).
    pub command: String,
    /// Time limit in milliseconds (default 120000, at most 600000).
    pub timeout: Option<u64>,
    /// A few words on what the command does, for the run log.
    pub description: Option<String>,
}

/// Which confinement a call runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Confinement {
    /// bubblewrap + seccomp: own mount, user, PID, network, IPC and UTS namespaces; only the
    /// system directories and the workspace are visible.
    Bwrap,
    /// landlock + seccomp (no bubblewrap): the host's filesystem, but only the system
    /// directories and the workspace are reachable, enforced by the kernel; no network sockets.
    Landlock,
    /// No sandbox (`safety.bash_sandbox: unsafe_no_sandbox`): allowlist, limits and a scrubbed
    /// environment only.
    Unconfined,
}

impl Confinement {
    /// How the confinement is named in logs and the run record.
    pub fn describe(self) -> &'static str {
        match self {
            Confinement::Bwrap => "bubblewrap + seccomp",
            Confinement::Landlock => "landlock + seccomp (bubblewrap unavailable or turned off)",
            Confinement::Unconfined => "NO SANDBOX (safety.bash_sandbox: unsafe_no_sandbox)",
        }
    }
}

/// Why a command could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot build the seccomp filter: {0}")]
    Seccomp(#[source] Arc<seccompiler::Error>),
    #[error("landlock is unavailable: {0}")]
    Landlock(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Unreachable(String),
    #[error("writable directory `{dir}`: {source}")]
    WritableDir {
        dir: String,
        #[source]
        source: WorkspaceError,
    },
}

/// Why the sandbox a mode asks for cannot be had here.
#[derive(Debug, thiserror::Error)]
pub enum ConfinementError {
    #[error(
        "Bash is unavailable: it requires bubblewrap (safety.bash_sandbox: always), which does not work here: {0}. Install the `bubblewrap` package and allow unprivileged user namespaces, or set safety.bash_sandbox: auto to use landlock instead"
    )]
    BwrapRequired(#[source] Arc<ProbeError>),
    #[error(
        "Bash is unavailable: safety.bash_sandbox: off confines commands with landlock, which does not work here: {0}. Use a kernel with landlock enabled (5.13 or later, `lsm=...,landlock`), or set safety.bash_sandbox: auto to use bubblewrap"
    )]
    LandlockRequired(#[source] Arc<ProbeError>),
    /// Neither works; the source is why landlock, the last one tried, does not.
    #[error(
        "Bash is unavailable: no sandbox works here. bubblewrap: {bwrap}. landlock: {landlock}. Install the `bubblewrap` package (and allow unprivileged user namespaces), or run on a kernel with landlock enabled"
    )]
    NoSandbox {
        bwrap: Arc<ProbeError>,
        #[source]
        landlock: Arc<ProbeError>,
    },
}

/// Why running `true` under a confinement failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot create a probe directory: {0}")]
    Directory(#[source] std::io::Error),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Launch(#[from] SandboxError),
    #[error("cannot start it ({0}); install the `bubblewrap` package")]
    Start(#[source] std::io::Error),
    #[error("{ending}: {output}")]
    Failed { ending: String, output: String },
}

impl SandboxError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
        let what = what.into();
        move |source| SandboxError::Io { what, source }
    }
}

/// `Bash`.
pub struct BashTool {
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
        let confinement = match confinement(&self.config).await {
            Ok(c) => c,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        run_bash(&self.config, ctx, &ws, &input, confinement).await
    }
}

/// Decides how to confine commands under `mode`, probing each mechanism once per process with
/// the exact launch path `Bash` uses. `auto` logs its choice once; a mode that cannot be had is
/// an error naming why and the fix, never a silent step down.
pub async fn confinement(config: &ToolsConfig) -> Result<Confinement, ConfinementError> {
    let chosen = match config.bash_sandbox {
        BashSandboxMode::Always => probe(config, Confinement::Bwrap)
            .await
            .map(|()| Confinement::Bwrap)
            .map_err(ConfinementError::BwrapRequired)?,
        BashSandboxMode::Off => probe(config, Confinement::Landlock)
            .await
            .map(|()| Confinement::Landlock)
            .map_err(ConfinementError::LandlockRequired)?,
        BashSandboxMode::Auto => match probe(config, Confinement::Bwrap).await {
            Ok(()) => Confinement::Bwrap,
            Err(bwrap) => match probe(config, Confinement::Landlock).await {
                Ok(()) => {
                    log_once(
                        Confinement::Landlock,
                        &format!("bubblewrap does not work here ({bwrap})"),
                    );
                    Confinement::Landlock
                }
                Err(landlock) => {
                    return Err(ConfinementError::NoSandbox { bwrap, landlock });
                }
            },
        },
        BashSandboxMode::UnsafeNoSandbox => Confinement::Unconfined,
    };
    log_once(chosen, "");
    Ok(chosen)
}

/// Logs the confinement `Bash` uses, once per process and confinement: `info` for bubblewrap,
/// `warn` for the weaker ones, so an operator sees them at the default log level.
fn log_once(confinement: Confinement, why: &str) {
    static LOGGED: std::sync::Mutex<Vec<Confinement>> = std::sync::Mutex::new(Vec::new());
    let Ok(mut logged) = LOGGED.lock() else {
        return;
    };
    if logged.contains(&confinement) {
        return;
    }
    logged.push(confinement);
    match confinement {
        Confinement::Bwrap => {
            tracing::info!(target: "maestro::sandbox", "Bash sandbox: {}", confinement.describe())
        }
        Confinement::Landlock => {
            tracing::warn!(target: "maestro::sandbox", "Bash sandbox: {}{}", confinement.describe(), if why.is_empty() { String::new() } else { format!(": {why}") })
        }
        Confinement::Unconfined => {
            tracing::warn!(target: "maestro::sandbox", "Bash sandbox: {}: commands run with Maestro's own access to this host", confinement.describe())
        }
    }
}

/// Whether `confinement` works here: `true` run through the same launch path as every call,
/// once per process.
async fn probe(config: &ToolsConfig, confinement: Confinement) -> Result<(), Arc<ProbeError>> {
    static BWRAP: OnceCell<Result<(), Arc<ProbeError>>> = OnceCell::const_new();
    static LANDLOCK: OnceCell<Result<(), Arc<ProbeError>>> = OnceCell::const_new();
    let cell = match confinement {
        Confinement::Bwrap => &BWRAP,
        Confinement::Landlock => &LANDLOCK,
        Confinement::Unconfined => return Ok(()),
    };
    cell.get_or_init(|| async { run_probe(config, confinement).await.map_err(Arc::new) })
        .await
        .clone()
}

async fn run_probe(config: &ToolsConfig, confinement: Confinement) -> Result<(), ProbeError> {
    let dir = std::env::temp_dir().join(format!(
        "maestro-sandbox-probe-{}-{:?}",
        std::process::id(),
        confinement
    ));
    std::fs::create_dir_all(&dir).map_err(ProbeError::Directory)?;
    let result = async {
        let ws = Workspace::open(&dir)?;
        let cancel = tokio_util::sync::CancellationToken::new();
        let job = launch::prepare(
            config,
            &ws,
            &[],
            "true",
            confinement,
            Duration::from_secs(10),
            &cancel,
        )?;
        let finished = process::run(job.job).await.map_err(ProbeError::Start)?;
        match finished.ending {
            Ending::Exited(0) => Ok(()),
            other => Err(ProbeError::Failed {
                ending: format!("{other:?}"),
                output: finished.output.trim().to_string(),
            }),
        }
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result
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
    let paths = match confinement {
        Confinement::Bwrap | Confinement::Landlock => None,
        Confinement::Unconfined => Some(PathPolicy {
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
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let timeout = config.bash_timeout(input.timeout);
    // Checked before (a file that arrived by other means; handing the directories to the
    // sandbox user would clear the bits silently) and after the command.
    let mut cleared = setid::clear(&writable);
    let launch = match launch::prepare(
        config,
        ws,
        &writable,
        &input.command,
        confinement,
        timeout,
        &ctx.cancel,
    ) {
        Ok(l) => l,
        Err(e) => return ToolOutput::error(format!("could not sandbox the command: {e}")),
    };
    let finished = process::run(launch.job).await;
    drop(launch.keep);
    cleared.extend(setid::clear(&writable));
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
        Err(e) => ToolOutput::error(format!("could not start the command: {e}")),
    }
}

/// The workspace directories mounted writable: the configured ones, only when the movement may
/// edit, each resolved (and created) inside the workspace.
fn writable_dirs(
    ws: &Workspace,
    edit: bool,
    dirs: &[String],
) -> Result<Vec<PathBuf>, SandboxError> {
    if !edit {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for dir in dirs {
        let resolved = ws
            .resolve(dir)
            .map_err(|source| SandboxError::WritableDir {
                dir: dir.clone(),
                source,
            })?;
        if !resolved.abs.exists() {
            std::fs::create_dir_all(&resolved.abs)
                .map_err(SandboxError::io(format!("cannot create `{dir}`")))?;
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
