//! Running one shell command line confined: bubblewrap + seccomp, or landlock + seccomp where
//! bubblewrap cannot run, with resource limits, a scrubbed environment and, when Maestro runs as
//! root, an unprivileged user. The command-line policy (allowlists, the exec-capable table,
//! package installs) decides beforehand what may run at all. See `docs/security.md` for what
//! each mode guarantees.
//!
//! This crate knows no tools and no runs: it is given a directory, the directories inside it
//! that may be written, a command line and limits ([`SandboxConfig`]), and hands back what the
//! command printed and how it ended. `maestro-tools`' `Bash` is its one user.

mod bwrap;
mod cgroup;
mod child;
mod command_line;
mod exec_capable;
mod landlock_fs;
mod launch;
mod policy;
mod process;
mod python_env;
mod seccomp;
mod setid;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

pub use command_line::SyntaxError;
pub use exec_capable::ExecRefusal;
pub use policy::{
    ANY_PROGRAM, DEFAULT_ALLOWED_COMMANDS, INSTALL_REFUSED, PathPolicy, PathRules, PolicyError,
    check as check_command, is_package_install,
};
pub use process::{Ending, Finished};
pub use python_env::{
    DEFAULT_REQUIREMENTS as DEFAULT_PYTHON_REQUIREMENTS, EnvInfo, PythonEnv, PythonEnvError,
    ReadyEnv, SetupOutcome,
};
pub use setid::clear as clear_setid;

/// Where the confined directory appears inside the bubblewrap sandbox.
pub const SANDBOX_WORKSPACE: &str = "/workspace";

/// How commands are confined (`safety.bash_sandbox`). Every mode but `unsafe_no_sandbox` is
/// kernel-enforced; none silently runs weaker than it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// bubblewrap + seccomp when bubblewrap works here, else landlock + seccomp; commands cannot
    /// run (with the reason and the fix) when neither works. The choice is logged once.
    #[default]
    Auto,
    /// bubblewrap + seccomp, or commands cannot run.
    Always,
    /// Do not use bubblewrap: landlock + seccomp, or commands cannot run.
    Off,
    /// No sandbox at all: commands run with Maestro's own access to the host, kept only by the
    /// allowlist, the resource limits and the scrubbed environment. Logged loudly at every
    /// start and written into the run record.
    UnsafeNoSandbox,
}

/// The limits and the confinement one command runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxConfig {
    /// How commands are confined (`safety.bash_sandbox`).
    pub mode: SandboxMode,
    /// Processes the command may hold at once (a pids cgroup where the host lets us create
    /// one; the PID namespace and the time limit apply always).
    pub max_processes: u32,
    /// Memory, in MiB (a memory cgroup where the host lets us make one, else `RLIMIT_AS`).
    pub memory_mb: u64,
    /// Size of the `/tmp` tmpfs inside the bubblewrap sandbox, in MiB.
    pub tmp_mb: u64,
    /// CPU seconds (`RLIMIT_CPU`).
    pub cpu_secs: u64,
    /// Largest file the command may write, in MiB (`RLIMIT_FSIZE`).
    pub file_mb: u64,
    /// Host user the command runs as when Maestro itself runs as root (`safety.sandbox_uid`).
    pub uid: u32,
    /// Host group the command runs as when Maestro itself runs as root (`safety.sandbox_gid`).
    pub gid: u32,
    /// Bytes of output kept (the rest is counted, not kept).
    pub output_cap_bytes: usize,
}

/// Whom the command runs as when Maestro runs as root (otherwise it runs as Maestro's own user).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunAs {
    /// The sandbox user ([`SandboxConfig::uid`]/`gid`); the writable directories are handed to
    /// it before the command runs. For directories Maestro made.
    #[default]
    SandboxUser,
    /// The user who owns `root`: for a directory someone named, whose files must keep their
    /// owner, so nothing changes hands. Refused when that user is root.
    RootOwner,
}

