//! Starting a run in this process, the entry every front end calls: a new run of a task, the
//! resume of a stopped one, or the replay of a finished one. Each is a job in the store (a new
//! run is submitted and claimed at once), goes through the one run path, and is steered through
//! its [`RunHandle`]: subscribed to, cancelled, answered, and awaited for its outcome.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use maestro_config::Config;
use maestro_protocol::EventRecord;
use maestro_store::{Claimed, Job, JobId, JobQueue, JobStatus, NewJob, Store, StoreError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::children::LocalChildren;
use crate::completer::Completer;
use crate::context::JobContext;
use crate::lease::LeaseKeeper;
use crate::lease_owner::LeaseOwner;
use crate::live::Subscription;
use crate::outcome::{RunError, RunOutcome};
use crate::run::{Execution, Target, execute, stored_events};

/// How long a local run's claim holds between heartbeats. Short, so that after a kill -9 the
/// run can be continued soon even from another process.
pub const LOCAL_LEASE: Duration = Duration::from_secs(10);

/// A run to start in this process.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// What to run.
    pub kind: RunKind,
    /// The model was chosen on the command line: it wins over a piece's `model`.
    pub model_from_flag: bool,
    /// How many items the run's live channel holds for its slowest subscriber before that one
    /// lags and catches up from the store ([`crate::LIVE_CAPACITY`] when `None`).
    pub live_capacity: Option<usize>,
}

/// What a [`RunRequest`] runs.
#[derive(Debug, Clone)]
pub enum RunKind {
    /// A new run of `task`.
    New {
        /// A piece file, a piece name found in the pieces directories, or `auto`.
        piece: String,
        /// The task.
        task: String,
        /// The directory the tools work in, named by the user; `None` for the run directory's
        /// own workspace.
        workspace: Option<PathBuf>,
        /// Who submits it, for the audit log.
        submitted_by: String,
        /// The job's own caps on what it and its subtasks may spend (`--max-cost-usd`), kept
        /// with the job; the configuration's caps apply as well, the tightest winning.
        budget: maestro_config::BudgetSettings,
    },
    /// Continue the stopped run (job) with this id where it stopped.
    Resume {
        /// The run's (job's) id.
        id: String,
    },
    /// Drive the finished run with this id again from its record: no model call, no tool run.
    Replay {
        /// The run's (job's) id.
        id: String,
        /// Its recorded events (from the store, or its `events.jsonl`).
        history: Vec<EventRecord>,
    },
}

/// Why a run could not be started at all (nothing was run, nothing was written).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The id names no job.
    #[error("no job or run `{0}` in the job store")]
    NoSuchJob(String),
    /// Another live process runs it.
    #[error(
        "run {id} is being run by {owner} (its lease holds until {until}); wait for it to end, or \
         for the lease to lapse if that process is gone"
    )]
    Busy {
        /// The job.
        id: JobId,
        /// Who holds its lease.
        owner: String,
        /// Until when.
        until: String,
    },
    /// It ended; a resume has nothing to do.
    #[error("run {id} already ended {status}; there is nothing to resume")]
    Ended {
        /// The job.
        id: JobId,
        /// How it ended.
        status: JobStatus,
    },
    /// It waits for an answer first.
    #[error(
        "run {id} is waiting for an answer to its question; answer it with `maestro jobs answer \
         {id} \"…\"`, then resume it"
    )]
    Unanswered {
        /// The job.
        id: JobId,
    },
    /// The task is empty.
    #[error("the task is empty; say what the run should do")]
    EmptyTask,
    /// The piece names no piece file, piece or builtin workflow, or it does not load: nothing
    /// was recorded.
    #[error(transparent)]
    Piece(Box<crate::pieces::PieceError>),
    /// The workspace named for the run is not a directory that exists.
    #[error(
        "the workspace {} {why}; create it first (mkdir -p), or leave out --workspace to work \
         in the run's own workspace",
        path.display()
    )]
    Workspace {
        /// The directory named.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// A run started in this process.
pub struct RunHandle {
    id: String,
    job: Option<JobId>,
    ctx: Arc<JobContext>,
    stop: CancellationToken,
    /// The last event the run had recorded before it started here.
    resumed_after: u64,
    children: Option<Arc<LocalChildren>>,
    task: JoinHandle<RunOutcome>,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle").field("id", &self.id).finish()
    }
}

