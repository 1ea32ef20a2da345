//! `maestro run`: load (or classify) a piece, run a task through it against an
//! OpenAI-compatible endpoint, show progress, print the result and exit with the run's status.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use maestro_config::{Config, LoadFrom};
use maestro_engine::{Engine, EventSink, JsonlSink, PieceSummary, RunRecord, classify};
use maestro_llm::{LlmError, OpenAiCompat, Provider, ToolMode};
use maestro_piece::{LoadOptions, Piece, discover, load_file, render_diagnostics};
use maestro_protocol::RunStatus;

use crate::progress::Progress;
use crate::toolbox::{McpSelection, Toolbox};

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
    /// Where run records go (default: `paths.runs_dir`, `.maestro/runs`).
    #[arg(long)]
    runs_dir: Option<PathBuf>,
    /// Print the run's events to stdout (instead of progress lines on stderr).
    #[arg(long, value_enum)]
    events: Option<EventsFormat>,
    /// The OpenAI-compatible API root, e.g. http://127.0.0.1:8088/v1 (also
    /// `MAESTRO_LLM_BASE_URL`, `llm.base_url`).
    #[arg(long)]
    llm_base_url: Option<String>,
    /// The model name to request. Without it: the piece's `model`, then `MAESTRO_MODEL`, then
    /// `llm.model`, then the endpoint's only model.
    #[arg(long)]
    model: Option<String>,
    /// How tools are offered: native tool calls, JSON answers, or probe once (`llm.tool_mode`).
    #[arg(long, value_enum)]
    tool_mode: Option<ToolModeArg>,
    /// The model's context window in tokens (default: asked from the endpoint).
    #[arg(long)]
    context_length: Option<u64>,
    /// Model calls one movement may make before the engine ends it.
    #[arg(long)]
    max_iterations: Option<u32>,
    /// Cap on each answer's length in tokens.
    #[arg(long)]
    max_tokens: Option<u32>,
    /// Carried text (previous answers, knowledge, reports) longer than this many characters is
    /// cut in prompts, pointing to the full copy.
    #[arg(long)]
    max_carried_chars: Option<usize>,
    /// Directories searched for pieces by name and by the classifier (default:
    /// `paths.pieces_dirs`, `.maestro/pieces` and `pieces`).
    #[arg(long)]
    pieces_dir: Vec<PathBuf>,
    /// Use this configuration file instead of `~/.maestro/config.yaml` and
    /// `.maestro/config.yaml`.
    #[arg(long)]
    config: Option<PathBuf>,
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

/// Resolves to true on SIGINT (Ctrl-C) or SIGTERM (what `kill`, systemd and container runtimes
/// send), so that either ends the run as `cancelled` with its `run_finished` recorded. The
/// handlers are installed before it returns, so a signal arriving right after is not lost.
fn stop_signal() -> anyhow::Result<impl std::future::Future<Output = bool> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            got = terminate.recv() => got.is_some(),
            got = interrupt.recv() => got.is_some(),
        }
    })
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    // One thread: a run waits on the model almost all the time, parallel movements interleave
    // on it, and tools' blocking work goes to tokio's blocking pool. Each worker thread would
    // add its own stack and malloc arena to the footprint (docs/benchmarks.md). The run record
    // is flushed when `run_async` returns; a tool thread still stuck in a system call must not
    // hold the process after that.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let out = runtime.block_on(run_async(args));
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    out
}

/// The configuration files and environment, with this command's flags on top.
fn configuration(args: &Args) -> anyhow::Result<Config> {
    let (mut config, _files) =
        Config::load(LoadFrom::current(args.config.clone())?).map_err(|e| anyhow!("{e}"))?;
    if let Some(url) = &args.llm_base_url {
        config.llm.base_url = url.clone();
    }
    if let Some(model) = &args.model {
        config.llm.model = Some(model.clone());
    }
    if let Some(mode) = args.tool_mode {
        config.llm.tool_mode = match mode {
            ToolModeArg::Native => ToolMode::Native,
            ToolModeArg::Json => ToolMode::Json,
            ToolModeArg::Auto => ToolMode::Auto,
        };
    }
    if let Some(tokens) = args.context_length {
        config.llm.context_length = Some(tokens);
    }
    if let Some(n) = args.max_iterations {
        config.engine.max_iterations_per_movement = n;
    }
    if args.max_tokens.is_some() {
        config.engine.max_tokens = args.max_tokens;
    }
    if let Some(n) = args.max_carried_chars {
        config.engine.max_carried_chars = n;
    }
    if let Some(dir) = &args.runs_dir {
        config.paths.runs_dir = dir.clone();
    }
    if !args.pieces_dir.is_empty() {
        config.paths.pieces_dirs = args.pieces_dir.clone();
    }
    Ok(config)
}

