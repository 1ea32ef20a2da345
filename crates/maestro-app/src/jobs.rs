//! The job use cases outside a worker: submit, inspect, wait for, cancel.

use std::path::PathBuf;
use std::time::Duration;

use maestro_config::Config;
use maestro_protocol::RunStatus;
use maestro_store::{
    CommentKind, Job, JobId, JobQueue, JobStatus, NewJob, Store, StoreError, StoredEvent,
    WorkerInfo,
};
use serde::Serialize;
use time::OffsetDateTime;

use crate::files::{FileError, FileLimits, Upload, check_uploads};
use crate::piece_store::find_piece_in;
use crate::pieces::{AUTO, PieceError};
use crate::toolbox::load_options;

/// A task to queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    /// A piece file, a piece name in `paths.pieces_dirs`, or `auto` (the worker classifies).
    pub piece: String,
    /// What the run should do; not empty.
    pub task: String,
    /// The directory the tools work in (default: the run directory's own workspace).
    pub workspace: Option<PathBuf>,
    /// The task class (default: `default`).
    pub class: Option<String>,
    /// Higher runs first among queued jobs (default 0).
    pub priority: i64,
    /// Claims allowed before the job ends `failed` (default 3).
    pub max_attempts: Option<i64>,
    /// Who submits it (the audit log's actor).
    pub submitted_by: String,
    /// The user (an email) the job belongs to: the server sets the signed-in user; `maestro
    /// jobs submit` sets none (a job of the machine's operator, which only admins see in the
    /// server's lists).
    pub owner: Option<String>,
    /// Files the run finds under `input/`, stored with the job (see [`crate::FileLimits`]).
    pub inputs: Vec<Upload>,
    /// The job's own caps on what it and its subtasks may spend, kept with the job; the
    /// configuration's caps apply as well, the tightest winning (docs/budgets.md).
    pub budget: maestro_config::BudgetSettings,
}

/// Why a use case failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The piece cannot be found or does not load.
    #[error(transparent)]
    Piece(#[from] PieceError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No job has this id.
    #[error("no job with id {0}")]
    NoSuchJob(JobId),
    /// The input files were refused: a bad path, one given twice, or over a limit.
    #[error(transparent)]
    Files(#[from] FileError),
    /// `--workspace` cannot be made absolute.
    #[error("the workspace `{}` cannot be resolved", path.display())]
    Workspace {
        /// The workspace as given.
        path: PathBuf,
        /// Why it cannot be made absolute.
        #[source]
        source: std::io::Error,
    },
    /// The run is a replay, not a job.
    #[error("run `{0}` is not a job")]
    NotAJob(String),
    /// The job had not ended when the wait ran out.
    #[error("job {id} is still {status} after {waited:?}")]
    WaitTimedOut {
        /// The job waited for.
        id: JobId,
        /// Its status when the wait ran out.
        status: JobStatus,
        /// How long the wait was.
        waited: Duration,
    },
    /// The task is empty or only whitespace: a job would run with nothing to do.
    #[error(
        "the task is empty; say what the job should do, e.g. `--task \"make the failing tests pass\"`"
    )]
    EmptyTask,
    /// `max_attempts` is below 1: a job needs at least the one attempt that runs it.
    #[error(
        "--max-attempts {0} is not allowed: a job needs at least 1 attempt; give 1 for no retry, \
         or leave the flag out for the default ({default})",
        default = NewJob::DEFAULT_MAX_ATTEMPTS
    )]
    MaxAttempts(i64),
    /// The answer is empty or only whitespace: the run would go on with nothing said.
    #[error(
        "the answer to job {0} is empty; write the answer to its question \
         (`maestro jobs show {0}` prints the question)"
    )]
    EmptyAnswer(JobId),
    /// A comment is empty or only whitespace.
    #[error("the comment on job {0} is empty; write what you want to say")]
    EmptyComment(JobId),
    /// A comment answers a question the job never asked.
    #[error(
        "job {job} has no question {comment}; `in_reply_to` takes the id of one of its \
         comments of kind `question`"
    )]
    NoSuchQuestion {
        /// The job commented on.
        job: JobId,
        /// The comment id given.
        comment: i64,
    },
}

/// Queues a task. The piece is looked up now, so that a misspelt name fails at once; a name is
/// stored as given (a piece file as an absolute path), and the worker looks it up again. A workspace is stored as an
/// absolute path, since a worker may run elsewhere.
pub async fn submit(store: &Store, config: &Config, s: Submission) -> Result<JobId, JobError> {
    if s.task.trim().is_empty() {
        return Err(JobError::EmptyTask);
    }
    if let Some(n) = s.max_attempts
        && n < 1
    {
        return Err(JobError::MaxAttempts(n));
    }
    let inputs = check_uploads(s.inputs, &FileLimits::from_config(&config.files))?;
    if s.piece != AUTO {
        find_piece_in(
            store,
            &s.piece,
            &config.paths.pieces_dirs,
            &load_options(config),
        )
        .await?;
    }
    let workspace = match s.workspace {
        Some(path) => Some(
            std::path::absolute(&path)
                .map_err(|source| JobError::Workspace { path, source })?
                .display()
                .to_string(),
        ),
        None => None,
    };
    let mut job = NewJob::new(
        crate::pieces::piece_as_kept(s.piece),
        s.task,
        s.submitted_by,
    );
    job.owner = s.owner;
    job.workspace = workspace;
    job.priority = s.priority;
    if let Some(class) = s.class {
        job.task_class = class;
    }
    if let Some(n) = s.max_attempts {
        job.max_attempts = n;
    }
    job.budget = crate::budget::limits_of(s.budget);
    if inputs.is_empty() {
        Ok(store.submit(job).await?)
    } else {
        Ok(store.submit_with_inputs(job, &inputs).await?)
    }
}