/// Starts `request` in this process, on `store` under `config`, through the one run path.
pub async fn start(
    store: Store,
    config: Config,
    request: RunRequest,
) -> Result<RunHandle, StartError> {
    let leases = LeaseKeeper::new(store.clone(), LOCAL_LEASE);
    let mut ctx = JobContext::new(
        store.clone(),
        Arc::new(config),
        leases,
        request.model_from_flag,
    );
    if let Some(capacity) = request.live_capacity {
        ctx.live = crate::live::LiveRuns::with_capacity(capacity);
    }
    let owner = LeaseOwner::this_process();
    let (target, job, resumed_after, children) = match request.kind {
        RunKind::Replay { id, history } => (Target::Replay { id, history }, None, 0, None),
        RunKind::New {
            piece,
            task,
            workspace,
            submitted_by,
            budget,
        } => {
            if task.trim().is_empty() {
                return Err(StartError::EmptyTask);
            }
            // What a person mistyped is said before anything is recorded: no job is left
            // behind for a piece that is not there or a workspace that does not exist.
            if let Some(path) = &workspace {
                let why = match std::fs::metadata(path) {
                    Ok(meta) if meta.is_dir() => None,
                    Ok(_) => Some("is not a directory"),
                    Err(_) => Some("does not exist"),
                };
                if let Some(why) = why {
                    let path = path.clone();
                    return Err(StartError::Workspace { path, why });
                }
            }
            // A piece that is not there or does not load is refused here too, as `maestro
            // submit` refuses it: its errors are the answer, not a failed job.
            if piece != crate::AUTO {
                let (config, tag) = ctx.current_config().await;
                crate::piece_store::find_piece_in(
                    &store,
                    &piece,
                    &config.paths.pieces_dirs,
                    &ctx.load_options(&config, tag.as_ref()),
                )
                .await
                .map_err(|e| StartError::Piece(Box::new(e)))?;
            }
            let mut job = NewJob::new(crate::pieces::piece_as_kept(piece), task, submitted_by);
            job.max_attempts = 1;
            job.budget = crate::budget::limits_of(budget);
            job.workspace = workspace
                .map(|w| std::path::absolute(&w).unwrap_or(w))
                .map(|w| w.display().to_string());
            let id = store.submit(job).await?;
            let claimed = store
                .claim_job(id, &owner.to_string(), LOCAL_LEASE, false)
                .await?
                .ok_or_else(|| StartError::NoSuchJob(id.to_string()))?;
            let children = LocalChildren::new(&ctx, owner.clone());
            (Target::Job(Box::new(claimed)), Some(id), 0, Some(children))
        }
        RunKind::Resume { id } => {
            let claimed = reclaim(&store, &id, &owner).await?;
            let job = claimed.job.id;
            let after = match stored_events(&store, job).await {
                Ok(history) => history.last().map_or(0, |r| r.seq),
                Err(_) => 0,
            };
            let children = LocalChildren::new(&ctx, owner.clone());
            (
                Target::Job(Box::new(claimed)),
                Some(job),
                after,
                Some(children),
            )
        }
    };
    if let Some(children) = &children {
        let children: std::sync::Weak<LocalChildren> = Arc::downgrade(children);
        let runner: std::sync::Weak<dyn crate::context::ChildRunner> = children;
        ctx.children = Some(runner);
    }
    let id = match &target {
        Target::Replay { id, .. } => id.clone(),
        Target::Job(claimed) => claimed.job.id.to_string(),
    };
    let ctx = Arc::new(ctx);
    let stop = CancellationToken::new();
    // The channel exists before the run does, and lasts until its end is written, so that a
    // subscriber misses nothing and ends with the run.
    let channel = job.map(|job| ctx.live.open(job));
    let (completer, _writing) = Completer::start(store);
    let execution = Execution {
        target,
        stop: Some(stop.clone()),
        hand_back: CancellationToken::new(),
        completer,
    };
    let run_ctx = Arc::clone(&ctx);
    let task = tokio::spawn(async move {
        let outcome = execute(&run_ctx, execution).await;
        drop(channel);
        if let Some(job) = job {
            run_ctx.live.close(job);
        }
        outcome
    });
    Ok(RunHandle {
        id,
        job,
        ctx,
        stop,
        resumed_after,
        children,
        task,
    })
}

/// Claims a stopped run again to continue it: one that was cancelled or failed, queued, or
/// whose process died (its lease lapsed, or it was a local run on this host whose process is
/// gone).
async fn reclaim(store: &Store, id: &str, owner: &LeaseOwner) -> Result<Claimed, StartError> {
    let job_id: JobId = id
        .parse()
        .map_err(|_| StartError::NoSuchJob(id.to_string()))?;
    let job = store
        .job(job_id)
        .await?
        .ok_or_else(|| StartError::NoSuchJob(id.to_string()))?;
    let take_over = job.status == JobStatus::Running
        && job
            .lease_owner
            .as_deref()
            .is_some_and(LeaseOwner::is_gone_process);
    let owner = owner.to_string();
    match store.claim_job(job_id, &owner, LOCAL_LEASE, true).await? {
        Some(claimed) => Ok(claimed),
        None if take_over => store
            .take_over_job(job_id, &owner, LOCAL_LEASE)
            .await?
            .ok_or_else(|| StartError::NoSuchJob(id.to_string())),
        None => Err(busy_or_ended(&job)),
    }
}

