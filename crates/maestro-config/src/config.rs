//! The whole configuration: its sections, their defaults, the checks that span fields, and the
//! conversions the CLI and the server need.

use std::path::PathBuf;

use maestro_engine::EngineConfig;
use maestro_gateway::GatewayConfig;
use maestro_tools::{BashSandboxMode, ToolsConfig};
use maestro_tools_mcp as mcp;
use maestro_tools_mcp::McpConfig;
use maestro_tools_ssh::{SshConnection, SshRegistry, SshRegistryError};
use maestro_tools_web::WebConfig;
use serde::{Deserialize, Serialize};

use crate::auth::AuthConfig;
use crate::engine::EngineSettings;
use crate::error::ConfigError;
use crate::llm::LlmConfig;

/// Maestro's configuration, as loaded by [`Config::load`](crate::Config::load): the files merged,
/// then the environment applied. Command-line flags are the caller's to apply on top (set the
/// public fields).
///
/// `Debug` and [`Config::redacted_yaml`] never show a secret.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `llm:` — the model endpoint, the model, the key, timeouts and retries.
    pub llm: LlmConfig,
    /// `engine:` — how a run is driven: limits, context thresholds, reminders.
    pub engine: EngineSettings,
    /// `tools:` — the built-in tools: the `Bash` sandbox and its limits, writable directories,
    /// output caps, piece and skill directories.
    pub tools: ToolsConfig,
    /// `web:` — what `WebFetch`, `DownloadFile`, `WebSearch` and `BrowseWeb` may reach, and their
    /// limits.
    pub web: WebConfig,
    /// `mcp:` — the MCP servers whose tools agents may use.
    pub mcp: McpConfig,
    /// `ssh:` — the SSH connections agents may use.
    pub ssh: SshConfig,
    /// `paths:` — where runs, pieces and facets live.
    pub paths: PathsConfig,
    /// `safety:` — the sandbox switch and limits; each key set here wins over its `tools.` twin.
    pub safety: SafetyConfig,
    /// `store:` — where jobs and their events are kept.
    pub store: StoreConfig,
    /// `workers:` — the worker profiles `maestro worker` can run (empty by default).
    pub workers: Vec<WorkerProfile>,
    /// `subtasks:` — how far runs may split into child runs.
    pub subtasks: SubtasksConfig,
    /// `auth:` — who may use the server: the switch, admins, sessions, the OIDC provider.
    pub auth: AuthConfig,
    /// `files:` — how large a job's uploaded inputs and recorded outputs may be.
    pub files: FilesConfig,
    /// `gateway:` — the LLM gateway: its upstreams and the model names it routes
    /// (`maestro gateway`, and `maestro serve` at `/v1` when enabled).
    pub gateway: GatewayConfig,
    /// `knowledge:` — the knowledge base: chunk sizes, the embedding model, search limits.
    pub knowledge: crate::knowledge::KnowledgeConfig,
    /// The project root: the directory holding the project's `.maestro/` (the current
    /// directory when there is none). Defaults that name project files start here.
    #[serde(skip)]
    pub root: PathBuf,
}

/// `store:` — where jobs, their events and the audit log are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite://PATH` or `postgres://…`; unset means `sqlite://.maestro/maestro.db` in the
    /// project. `--db` and `MAESTRO_DB` win over it.
    pub url: Option<String>,
}

/// `subtasks:` — how far runs may split into child runs (`SpawnSubTask`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubtasksConfig {
    /// How many levels of subtasks below a submitted job (its children are level 1). 0 turns
    /// subtasks off: `SpawnSubTask` is not offered and `WAIT_SUBTASKS` takes `default_next`.
    pub max_depth: u32,
    /// How many children one run may spawn in all.
    pub max_children: u32,
}

impl Default for SubtasksConfig {
    fn default() -> Self {
        SubtasksConfig {
            max_depth: 2,
            max_children: 10,
        }
    }
}