/// What `maestro jobs list` and `maestro jobs show` print about a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSummary {
    /// The job's id (a UUIDv7: ids sort by submission time).
    pub id: JobId,
    /// Where it is in its life: queued, running, waiting, or how it ended.
    pub status: JobStatus,
    /// The piece as submitted: a name, a file, or `auto`.
    pub piece: String,
    /// The job that spawned it, for a subtask.
    pub parent_id: Option<JobId>,
    /// Claims so far.
    pub attempt: i64,
    /// When it was submitted.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When its row last changed.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// The run's outcome: `run_id`, `status`, `result`, `run_dir`.
    pub result: Option<serde_json::Value>,
    /// Why it ended other than by its run's normal outcome, or why its last attempt failed:
    /// an end reason's code and detail (`llm_error: …`).
    pub reason: Option<String>,
    /// The run's latest open question (a job waiting for input).
    pub question: Option<String>,
    /// The schedule that fired it, if one did.
    pub schedule_id: Option<String>,
    /// The slot of that schedule it was fired for.
    #[serde(with = "time::serde::rfc3339::option")]
    pub scheduled_for: Option<OffsetDateTime>,
    /// A subtask's title, as its parent gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Levels below the submitted job it descends from (0 for a submitted job).
    pub depth: i64,
    /// The user the job belongs to (an email); `None`: nobody's (submitted from the command
    /// line).
    pub owner: Option<String>,
}

pub(crate) async fn summary(store: &Store, job: Job) -> Result<JobSummary, JobError> {
    let question = if job.status == JobStatus::WaitingInput {
        store
            .comments(job.id)
            .await?
            .into_iter()
            .rev()
            .find(|c| c.kind == CommentKind::Question)
            .map(|c| c.body)
    } else {
        None
    };
    Ok(JobSummary {
        id: job.id,
        status: job.status,
        piece: job.piece,
        parent_id: job.parent_id,
        attempt: job.attempts,
        created_at: job.created_at,
        updated_at: job.updated_at,
        result: job.result,
        reason: job.reason,
        question,
        schedule_id: job.schedule_id,
        scheduled_for: job.scheduled_for,
        title: job.title,
        depth: job.depth,
        owner: job.owner,
    })
}

/// Every job (optionally in one status), oldest first.
pub async fn list_jobs(
    store: &Store,
    status: Option<JobStatus>,
) -> Result<Vec<JobSummary>, JobError> {
    let mut out = Vec::new();
    for job in store.jobs(status).await? {
        out.push(summary(store, job).await?);
    }
    Ok(out)
}

/// One job.
pub async fn show_job(store: &Store, id: JobId) -> Result<JobSummary, JobError> {
    let job = store.job(id).await?.ok_or(JobError::NoSuchJob(id))?;
    summary(store, job).await
}

/// The exit code of a job that ended or waits for a person: the run's exit code
/// ([`RunStatus::exit_code`]); a cancelled job exits as a failed run. `None` while it is
/// queued, running or waiting for subtasks.
pub fn exit_code(status: JobStatus) -> Option<i32> {
    let run = match status {
        JobStatus::Completed => RunStatus::Completed,
        JobStatus::Aborted => RunStatus::Aborted,
        JobStatus::Exceeded => RunStatus::Exceeded,
        JobStatus::WaitingInput => RunStatus::NeedsUserInput,
        JobStatus::Failed | JobStatus::Cancelled => RunStatus::Failed,
        JobStatus::Queued | JobStatus::Running | JobStatus::WaitingSubtasks => return None,
    };
    Some(run.exit_code())
}

/// How often waiting and following look at the store.
pub const POLL: Duration = Duration::from_millis(200);

/// The exit code of `maestro jobs wait` when its `--timeout` runs out (as `timeout(1)`'s):
/// distinct from every run's exit code ([`exit_code`]) and from 2, a usage error or a failure.
pub const WAIT_TIMED_OUT_EXIT: u8 = 124;

/// The longest pause between two tries while the store does not answer.
const OUTAGE_MAX_PAUSE: Duration = Duration::from_secs(5);

