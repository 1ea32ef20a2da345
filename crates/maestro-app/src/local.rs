//! A run in this process as a job (`maestro run`): submitted to the store, claimed at once by
//! this process, its events written to the store under the lease and to `events.jsonl`, and its
//! end written back. Every local run is then a job `maestro jobs` shows, and one that stopped
//! (Ctrl-C, a failure, kill -9) can be continued with `maestro run --resume`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use maestro_config::Config;
use maestro_engine::{
    EndReason, EventLog, EventRecord, JsonlLog, RunEnd, RunRecord, RunReport, SubtaskHost,
};
use maestro_protocol::RunStatus;
use maestro_store::{
    Claimed, FailDisposition, Job, JobId, JobQueue, JobStatus, NewJob, Outcome, Store, StoreError,
};
use tokio_util::sync::CancellationToken;

use crate::job::JobContext;
use crate::lease::{Kept, LeaseKeeper};
use crate::store_log::{EventWriter, Fence, StoreLog};
use crate::subtasks::{LocalChildren, StoreSubtasks};

/// How long a local run's claim holds between heartbeats. Short, so that after a kill -9 the
/// run can be continued soon even from another process.
pub const LOCAL_LEASE: Duration = Duration::from_secs(10);

/// Why a local job cannot start or end.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no job or run `{0}` in the job store")]
    NoSuchJob(String),
    #[error(
        "run {id} is being run by {owner} (its lease holds until {until}); wait for it to end, or \
         for the lease to lapse if that process is gone"
    )]
    Busy {
        id: JobId,
        owner: String,
        until: String,
    },
    #[error("run {id} already ended {status}; there is nothing to resume")]
    Ended { id: JobId, status: JobStatus },
    #[error(
        "run {id} is waiting for an answer to its question; answer it with `maestro jobs answer \
         {id} \"…\"`, then resume it"
    )]
    Unanswered { id: JobId },
    #[error("the stored events of run {id} cannot be read: {source}")]
    Events {
        id: JobId,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Jsonl {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A job this process runs itself.
pub struct LocalJob {
    store: Store,
    claimed: Claimed,
    fence: Arc<Fence>,
    /// Its lease, kept until the run's end is written.
    kept: Option<Kept>,
    /// Also keeps the leases of the children it runs.
    leases: LeaseKeeper,
}

impl std::fmt::Debug for LocalJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalJob")
            .field("job", &self.claimed.job.id)
            .finish()
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// This process's name as a lease owner.
pub(crate) fn owner() -> String {
    format!("local:{}:{}", hostname(), std::process::id())
}

/// True when `owner` names a local run on this host whose process is gone.
pub(crate) fn owner_is_gone(owner: &str) -> bool {
    let mut parts = owner.splitn(3, ':');
    let (Some("local"), Some(host), Some(pid)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    host == hostname() && !Path::new("/proc").join(pid).exists()
}

impl LocalJob {
    /// Submits `job` and claims it at once (not another queued job).
    pub async fn start(store: Store, mut job: NewJob) -> Result<LocalJob, LocalError> {
        job.max_attempts = 1;
        let id = store.submit(job).await?;
        let claimed = store
            .claim_job(id, &owner(), LOCAL_LEASE, false)
            .await?
            .ok_or_else(|| LocalError::NoSuchJob(id.to_string()))?;
        Ok(LocalJob::keep(store, claimed))
    }

    /// Claims a stopped run again to continue it: one that was cancelled or failed, queued, or
    /// whose process died (its lease lapsed, or it was a local run on this host whose process is
    /// gone).
    pub async fn resume(store: Store, id: &str) -> Result<LocalJob, LocalError> {
        let job_id: JobId = id
            .parse()
            .map_err(|_| LocalError::NoSuchJob(id.to_string()))?;
        let job = store
            .job(job_id)
            .await?
            .ok_or_else(|| LocalError::NoSuchJob(id.to_string()))?;
        let take_over = job.status == JobStatus::Running
            && job.lease_owner.as_deref().is_some_and(owner_is_gone);
        let claimed = store.claim_job(job_id, &owner(), LOCAL_LEASE, true).await?;
        let claimed = match claimed {
            Some(claimed) => claimed,
            None if take_over => store
                .take_over_job(job_id, &owner(), LOCAL_LEASE)
                .await?
                .ok_or_else(|| LocalError::NoSuchJob(id.to_string()))?,
            None => return Err(busy_or_ended(&job)),
        };
        Ok(LocalJob::keep(store, claimed))
    }

    fn keep(store: Store, claimed: Claimed) -> LocalJob {
        let fence = Arc::new(Fence::default());
        let leases = LeaseKeeper::new(store.clone(), LOCAL_LEASE);
        let kept = leases.keep(claimed.lease.clone(), Arc::clone(&fence));
        LocalJob {
            store,
            claimed,
            fence,
            kept: Some(kept),
            leases,
        }
    }

    pub fn id(&self) -> JobId {
        self.claimed.job.id
    }

    pub fn job(&self) -> &Job {
        &self.claimed.job
    }

    /// Cancelled when the job was cancelled (`maestro jobs cancel`) or taken over: the run
    /// must stop.
    pub fn stop_run(&self) -> CancellationToken {
        self.fence.stop_run.clone()
    }

    /// The run's stored events (none for a new run).
    pub async fn history(&self) -> Result<Vec<EventRecord>, LocalError> {
        let id = self.id();
        self.store
            .events(id, 0)
            .await?
            .into_iter()
            .map(|e| serde_json::from_value(e.payload))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| LocalError::Events { id, source })
    }

    /// The run's side of subtasks (`SpawnSubTask`, `WAIT_SUBTASKS`), with the children running
    /// in this process; `None` when subtasks are off. Call [`LocalChildren::finish`] after
    /// the run.
    pub fn subtasks(
        &self,
        record: &RunRecord,
        config: &Config,
        model_from_flag: bool,
    ) -> Option<(Arc<dyn SubtaskHost>, Arc<LocalChildren>)> {
        let children = LocalChildren::new(
            JobContext {
                store: self.store.clone(),
                events: EventWriter::new(self.store.clone()),
                models: crate::clients::ModelClients::default(),
                config: Arc::new(config.clone()),
                load_options: std::sync::OnceLock::new(),
                leases: self.leases.clone(),
                model_from_flag,
                local: None,
                tools: Arc::default(),
                pieces: Arc::default(),
            },
            owner(),
        );
        let host = StoreSubtasks::for_job(
            &self.store,
            &self.claimed.lease,
            &self.claimed.job,
            record.workspace.clone(),
            config,
            Some(Arc::clone(&children)),
        )?;
        Some((Arc::new(host), children))
    }

    /// The answers people gave to the run's questions, oldest first.
    pub async fn answers(&self) -> Result<Vec<String>, LocalError> {
        Ok(self.store.answers(self.id()).await?)
    }

    /// Where the run's events go: the store first (the authority), then `events.jsonl`,
    /// rewritten to hold exactly `history` first.
    pub fn logs(
        &self,
        record: &RunRecord,
        history: &[EventRecord],
    ) -> Result<Vec<Arc<dyn EventLog>>, LocalError> {
        let path = record.events_path();
        let jsonl = JsonlLog::rewrite(&path, history)
            .map_err(|source| LocalError::Jsonl { path, source })?;
        let store = StoreLog::new(
            EventWriter::new(self.store.clone()),
            self.claimed.lease.clone(),
            Arc::clone(&self.fence),
        );
        Ok(vec![Arc::new(store), Arc::new(jsonl)])
    }

    /// Writes how the run ended. A run stopped by its user ends the job `cancelled`; a run that
    /// stopped without an end (suspended, or the endpoint down) leaves the job to be resumed.
    pub async fn finish(mut self, end: &RunEnd) -> Result<(), LocalError> {
        drop(self.kept.take());
        if self.fence.closed().is_some() {
            return Ok(());
        }
        let lease = &self.claimed.lease;
        match end {
            RunEnd::Finished(report) => {
                self.store.finish(lease, outcome(report)).await?;
            }
            RunEnd::Retry { reason } => {
                let _: FailDisposition = self.store.fail(lease, reason).await?;
            }
            RunEnd::Suspended => self.store.release(lease).await?,
        }
        Ok(())
    }

    /// Hands the job back untouched (the run could not start).
    pub async fn abandon(mut self, reason: &str) -> Result<(), LocalError> {
        drop(self.kept.take());
        self.store
            .finish(
                &self.claimed.lease,
                Outcome {
                    status: JobStatus::Failed,
                    result: None,
                    reason: Some(reason.to_string()),
                },
            )
            .await?;
        Ok(())
    }
}

fn busy_or_ended(job: &Job) -> LocalError {
    match (job.status, &job.lease_owner, job.lease_expires_at) {
        (JobStatus::Running, Some(owner), Some(until)) => LocalError::Busy {
            id: job.id,
            owner: owner.clone(),
            until: until.to_string(),
        },
        (JobStatus::WaitingInput, _, _) => LocalError::Unanswered { id: job.id },
        (status, _, _) => LocalError::Ended { id: job.id, status },
    }
}

/// The job's outcome for a run that ended on its own; a run its user stopped is `cancelled`.
pub(crate) fn outcome(report: &RunReport) -> Outcome {
    let status = match report.status {
        RunStatus::Completed => JobStatus::Completed,
        RunStatus::Aborted => JobStatus::Aborted,
        RunStatus::Exceeded => JobStatus::Exceeded,
        RunStatus::NeedsUserInput => JobStatus::WaitingInput,
        RunStatus::WaitingSubtasks => JobStatus::WaitingSubtasks,
        RunStatus::Failed if report.reason == Some(EndReason::Cancelled) => JobStatus::Cancelled,
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
