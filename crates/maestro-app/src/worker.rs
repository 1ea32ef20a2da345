//! The worker: claims jobs of its profiles' task classes, runs each through the engine under a
//! fenced lease that a heartbeat keeps alive, and writes how it ended.
//!
//! One process may serve several profiles, each with its own concurrency. Shutting down
//! ([`Shutdown`]) stops claiming, lets runs in flight finish for the drain time, then hands the
//! rest back (their leases released, so another worker takes them at once).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use maestro_config::{Config, WorkerProfile};
use maestro_engine::{
    EndReason, Engine, EventRecord, JsonlLog, RunEnd, RunRecord, RunReport, RunSpec,
};
use maestro_llm::Provider;
use maestro_piece::Piece;
use maestro_protocol::RunStatus;
use maestro_store::{
    Claimed, Classes, CommentKind, FailDisposition, JobQueue, JobStatus, Lease, Outcome, Store,
    StoreError, StoredEvent, WorkerInfo,
};
use time::OffsetDateTime;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::models::{ModelError, check_served, client, served_model};
use crate::pieces::{AUTO, PieceError, available_pieces, classify_piece, find_piece};
use crate::store_log::{Fence, StoreLog};
use crate::toolbox::{McpSelection, Toolbox, load_options};

/// One worker profile: a name, how many jobs at once, which task classes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub concurrency: usize,
    pub classes: Classes,
}

impl Profile {
    /// The profile a `workers:` entry describes.
    pub fn from_config(profile: &WorkerProfile) -> Profile {
        Profile {
            name: profile.name.clone(),
            concurrency: usize::try_from(profile.concurrency.max(1)).unwrap_or(1),
            classes: classes(&profile.task_classes),
        }
    }
}

/// `Classes::Any` for an empty list.
pub fn classes(names: &[String]) -> Classes {
    if names.is_empty() {
        Classes::Any
    } else {
        Classes::Only(names.to_vec())
    }
}

/// How a worker process runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Shown by `maestro workers`.
    pub name: String,
    pub profiles: Vec<Profile>,
    /// How long a claim holds; renewed every third of it.
    pub lease: Duration,
    /// How long runs in flight may go on after shutdown begins.
    pub drain: Duration,
    /// How long an idle slot waits before looking for work again.
    pub idle_poll: Duration,
    /// The model was chosen on the command line: it wins over a piece's `model`.
    pub model_from_flag: bool,
}

impl WorkerOptions {
    /// The default lease.
    pub const LEASE: Duration = Duration::from_secs(30);
    /// The default drain time.
    pub const DRAIN: Duration = Duration::from_secs(30);
}

/// Tells a running worker to stop: first [`Shutdown::stop_claiming`] (drain), then, or when
/// the drain time is up, [`Shutdown::hand_back`].
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    stop: CancellationToken,
    hand_back: CancellationToken,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Claim nothing more; runs in flight go on for the drain time.
    pub fn stop_claiming(&self) {
        self.stop.cancel();
    }

    /// Stop the runs in flight now and release their leases.
    pub fn hand_back(&self) {
        self.stop.cancel();
        self.hand_back.cancel();
    }
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Runs that ended (or parked) and were recorded.
    pub finished: u64,
    /// Jobs queued again after an infrastructure failure, or ended `failed` for it.
    pub failed: u64,
    /// Jobs whose lease was lost or that were cancelled while running.
    pub fenced: u64,
    /// Jobs handed back at shutdown.
    pub handed_back: u64,
}

#[derive(Default)]
struct Counters {
    finished: AtomicU64,
    failed: AtomicU64,
    fenced: AtomicU64,
    handed_back: AtomicU64,
}

/// Why the worker could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Registering the worker failed.
    #[error("cannot register the worker")]
    Register(#[source] StoreError),
}

/// A worker process: a store, the configuration runs use, and how to run.
#[derive(Debug, Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    config: Config,
    options: WorkerOptions,
}

impl Worker {
    pub fn new(store: Store, config: Config, options: WorkerOptions) -> Worker {
        Worker {
            inner: Arc::new(Inner {
                store,
                config,
                options,
            }),
        }
    }

