//! One claimed job, start to end: choose its piece and model, keep its lease, rebuild its run
//! from the stored events, run it through the engine with the store as its durable log, and
//! write how it ended — or hand it back, or stop writing when the lease is lost.

use std::path::PathBuf;
use std::sync::Arc;

use maestro_config::Config;
use maestro_engine::{
    Engine, EventRecord, JsonlLog, RunEnd, RunEvent, RunRecord, RunReport, RunSpec, SubtaskHost,
};
use maestro_llm::Provider;
use maestro_piece::{LoadOptions, Piece};
use maestro_protocol::RunStatus;
use maestro_store::{
    Claimed, CommentKind, FailDisposition, JobQueue, JobStatus, Lease, Outcome, Store,
};
use maestro_tools::Registry;
use tokio_util::sync::CancellationToken;

use crate::clients::ModelClients;
use crate::completer::Completer;
use crate::lease::LeaseKeeper;
use crate::local::outcome;
use crate::models::ModelError;
use crate::pieces::{
    AUTO, PieceCache, PieceError, available_pieces, classify_piece, find_piece, load_piece,
};
use crate::store_log::{EventWriter, Fence, StoreLog};
use crate::subtasks::{LocalChildren, StoreSubtasks};
use crate::toolbox::{McpSelection, Toolbox, ToolboxError, load_options};

/// What running one job needs from its worker.
#[derive(Debug)]
pub(crate) struct JobContext {
    pub store: Store,
    /// Commits the events of all of the worker's runs.
    pub events: EventWriter,
    /// The model clients and endpoint model lists the worker's runs share.
    pub models: ModelClients,
    /// The configuration with the worker's flags applied, shared by its runs (a run whose
    /// piece names its own model gets a copy).
    pub config: Arc<Config>,
    /// How its runs load pieces (the tool catalogue of `config` among it), made once.
    pub load_options: std::sync::OnceLock<LoadOptions>,
    /// Keeps the leases of the runs, and says how long a claim holds.
    pub leases: LeaseKeeper,
    /// The model was chosen on the command line: it wins over a piece's `model`.
    pub model_from_flag: bool,
    /// Set for a local run's children: the subtasks they spawn run in this process too.
    pub local: Option<std::sync::Weak<LocalChildren>>,
    /// The tools of runs whose piece uses no MCP server, built once for all of them.
    pub tools: Arc<tokio::sync::OnceCell<Registry>>,
    /// The pieces its runs found by name, kept for a moment.
    pub pieces: Arc<PieceCache>,
}

impl JobContext {
    fn load_options(&self) -> &LoadOptions {
        self.load_options.get_or_init(|| load_options(&self.config))
    }

    /// The built-in, web and SSH tools of the worker's configuration, built by the first run
    /// that needs them.
    async fn shared_tools(&self, config: &Config) -> Result<Registry, ToolboxError> {
        self.tools
            .get_or_try_init(|| async {
                let toolbox = Toolbox::build(config, &McpSelection::none()).await?;
                let registry = toolbox.registry.clone();
                toolbox.shutdown().await;
                Ok(registry)
            })
            .await
            .cloned()
    }
}

/// How one claimed job left this worker.
pub(crate) enum JobEnd {
    /// Its end (or park) was written.
    Recorded,
    /// An infrastructure failure was reported (requeued or failed).
    Failed,
    /// The lease was lost or the job cancelled: nothing more was written.
    Fenced,
    /// Released at shutdown.
    HandedBack,
}

/// Why a job could not start.
enum Unstartable {
    /// Try again later (the endpoint is down).
    Infrastructure(String),
    /// It will never run (the piece is gone or broken, the model is not served, …).
    Permanent(String),
}

impl From<ModelError> for Unstartable {
    fn from(e: ModelError) -> Unstartable {
        match e {
            // The connection error names the URL and the cause; the CLI's advice on starting a
            // local model is not for a job's reason.
            ModelError::Unreachable { cause, .. } => Unstartable::Infrastructure(cause.to_string()),
            e => Unstartable::Permanent(e.to_string()),
        }
    }
}

impl From<PieceError> for Unstartable {
    fn from(e: PieceError) -> Unstartable {
        match &e {
            PieceError::Classify(maestro_engine::ClassifyError::Llm(
                maestro_llm::LlmError::Connect { .. },
            )) => Unstartable::Infrastructure(e.to_string()),
            _ => Unstartable::Permanent(format!("piece_error: {e}")),
        }
    }
}

