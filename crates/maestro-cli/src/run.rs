//! `maestro run`: load (or classify) a piece, run a task through it against an
//! OpenAI-compatible endpoint, show progress, print the result and exit with the run's status.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, anyhow, bail};
use maestro_engine::{
    Engine, EngineConfig, EventRecord, EventSink, JsonlSink, PieceSummary, RunEvent, RunRecord,
    classify,
};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider, ToolMode};
use maestro_piece::{LoadOptions, Piece, discover, load_file, render_diagnostics};
use maestro_protocol::Secret;
use maestro_tools::{Registry, ToolsConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A piece file, a piece name found in the pieces directories, or `auto` (the default) to
    /// let the classifier choose.
    piece: Option<String>,
    /// The task to run.
    #[arg(long)]
    task: String,
    /// Work in this directory instead of the run directory's own workspace.
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Where run records go.
    #[arg(long, default_value = ".maestro/runs")]
    runs_dir: PathBuf,
    /// Print the run's events to stdout (instead of progress lines on stderr).
    #[arg(long, value_enum)]
    events: Option<EventsFormat>,
    /// The OpenAI-compatible API root, e.g. http://127.0.0.1:8088/v1.
    #[arg(long, env = "MAESTRO_LLM_BASE_URL")]
    llm_base_url: Option<String>,
    /// The model name to request (default: the piece's `model`, else `default`).
    #[arg(long, env = "MAESTRO_MODEL")]
    model: Option<String>,
    /// How tools are offered: native tool calls, JSON answers, or probe once (auto).
    #[arg(long, value_enum, default_value = "auto", env = "MAESTRO_TOOL_MODE")]
    tool_mode: ToolModeArg,
    /// The model's context window in tokens (default: asked from the endpoint).
    #[arg(long, env = "MAESTRO_CONTEXT_LENGTH")]
    context_length: Option<u64>,
    /// Model calls one movement may make before the engine ends it.
    #[arg(long, default_value_t = 30)]
    max_iterations: u32,
    /// Cap on each answer's length in tokens.
    #[arg(long, env = "MAESTRO_MAX_TOKENS")]
    max_tokens: Option<u32>,
    /// Carried text (previous answers, knowledge, reports) longer than this many characters is
    /// cut in prompts, pointing to the full copy.
    #[arg(long, default_value_t = 20_000)]
    max_carried_chars: usize,
    /// Directories searched for pieces by name and by the classifier (default: `.maestro/pieces`
    /// and `pieces`).
    #[arg(long)]
    pieces_dir: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum EventsFormat {
    Jsonl,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ToolModeArg {
    Native,
    Json,
    Auto,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<u8> {
    let base_url = args.llm_base_url.clone().ok_or_else(|| {
        anyhow!("no model endpoint: pass --llm-base-url URL or set MAESTRO_LLM_BASE_URL")
    })?;
    let api_key = std::env::var("MAESTRO_API_KEY")
        .ok()
        .filter(|k| !k.is_empty())
        .map(Secret::new);
    let mut llm_config = OpenAiConfig::new(base_url).with_tool_mode(match args.tool_mode {
        ToolModeArg::Native => ToolMode::Native,
        ToolModeArg::Json => ToolMode::Json,
        ToolModeArg::Auto => ToolMode::Auto,
    });
    if let Some(key) = &api_key {
        llm_config = llm_config.with_api_key(key.clone());
    }
    if let Some(tokens) = args.context_length {
        llm_config = llm_config.with_context_length(tokens);
    }
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompat::new(llm_config)?);

    let dirs = pieces_dirs(&args.pieces_dir);
    let piece = match args.piece.as_deref() {
        None | Some("auto") => {
            let model = args.model.clone().unwrap_or_else(|| "default".into());
            classified_piece(provider.as_ref(), &model, &args.task, &dirs).await?
        }
        Some(given) => find_piece(given, &dirs)?,
    };
    let model = args
        .model
        .clone()
        .or_else(|| piece.model.clone())
        .unwrap_or_else(|| "default".into());

    let mut config = EngineConfig::new(model);
    config.context_length = args.context_length;
    config.max_iterations_per_movement = args.max_iterations;
    config.max_tokens = args.max_tokens;
    config.max_carried_chars = args.max_carried_chars;
    let mut engine = Engine::new(provider, Registry::builtin(ToolsConfig::default()), config);
    if let Some(key) = api_key {
        engine = engine.with_secret(key);
    }
    let cancel = engine.cancel_token();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    });

    let record = RunRecord::create(&args.runs_dir, args.workspace.as_deref())?;
    let run_dir = record.dir.clone();
    let observer: Arc<dyn EventSink> = match args.events {
        Some(EventsFormat::Jsonl) => Arc::new(JsonlSink::new(std::io::stdout())),
        None => Arc::new(Progress::new(piece.max_movements)),
    };
    let report = engine
        .run(Arc::new(piece), &args.task, record, vec![observer])
        .await?;

    let mut summary = format!("run {} {}", report.run_id, report.status);
    if let Some(reason) = &report.reason {
        summary.push_str(&format!(" ({reason})"));
    }
    eprintln!("{summary}; record in {}", run_dir.display());
    if args.events.is_none() && !report.result.is_empty() {
        println!("{}", report.result);
    }
    Ok(report.status.exit_code() as u8)
}

fn pieces_dirs(given: &[PathBuf]) -> Vec<PathBuf> {
    if given.is_empty() {
        vec![PathBuf::from(".maestro/pieces"), PathBuf::from("pieces")]
    } else {
        given.to_vec()
    }
}

