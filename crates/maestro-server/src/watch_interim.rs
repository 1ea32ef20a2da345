//! Following a job by reading the store: the events after a cursor and the job's status,
//! until its status is final.

use std::sync::Arc;
use std::time::Duration;

use maestro_app::{EventRecord, JobError, JobId, JobQueue as _, JobStatus, Store, Worker};

/// What a watch hands over.
#[derive(Debug, Clone)]
pub(crate) enum Watched {
    Event(Arc<EventRecord>),
    Status(JobStatus),
    #[allow(dead_code)]
    TextDelta {
        movement: String,
        text: String,
    },
    Resync {
        last_seq: i64,
    },
}

pub(crate) struct JobWatch {
    store: Store,
    job: JobId,
    after: i64,
    status: Option<JobStatus>,
    pending: std::collections::VecDeque<Watched>,
    done: bool,
}

pub(crate) async fn watch_job(
    store: &Store,
    _worker: Option<&Worker>,
    job: JobId,
    after: Option<i64>,
) -> Result<JobWatch, JobError> {
    store.job(job).await?.ok_or(JobError::NoSuchJob(job))?;
    let mut pending = std::collections::VecDeque::new();
    let mut after = after.unwrap_or(0);
    let last = store.events(job, 0).await?.last().map_or(0, |e| e.seq);
    if after > last {
        pending.push_back(Watched::Resync { last_seq: last });
        after = last;
    }
    Ok(JobWatch {
        store: store.clone(),
        job,
        after,
        status: None,
        pending,
        done: false,
    })
}

impl JobWatch {
    pub(crate) async fn next(&mut self) -> Option<Watched> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            let job = self.store.job(self.job).await.ok()??;
            if self.status != Some(job.status) {
                self.status = Some(job.status);
                self.pending.push_back(Watched::Status(job.status));
            }
            let events = self.store.events(self.job, self.after).await.ok()?;
            for e in &events {
                if let Ok(record) = serde_json::from_value::<EventRecord>(e.payload.clone()) {
                    self.pending.push_back(Watched::Event(Arc::new(record)));
                }
                self.after = e.seq;
            }
            if maestro_app::exit_code(job.status).is_some()
                && job.status != JobStatus::WaitingInput
                && events.is_empty()
            {
                self.done = true;
                continue;
            }
            if self.pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
