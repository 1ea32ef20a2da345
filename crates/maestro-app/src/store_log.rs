//! A run's events into the job store, under the worker's lease: the durable log a resumed run
//! is rebuilt from.

use std::sync::{Arc, Mutex};

use maestro_engine::{AppendError, AppendFuture, EventLog, EventRecord};
use maestro_store::{JobQueue, Lease, NewEvent, Store, StoreError};
use tokio_util::sync::CancellationToken;

/// Why the worker must stop writing about a job, shared by the heartbeat, the event log and the
/// job's runner: once set, nothing more is written under this lease.
#[derive(Debug, Default)]
pub struct Fence {
    lost: Mutex<Option<String>>,
    /// Cancelled when the lease is lost, the job cancelled or the run handed back: the run stops.
    pub stop_run: CancellationToken,
}

impl Fence {
    /// Marks the lease as unusable (the first reason wins) and stops the run.
    pub fn close(&self, why: impl Into<String>) {
        if let Ok(mut lost) = self.lost.lock()
            && lost.is_none()
        {
            *lost = Some(why.into());
        }
        self.stop_run.cancel();
    }

    /// Why writing stopped, if it did.
    pub fn closed(&self) -> Option<String> {
        self.lost.lock().ok().and_then(|lost| lost.clone())
    }
}

/// Why an append did not happen.
#[derive(Debug, thiserror::Error)]
pub enum AppendFailure {
    /// The lease is lost, the job cancelled or handed back: stop, write nothing more.
    #[error("{0}")]
    Fenced(String),
    /// The store failed.
    #[error("appending events to the job store failed")]
    Store(#[source] StoreError),
}

/// The run's events as rows of `job_events`, written under `lease`.
#[derive(Debug, Clone)]
pub struct StoreLog {
    store: Store,
    lease: Lease,
    fence: Arc<Fence>,
}

impl StoreLog {
    pub fn new(store: Store, lease: Lease, fence: Arc<Fence>) -> StoreLog {
        StoreLog {
            store,
            lease,
            fence,
        }
    }

    /// The row of one event: its `seq`, its type, and the whole record as `payload` (so that
    /// `maestro jobs events` prints exactly the `events.jsonl` line).
    pub fn row(record: &EventRecord) -> Result<NewEvent, serde_json::Error> {
        Ok(NewEvent {
            seq: i64::try_from(record.seq).unwrap_or(i64::MAX),
            kind: record.event.kind().to_string(),
            payload: serde_json::to_value(record)?,
        })
    }

    /// Appends `records` in one transaction, fenced by the lease. A lost lease or a cancelled
    /// job closes the [`Fence`] (which stops the run).
    pub async fn append_records(&self, records: &[EventRecord]) -> Result<(), AppendFailure> {
        if let Some(why) = self.fence.closed() {
            return Err(AppendFailure::Fenced(why));
        }
        let rows = records
            .iter()
            .map(StoreLog::row)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                AppendFailure::Store(StoreError::Corrupt {
                    what: format!("an event does not serialise: {e}"),
                })
            })?;
        match self.store.append_events(&self.lease, &rows).await {
            Ok(()) => Ok(()),
            Err(e @ (StoreError::LeaseLost { .. } | StoreError::JobCancelled(_))) => {
                let why = e.to_string();
                self.fence.close(why.clone());
                Err(AppendFailure::Fenced(why))
            }
            Err(e) => Err(AppendFailure::Store(e)),
        }
    }
}

impl EventLog for StoreLog {
    fn append<'a>(&'a self, records: &'a [EventRecord]) -> AppendFuture<'a> {
        Box::pin(async move {
            self.append_records(records).await.map_err(|e| match e {
                AppendFailure::Fenced(why) => AppendError::Fenced(why),
                AppendFailure::Store(e) => AppendError::Store(Box::new(e)),
            })
        })
    }
}
