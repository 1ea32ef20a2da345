//! `maestro tools`: list the tools, or call one by hand through the same registry entry point
//! the engine uses (`Registry::execute_allowed`).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use maestro_tools::{BashSandboxMode, Registry, RunScratch, ToolContext, ToolsConfig};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List every tool with its one-sentence description.
    List {
        /// Print the full specs (name, description, input JSON Schema) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Call one tool and print `{"ok":bool,"output":...,"error":...}`. Exit code 0 when the
    /// tool succeeded, 1 when it failed, 2 on usage errors.
    Call(CallArgs),
}

#[derive(Debug, clap::Args)]
pub struct CallArgs {
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
    /// Bash sandbox mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub bash_sandbox: SandboxArg,
    /// Directory the pieces tools read and write.
    #[arg(long)]
    pub pieces_dir: Option<PathBuf>,
    /// Directory holding skills (repeatable).
    #[arg(long)]
    pub skills_dir: Vec<PathBuf>,
    /// JSON file holding the run scratch (checklist); read before and written after the call.
    #[arg(long)]
    pub scratch: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SandboxArg {
    Auto,
    Always,
    Off,
}

/// The registry the CLI offers: every built-in tool.
fn registry(config: ToolsConfig) -> Registry {
    Registry::builtin(config)
}

pub fn run(cmd: Command) -> anyhow::Result<u8> {
    match cmd {
        Command::List { json } => {
            let specs = registry(ToolsConfig::default()).list();
            if json {
                let _ = writeln!(
                    std::io::stdout(),
                    "{}",
                    serde_json::to_string_pretty(&specs)?
                );
            } else {
                let width = specs.iter().map(|s| s.name.len()).max().unwrap_or(0);
                for spec in specs {
                    let _ = writeln!(
                        std::io::stdout(),
                        "{:width$}  {}",
                        spec.name,
                        spec.description
                    );
                }
            }
            Ok(0)
        }
        Command::Call(args) => call(args),
    }
}

fn call(args: CallArgs) -> anyhow::Result<u8> {
    if !args.workspace.exists() {
        maestro_tools::prepare_workspace(&args.workspace).map_err(|e| {
            anyhow::anyhow!(
                "cannot create the workspace `{}`: {e}",
                args.workspace.display()
            )
        })?;
    }
    let scratch = match &args.scratch {
        Some(path) if path.exists() => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!("cannot read the scratch file `{}`: {e}", path.display())
            })?;
            serde_json::from_str::<RunScratch>(&text).map_err(|e| {
                anyhow::anyhow!("the scratch file `{}` is not valid: {e}", path.display())
            })?
        }
        _ => RunScratch::default(),
    };
    let config = ToolsConfig {
        bash_sandbox: match args.bash_sandbox {
            SandboxArg::Auto => BashSandboxMode::Auto,
            SandboxArg::Always => BashSandboxMode::Always,
            SandboxArg::Off => BashSandboxMode::Off,
        },
        pieces_dir: args.pieces_dir.clone(),
        skills_dirs: args.skills_dir.clone(),
        ..ToolsConfig::default()
    };
    let registry = registry(config);
    let scratch = Arc::new(Mutex::new(scratch));
    let ctx = ToolContext {
        workspace: args.workspace.clone(),
        edit: args.edit,
        allowed_commands: args.allowed_commands.clone(),
        allowed_ssh_connections: None,
        cancel: maestro_tools::CancellationToken::new(),
        scratch: Arc::clone(&scratch),
    };
    // Calling a tool by hand offers it (and nothing else): the permissions under test are the
    // edit flag and the allowlist.
    let allowed = vec![args.tool.clone()];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let output =
        runtime.block_on(registry.execute_allowed(&ctx, &allowed, &args.tool, &args.input));
    if let Some(path) = &args.scratch {
        let state = scratch.lock().map(|s| s.clone()).unwrap_or_default();
        std::fs::write(path, serde_json::to_string_pretty(&state)?).map_err(|e| {
            anyhow::anyhow!("cannot write the scratch file `{}`: {e}", path.display())
        })?;
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