/// What a claimed job runs with.
struct Prepared {
    piece: Arc<Piece>,
    /// The piece's file, recorded in `run_started`.
    piece_file: Option<PathBuf>,
    config: Arc<Config>,
}

/// The piece a resumed run started with, as its `run_started` event recorded it: the file, and
/// the piece's name.
pub fn recorded_piece(history: &[EventRecord]) -> Option<(String, Option<PathBuf>)> {
    history.iter().find_map(|record| match &record.event {
        RunEvent::RunStarted {
            piece, piece_file, ..
        } => Some((piece.clone(), piece_file.as_ref().map(PathBuf::from))),
        _ => None,
    })
}

/// The piece and the settings a job runs with. A resumed run keeps the piece it started with
/// (the classifier is not asked again).
async fn prepare(
    ctx: &JobContext,
    claimed: &Claimed,
    history: &[EventRecord],
) -> Result<Prepared, Unstartable> {
    let mut config = Arc::clone(&ctx.config);
    let dirs = &ctx.config.paths.pieces_dirs;
    let opts = ctx.load_options();
    let (piece, piece_file) = if let Some((name, file)) = recorded_piece(history) {
        match file.filter(|file| file.is_file()) {
            Some(file) => (Arc::new(load_piece(&file, opts)?), file),
            None => {
                let found = find_piece(&name, dirs, opts)?;
                (Arc::new(found.piece), found.path)
            }
        }
    } else if claimed.job.piece == AUTO {
        if config.llm.model.is_none() {
            Arc::make_mut(&mut config).llm.model = Some(ctx.models.served_model(&config).await?);
        }
        let model = config.llm.model.clone().unwrap_or_default();
        let provider = ctx.models.client(&config)?;
        let chosen = classify_piece(
            &*provider,
            &model,
            &claimed.job.task,
            available_pieces(dirs, opts),
        )
        .await?;
        tracing::info!(job = %claimed.job.id, piece = %chosen.choice.piece, "classified: {}", chosen.choice.reason);
        (Arc::new(chosen.piece), chosen.path)
    } else {
        let found = ctx.pieces.find(&claimed.job.piece, dirs, opts)?;
        (found.piece, found.path)
    };
    if !ctx.model_from_flag && piece.model.is_some() && piece.model != config.llm.model {
        Arc::make_mut(&mut config).llm.model = piece.model.clone();
    }
    // A run started against an endpoint that does not answer would only wait for it: an
    // unreachable endpoint sends the job back to the queue instead.
    match &config.llm.model {
        Some(model) => ctx.models.check_served(&config, model).await?,
        None => {
            Arc::make_mut(&mut config).llm.model = Some(ctx.models.served_model(&config).await?);
        }
    }
    Ok(Prepared {
        piece,
        piece_file: Some(piece_file),
        config,
    })
}

/// The job's stored events, to resume from (none for a new run).
async fn history(store: &Store, lease: &Lease) -> Result<Vec<EventRecord>, Ended> {
    if first_claim(lease) {
        return Ok(Vec::new());
    }
    let job = lease.job_id;
    let stored = store
        .events(job, 0)
        .await
        .map_err(|e| Ended::Broken(format!("reading the job's events failed: {e}")))?;
    stored
        .into_iter()
        .map(|event| serde_json::from_value::<EventRecord>(event.payload))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Ended::Unstarted(Unstartable::Permanent(format!(
                "the job's stored events cannot be read: {e}"
            )))
        })
}

/// Whether `lease` is the job's first claim. Events are written only under a lease and a
/// question is answered only once a run asked it, so such a job has neither: nothing to read.
fn first_claim(lease: &Lease) -> bool {
    lease.fence == 1
}

