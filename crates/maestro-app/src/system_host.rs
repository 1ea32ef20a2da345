//! TAKT system steps on the job store: the engine's [`SystemHost`] for a run that is a job.
//! `task_queue_context` counts the store's jobs; `enqueue_task` submits a new job (the same
//! effect of the same visit, repeated after a crash, finds the job it made instead of making a
//! second one).

use maestro_engine::{EnqueueRequest, EnqueuedTask, QueueCounts, SystemFuture, SystemHost};
use maestro_store::{Job, JobId, JobQueue, JobStatus, NewJob, Store};

/// The store's side of system steps for the run of one job.
pub(crate) struct StoreSystemHost {
    store: Store,
    /// The job whose run this is (left out of the counts with `exclude_current_task`).
    job: JobId,
    /// The owner and class new jobs take from it.
    owner: Option<String>,
    task_class: String,
}

impl StoreSystemHost {
    /// The host for the run of `job`.
    pub(crate) fn for_job(store: &Store, job: &Job) -> StoreSystemHost {
        StoreSystemHost {
            store: store.clone(),
            job: job.id,
            owner: job.owner.clone(),
            task_class: job.task_class.clone(),
        }
    }

    /// Who submitted a job an effect made: names the effect, so a repeat finds it.
    fn submitter(key: &str) -> String {
        format!("workflow effect {key}")
    }

    async fn counts(&self, exclude_current: bool) -> Result<QueueCounts, String> {
        let jobs = self
            .store
            .jobs(None)
            .await
            .map_err(|e| format!("cannot read the job queue: {e}"))?;
        let mut counts = QueueCounts::default();
        for job in jobs
            .iter()
            .filter(|j| !(exclude_current && j.id == self.job))
        {
            match job.status {
                JobStatus::Queued => counts.pending += 1,
                JobStatus::Running | JobStatus::WaitingInput | JobStatus::WaitingSubtasks => {
                    counts.running += 1
                }
                JobStatus::Completed => counts.completed += 1,
                JobStatus::Exceeded => counts.exceeded += 1,
                JobStatus::Aborted | JobStatus::Failed | JobStatus::Cancelled => counts.failed += 1,
            }
        }
        Ok(counts)
    }

    async fn submit(&self, request: EnqueueRequest) -> Result<EnqueuedTask, String> {
        let submitter = Self::submitter(&request.key);
        let jobs = self
            .store
            .jobs(None)
            .await
            .map_err(|e| format!("cannot read the job queue: {e}"))?;
        if let Some(made) = jobs.iter().find(|j| j.submitted_by == submitter) {
            return Ok(EnqueuedTask {
                id: made.id.to_string(),
            });
        }
        let id = self
            .store
            .submit(NewJob {
                piece: request
                    .piece
                    .unwrap_or_else(|| crate::pieces::AUTO.to_owned()),
                task: request.task,
                submitted_by: submitter,
                parent_id: None,
                priority: 0,
                task_class: self.task_class.clone(),
                workspace: None,
                max_attempts: NewJob::DEFAULT_MAX_ATTEMPTS,
                run_at: None,
                owner: self.owner.clone(),
                budget: Default::default(),
            })
            .await
            .map_err(|e| format!("the job queue refused the task: {e}"))?;
        Ok(EnqueuedTask { id: id.to_string() })
    }
}

impl SystemHost for StoreSystemHost {
    fn queue(&self, exclude_current: bool) -> SystemFuture<'_, QueueCounts> {
        Box::pin(self.counts(exclude_current))
    }

    fn enqueue(&self, request: EnqueueRequest) -> SystemFuture<'_, EnqueuedTask> {
        Box::pin(self.submit(request))
    }
}