async fn run_async(args: Args) -> anyhow::Result<u8> {
    let mut config = configuration(&args)?;
    let dirs = config.paths.pieces_dirs.clone();
    let opts = LoadOptions {
        tools: Some(crate::toolbox::tool_catalog(&config)),
        ..crate::validate::load_options(None, &config.paths.facets_dirs)
    };
    let piece = match args.piece.as_deref() {
        None | Some("auto") => {
            if config.llm.model.is_none() {
                config.llm.model = Some(served_model(&config).await?);
            }
            let model = config
                .llm
                .require_model()
                .map_err(|e| anyhow!("{e}"))?
                .to_string();
            let provider = client(&config)?;
            classified_piece(&provider, &model, &args.task, &dirs, &opts).await?
        }
        Some(given) => find_piece(given, &dirs, &opts)?,
    };
    // The more specific setting wins: the flag, then the piece, then the environment and the
    // configuration files (already merged in that order).
    if args.model.is_none() && piece.model.is_some() {
        config.llm.model = piece.model.clone();
    }
    match &config.llm.model {
        Some(model) => ensure_served(&config, model).await?,
        None => config.llm.model = Some(served_model(&config).await?),
    }
    let engine_config = config.engine_config().map_err(|e| anyhow!("{e}"))?;
    let provider: Arc<dyn Provider> = Arc::new(client(&config)?);

    let toolbox = Toolbox::build(&config, &McpSelection::for_piece(&piece)).await?;
    if let Err(message) = toolbox.ensure_required(&piece.required_mcp) {
        eprintln!(
            "error: piece `{}` cannot run: {message}\nno run was started",
            piece.name
        );
        toolbox.shutdown().await;
        return Ok(1);
    }
    let mut engine = Engine::new(provider, toolbox.registry.clone(), engine_config);
    if let Some(key) = config.llm.api_key.clone() {
        engine = engine.with_secret(key);
    }
    let cancel = engine.cancel_token();
    let stop = stop_signal()?;
    tokio::spawn(async move {
        if stop.await {
            cancel.cancel();
        }
    });

    let record = match RunRecord::create(&config.paths.runs_dir, args.workspace.as_deref()) {
        Ok(record) => record,
        Err(e) => {
            toolbox.shutdown().await;
            return Err(e.into());
        }
    };
    let run_dir = record.dir.clone();
    let progress = match args.events {
        Some(EventsFormat::Jsonl) => None,
        None => Some(Arc::new(Progress::new(piece.max_movements))),
    };
    let observer: Arc<dyn EventSink> = match &progress {
        Some(progress) => Arc::clone(progress) as Arc<dyn EventSink>,
        None => Arc::new(JsonlSink::new(std::io::stdout())),
    };
    let outcome = engine
        .run(Arc::new(piece), &args.task, record, vec![observer])
        .await;
    if let Some(progress) = &progress {
        progress.finish();
    }
    // The MCP servers live as long as the run: the engine's registry goes first so that the
    // hub holds the last handle on each connection and can wait for the servers to exit.
    drop(engine);
    toolbox.shutdown().await;
    let report = outcome?;
    if report.status == RunStatus::Failed {
        explain_unreachable(&config).await;
    }

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

fn load(path: &Path, opts: &LoadOptions) -> anyhow::Result<Piece> {
    match load_file(path, opts) {
        Ok(loaded) => Ok(loaded.piece),
        Err(failed) => {
            let source = std::fs::read_to_string(path).unwrap_or_default();
            eprint!("{}", render_diagnostics(&source, &failed.errors));
            bail!("{} is not a valid piece", path.display())
        }
    }
}

/// Every piece that loads from `dirs`; broken files are skipped with a note.
fn available_pieces(dirs: &[PathBuf], opts: &LoadOptions) -> Vec<(PathBuf, Piece)> {
    let mut pieces = Vec::new();
    for path in dirs.iter().filter(|d| d.exists()).flat_map(|d| discover(d)) {
        match load_file(&path, opts) {
            Ok(loaded) => pieces.push((path, loaded.piece)),
            Err(failed) => eprintln!("note: skipping {}: {}", path.display(), failed.errors.len()),
        }
    }
    pieces
}

fn find_piece(given: &str, dirs: &[PathBuf], opts: &LoadOptions) -> anyhow::Result<Piece> {
    let path = Path::new(given);
    if path.is_file() {
        return load(path, opts);
    }
    let pieces = available_pieces(dirs, opts);
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
    opts: &LoadOptions,
) -> anyhow::Result<Piece> {
    let pieces = available_pieces(dirs, opts);
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

/// Where `tool_mode: auto` remembers, per endpoint and model, the mode it settled on:
/// `~/.maestro/cache/tool-modes.json`.
fn tool_mode_cache() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(".maestro/cache/tool-modes.json"))
}