/// Runs one claimed job to its end, a park, a retry, a lost lease or a hand-back.
pub(crate) async fn run_job(
    ctx: &JobContext,
    claimed: Claimed,
    hand_back: &CancellationToken,
    completer: &Completer,
) -> JobEnd {
    let store = &ctx.store;
    let lease = claimed.lease.clone();
    let job_id = claimed.job.id;
    let fence = Arc::new(Fence::default());
    let kept = ctx.leases.keep(lease.clone(), Arc::clone(&fence));
    // A hand-back suspends the run: it stops where it is and records no end, so that the
    // worker that claims the job next resumes it.
    let suspend = hand_back.child_token();
    let end = match history(store, &lease).await {
        Ok(history) => match prepare(ctx, &claimed, &history).await {
            Ok(prepared) => {
                run_prepared(ctx, &claimed, prepared, history, &fence, suspend.clone()).await
            }
            Err(unstartable) => Ended::Unstarted(unstartable),
        },
        Err(ended) => ended,
    };
    drop(kept);
    if suspend.is_cancelled() && !matches!(end, Ended::Report(_)) {
        return match store.release(&lease).await {
            Ok(()) => JobEnd::HandedBack,
            Err(e) => {
                tracing::warn!(job = %job_id, "handing the job back failed: {e}");
                JobEnd::Fenced
            }
        };
    }
    if let Some(why) = fence.closed() {
        tracing::info!(job = %job_id, "stopped, writing nothing more: {why}");
        return JobEnd::Fenced;
    }
    let written = match end {
        Ended::Unstarted(Unstartable::Infrastructure(reason)) | Ended::Retry(reason) => {
            return fail(store, &lease, &reason).await;
        }
        Ended::Unstarted(Unstartable::Permanent(reason)) => {
            completer
                .finish(
                    &lease,
                    Outcome {
                        status: JobStatus::Failed,
                        result: None,
                        reason: Some(reason),
                    },
                )
                .await
        }
        Ended::Report(report) => {
            let finished = completer.finish(&lease, outcome(&report)).await;
            if finished.is_ok() && report.status == RunStatus::NeedsUserInput {
                // The run's question, for `maestro jobs show` and whoever answers it.
                let asked = store
                    .add_comment(job_id, &lease.worker, CommentKind::Question, &report.result)
                    .await;
                if let Err(e) = asked {
                    tracing::warn!(job = %job_id, "recording the run's question failed: {e}");
                }
            }
            finished
        }
        Ended::Broken(reason) => return fail(store, &lease, &reason).await,
        // Only when the hand-back came too late to release (the release above failed).
        Ended::Suspended => return JobEnd::Fenced,
    };
    match written {
        Ok(()) => JobEnd::Recorded,
        Err(e) => {
            tracing::warn!(job = %job_id, "recording the job's end failed: {e}");
            JobEnd::Fenced
        }
    }
}

async fn fail(store: &Store, lease: &Lease, reason: &str) -> JobEnd {
    match store.fail(lease, reason).await {
        Ok(FailDisposition::Requeued { run_at }) => {
            tracing::info!(job = %lease.job_id, %run_at, "requeued: {reason}");
            JobEnd::Failed
        }
        Ok(FailDisposition::Failed) => {
            tracing::info!(job = %lease.job_id, "failed: {reason}");
            JobEnd::Failed
        }
        Err(e) => {
            tracing::warn!(job = %lease.job_id, "reporting the failure failed: {e}");
            JobEnd::Fenced
        }
    }
}

/// What came of a job's run.
enum Ended {
    Unstarted(Unstartable),
    /// The run ended (or parked) on its own.
    Report(Box<RunReport>),
    /// The endpoint became unreachable: run it again later.
    Retry(String),
    /// The run record or the store failed.
    Broken(String),
    /// Stopped for a hand-back, no end recorded.
    Suspended,
}