/// Rides out a store that fails for a while (a PostgreSQL restart, a busy or full disk) as a
/// worker does: each failed look is warned about and tried again after a pause that doubles
/// from [`POLL`] up to [`OUTAGE_MAX_PAUSE`]. Errors retrying cannot help
/// ([`StoreError::is_unusable`], a bad URL, a missing store) are returned at once.
#[derive(Debug, Default)]
struct Outage {
    failures: u32,
}

impl Outage {
    async fn look<T>(&mut self, result: Result<T, StoreError>) -> Result<Option<T>, JobError> {
        match result {
            Ok(value) => {
                if self.failures > 0 {
                    tracing::warn!("the store answers again");
                }
                self.failures = 0;
                Ok(Some(value))
            }
            Err(e) if retryable(&e) => {
                let pause = POLL
                    .saturating_mul(1 << self.failures.min(8))
                    .min(OUTAGE_MAX_PAUSE);
                self.failures += 1;
                tracing::warn!("reading the store failed (trying again in {pause:?}): {e}");
                tokio::time::sleep(pause).await;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

fn retryable(e: &StoreError) -> bool {
    matches!(e, StoreError::Query { .. } | StoreError::Connect { .. }) && !e.is_unusable()
}

/// Waits until the job has an exit code ([`exit_code`]), at most `timeout`. A store that
/// fails meanwhile is warned about and read again ([`Outage`]).
pub async fn wait_job(
    store: &Store,
    id: JobId,
    timeout: Option<Duration>,
) -> Result<Job, JobError> {
    let started = tokio::time::Instant::now();
    let mut outage = Outage::default();
    let mut status = None;
    loop {
        if let Some(job) = outage.look(store.job(id).await).await? {
            let job = job.ok_or(JobError::NoSuchJob(id))?;
            if exit_code(job.status).is_some() {
                return Ok(job);
            }
            status = Some(job.status);
        }
        if let Some(limit) = timeout
            && started.elapsed() >= limit
        {
            return Err(JobError::WaitTimedOut {
                id,
                status: status.unwrap_or(JobStatus::Queued),
                waited: limit,
            });
        }
        if outage.failures == 0 {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Hands each of the job's events after `after` to `emit`, in order; with `follow`, goes on
/// until the job has ended and every event is handed over. A store that fails meanwhile is
/// warned about and read again ([`Outage`]).
pub async fn follow_events<E>(
    store: &Store,
    id: JobId,
    mut after: i64,
    follow: bool,
    mut emit: impl FnMut(&StoredEvent) -> Result<(), E>,
) -> Result<(), FollowError<E>> {
    let mut outage = Outage::default();
    let exists = loop {
        if let Some(job) = outage.look(store.job(id).await).await? {
            break job.is_some();
        }
    };
    if !exists {
        return Err(JobError::NoSuchJob(id).into());
    }
    loop {
        // Read the status before the events, so that events written just before the end are
        // not missed.
        let Some(job) = outage.look(store.job(id).await).await? else {
            continue;
        };
        let ended = job.is_none_or(|job| exit_code(job.status).is_some());
        let Some(events) = outage.look(store.events(id, after).await).await? else {
            continue;
        };
        for event in &events {
            emit(event).map_err(FollowError::Emit)?;
            after = event.seq;
        }
        if !follow || (ended && events.is_empty()) {
            return Ok(());
        }
        if events.is_empty() {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Why following a job's events stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError<E> {
    /// Reading the job or its events failed.
    #[error(transparent)]
    Job(#[from] JobError),
    /// Handing an event on failed (its reader went away, say).
    #[error("{0}")]
    Emit(E),
}

/// Cancels the job and its descendants; returns the ids cancelled.
pub async fn cancel_job(store: &Store, id: JobId, actor: &str) -> Result<Vec<JobId>, JobError> {
    Ok(store.cancel(id, actor).await?)
}

/// Answers the question a job waiting for input asked and queues it again (the store records
/// the answer as a comment and in the audit log). An empty answer is refused; so is a job that
/// is not waiting for input.
pub async fn answer_job(store: &Store, id: JobId, actor: &str, text: &str) -> Result<(), JobError> {
    if text.trim().is_empty() {
        return Err(JobError::EmptyAnswer(id));
    }
    store.answer(id, actor, text).await?;
    Ok(())
}

/// A live worker and the jobs it runs now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerSummary {
    /// The worker as it registered: name, profile, classes, host, pid, heartbeat.
    #[serde(flatten)]
    pub worker: WorkerInfo,
    /// The jobs it holds a lease on now.
    pub running: Vec<JobId>,
}

/// Workers seen within `within`, each with the jobs it holds a lease on.
pub async fn live_workers(store: &Store, within: Duration) -> Result<Vec<WorkerSummary>, JobError> {
    let running = store.jobs(Some(JobStatus::Running)).await?;
    Ok(store
        .live_workers(within)
        .await?
        .into_iter()
        .map(|worker| WorkerSummary {
            running: running
                .iter()
                .filter(|job| job.lease_owner.as_deref() == Some(worker.id.as_str()))
                .map(|job| job.id)
                .collect(),
            worker,
        })
        .collect())
}