/// `files:` — the limits on a job's files: the inputs uploaded with it and the outputs its runs
/// leave in `output/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// The largest single file, in MiB.
    pub max_upload_mb: u64,
    /// The most all of one job's files of one kind (its inputs, or its outputs) may hold, in
    /// MiB.
    pub max_job_mb: u64,
    /// The most files of one kind one job may have.
    pub max_files: u64,
}

impl Default for FilesConfig {
    fn default() -> Self {
        FilesConfig {
            max_upload_mb: 25,
            max_job_mb: 100,
            max_files: 1000,
        }
    }
}

/// One entry of `workers:` — a worker profile: how many jobs of which task classes one
/// `maestro worker` process runs at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerProfile {
    /// Shown by `maestro workers`.
    pub name: String,
    /// Jobs this profile runs at the same time (default 1).
    #[serde(default = "WorkerProfile::default_concurrency")]
    pub concurrency: u32,
    /// The task classes it claims; empty means every class.
    #[serde(default)]
    pub task_classes: Vec<String>,
}

impl WorkerProfile {
    fn default_concurrency() -> u32 {
        1
    }
}

/// `safety:` — the sandbox switch and the limits of sandboxed commands. Each key, when set,
/// wins over its `tools.` twin (see [`Config::tools_config`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SafetyConfig {
    /// Which sandbox `Bash` commands run in (`auto`, `always`, `off`, `unsafe_no_sandbox`);
    /// see `tools.bash_sandbox`.
    pub bash_sandbox: Option<BashSandboxMode>,
    /// Memory of one `Bash` call, MiB (default 1024).
    pub bash_memory_mb: Option<u64>,
    /// Size of the sandbox's `/tmp`, MiB (default 256).
    pub bash_tmp_mb: Option<u64>,
    /// CPU seconds of one `Bash` call (default 600).
    pub bash_cpu_secs: Option<u64>,
    /// Processes one `Bash` call may hold at once (default 256).
    pub bash_max_processes: Option<u32>,
    /// Host uid/gid sandboxed commands run as when Maestro runs as root (default 65534).
    pub sandbox_uid: Option<u32>,
    /// Host gid sandboxed commands run as when Maestro runs as root (default 65534).
    pub sandbox_gid: Option<u32>,
    /// The requirements file `maestro sandbox setup` installs into the sandbox's Python
    /// environment (default: the built-in list: numpy, pandas, matplotlib, openpyxl,
    /// python-docx, pypdf).
    pub python_requirements: Option<PathBuf>,
    /// Where `maestro sandbox setup` builds that environment, whose `python3` sandboxed
    /// commands then run (default `.maestro/python`; without a finished environment there,
    /// they get the system's `python3`).
    pub python_env: Option<PathBuf>,
}

impl SafetyConfig {
    /// Writes every key that is set over its `tools.` twin.
    pub fn apply(&self, tools: &mut ToolsConfig) {
        let s = self;
        if let Some(v) = s.python_env.clone() {
            tools.python_env = Some(v);
        }
        if let Some(v) = s.bash_sandbox {
            tools.bash_sandbox = v;
        }
        if let Some(v) = s.bash_memory_mb {
            tools.bash_memory_mb = v;
        }
        if let Some(v) = s.bash_tmp_mb {
            tools.bash_tmp_mb = v;
        }
        if let Some(v) = s.bash_cpu_secs {
            tools.bash_cpu_secs = v;
        }
        if let Some(v) = s.bash_max_processes {
            tools.bash_max_processes = v;
        }
        if let Some(v) = s.sandbox_uid {
            tools.sandbox_uid = v;
        }
        if let Some(v) = s.sandbox_gid {
            tools.sandbox_gid = v;
        }
    }
}

/// `ssh:` — the SSH connections agents may use (by id, through `allowed_ssh_connections`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SshConfig {
    /// The connections, each with its unique `id`, host, user and credentials.
    pub connections: Vec<SshConnection>,
}

