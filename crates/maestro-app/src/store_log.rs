//! A run's events into the job store, under the worker's lease: the durable log a resumed run
//! is rebuilt from. The events of all of a worker's runs go through one [`EventWriter`], which
//! commits whatever is queued together.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use maestro_engine::{AppendError, AppendFuture, EventLog, EventRecord, RunEvent};
use maestro_store::{EventBatch, JobQueue, Lease, NewEvent, Store, StoreError, StoreResult};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::outputs::{OutputSync, SyncError};

/// At most this many runs' batches go into one transaction.
const MAX_GROUP: usize = 512;

/// Why the worker must stop writing about a job, shared by the heartbeat, the event log and the
/// job's runner: once set, nothing more is written under this lease.
#[derive(Debug, Default)]
pub struct StopLatch {
    lost: Mutex<Option<String>>,
    /// Cancelled when the lease is lost, the job cancelled or the run handed back: the run stops.
    pub stop_run: CancellationToken,
}

impl StopLatch {
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
    /// The worker's [`EventWriter`] stopped before it confirmed the commit: whether the events
    /// were written is unknown.
    #[error("the event writer stopped before confirming the events of job {0}")]
    Unconfirmed(maestro_store::JobId),
    /// The files a tool call left under `output/` could not be recorded before its result: the
    /// result is not appended either.
    #[error("recording the run's output files before a tool result failed: {0}")]
    Outputs(String),
}

/// The one writer of a worker's events. Every run hands it its batches, and it commits
/// whatever is queued in one transaction ([`Store::append_batches`]): concurrent runs share a
/// commit instead of queueing one by one for SQLite's single writer (or paying a PostgreSQL
/// commit each). Each run still waits for its own batch's commit before the side effect that
/// follows, and each batch is fenced by its own run's lease, so a stale attempt's batch is
/// refused without failing the others'.
///
/// Cheap to clone. Its task starts with the first append and ends when the last clone is
/// dropped.
#[derive(Clone)]
pub struct EventWriter {
    inner: Arc<WriterInner>,
}

struct WriterInner {
    store: Store,
    queue: OnceLock<mpsc::UnboundedSender<Queued>>,
}

/// A batch waiting for the next commit, and who waits for it.
struct Queued {
    batch: EventBatch,
    done: oneshot::Sender<StoreResult<()>>,
}

impl fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventWriter")
            .field("store", self.inner.store.url())
            .finish_non_exhaustive()
    }
}

impl EventWriter {
    /// A writer for `store`'s events.
    pub fn new(store: Store) -> EventWriter {
        EventWriter {
            inner: Arc::new(WriterInner {
                store,
                queue: OnceLock::new(),
            }),
        }
    }

    /// Appends `events` under `lease` with the next commit, all or none, and resolves with the
    /// store's answer once that commit is done. Must be called inside a Tokio runtime (the first
    /// call starts the writer task).
    pub async fn append(
        &self,
        lease: &Lease,
        events: Vec<NewEvent>,
    ) -> Result<StoreResult<()>, AppendFailure> {
        let queue = self.inner.queue.get_or_init(|| {
            let (queue, queued) = mpsc::unbounded_channel();
            tokio::spawn(commit_queued(self.inner.store.clone(), queued));
            queue
        });
        let (done, committed) = oneshot::channel();
        let batch = EventBatch {
            lease: lease.clone(),
            events,
        };
        if let Err(mpsc::error::SendError(unsent)) = queue.send(Queued { batch, done }) {
            // The writer task is gone (its runtime shut down): write alone.
            let Queued { batch, .. } = unsent;
            return Ok(self
                .inner
                .store
                .append_events(&batch.lease, &batch.events)
                .await);
        }
        // The writer task stopped before answering (its runtime shut down): the batch may or
        // may not have been committed.
        committed
            .await
            .map_err(|_| AppendFailure::Unconfirmed(lease.job_id))
    }
}

/// The writer task: commits everything queued since the last commit, together.
async fn commit_queued(store: Store, mut queue: mpsc::UnboundedReceiver<Queued>) {
    let mut queued = Vec::new();
    while queue.recv_many(&mut queued, MAX_GROUP).await > 0 {
        let (batches, done): (Vec<EventBatch>, Vec<_>) =
            queued.drain(..).map(|q| (q.batch, q.done)).unzip();
        let results = store.append_batches(&batches).await;
        for (done, result) in done.into_iter().zip(results) {
            let _ = done.send(result);
        }
    }
}