/// One command to run: where, what may be written, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Command<'a> {
    /// The directory the command runs in (canonical; `/workspace` inside bubblewrap). It is
    /// read-only to the command except for `writable`.
    pub root: &'a Path,
    /// Absolute directories inside `root` the command may write (`root` itself makes all of
    /// it writable).
    pub writable: &'a [PathBuf],
    /// The shell command line (`/bin/sh -c`).
    pub line: &'a str,
    /// Whom it runs as when Maestro runs as root.
    pub run_as: RunAs,
    /// How long the command may run; past it the command and everything it started are killed
    /// and it ends [`Ending::TimedOut`].
    pub timeout: Duration,
    /// Stops the command and everything it started.
    pub cancel: &'a CancellationToken,
    /// A finished Python environment ([`PythonEnv::ready`]) mounted read-only at its own path,
    /// its `bin/` first on `PATH`, so `python3` is its interpreter; `None`: the system's.
    pub python_env: Option<&'a Path>,
}

/// Why a command could not be run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The confinement could not be set up around the command (the source says which step).
    #[error("could not sandbox the command: {0}")]
    Sandbox(#[source] SandboxError),
    /// The sandbox was set up but the process could not be spawned.
    #[error("could not start the command: {0}")]
    Start(#[source] std::io::Error),
}

/// Runs `command` under `confinement` (see [`confinement`]) and waits for it to end, be
/// stopped by its time limit or cancelled.
pub async fn run(
    config: &SandboxConfig,
    confinement: Confinement,
    command: Command<'_>,
) -> Result<Finished, RunError> {
    let launch = launch::prepare(config, confinement, command).map_err(RunError::Sandbox)?;
    let shown = launch.keep.view.is_some();
    let finished = process::run(launch.job).await;
    drop(launch.keep);
    finished.map_err(|e| match shown {
        false => RunError::Start(e),
        true => RunError::Sandbox(SandboxError::Unreachable {
            workspace: command.root.to_path_buf(),
            source: e,
        }),
    })
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
    /// The seccomp filter could not be compiled for this architecture.
    #[error("cannot build the seccomp filter: {0}")]
    Seccomp(#[source] Arc<seccompiler::Error>),
    /// The landlock ruleset could not be built or is not enforced by this kernel; holds why.
    #[error("landlock is unavailable: {0}")]
    Landlock(String),
    /// A file-system step of the setup failed (scratch directory, ownership, filter file).
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the path (completes the message before the cause).
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The sandbox user cannot traverse a directory above the workspace, and the workspace
    /// could not be shown to it elsewhere (a private mount namespace needs `CAP_SYS_ADMIN`).
    #[error(
        "Maestro runs as root, so Bash runs commands as an unprivileged user, which cannot traverse the directories above the workspace {}; showing it the workspace in a mount namespace of its own failed ({source}). Put workspaces under a directory others can traverse (for example /srv/maestro), set safety.sandbox_uid to a user that can, or run Maestro as an unprivileged user", workspace.display()
    )]
    Unreachable {
        /// The workspace the command was to run in.
        workspace: PathBuf,
        /// Why showing the workspace in a private mount namespace failed.
        #[source]
        source: std::io::Error,
    },
    /// Maestro runs as root, the command runs as the workspace's owner ([`RunAs::RootOwner`]),
    /// and that owner is root; holds the workspace.
    #[error(
        "Maestro runs as root and the workspace {} belongs to root. Bash never runs commands as root, and in a directory you named it does not hand your files to the sandbox user; change the directory's owner to the user commands should run as (`chown -R USER {}`), or run Maestro as that user",
        .0.display(), .0.display()
    )]
    RootOwned(PathBuf),
}

