//! `maestro run`: load (or classify) a piece, run a task through it against an
//! OpenAI-compatible endpoint, show progress, print the result and exit with the run's status.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use maestro_app::{
    LocalJob, McpSelection, PieceError, Skipped, Toolbox, available_pieces, classify_piece, client,
    endpoint_unreachable, ensure_served, no_endpoint, open_store, recorded_piece, tool_catalog,
};
use maestro_config::{Config, LoadFrom};
use maestro_engine::{Engine, EventSink, JsonlSink, RunEnd, RunRecord, RunSpec};
use maestro_llm::{Provider, ToolMode};
use maestro_piece::{LoadOptions, Piece, render_diagnostics};
use maestro_protocol::RunStatus;
use maestro_store::{NewJob, PoolSize};

use crate::progress::Progress;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A piece file, a piece name found in the pieces directories, or `auto` (the default) to
    /// let the classifier choose.
    piece: Option<String>,
    /// The task to run.
    #[arg(long, required_unless_present = "resume")]
    task: Option<String>,
    /// Continue the run (the job) with this id where it stopped: after Ctrl-C, a failure or
    /// kill -9. What its record holds is reused: no recorded model answer is asked again and no
    /// recorded tool call runs again.
    #[arg(long, conflicts_with_all = ["piece", "task", "workspace"])]
    resume: Option<String>,
    /// The job store (`sqlite://PATH` or `postgres://…`; also `MAESTRO_DB`, `store.url`;
    /// default `sqlite://.maestro/maestro.db`). Every run is a job there.
    #[arg(long)]
    db: Option<String>,
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
        tools: Some(tool_catalog(&config)),
        ..crate::validate::load_options(None, &config.paths.facets_dirs)
    };
    // One connection: a run's queries come one at a time (docs/benchmarks.md, "Footprint").
    let store = open_store(args.db.as_deref(), &config, PoolSize::Single).await?;
    // A resumed run takes its job, its record and its piece from the store.
    let resumed = match &args.resume {
        Some(id) => {
            let local = LocalJob::resume(store.clone(), id).await?;
            let history = local.history().await?;
            Some((local, history))
        }
        None => None,
    };
    let task = match (&resumed, &args.task) {
        (Some((local, _)), _) => local.job().task.clone(),
        (None, Some(task)) => task.clone(),
        (None, None) => return Err(anyhow!("--task is required")),
    };
    let (piece, piece_file) = match &resumed {
        Some((local, history)) => match recorded_piece(history) {
            Some((_, Some(file))) if file.is_file() => {
                (crate::run::load_piece_file(&file, &opts)?, Some(file))
            }
            Some((name, _)) => found_piece(&name, &dirs, &opts)?,
            None => found_piece(&local.job().piece, &dirs, &opts)?,
        },
        None => match args.piece.as_deref() {
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
                classified_piece(&provider, &model, &task, &dirs, &opts).await?
            }
            Some(given) => found_piece(given, &dirs, &opts)?,
        },
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
    let (local, history) = match resumed {
        Some(resumed) => resumed,
        None => {
            let mut job = NewJob::new(
                piece_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| piece.name.clone()),
                task.clone(),
                whoami(),
            );
            job.workspace = args
                .workspace
                .as_ref()
                .map(|w| std::path::absolute(w).unwrap_or_else(|_| w.clone()))
                .map(|w| w.display().to_string());
            (LocalJob::start(store, job).await?, Vec::new())
        }
    };
    let cancel = engine.cancel_token();
    let stop = stop_signal()?;
    let stop_run = local.stop_run();
    tokio::spawn(async move {
        tokio::select! {
            got = stop => if got { cancel.cancel() },
            _ = stop_run.cancelled() => cancel.cancel(),
        }
    });

    let workspace = local.job().workspace.as_ref().map(PathBuf::from);
    let record = RunRecord::open(
        &config.paths.runs_dir,
        &local.id().to_string(),
        workspace.as_deref(),
    );
    let (record, logs) = match record
        .map_err(anyhow::Error::from)
        .and_then(|r| Ok((r.clone(), local.logs(&r, &history)?)))
    {
        Ok(ready) => ready,
        Err(e) => {
            toolbox.shutdown().await;
            let _ = local.abandon(&e.to_string()).await;
            return Err(e);
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
    // Subtasks run in this process, each as a job of its own in the same store.
    let subtasks = local.subtasks(&record, &config, args.model.is_some());
    let mut spec = RunSpec::new(Arc::new(piece), &task, record);
    spec.subtasks = subtasks.as_ref().map(|(host, _)| Arc::clone(host));
    spec.logs = logs;
    spec.observers = vec![observer];
    spec.history = history;
    spec.piece_file = piece_file;
    spec.answers = local.answers().await.unwrap_or_default();
    let outcome = engine.run_spec(spec).await;
    if let Some((_, children)) = &subtasks {
        let stopped = matches!(&outcome, Ok(RunEnd::Finished(report))
            if report.reason == Some(maestro_engine::EndReason::Cancelled));
        children.finish(local.id(), stopped).await;
    }
    if let Some(progress) = &progress {
        progress.finish();
    }
    // The MCP servers live as long as the run: the engine's registry goes first so that the
    // hub holds the last handle on each connection and can wait for the servers to exit.
    drop(engine);
    toolbox.shutdown().await;
    let end = match outcome {
        Ok(end) => end,
        Err(e) => {
            let _ = local.abandon(&e.to_string()).await;
            return Err(e.into());
        }
    };
    let cancelled_elsewhere = local.stop_run().is_cancelled();
    local.finish(&end).await?;
    let RunEnd::Finished(report) = end else {
        return Err(anyhow!("the run stopped without an end"));
    };
    if report.status == RunStatus::Failed && endpoint_unreachable(&config).await {
        eprintln!("error: {}", no_endpoint(&config.llm.base_url));
    }

    let mut summary = format!("run {} {}", report.run_id, report.status);
    if let Some(reason) = &report.reason {
        summary.push_str(&format!(" ({reason})"));
    }
    if cancelled_elsewhere {
        summary.push_str(" by `maestro jobs cancel`");
    }
    eprintln!("{summary}; record in {}", run_dir.display());
    if report.status == RunStatus::Failed {
        eprintln!(
            "continue it where it stopped with: maestro run --resume {}",
            report.run_id
        );
    }
    if report.status == RunStatus::NeedsUserInput {
        eprintln!(
            "the run asks: {}\nanswer it, then go on, with:\n  maestro jobs answer {id} \"…\"\n  maestro run --resume {id}",
            report.result,
            id = report.run_id
        );
    }
    if args.events.is_none() && !report.result.is_empty() {
        println!("{}", report.result);
    }
    Ok(report.status.exit_code() as u8)
}

/// Who submits a local run, for the audit log.
fn whoami() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "local".to_string())
}