/// The run's events as rows of `job_events`, written under `lease` through the worker's
/// [`EventWriter`].
#[derive(Debug, Clone)]
pub struct StoreLog {
    writer: EventWriter,
    lease: Lease,
    latch: Arc<StopLatch>,
    /// The run's `output/`, recorded before the result of a call that may have changed it.
    outputs: Option<Arc<OutputSync>>,
}

impl StoreLog {
    /// The log of the run held by `lease`, committed through `writer`; `latch` stops it.
    pub fn new(writer: EventWriter, lease: Lease, latch: Arc<StopLatch>) -> StoreLog {
        StoreLog {
            writer,
            lease,
            latch,
            outputs: None,
        }
    }

    /// Before it appends the result of a tool call that may have written files
    /// ([`maestro_engine::may_write_outputs`]), the log records what changed under the run's
    /// `output/` (`outputs`): a result in the record always has its files in the store.
    pub(crate) fn with_outputs(mut self, outputs: Arc<OutputSync>) -> StoreLog {
        self.outputs = Some(outputs);
        self
    }

    /// Appends `records` with the writer's next commit, fenced by the lease. A lost lease or a
    /// cancelled job closes the [`StopLatch`] (which stops the run).
    pub async fn append_records(&self, records: &[EventRecord]) -> Result<(), AppendFailure> {
        let json = records
            .iter()
            .map(serde_json::value::to_raw_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                AppendFailure::Store(StoreError::Corrupt {
                    what: format!("an event does not serialise: {e}"),
                })
            })?;
        self.append_serialised(records, &json).await
    }

    /// [`StoreLog::append_records`] with each record's JSON already written (`json[i]` is
    /// `records[i]`'s).
    pub async fn append_serialised(
        &self,
        records: &[EventRecord],
        json: &[Box<RawValue>],
    ) -> Result<(), AppendFailure> {
        if let Some(why) = self.latch.closed() {
            return Err(AppendFailure::Fenced(why));
        }
        if let Some(outputs) = &self.outputs
            && records.iter().any(|record| {
                matches!(&record.event, RunEvent::ToolResult { tool, .. }
                    if maestro_engine::may_write_outputs(tool))
            })
            && let Err(e) = outputs.record_changes().await
        {
            return Err(match e {
                SyncError::Store(e) => self.refused(e),
                e => AppendFailure::Outputs(e.to_string()),
            });
        }
        let rows = records
            .iter()
            .zip(json)
            // The whole record is the payload, so that `maestro jobs events` prints exactly
            // the `events.jsonl` line.
            .map(|(record, json)| NewEvent {
                seq: i64::try_from(record.seq).unwrap_or(i64::MAX),
                kind: record.event.kind().to_string(),
                payload: json.clone(),
            })
            .collect();
        match self.writer.append(&self.lease, rows).await? {
            Ok(()) => Ok(()),
            Err(e) => Err(self.refused(e)),
        }
    }

    /// A write the store refused: a lost lease or a cancelled job closes the [`StopLatch`].
    fn refused(&self, e: StoreError) -> AppendFailure {
        match e {
            StoreError::LeaseLost { .. } | StoreError::JobCancelled(_) => {
                let why = e.to_string();
                self.latch.close(why.clone());
                AppendFailure::Fenced(why)
            }
            e => AppendFailure::Store(e),
        }
    }
}

impl EventLog for StoreLog {
    fn append<'a>(&'a self, records: &'a [EventRecord]) -> AppendFuture<'a> {
        Box::pin(async move { self.append_records(records).await.map_err(append_error) })
    }

    fn append_json<'a>(
        &'a self,
        records: &'a [EventRecord],
        json: &'a [Box<RawValue>],
    ) -> AppendFuture<'a> {
        Box::pin(async move {
            self.append_serialised(records, json)
                .await
                .map_err(append_error)
        })
    }
}

fn append_error(e: AppendFailure) -> AppendError {
    match e {
        AppendFailure::Fenced(why) => AppendError::Fenced(why),
        AppendFailure::Store(e) => AppendError::Store(Box::new(e)),
        e @ (AppendFailure::Unconfirmed(_) | AppendFailure::Outputs(_)) => {
            AppendError::Store(Box::new(e))
        }
    }
}
