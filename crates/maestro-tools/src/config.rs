//! Tool configuration: the knobs an operator sets once (sandbox mode, default Bash allowlist,
//! writable directories, output caps, time limits, where pieces and skills live).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How `Bash` is confined (`safety.bash_sandbox`): the sandbox's [`SandboxMode`].
pub use maestro_sandbox::SandboxMode as BashSandboxMode;
pub use maestro_sandbox::{DEFAULT_ALLOWED_COMMANDS, SandboxConfig, SandboxMode};

/// Configuration shared by every built-in tool. Build it once and hand it to
/// [`Registry::builtin`](crate::Registry::builtin).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolsConfig {
    /// How `Bash` confines commands (`safety.bash_sandbox`, default `auto`).
    pub bash_sandbox: BashSandboxMode,
    /// Programs `Bash` may run when a movement sets no `allowed_commands`.
    pub default_allowed_commands: Vec<String>,
    /// Workspace-relative directories `Write`, `Edit` and `Bash` may write to (when the movement
    /// has `edit: true`). `"."` makes the whole workspace writable.
    pub writable_dirs: Vec<String>,
    /// Maximum bytes of tool output handed back to the model.
    pub output_cap_bytes: usize,
    /// The longest side, in pixels, of an image ReadImage shows the model (`tools.image_max_side`,
    /// default 1568): a larger image is shrunk to it, keeping its proportions.
    pub image_max_side: u32,
    /// `Bash` time limit when the call gives none.
    #[serde(with = "millis", rename = "bash_default_timeout_ms")]
    pub bash_default_timeout: Duration,
    /// Upper bound on a `Bash` call's `timeout`.
    #[serde(with = "millis", rename = "bash_max_timeout_ms")]
    pub bash_max_timeout: Duration,
    /// Time limit the registry applies to every other tool call.
    #[serde(with = "millis", rename = "call_timeout_ms")]
    pub call_timeout: Duration,
    /// Maximum number of processes one `Bash` call may hold at once (enforced with a pids
    /// cgroup where the host lets us create one; the PID namespace and time limit apply always).
    pub bash_max_processes: u32,
    /// Memory one `Bash` call may use, in MiB (a memory cgroup where the host lets us make
    /// one, else `RLIMIT_AS`).
    pub bash_memory_mb: u64,
    /// Size of the `/tmp` tmpfs inside the bubblewrap sandbox, in MiB.
    pub bash_tmp_mb: u64,
    /// CPU seconds one `Bash` call may use (`RLIMIT_CPU`).
    pub bash_cpu_secs: u64,
    /// Largest file one `Bash` call may write, in MiB (`RLIMIT_FSIZE`).
    pub bash_file_mb: u64,
    /// Host user sandboxed commands run as when Maestro itself runs as root, so what they
    /// create is not owned by root (`safety.sandbox_uid`, default `nobody`, 65534).
    pub sandbox_uid: u32,
    /// Host group sandboxed commands run as when Maestro itself runs as root
    /// (`safety.sandbox_gid`, default 65534).
    pub sandbox_gid: u32,
    /// Directory `ListPieces`/`GetPiece` read and `CreatePiece`/`UpdatePiece` write.
    pub pieces_dir: Option<PathBuf>,
    /// Further read-only piece directories (e.g. built-ins) listed by `ListPieces`/`GetPiece`.
    pub extra_pieces_dirs: Vec<PathBuf>,
    /// Directories holding skills: `<dir>/<name>.md` or `<dir>/<name>/SKILL.md`.
    pub skills_dirs: Vec<PathBuf>,
    /// Where `InstallSkill` installs skills (and where `ListSkills`/`ReadSkill` also look);
    /// `None` (the default) leaves `InstallSkill` off.
    pub skills_install_dir: Option<PathBuf>,
    /// Directory of `<Tool>.md` files read before the embedded tool docs (for operators who
    /// document their own tools).
    pub docs_dir: Option<PathBuf>,
    /// Where `maestro sandbox setup` builds the Python environment `Bash` mounts
    /// (`safety.python_env`); a finished one there gives sandboxed commands its `python3`.
    #[serde(skip)]
    pub python_env: Option<PathBuf>,
    /// The tool names `CreatePiece`/`UpdatePiece` check a piece's `allowed_tools` against. It
    /// depends on more than this section (web search, SSH connections), so whoever assembles the
    /// tools sets it (`maestro-app`'s toolbox); `None` checks against this crate's
    /// [`crate::catalog::names_only`].
    #[serde(skip)]
    pub tool_catalog: Option<maestro_piece::ToolCatalog>,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            bash_sandbox: BashSandboxMode::Auto,
            default_allowed_commands: DEFAULT_ALLOWED_COMMANDS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            writable_dirs: vec!["output".to_string()],
            output_cap_bytes: 30_000,
            image_max_side: 1568,
            bash_default_timeout: Duration::from_secs(120),
            bash_max_timeout: Duration::from_secs(600),
            call_timeout: Duration::from_secs(120),
            bash_max_processes: 256,
            bash_memory_mb: 1024,
            bash_tmp_mb: 256,
            bash_cpu_secs: 600,
            bash_file_mb: 1024,
            sandbox_uid: 65534,
            sandbox_gid: 65534,
            pieces_dir: None,
            extra_pieces_dirs: Vec::new(),
            skills_dirs: Vec::new(),
            skills_install_dir: None,
            docs_dir: None,
            python_env: None,
            tool_catalog: None,
        }
    }
}

impl ToolsConfig {
    /// Every directory skills are found in: `skills_dirs`, then `skills_install_dir`.
    pub fn skill_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.skills_dirs.clone();
        dirs.extend(self.skills_install_dir.iter().cloned());
        dirs
    }

    /// The limits and the confinement `Bash` hands the sandbox.
    pub fn sandbox(&self) -> SandboxConfig {
        SandboxConfig {
            mode: self.bash_sandbox,
            max_processes: self.bash_max_processes,
            memory_mb: self.bash_memory_mb,
            tmp_mb: self.bash_tmp_mb,
            cpu_secs: self.bash_cpu_secs,
            file_mb: self.bash_file_mb,
            uid: self.sandbox_uid,
            gid: self.sandbox_gid,
            output_cap_bytes: self.output_cap_bytes,
        }
    }

    /// The cap applied to the `timeout` a model asked for (milliseconds), or the default.
    pub fn bash_timeout(&self, requested_ms: Option<u64>) -> Duration {
        match requested_ms {
            Some(ms) => Duration::from_millis(ms.max(1)).min(self.bash_max_timeout),
            None => self.bash_default_timeout,
        }
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
