//! `maestro tools`: list the tools, or call one by hand, through the app
//! (`maestro_app::list_tools`, `maestro_app::call_tool`): the same registry and the same entry
//! point a run uses.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context, anyhow};
use maestro_app::{BashSandboxMode, ToolCallRequest};
use maestro_config::{Config, LoadFrom};
use maestro_protocol::RunScratch;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List every tool with its one-sentence description: the built-in, web and SSH tools and
    /// the tools of every configured MCP server.
    List {
        /// Print the full specs (name, description, input JSON Schema) as JSON.
        #[arg(long)]
        json: bool,
        /// Use this configuration file instead of `~/.maestro/config.yaml` and
        /// `.maestro/config.yaml`.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Call one tool and print `{"ok":bool,"output":...,"error":...}`. Exit code 0 when the
    /// tool succeeded, 1 when it failed, 2 on usage errors.
    Call(Box<CallArgs>),
}

#[derive(Debug, clap::Args)]
pub(crate) struct CallArgs {
    /// The tool's name, e.g. `Read` or `Bash`.
    pub tool: String,
    /// The job workspace (created with the standard layout if it does not exist).
    #[arg(long)]
    pub workspace: PathBuf,
    /// The tool's input as a JSON object, e.g. '{"file_path":"input/a.txt"}'.
    #[arg(long, default_value = "{}")]
    pub input: String,
    /// Act as a movement with `edit: true` (enables Write, Edit, writable SQLite).
    #[arg(long)]
    pub edit: bool,
    /// Bash allowlist for this call (comma-separated program names); default: the built-in list.
    #[arg(long, value_delimiter = ',')]
    pub allowed_commands: Option<Vec<String>>,
    /// SSH connection ids the call may use (comma-separated; `*` for any configured one);
    /// default: none.
    #[arg(long, value_delimiter = ',')]
    pub allowed_ssh_connections: Option<Vec<String>>,
    /// Bash sandbox mode (default: `tools.bash_sandbox`, `auto`).
    #[arg(long, value_enum)]
    pub bash_sandbox: Option<SandboxArg>,
    /// Directory the pieces tools read and write (default: `tools.pieces_dir`).
    #[arg(long)]
    pub pieces_dir: Option<PathBuf>,
    /// Directory holding skills (repeatable; default: `tools.skills_dirs`).
    #[arg(long)]
    pub skills_dir: Vec<PathBuf>,
    /// Use this configuration file instead of `~/.maestro/config.yaml` and
    /// `.maestro/config.yaml`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// JSON file holding the run scratch (checklist); read before and written after the call.
    #[arg(long)]
    pub scratch: Option<PathBuf>,
    /// Stop the call after this many seconds (default: `tools.call_timeout_ms`, 120 s; Bash
    /// keeps its own limit when that is shorter).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum SandboxArg {
    Auto,
    Always,
    Off,
    UnsafeNoSandbox,
}

fn load_config(path: Option<PathBuf>) -> anyhow::Result<Config> {
    let (config, _files) = Config::load(LoadFrom::current(path)?).map_err(|e| anyhow!("{e}"))?;
    Ok(config)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `work` to completion, then stops the runtime without waiting for blocking threads: a
/// thread stuck in a system call (a tool that timed out) must not keep the process alive once
/// the answer is known. Such threads end with the process.
pub(crate) fn block_on<T>(work: impl std::future::Future<Output = T>) -> anyhow::Result<T> {
    let runtime = runtime()?;
    let out = runtime.block_on(work);
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    Ok(out)
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<u8> {
    match cmd {
        Command::List { json, config } => {
            let config = load_config(config)?;
            block_on(list(&config, json))?
        }
        Command::Call(args) => call(*args),
    }
}

async fn list(config: &Config, json: bool) -> anyhow::Result<u8> {
    let listing = maestro_app::list_tools(config).await?;
    for (server, reason) in &listing.unavailable {
        eprintln!(
            "note: MCP server `{server}` is not available, its tools are not listed: {reason}"
        );
    }
    let specs = listing.specs;
    // A closed stdout (`| head`) is not worth a panic.
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{}", serde_json::to_string_pretty(&specs)?);
    } else {
        let width = specs.iter().map(|s| s.name.len()).max().unwrap_or(0);
        for spec in &specs {
            let _ = writeln!(out, "{:width$}  {}", spec.name, spec.description);
        }
    }
    Ok(0)
}

fn call(args: CallArgs) -> anyhow::Result<u8> {
    let scratch = match &args.scratch {
        Some(path) if path.exists() => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow!("cannot read the scratch file `{}`: {e}", path.display()))?;
            serde_json::from_str::<RunScratch>(&text)
                .map_err(|e| anyhow!("the scratch file `{}` is not valid: {e}", path.display()))?
        }
        _ => RunScratch::default(),
    };
    let mut config = load_config(args.config.clone())?;
    if let Some(mode) = args.bash_sandbox {
        config.tools.bash_sandbox = match mode {
            SandboxArg::Auto => BashSandboxMode::Auto,
            SandboxArg::Always => BashSandboxMode::Always,
            SandboxArg::Off => BashSandboxMode::Off,
            SandboxArg::UnsafeNoSandbox => BashSandboxMode::UnsafeNoSandbox,
        };
    }
    if args.pieces_dir.is_some() {
        config.tools.pieces_dir = args.pieces_dir.clone();
    }
    if !args.skills_dir.is_empty() {
        config.tools.skills_dirs = args.skills_dir.clone();
    }
    if let Some(secs) = args.timeout {
        let limit = std::time::Duration::from_secs(secs);
        let tools = &mut config.tools;
        tools.call_timeout = limit;
        tools.bash_max_timeout = tools.bash_max_timeout.min(limit);
        tools.bash_default_timeout = tools.bash_default_timeout.min(limit);
    }
    let request = ToolCallRequest {
        tool: args.tool.clone(),
        input: args.input.clone(),
        workspace: args.workspace.clone(),
        edit: args.edit,
        allowed_commands: args.allowed_commands.clone(),
        allowed_ssh_connections: args.allowed_ssh_connections.clone(),
        scratch,
    };
    let called = block_on(maestro_app::call_tool(&config, request))?
        .map_err(|e| anyhow!(maestro_app::error_chain(&e)))?;
    let output = called.output;
    if let Some(path) = &args.scratch {
        std::fs::write(path, serde_json::to_string_pretty(&called.scratch)?)
            .map_err(|e| anyhow!("cannot write the scratch file `{}`: {e}", path.display()))?;
    }
    let mut printed = serde_json::json!({
        "ok": output.ok,
        "output": if output.ok { serde_json::Value::String(output.output.clone()) } else { serde_json::Value::Null },
        "error": if output.ok { serde_json::Value::Null } else { serde_json::Value::String(output.output.clone()) },
    });
    if output.truncated {
        printed["truncated"] = serde_json::Value::Bool(true);
    }
    // A closed stdout (`| head`) is not worth a panic.
    let _ = writeln!(std::io::stdout(), "{printed}");
    Ok(if output.ok { 0 } else { 1 })
}
