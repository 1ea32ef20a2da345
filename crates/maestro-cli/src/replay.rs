//! `maestro replay ID`: drives a finished run again from its record, with no model call and no
//! tool run, and checks that it reaches the same movements, transitions and status.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use maestro_app::{McpSelection, Toolbox, client, open_store, recorded_piece, tool_catalog};
use maestro_config::{Config, LoadFrom};
use maestro_engine::{Engine, EventRecord, RunEvent, RunRecord, read_events};
use maestro_llm::Provider;
use maestro_piece::LoadOptions;
use maestro_store::{JobId, JobQueue, PoolSize};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run's id (its job id).
    id: String,
    /// The job store the run is in (also `MAESTRO_DB`, `store.url`). Without the run there,
    /// `<runs dir>/<ID>/events.jsonl` is read.
    #[arg(long)]
    db: Option<String>,
    /// Where run records go (default: `paths.runs_dir`, `.maestro/runs`).
    #[arg(long)]
    runs_dir: Option<PathBuf>,
    /// Directories searched for the run's piece by name when its file is gone.
    #[arg(long)]
    pieces_dir: Vec<PathBuf>,
    /// Use this configuration file instead of `~/.maestro/config.yaml` and
    /// `.maestro/config.yaml`.
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let out = runtime.block_on(replay(args));
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    out
}

/// The run's events: from the store when it holds the run, else from its `events.jsonl`.
async fn history(args: &Args, config: &Config) -> anyhow::Result<Vec<EventRecord>> {
    if let Ok(id) = args.id.parse::<JobId>() {
        let store = open_store(args.db.as_deref(), config, PoolSize::Shared).await?;
        let stored = store.events(id, 0).await?;
        if !stored.is_empty() {
            return stored
                .into_iter()
                .map(|e| serde_json::from_value(e.payload).map_err(anyhow::Error::from))
                .collect();
        }
    }
    let path = config.paths.runs_dir.join(&args.id).join("events.jsonl");
    if !path.is_file() {
        return Err(anyhow!(
            "no run `{}`: the job store holds no events for it and {} does not exist",
            args.id,
            path.display()
        ));
    }
    read_events(&path).map_err(|e| anyhow!("{e}"))
}

async fn replay(args: Args) -> anyhow::Result<u8> {
    let (mut config, _files) =
        Config::load(LoadFrom::current(args.config.clone())?).map_err(|e| anyhow!("{e}"))?;
    if let Some(dir) = &args.runs_dir {
        config.paths.runs_dir = dir.clone();
    }
    if !args.pieces_dir.is_empty() {
        config.paths.pieces_dirs = args.pieces_dir.clone();
    }
    let history = history(&args, &config).await?;
    // A run stopped by its user ended where it was, not where its piece led: it has nothing to
    // replay until it is continued.
    let last_end = history.iter().rev().find_map(|r| match &r.event {
        RunEvent::RunFinished { status, reason, .. } => Some((*status, reason.clone())),
        _ => None,
    });
    let status = match last_end {
        Some((_, Some(maestro_engine::EndReason::Cancelled))) | None => None,
        Some((status, _)) => Some(status),
    };
    let Some(status) = status else {
        eprintln!(
            "error: run {} has not finished (it was stopped, or is still running); continue it with \
             `maestro run --resume {}`",
            args.id, args.id
        );
        return Ok(1);
    };
    let opts = LoadOptions {
        tools: Some(tool_catalog(&config)),
        ..crate::validate::load_options(None, &config.paths.facets_dirs)
    };
    let piece = match recorded_piece(&history) {
        Some((_, Some(file))) if file.is_file() => crate::run::load_piece_file(&file, &opts)?,
        Some((name, _)) => {
            maestro_app::find_piece(&name, &config.paths.pieces_dirs, &opts)
                .map_err(crate::run::explain_piece_error)?
                .piece
        }
        None => return Err(anyhow!("run {} has no `run_started` event", args.id)),
    };
    if config.llm.model.is_none() {
        config.llm.model = Some(piece.model.clone().unwrap_or_else(|| "replay".into()));
    }
    let engine_config = config.engine_config().map_err(|e| anyhow!("{e}"))?;
    // The client is never called: a replay answers every call from the record.
    let provider: Arc<dyn Provider> = Arc::new(client(&config)?);
    // The same tool set the run was offered (the counts are part of the record); none runs.
    let toolbox = Toolbox::build(&config, &McpSelection::for_piece(&piece)).await?;
    let engine = Engine::new(provider, toolbox.registry.clone(), engine_config);
    let scratch = tempfile::tempdir().context("cannot create a scratch directory")?;
    let record = RunRecord::open(scratch.path(), &args.id, None)?;
    let calls = history
        .iter()
        .filter(|r| matches!(r.event, RunEvent::LlmResponse { .. }))
        .count();
    let tools = history
        .iter()
        .filter(|r| matches!(r.event, RunEvent::ToolResult { .. }))
        .count();
    let outcome = engine.replay(Arc::new(piece), history, record).await;
    drop(engine);
    toolbox.shutdown().await;
    match outcome {
        Ok(report) => {
            eprintln!(
                "replay of run {}: the same movements, transitions and status ({status}); \
                 {calls} recorded answers and {tools} recorded tool results reused, 0 model \
                 calls, 0 tool runs",
                args.id
            );
            debug_assert_eq!(report.status, status);
            Ok(0)
        }
        Err(maestro_engine::EngineError::Diverged(divergence)) => {
            eprintln!("replay of run {} diverged: {divergence}", args.id);
            Ok(1)
        }
        Err(e) => Err(e.into()),
    }
}