    /// Registers the profiles and runs until `shutdown`, then drains and hands back.
    pub async fn run(&self, shutdown: Shutdown) -> Result<WorkerStats, WorkerError> {
        let inner = &self.inner;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".to_string());
        let now = OffsetDateTime::now_utc();
        let mut ids = Vec::new();
        for profile in &inner.options.profiles {
            let info = WorkerInfo {
                id: uuid::Uuid::now_v7().to_string(),
                name: inner.options.name.clone(),
                profile: profile.name.clone(),
                task_classes: match &profile.classes {
                    Classes::Any => Vec::new(),
                    Classes::Only(names) => names.clone(),
                },
                host: host.clone(),
                pid: i64::from(std::process::id()),
                started_at: now,
                heartbeat_at: now,
            };
            inner
                .store
                .register_worker(&info)
                .await
                .map_err(WorkerError::Register)?;
            ids.push((info.id, profile.clone()));
        }
        let done = CancellationToken::new();
        let beat = tokio::spawn(worker_heartbeats(
            inner.store.clone(),
            ids.iter().map(|(id, _)| id.clone()).collect(),
            inner.options.lease / 3,
            done.clone(),
        ));
        let counters = Arc::new(Counters::default());
        let mut slots = JoinSet::new();
        for (id, profile) in &ids {
            for _ in 0..profile.concurrency {
                slots.spawn(slot(
                    Arc::clone(&self.inner),
                    id.clone(),
                    profile.classes.clone(),
                    shutdown.clone(),
                    Arc::clone(&counters),
                ));
            }
        }
        let drain = inner.options.drain;
        let deadline = {
            let shutdown = shutdown.clone();
            async move {
                shutdown.stop.cancelled().await;
                tokio::time::sleep(drain).await;
            }
        };
        tokio::select! {
            _ = join_all(&mut slots) => {}
            _ = deadline => {
                tracing::info!("drain time is up: handing the runs in flight back");
                shutdown.hand_back();
                join_all(&mut slots).await;
            }
        }
        done.cancel();
        let _ = beat.await;
        Ok(WorkerStats {
            finished: counters.finished.load(Ordering::Relaxed),
            failed: counters.failed.load(Ordering::Relaxed),
            fenced: counters.fenced.load(Ordering::Relaxed),
            handed_back: counters.handed_back.load(Ordering::Relaxed),
        })
    }
}

async fn join_all(set: &mut JoinSet<()>) {
    while let Some(joined) = set.join_next().await {
        if let Err(e) = joined {
            tracing::error!("a worker slot stopped: {e}");
        }
    }
}

async fn worker_heartbeats(
    store: Store,
    ids: Vec<String>,
    every: Duration,
    done: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        for id in &ids {
            if let Err(e) = store.worker_heartbeat(id).await {
                tracing::warn!("worker heartbeat failed: {e}");
            }
        }
    }
}