impl SshConfig {
    /// The registry the SSH tools read. Duplicate ids are refused when loading, so this only
    /// fails for a configuration changed in code afterwards.
    pub fn registry(&self) -> Result<SshRegistry, SshRegistryError> {
        SshRegistry::new(self.connections.clone())
    }
}

/// `paths:` — where runs, pieces and facets live. After loading, every path is absolute: a
/// relative path in a file is taken from the directory that holds the file's `.maestro/`
/// directory (the file's own directory for a `--config` file elsewhere), a default from the
/// project root, and `~/` means the home directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PathsConfig {
    /// Where run records are written.
    pub runs_dir: PathBuf,
    /// Where pieces are found by name, in order.
    pub pieces_dirs: Vec<PathBuf>,
    /// Further directories searched for facets (personas, policies, knowledge, instructions,
    /// output contracts) after a piece's own.
    pub facets_dirs: Vec<PathBuf>,
}

impl Default for PathsConfig {
    fn default() -> Self {
        PathsConfig {
            runs_dir: PathBuf::from(".maestro/runs"),
            pieces_dirs: vec![PathBuf::from(".maestro/pieces"), PathBuf::from("pieces")],
            facets_dirs: Vec::new(),
        }
    }
}

impl Config {
    /// The engine's configuration: `engine:` with the model and context length of `llm:`.
    /// Fails with [`ConfigError::NoModel`] when no model is configured.
    pub fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        let model = self.llm.require_model()?;
        Ok(self
            .engine
            .to_engine_config(model, self.llm.effective_context_length()))
    }

    /// Problems no single field's type catches, as (field path, what is wrong, the fix).
    pub(crate) fn check(&self) -> Vec<Check> {
        let mut found = Vec::new();
        let mut fail = |field: &[&str], message: String, fix: &str| {
            found.push(Check {
                field: field.iter().map(|s| s.to_string()).collect(),
                message,
                fix: fix.to_string(),
            });
        };
        let llm = &self.llm;
        if !(llm.base_url.starts_with("http://") || llm.base_url.starts_with("https://")) {
            fail(
                &["llm", "base_url"],
                format!("{:?} is not an http(s) URL", llm.base_url),
                match llm.provider {
                    maestro_llm::ProviderKind::OpenAi => {
                        "give the API root with its version segment, e.g. http://127.0.0.1:11434/v1"
                    }
                    maestro_llm::ProviderKind::Anthropic => {
                        "give the API root without its version segment, e.g. \
                         https://api.anthropic.com, or remove llm.base_url for that one"
                    }
                },
            );
        }
        if llm.model.as_deref() == Some("") {
            fail(
                &["llm", "model"],
                "the model name is empty".into(),
                "name a model or remove the field",
            );
        }
        if llm.api_key_env.as_deref() == Some("") {
            fail(
                &["llm", "api_key_env"],
                "the variable name is empty".into(),
                "name the environment variable holding the key, e.g. OPENAI_API_KEY",
            );
        }
        if llm.idle_timeout_secs == 0 {
            fail(
                &["llm", "idle_timeout_secs"],
                "must be at least 1".into(),
                "give a number of seconds, e.g. 120",
            );
        }
        if llm.call_timeout_secs < llm.idle_timeout_secs {
            fail(
                &["llm", "call_timeout_secs"],
                format!(
                    "{} s is shorter than idle_timeout_secs ({} s)",
                    llm.call_timeout_secs, llm.idle_timeout_secs
                ),
                "give the whole call at least as long as one silence, e.g. 1800",
            );
        }
        for (field, value, example) in [
            ("max_answer_bytes", llm.max_answer_bytes as u64, "33554432"),
            ("max_answer_tokens", llm.max_answer_tokens, "65536"),
        ] {
            if value == 0 {
                fail(
                    &["llm", field],
                    "must be at least 1".into(),
                    &format!("give a positive limit, e.g. {example}"),
                );
            }
        }
        for (model, overrides) in &llm.models {
            let Some(price) = overrides.price else {
                continue;
            };
            for (field, value) in [
                ("input_per_mtok", Some(price.input_per_mtok)),
                ("output_per_mtok", Some(price.output_per_mtok)),
                ("cached_input_per_mtok", price.cached_input_per_mtok),
            ] {
                if let Some(value) = value
                    && !(value.is_finite() && value >= 0.0)
                {
                    fail(
                        &["llm", "models", model, "price", field],
                        format!("{value} is not a price"),
                        "give US dollars per million tokens, 0 or more, e.g. 0.5",
                    );
                }
            }
        }
        let engine_caps = crate::budget::BudgetSettings {
            max_total_tokens: self.engine.max_total_tokens,
            max_cost_usd: self.engine.max_cost_usd,
        };
        for (field, message, fix) in engine_caps.problems() {
            fail(&["engine", field], message, fix);
        }
        for (piece, settings) in &self.engine.pieces {
            if let Some(budget) = settings.budget {
                for (field, message, fix) in budget.problems() {
                    fail(&["engine", "pieces", piece, "budget", field], message, fix);
                }
            }
        }
        let retry = &llm.retry;
        if retry.max_attempts == 0 {
            fail(
                &["llm", "retry", "max_attempts"],
                "must be at least 1".into(),
                "use 1 to disable retries",
            );
        }
        if retry.initial_ms > retry.max_ms {
            fail(
                &["llm", "retry", "initial_ms"],
                format!(
                    "{} is larger than max_ms ({})",
                    retry.initial_ms, retry.max_ms
                ),
                "make initial_ms at most max_ms",
            );
        }
        if !(0.0..=1.0).contains(&retry.jitter) {
            fail(
                &["llm", "retry", "jitter"],
                format!("{} is outside 0.0..=1.0", retry.jitter),
                "use e.g. 0.2 for ±20 %",
            );
        }
        let t = &self.engine.context_thresholds;
        if !(0.0 < t.warn && t.warn <= t.prompt && t.prompt <= t.force && t.force <= 1.0) {
            fail(
                &["engine", "context_thresholds"],
                format!(
                    "warn {}, prompt {}, force {} are not increasing fractions",
                    t.warn, t.prompt, t.force
                ),
                "use 0 < warn <= prompt <= force <= 1, e.g. 0.70, 0.85, 0.95",
            );
        }
        for slug in self.mcp.servers.keys() {
            if let Err(invalid) = mcp::check_slug(slug) {
                fail(
                    &["mcp", "servers", slug],
                    invalid.to_string(),
                    "rename the server",
                );
            }
        }
        for (index, profile) in self.workers.iter().enumerate() {
            let index = index.to_string();
            if profile.concurrency == 0 {
                fail(
                    &["workers", &index, "concurrency"],
                    "must be at least 1".into(),
                    "give the number of jobs this profile runs at once, e.g. 2",
                );
            }
            if profile.name.is_empty() {
                fail(
                    &["workers", &index, "name"],
                    "the profile name is empty".into(),
                    "name the profile, e.g. `default`",
                );
            }
        }
        if self.subtasks.max_depth > 0 && self.subtasks.max_children == 0 {
            fail(
                &["subtasks", "max_children"],
                "must be at least 1 while subtasks are on".into(),
                "give the number of subtasks one run may spawn, e.g. 10, or set `subtasks.max_depth: 0` to turn them off",
            );
        }
        for (index, connection) in self.ssh.connections.iter().enumerate() {
            let earlier = &self.ssh.connections[..index];
            if earlier.iter().any(|c| c.id == connection.id) {
                let index = index.to_string();
                fail(
                    &["ssh", "connections", &index, "id"],
                    format!("the id {} is declared twice", connection.id),
                    "give every connection its own id (e.g. from `uuidgen`)",
                );
            }
        }
        found.extend(self.auth.check());
        found.extend(self.gateway.check().into_iter().map(|c| Check {
            field: c.field,
            message: c.message,
            fix: c.fix,
        }));
        found
    }
}

/// One failed cross-field check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    pub field: Vec<String>,
    pub message: String,
    pub fix: String,
}