fn busy_or_ended(job: &Job) -> StartError {
    match (job.status, &job.lease_owner, job.lease_expires_at) {
        (JobStatus::Running, Some(owner), Some(until)) => StartError::Busy {
            id: job.id,
            owner: owner.clone(),
            until: until.to_string(),
        },
        (JobStatus::WaitingInput, _, _) => StartError::Unanswered { id: job.id },
        (status, _, _) => StartError::Ended { id: job.id, status },
    }
}

impl RunHandle {
    /// The run's id (its job's id).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The run's job, unless it is a replay.
    pub fn job(&self) -> Option<JobId> {
        self.job
    }

    /// The last event the run had recorded before it started here (0 for a new run).
    pub fn resumed_after(&self) -> u64 {
        self.resumed_after
    }

    /// The events the run commits from now on (a resumed run's earlier events are not
    /// repeated), each once and in `seq` order, with the model's text as it streams.
    pub fn subscribe(&self) -> Subscription {
        self.subscribe_after(self.resumed_after)
    }

    /// The run's events after `seq`: those the store already holds, then live.
    pub fn subscribe_after(&self, seq: u64) -> Subscription {
        let Some(job) = self.job else {
            return Subscription::new(JobId::new(), None, None, seq);
        };
        Subscription::new(
            job,
            Some(self.ctx.store.clone()),
            self.ctx.live.receiver(job),
            seq,
        )
    }

    /// Stops the run: it ends `cancelled`, and that is recorded.
    pub fn cancel(&self) {
        self.stop.cancel();
    }

    /// Something that cancels the run from elsewhere (a signal handler), while the handle
    /// waits for its outcome.
    pub fn canceller(&self) -> Canceller {
        Canceller(self.stop.clone())
    }

    /// True once [`RunHandle::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Answers the question the run parked on (`waiting_input`): the job goes back to the
    /// queue, to go on in the same conversation when it is resumed.
    pub async fn answer(&self, author: &str, text: &str) -> Result<(), crate::JobError> {
        let job = self
            .job
            .ok_or_else(|| crate::JobError::NotAJob(self.id.clone()))?;
        crate::jobs::answer_job(&self.ctx.store, job, author, text).await
    }

    /// Waits for the run's end and says how it ended. A local run's children end first: when
    /// the run was stopped, they are cancelled too.
    pub async fn outcome(self) -> RunOutcome {
        let outcome = match self.task.await {
            Ok(outcome) => outcome,
            Err(e) => RunOutcome::Failed {
                error: RunError::Internal(format!("the run's task stopped: {e}")),
                requeued: false,
            },
        };
        if let (Some(children), Some(job)) = (&self.children, self.job) {
            let stopped = self.stop.is_cancelled()
                || matches!(&outcome, RunOutcome::Ended(s) if s.reason == Some(maestro_protocol::EndReason::Cancelled));
            children.finish(job, stopped).await;
        }
        outcome
    }
}

/// Why a run's record cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordReadError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] RunError),
    /// Neither the store nor the runs directory holds the run.
    #[error("no run `{id}`: the job store holds no events for it and {} does not exist", path.display())]
    Missing {
        /// The run's id.
        id: String,
        /// Where its `events.jsonl` would be.
        path: PathBuf,
    },
    /// Its `events.jsonl` cannot be read.
    #[error("{0}")]
    Jsonl(String),
}

/// A run's recorded events: from the store when it holds the run, else from its
/// `events.jsonl` under `runs_dir`.
pub async fn recorded_run(
    store: Option<&Store>,
    runs_dir: &std::path::Path,
    id: &str,
) -> Result<Vec<EventRecord>, RecordReadError> {
    if let (Some(store), Ok(job)) = (store, id.parse::<JobId>()) {
        let history = stored_events(store, job).await?;
        if !history.is_empty() {
            return Ok(history);
        }
    }
    let path = runs_dir.join(id).join("events.jsonl");
    if !path.is_file() {
        return Err(RecordReadError::Missing {
            id: id.to_string(),
            path,
        });
    }
    maestro_engine::read_events(&path).map_err(RecordReadError::Jsonl)
}

/// Cancels one run ([`RunHandle::canceller`]).
#[derive(Debug, Clone)]
pub struct Canceller(CancellationToken);

impl Canceller {
    /// Stops the run: it ends `cancelled`, and that is recorded.
    pub fn cancel(&self) {
        self.0.cancel();
    }
}