fn load(path: &Path) -> anyhow::Result<Piece> {
    match load_file(path, &LoadOptions::default()) {
        Ok(loaded) => Ok(loaded.piece),
        Err(failed) => {
            let source = std::fs::read_to_string(path).unwrap_or_default();
            eprint!("{}", render_diagnostics(&source, &failed.errors));
            bail!("{} is not a valid piece", path.display())
        }
    }
}

/// Every piece that loads from `dirs`; broken files are skipped with a note.
fn available_pieces(dirs: &[PathBuf]) -> Vec<(PathBuf, Piece)> {
    let mut pieces = Vec::new();
    for path in dirs.iter().filter(|d| d.exists()).flat_map(|d| discover(d)) {
        match load_file(&path, &LoadOptions::default()) {
            Ok(loaded) => pieces.push((path, loaded.piece)),
            Err(failed) => eprintln!("note: skipping {}: {}", path.display(), failed.errors.len()),
        }
    }
    pieces
}

fn find_piece(given: &str, dirs: &[PathBuf]) -> anyhow::Result<Piece> {
    let path = Path::new(given);
    if path.is_file() {
        return load(path);
    }
    let pieces = available_pieces(dirs);
    if let Some((_, piece)) = pieces
        .iter()
        .find(|(p, piece)| piece.name == given || p.file_stem().is_some_and(|s| s == given))
    {
        return Ok(piece.clone());
    }
    let known: Vec<&str> = pieces.iter().map(|(_, p)| p.name.as_str()).collect();
    bail!(
        "no piece file or piece named `{given}` (searched {}); known pieces: {}",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    )
}

async fn classified_piece(
    provider: &dyn Provider,
    model: &str,
    task: &str,
    dirs: &[PathBuf],
) -> anyhow::Result<Piece> {
    let pieces = available_pieces(dirs);
    let summaries: Vec<PieceSummary> = pieces.iter().map(|(_, p)| PieceSummary::from(p)).collect();
    let chosen = classify(provider, model, task, &summaries).await?;
    eprintln!("piece: {} ({})", chosen.piece, chosen.reason);
    pieces
        .into_iter()
        .find(|(_, p)| p.name == chosen.piece)
        .map(|(_, p)| p)
        .ok_or_else(|| {
            anyhow!(
                "the classifier chose `{}`, which did not load",
                chosen.piece
            )
        })
}

/// Live progress on stderr: one line per movement, tool call, retry and warning, with running
/// token totals.
struct Progress {
    max_movements: u32,
    tokens: Mutex<u64>,
    color: bool,
}

impl Progress {
    fn new(max_movements: u32) -> Self {
        Progress {
            max_movements,
            tokens: Mutex::new(0),
            color: std::io::stderr().is_terminal(),
        }
    }

    fn line(&self, text: String) {
        let tokens = self.tokens.lock().map(|t| *t).unwrap_or(0);
        let mut err = std::io::stderr().lock();
        if self.color {
            let _ = writeln!(err, "\x1b[2m[{tokens:>7} tok]\x1b[0m {text}");
        } else {
            let _ = writeln!(err, "[{tokens:>7} tok] {text}");
        }
    }
}

impl EventSink for Progress {
    fn record(&self, record: &EventRecord) -> std::io::Result<()> {
        match &record.event {
            RunEvent::RunStarted {
                run_id,
                piece,
                dialect,
                ..
            } => self.line(format!("run {run_id}: piece {piece} ({dialect})")),
            RunEvent::MovementStarted {
                movement,
                iteration,
                parent,
                ..
            } => match parent {
                Some(parent) => self.line(format!("  ▸ {parent}/{movement}")),
                None => self.line(format!("▶ {movement} ({iteration}/{})", self.max_movements)),
            },
            RunEvent::LlmResponse { usage, .. } => {
                if let Ok(mut t) = self.tokens.lock() {
                    *t += usage.total_tokens;
                }
            }
            RunEvent::LlmRetry {
                attempt,
                delay_ms,
                reason,
                ..
            } => self.line(format!("  retry {attempt} in {delay_ms} ms: {reason}")),
            RunEvent::ToolCall { movement, tool, .. } => self.line(format!("  {movement}: {tool}")),
            RunEvent::ToolResult {
                tool, ok: false, ..
            } => self.line(format!("  {tool} failed")),
            RunEvent::JudgeRequest { movement, kind, .. } => {
                self.line(format!("  {movement}: {kind:?} call"))
            }
            RunEvent::ReportWritten { name, .. } => self.line(format!("  report {name}")),
            RunEvent::Reminder { movement, kind, .. } => {
                self.line(format!("  {movement}: reminder ({kind:?})"))
            }
            RunEvent::ContextWarning {
                level,
                used_tokens,
                context_length,
                ..
            } => self.line(format!(
                "  context {level:?}: {used_tokens}/{context_length} tokens"
            )),
            RunEvent::LoopWarning {
                movement,
                consecutive,
                ..
            } => self.line(format!(
                "  loop warning: {movement} entered {consecutive} times in a row"
            )),
            RunEvent::LoopMonitorTriggered {
                judge, cycle_count, ..
            } => self.line(format!(
                "  loop monitor: {cycle_count} cycles, judge {judge}"
            )),
            RunEvent::Warning { message, .. } => self.line(format!("  warning: {message}")),
            RunEvent::MovementFinished {
                movement,
                next,
                via,
                parent,
                ..
            } => {
                let indent = if parent.is_some() { "    " } else { "" };
                self.line(format!("{indent}✓ {movement} → {next} ({via:?})"))
            }
            RunEvent::RunFinished { status, reason, .. } => self.line(format!(
                "■ {status}{}",
                reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )),
            RunEvent::LlmRequest { .. }
            | RunEvent::ToolResult { .. }
            | RunEvent::ScratchUpdated { .. } => {}
        }
        Ok(())
    }
}