/// Loads a piece file, printing its diagnostics when it does not load.
pub(crate) fn load_piece_file(path: &std::path::Path, opts: &LoadOptions) -> anyhow::Result<Piece> {
    maestro_app::load_piece(path, opts).map_err(explain_piece_error)
}

/// The piece `given` names and the file it came from.
fn found_piece(
    given: &str,
    dirs: &[PathBuf],
    opts: &LoadOptions,
) -> anyhow::Result<(Piece, Option<PathBuf>)> {
    match maestro_app::find_piece(given, dirs, opts) {
        Ok(found) => {
            note_skipped(&found.skipped);
            Ok((found.piece, Some(found.path)))
        }
        Err(e) => Err(explain_piece_error(e)),
    }
}

/// Prints the notes about piece files that were passed over because they do not load.
pub(crate) fn note_skipped(skipped: &[Skipped]) {
    for skip in skipped {
        eprintln!("note: skipping {}: {}", skip.path.display(), skip.errors);
    }
}

/// Prints what a piece error carries besides its message (diagnostics, skipped files).
pub(crate) fn explain_piece_error(e: PieceError) -> anyhow::Error {
    match &e {
        PieceError::Invalid {
            source_text,
            diagnostics,
            ..
        } => eprint!("{}", render_diagnostics(source_text, &diagnostics.errors)),
        PieceError::NotFound { skipped, .. } => note_skipped(skipped),
        PieceError::Classify(_) | PieceError::ChosenMissing(_) => {}
    }
    e.into()
}

async fn classified_piece(
    provider: &dyn Provider,
    model: &str,
    task: &str,
    dirs: &[PathBuf],
    opts: &LoadOptions,
) -> anyhow::Result<(Piece, Option<PathBuf>)> {
    let available = available_pieces(dirs, opts);
    note_skipped(&available.skipped);
    let chosen = classify_piece(provider, model, task, available)
        .await
        .map_err(explain_piece_error)?;
    eprintln!("piece: {} ({})", chosen.choice.piece, chosen.choice.reason);
    Ok((chosen.piece, Some(chosen.path)))
}

/// With no model configured anywhere, the endpoint's only model is used, and said so.
async fn served_model(config: &Config) -> anyhow::Result<String> {
    let model = maestro_app::served_model(config).await?;
    eprintln!(
        "model: {model} (the only model {} serves)",
        config.llm.base_url
    );
    Ok(model)
}