/// One unit of concurrency: claim, run, repeat, until shutdown.
async fn slot(
    inner: Arc<Inner>,
    worker_id: String,
    classes: Classes,
    shutdown: Shutdown,
    counters: Arc<Counters>,
) {
    while !shutdown.stop.is_cancelled() {
        match inner
            .store
            .claim(&worker_id, &classes, inner.options.lease)
            .await
        {
            Ok(Some(claimed)) => {
                let end = run_job(&inner, claimed, &shutdown).await;
                let counter = match end {
                    JobEnd::Recorded => &counters.finished,
                    JobEnd::Failed => &counters.failed,
                    JobEnd::Fenced => &counters.fenced,
                    JobEnd::HandedBack => &counters.handed_back,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Ok(None) => {
                tokio::select! {
                    _ = shutdown.stop.cancelled() => {}
                    _ = tokio::time::sleep(inner.options.idle_poll) => {}
                }
            }
            Err(e) => {
                tracing::warn!("claiming a job failed: {e}");
                tokio::select! {
                    _ = shutdown.stop.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// How one claimed job left this worker.
enum JobEnd {
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
    piece: Piece,
    /// The piece's file, recorded in `run_started`.
    piece_file: Option<PathBuf>,
    config: Config,
}

/// The piece and the settings a job runs with.
async fn prepare(inner: &Inner, claimed: &Claimed) -> Result<Prepared, Unstartable> {
    let mut config = inner.config.clone();
    let dirs = config.paths.pieces_dirs.clone();
    let opts = load_options(&config);
    let (piece, piece_file) = if claimed.job.piece == AUTO {
        if config.llm.model.is_none() {
            config.llm.model = Some(served_model(&config).await?);
        }
        let model = config.llm.model.clone().unwrap_or_default();
        let provider = client(&config)?;
        let chosen = classify_piece(
            &provider,
            &model,
            &claimed.job.task,
            available_pieces(&dirs, &opts),
        )
        .await?;
        tracing::info!(job = %claimed.job.id, piece = %chosen.choice.piece, "classified: {}", chosen.choice.reason);
        (chosen.piece, chosen.path)
    } else {
        let found = find_piece(&claimed.job.piece, &dirs, &opts)?;
        (found.piece, found.path)
    };
    if !inner.options.model_from_flag && piece.model.is_some() {
        config.llm.model = piece.model.clone();
    }
    // A run started against an endpoint that does not answer would only wait for it: an
    // unreachable endpoint sends the job back to the queue instead.
    match &config.llm.model {
        Some(model) => check_served(&config, model).await?,
        None => config.llm.model = Some(served_model(&config).await?),
    }
    Ok(Prepared {
        piece,
        piece_file: Some(piece_file),
        config,
    })
}

/// Keeps the lease: a heartbeat every third of it, and a look at the job's status every second
/// (so that a cancel stops the run within about a second). A lost lease or a cancelled job
/// closes the fence, which stops the run.
async fn keep_lease(
    store: Store,
    mut lease: Lease,
    lease_for: Duration,
    fence: Arc<Fence>,
    done: CancellationToken,
) {
    let tick = (lease_for / 3).min(Duration::from_secs(1));
    let beat_every = lease_for / 3;
    let mut last_beat = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            _ = fence.stop_run.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        if last_beat.elapsed() >= beat_every {
            match store.heartbeat(&lease, lease_for).await {
                Ok(renewed) => {
                    lease = renewed;
                    last_beat = tokio::time::Instant::now();
                }
                Err(e @ (StoreError::LeaseLost { .. } | StoreError::JobCancelled(_))) => {
                    fence.close(e.to_string());
                    return;
                }
                Err(e) => tracing::warn!(job = %lease.job_id, "renewing the lease failed: {e}"),
            }
        } else {
            match store.job(lease.job_id).await {
                Ok(Some(job)) if job.status == JobStatus::Cancelled => {
                    fence.close(format!("job {} was cancelled", job.id));
                    return;
                }
                Ok(Some(job)) if job.fence != lease.fence => {
                    fence.close(format!(
                        "lease lost on job {}: fencing token {} is now {}",
                        job.id, lease.fence, job.fence
                    ));
                    return;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(job = %lease.job_id, "reading the job failed: {e}"),
            }
        }
    }
}

/// Runs one claimed job to its end, a park, a retry, a lost lease or a hand-back.
async fn run_job(inner: &Inner, claimed: Claimed, shutdown: &Shutdown) -> JobEnd {
    let store = &inner.store;
    let lease = claimed.lease.clone();
    let job_id = claimed.job.id;
    let fence = Arc::new(Fence::default());
    let done = CancellationToken::new();
    let keeper = tokio::spawn(keep_lease(
        store.clone(),
        lease.clone(),
        inner.options.lease,
        Arc::clone(&fence),
        done.clone(),
    ));
    // A hand-back suspends the run: it stops where it is and records no end, so that the
    // worker that claims the job next resumes it.
    let suspend = shutdown.hand_back.child_token();
    let end = match (
        prepare(inner, &claimed).await,
        store.events(job_id, 0).await,
    ) {
        (Ok(prepared), Ok(history)) => {
            run_prepared(inner, &claimed, prepared, history, &fence, suspend.clone()).await
        }
        (Err(unstartable), _) => Ended::Unstarted(unstartable),
        (_, Err(e)) => Ended::Broken(format!("reading the job's events failed: {e}")),
    };
    done.cancel();
    let _ = keeper.await;
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
            store
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
            let finished = store.finish(&lease, outcome(&report)).await;
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

/// The job's outcome for a run that ended on its own.
fn outcome(report: &RunReport) -> Outcome {
    let status = match report.status {
        RunStatus::Completed => JobStatus::Completed,
        RunStatus::Aborted => JobStatus::Aborted,
        RunStatus::Exceeded => JobStatus::Exceeded,
        RunStatus::NeedsUserInput => JobStatus::WaitingInput,
        RunStatus::Failed => JobStatus::Failed,
    };
    Outcome {
        status,
        result: Some(serde_json::json!({
            "run_id": report.run_id,
            "status": report.status,
            "result": report.result,
            "run_dir": report.run_dir,
        })),
        reason: report.reason.as_ref().map(EndReason::to_string),
    }
}

/// Runs the engine over the job, its events going to the store under the lease.
async fn run_prepared(
    inner: &Inner,
    claimed: &Claimed,
    prepared: Prepared,
    history: Vec<StoredEvent>,
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
    let provider: Arc<dyn Provider> = match client(&config) {
        Ok(c) => Arc::new(c),
        Err(e) => return Ended::Unstarted(e.into()),
    };
    let toolbox = match Toolbox::build(&config, &McpSelection::for_piece(&piece)).await {
        Ok(t) => t,
        Err(e) => {
            return Ended::Unstarted(Unstartable::Permanent(format!("{e}: {}", source_of(&e))));
        }
    };
    if let Err(message) = toolbox.ensure_required(&piece.required_mcp) {
        toolbox.shutdown().await;
        return Ended::Unstarted(Unstartable::Permanent(format!(
            "piece `{}` cannot run: {message}",
            piece.name
        )));
    }
    let mut engine = Engine::new(provider, toolbox.registry.clone(), engine_config);
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
    let parts = RunParts {
        piece,
        piece_file,
        history: &history,
        workspace,
        suspend,
    };
    let ended = match run_spec(inner, claimed, parts, &config, fence) {
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
    toolbox.shutdown().await;
    ended
}

/// What a job's run is made of besides the job.
struct RunParts<'a> {
    piece: Piece,
    piece_file: Option<PathBuf>,
    history: &'a [StoredEvent],
    workspace: Option<PathBuf>,
    suspend: CancellationToken,
}

/// The engine's run of the job: its directory named by the job id, its events in the store
/// (first, the authority) and in `events.jsonl`, and whatever the store already holds as the
/// history to resume from.
fn run_spec(
    inner: &Inner,
    claimed: &Claimed,
    parts: RunParts<'_>,
    config: &Config,
    fence: &Arc<Fence>,
) -> Result<RunSpec, Ended> {
    let RunParts {
        piece,
        piece_file,
        history,
        workspace,
        suspend,
    } = parts;
    let record = RunRecord::open(
        &config.paths.runs_dir,
        &claimed.job.id.to_string(),
        workspace.as_deref(),
    )
    .map_err(|e| Ended::Broken(format!("record_error: {e}")))?;
    let history = history
        .iter()
        .map(|event| serde_json::from_value::<EventRecord>(event.payload.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Ended::Unstarted(Unstartable::Permanent(format!(
                "the job's stored events cannot be read: {e}"
            )))
        })?;
    let jsonl = JsonlLog::rewrite(&record.events_path(), &history).map_err(|e| {
        Ended::Broken(format!(
            "record_error: cannot write {}: {e}",
            record.events_path().display()
        ))
    })?;
    let store_log = StoreLog::new(
        inner.store.clone(),
        claimed.lease.clone(),
        Arc::clone(fence),
    );
    let mut spec = RunSpec::new(Arc::new(piece), &claimed.job.task, record);
    spec.logs = vec![Arc::new(store_log), Arc::new(jsonl)];
    spec.history = history;
    // The last attempt records how the run ended, even when the endpoint is down.
    spec.retry_infrastructure = claimed.job.attempts < claimed.job.max_attempts;
    spec.piece_file = piece_file;
    spec.suspend = Some(suspend);
    Ok(spec)
}

fn source_of(e: &dyn std::error::Error) -> String {
    e.source().map(|s| s.to_string()).unwrap_or_default()
}
