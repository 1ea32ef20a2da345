//! Tool configuration: the knobs an operator sets once (sandbox mode, default Bash allowlist,
//! writable directories, output caps, time limits, where pieces and skills live).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How `Bash` is confined (`safety.bash_sandbox`). Every mode but `unsafe_no_sandbox` is
/// kernel-enforced; none silently runs weaker than it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BashSandboxMode {
    /// bubblewrap + seccomp when bubblewrap works here, else landlock + seccomp; `Bash` is
    /// unavailable (with the reason and the fix) when neither works. The choice is logged once.
    #[default]
    Auto,
    /// bubblewrap + seccomp, or `Bash` is unavailable.
    Always,
    /// Do not use bubblewrap: landlock + seccomp, or `Bash` is unavailable.
    Off,
    /// No sandbox at all: commands run with Maestro's own access to the host, kept only by the
    /// allowlist, the resource limits and the scrubbed environment. Logged loudly at every
    /// start and written into the run record.
    UnsafeNoSandbox,
}

/// Configuration shared by every built-in tool. Build it once and hand it to
/// [`Registry::builtin`](crate::Registry::builtin).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolsConfig {
    pub bash_sandbox: BashSandboxMode,
    /// Programs `Bash` may run when a movement sets no `allowed_commands`.
    pub default_allowed_commands: Vec<String>,
    /// Workspace-relative directories `Write`, `Edit` and `Bash` may write to (when the movement
    /// has `edit: true`). `"."` makes the whole workspace writable.
    pub writable_dirs: Vec<String>,
    /// Maximum bytes of tool output handed back to the model.
    pub output_cap_bytes: usize,
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
    /// Host user and group sandboxed commands run as when Maestro itself runs as root, so what
    /// they create is not owned by root (default `nobody`, 65534).
    pub sandbox_uid: u32,
    pub sandbox_gid: u32,
    /// Directory `ListPieces`/`GetPiece` read and `CreatePiece`/`UpdatePiece` write.
    pub pieces_dir: Option<PathBuf>,
    /// Further read-only piece directories (e.g. built-ins) listed by `ListPieces`/`GetPiece`.
    pub extra_pieces_dirs: Vec<PathBuf>,
    /// Directories holding skills: `<dir>/<name>.md` or `<dir>/<name>/SKILL.md`.
    pub skills_dirs: Vec<PathBuf>,
    /// Directory of `<Tool>.md` files read before the embedded tool docs (for operators who
    /// document their own tools).
    pub docs_dir: Option<PathBuf>,
    /// The tool names `CreatePiece`/`UpdatePiece` check a piece's `allowed_tools` against. It
    /// depends on more than this section (web search, SSH connections), so whoever builds the
    /// registry sets it ([`crate::catalog::tool_catalog`]); `None` checks the names only.
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
            docs_dir: None,
            tool_catalog: None,
        }
    }
}

/// The programs `Bash` may run when neither the movement nor the configuration says otherwise:
/// reading, searching and transforming text, moving files around inside the workspace, archives,
/// `git` and `sqlite3`. Shells, interpreters (`python3`, `make`), `env`, `sudo`, network clients
/// and package managers are absent on purpose: a program that runs any code needs `*` (see
/// `docs/tools/Bash.md`).
pub const DEFAULT_ALLOWED_COMMANDS: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "find",
    "sed",
    "awk",
    "sort",
    "uniq",
    "cut",
    "tr",
    "diff",
    "cmp",
    "comm",
    "paste",
    "join",
    "fold",
    "nl",
    "column",
    "echo",
    "printf",
    "pwd",
    "mkdir",
    "cp",
    "mv",
    "rm",
    "rmdir",
    "touch",
    "ln",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "stat",
    "file",
    "du",
    "date",
    "true",
    "false",
    "test",
    "seq",
    "sleep",
    "tee",
    "xxd",
    "od",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "base64",
    "jq",
    "sqlite3",
    "tar",
    "gzip",
    "gunzip",
    "zcat",
    "unzip",
    "zip",
    "xargs",
    "git",
];

impl ToolsConfig {
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

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