/// Why the sandbox a mode asks for cannot be had here.
#[derive(Debug, thiserror::Error)]
pub enum ConfinementError {
    /// `safety.bash_sandbox: always`, and bubblewrap does not work here.
    #[error(
        "Bash is unavailable: it requires bubblewrap (safety.bash_sandbox: always), which does not work here: {0}. Install the `bubblewrap` package and allow unprivileged user namespaces, or set safety.bash_sandbox: auto to use landlock instead"
    )]
    BwrapRequired(#[source] Arc<ProbeError>),
    /// `safety.bash_sandbox: off`, and landlock does not work here.
    #[error(
        "Bash is unavailable: safety.bash_sandbox: off confines commands with landlock, which does not work here: {0}. Use a kernel with landlock enabled (5.13 or later, `lsm=...,landlock`), or set safety.bash_sandbox: auto to use bubblewrap"
    )]
    LandlockRequired(#[source] Arc<ProbeError>),
    /// Neither works; the source is why landlock, the last one tried, does not.
    #[error(
        "Bash is unavailable: no sandbox works here. bubblewrap: {bwrap}. landlock: {landlock}. Install the `bubblewrap` package (and allow unprivileged user namespaces), or run on a kernel with landlock enabled"
    )]
    NoSandbox {
        /// Why bubblewrap does not work.
        bwrap: Arc<ProbeError>,
        /// Why landlock does not work.
        #[source]
        landlock: Arc<ProbeError>,
    },
}

/// Why running `true` under a confinement failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The probe's scratch directory under the system temporary directory could not be made.
    #[error("cannot create a probe directory: {0}")]
    Directory(#[source] std::io::Error),
    /// The confinement could not be set up for the probe.
    #[error(transparent)]
    Launch(#[from] SandboxError),
    /// The launcher could not be spawned (for bubblewrap: `bwrap` is missing).
    #[error("cannot start it ({0}); install the `bubblewrap` package")]
    Start(#[source] std::io::Error),
    /// `true` ran but did not exit 0.
    #[error("{ending}: {output}")]
    Failed {
        /// How it ended instead (an [`Ending`], debug-printed).
        ending: String,
        /// What it printed, trimmed: usually the launcher's complaint.
        output: String,
    },
}

impl SandboxError {
    /// An I/O error on `what`.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
        let what = what.into();
        move |source| SandboxError::Io { what, source }
    }
}

/// Decides how to confine commands under `mode`, probing each mechanism once per process with
/// the exact launch path `Bash` uses. `auto` logs its choice once; a mode that cannot be had is
/// an error naming why and the fix, never a silent step down.
pub async fn confinement(config: &SandboxConfig) -> Result<Confinement, ConfinementError> {
    let chosen = match config.mode {
        SandboxMode::Always => probe(config, Confinement::Bwrap)
            .await
            .map(|()| Confinement::Bwrap)
            .map_err(ConfinementError::BwrapRequired)?,
        SandboxMode::Off => probe(config, Confinement::Landlock)
            .await
            .map(|()| Confinement::Landlock)
            .map_err(ConfinementError::LandlockRequired)?,
        SandboxMode::Auto => match probe(config, Confinement::Bwrap).await {
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
        SandboxMode::UnsafeNoSandbox => Confinement::Unconfined,
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
async fn probe(config: &SandboxConfig, confinement: Confinement) -> Result<(), Arc<ProbeError>> {
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

async fn run_probe(config: &SandboxConfig, confinement: Confinement) -> Result<(), ProbeError> {
    let dir = std::env::temp_dir().join(format!(
        "maestro-sandbox-probe-{}-{:?}",
        std::process::id(),
        confinement
    ));
    std::fs::create_dir_all(&dir).map_err(ProbeError::Directory)?;
    let result = async {
        let root = std::fs::canonicalize(&dir).map_err(ProbeError::Directory)?;
        let cancel = CancellationToken::new();
        let command = Command {
            root: &root,
            writable: &[],
            line: "true",
            run_as: RunAs::SandboxUser,
            timeout: Duration::from_secs(10),
            python_env: None,
            cancel: &cancel,
        };
        let job = launch::prepare(config, confinement, command)?;
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