/// The model endpoint's client, as configured.
fn client(config: &Config) -> anyhow::Result<OpenAiCompat> {
    let mut openai = config.llm.to_openai_config();
    openai.tool_mode_cache = tool_mode_cache();
    Ok(OpenAiCompat::new(openai)?)
}

/// A model the endpoint does not list (`GET /v1/models`) stops the run before it starts, with
/// what the endpoint serves. An endpoint that cannot list its models is not held to this.
async fn ensure_served(config: &Config, model: &str) -> anyhow::Result<()> {
    let base = &config.llm.base_url;
    let Ok(served) = client(config)?.list_models().await else {
        return Ok(());
    };
    // Ollama lists `qwen3:latest` and answers to `qwen3`.
    let listed = |id: &String| id == model || id.strip_suffix(":latest") == Some(model);
    if served.is_empty() || served.iter().any(listed) {
        return Ok(());
    }
    bail!(
        "the model `{model}` is not served by {base}; it serves: {}. Choose one with --model, the \
         piece's `model`, MAESTRO_MODEL or llm.model",
        served.join(", ")
    )
}

/// With no model configured anywhere, the endpoint's only model is used; several (or none) is an
/// error that lists what the endpoint serves.
async fn served_model(config: &Config) -> anyhow::Result<String> {
    let base = &config.llm.base_url;
    let provider = client(config)?;
    let models = provider.list_models().await.map_err(|e| match e {
        LlmError::Connect { .. } => anyhow!(no_endpoint(base)),
        e => anyhow!("no model: set llm.model, MAESTRO_MODEL or --model (listing the models at {base} failed: {e})"),
    })?;
    match models.as_slice() {
        [only] => {
            eprintln!("model: {only} (the only model {base} serves)");
            Ok(only.clone())
        }
        [] => Err(anyhow!(
            "no model: set llm.model, MAESTRO_MODEL or --model ({base} lists no models)"
        )),
        several => Err(anyhow!(
            "no model: set llm.model, MAESTRO_MODEL or --model; {base} serves: {}",
            several.join(", ")
        )),
    }
}

/// The one line a user needs when nothing answers at `base`.
fn no_endpoint(base: &str) -> String {
    format!(
        "no model endpoint answers at {base}; start the small local model with \
         `export MAESTRO_LLM_BASE_URL=$(bash scripts/local-llm.sh start)` from the Maestro source \
         tree, or give your endpoint with --llm-base-url or MAESTRO_LLM_BASE_URL"
    )
}

/// After a failed run: when the endpoint does not answer at all, says how to get one.
async fn explain_unreachable(config: &Config) {
    let Ok(provider) = client(config) else {
        return;
    };
    if let Err(LlmError::Connect { .. }) = provider.list_models().await {
        eprintln!("error: {}", no_endpoint(&config.llm.base_url));
    }
}