/// Runs the engine over the job, its events going to the store under the lease.
async fn run_prepared(
    ctx: &JobContext,
    claimed: &Claimed,
    prepared: Prepared,
    history: Vec<EventRecord>,
    fence: &Arc<Fence>,
    suspend: CancellationToken,
) -> Ended {
    let Prepared {
        piece,
        piece_file,
        config,
    } = prepared;
    let engine_config = match config.engine_config() {
        Ok(c) => c,
        Err(e) => return Ended::Unstarted(Unstartable::Permanent(e.to_string())),
    };
    let provider: Arc<dyn Provider> = match ctx.models.client(&config) {
        Ok(c) => c,
        Err(e) => return Ended::Unstarted(e.into()),
    };
    let selection = McpSelection::for_piece(&piece);
    let uses_mcp = !piece.required_mcp.is_empty()
        || config.mcp.servers.keys().any(|slug| selection.wants(slug));
    // A piece that uses no MCP server runs with the worker's shared tools; one that does starts
    // its servers for this run.
    let (registry, toolbox) = if uses_mcp {
        let toolbox = match Toolbox::build(&config, &selection).await {
            Ok(t) => t,
            Err(e) => return unbuildable(&e),
        };
        if let Err(message) = toolbox.ensure_required(&piece.required_mcp) {
            toolbox.shutdown().await;
            return Ended::Unstarted(Unstartable::Permanent(format!(
                "piece `{}` cannot run: {message}",
                piece.name
            )));
        }
        (toolbox.registry.clone(), Some(toolbox))
    } else {
        match ctx.shared_tools(&config).await {
            Ok(registry) => (registry, None),
            Err(e) => return unbuildable(&e),
        }
    };
    let mut engine = Engine::new(provider, registry, engine_config);
    if let Some(key) = config.llm.api_key.clone() {
        engine = engine.with_secret(key);
    }
    let cancel = engine.cancel_token();
    let stop_run = fence.stop_run.clone();
    let forward = tokio::spawn(async move {
        stop_run.cancelled().await;
        cancel.cancel();
    });
    let workspace = claimed.job.workspace.as_ref().map(PathBuf::from);
    let answers = if first_claim(&claimed.lease) {
        Vec::new()
    } else {
        match ctx.store.answers(claimed.job.id).await {
            Ok(answers) => answers,
            Err(e) => return Ended::Broken(format!("reading the job's answers failed: {e}")),
        }
    };
    let parts = RunParts {
        piece,
        piece_file,
        history,
        workspace,
        suspend,
        answers,
    };
    let ended = match run_spec(ctx, claimed, parts, &config, fence) {
        Ok(spec) => match engine.run_spec(spec).await {
            Ok(RunEnd::Finished(report)) => Ended::Report(report),
            Ok(RunEnd::Retry { reason }) => Ended::Retry(reason),
            Ok(RunEnd::Suspended) => Ended::Suspended,
            Err(e) => Ended::Broken(format!("record_error: {e}")),
        },
        Err(broken) => broken,
    };
    forward.abort();
    drop(engine);
    if let Some(toolbox) = toolbox {
        toolbox.shutdown().await;
    }
    ended
}

/// What a job's run is made of besides the job.
struct RunParts {
    piece: Arc<Piece>,
    piece_file: Option<PathBuf>,
    history: Vec<EventRecord>,
    workspace: Option<PathBuf>,
    suspend: CancellationToken,
    answers: Vec<String>,
}

/// The engine's run of the job: its directory named by the job id, its events in the store
/// (first, the authority) and in `events.jsonl`, and whatever the store already holds as the
/// history to resume from.
fn run_spec(
    ctx: &JobContext,
    claimed: &Claimed,
    parts: RunParts,
    config: &Config,
    fence: &Arc<Fence>,
) -> Result<RunSpec, Ended> {
    let RunParts {
        piece,
        piece_file,
        history,
        workspace,
        suspend,
        answers,
    } = parts;
    let mut record = RunRecord::open(
        &config.paths.runs_dir,
        &claimed.job.id.to_string(),
        workspace.as_deref(),
    )
    .map_err(|e| Ended::Broken(format!("record_error: {e}")))?;
    if claimed.job.parent_id.is_some() {
        // A subtask's workspace (`subtasks/<n>/` of its parent's) is made for it, not named.
        record.workspace_kind = maestro_tools::WorkspaceKind::Job;
    }
    let jsonl = JsonlLog::rewrite(&record.events_path(), &history).map_err(|e| {
        Ended::Broken(format!(
            "record_error: cannot write {}: {e}",
            record.events_path().display()
        ))
    })?;
    let store_log = StoreLog::new(ctx.events.clone(), claimed.lease.clone(), Arc::clone(fence));
    let mut spec = RunSpec::new(piece, &claimed.job.task, record);
    spec.logs = vec![Arc::new(store_log), Arc::new(jsonl)];
    spec.history = history;
    // The last attempt records how the run ended, even when the endpoint is down.
    spec.retry_infrastructure = claimed.job.attempts < claimed.job.max_attempts;
    spec.piece_file = piece_file;
    spec.suspend = Some(suspend);
    spec.answers = answers;
    spec.subtasks = StoreSubtasks::for_job(
        &ctx.store,
        &claimed.lease,
        &claimed.job,
        spec.record.workspace.clone(),
        config,
        ctx.local.as_ref().and_then(std::sync::Weak::upgrade),
    )
    .map(|host| Arc::new(host) as Arc<dyn SubtaskHost>);
    Ok(spec)
}

/// A run whose tools cannot be set up (`ssh.connections` is wrong, say) never starts.
fn unbuildable(e: &ToolboxError) -> Ended {
    Ended::Unstarted(Unstartable::Permanent(format!("{e}: {}", source_of(e))))
}

fn source_of(e: &dyn std::error::Error) -> String {
    e.source().map(|s| s.to_string()).unwrap_or_default()
}
