//! The journal: the one place a run changes. It numbers each event (`seq`, gapless from 1),
//! stamps it and applies it to the [`RunState`] under one lock, so concurrent sub-movements still
//! produce one ordered story, and hands it to a writer task that commits it to every
//! [`EventLog`] (no file or database I/O on the runtime's threads). [`Journal::emit`] resolves
//! once the event is committed, so the side effect that follows an event never runs before the
//! event is durable.
//!
//! A resumed run goes through its record again first (see `recorded.rs`): events the record
//! already holds are applied to the state but not written again and not numbered anew.

use std::sync::{Arc, Mutex};

use time::format_description::well_known::Rfc3339;
use tokio::sync::{mpsc, oneshot};

use crate::error::{EngineError, InternalError, RecordError};
use crate::event::{EventRecord, EventSink, RunEvent};
use crate::log::{AppendError, EventLog};
use crate::recorded::{Matched, Recorded};
use crate::state::RunState;

/// At most this many events go to the logs in one commit.
const MAX_BATCH: usize = 256;

/// Appends events and keeps the state they add up to.
pub struct Journal {
    inner: Mutex<Inner>,
    writer: mpsc::UnboundedSender<Pending>,
    observers: Arc<Vec<Arc<dyn EventSink>>>,
    recorded: Option<Recorded>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("observers", &self.observers.len())
            .field("resuming", &self.recorded.is_some())
            .finish_non_exhaustive()
    }
}

struct Inner {
    seq: u64,
    state: RunState,
}

struct Pending {
    /// `None` for a flush: nothing to write, only the acknowledgement. Boxed: the channel
    /// allocates its slots in blocks, and a run's queue would otherwise hold blocks of whole
    /// events, most of them never used.
    record: Option<Box<EventRecord>>,
    done: Option<oneshot::Sender<Result<(), Arc<AppendError>>>>,
}

impl Journal {
    /// `logs` failing fails the run (the record must be complete); `observers` (progress
    /// printers, stdout) see each event once it is committed, and their failures are ignored.
    /// Must be called inside a Tokio runtime (it starts the writer task).
    pub fn new(logs: Vec<Arc<dyn EventLog>>, observers: Vec<Arc<dyn EventSink>>) -> Self {
        Journal::with_record(logs, observers, None, 0)
    }

    /// A journal that first goes through `recorded` (a resumed or replayed run); new events are
    /// numbered from `last_seq + 1`.
    pub(crate) fn with_record(
        logs: Vec<Arc<dyn EventLog>>,
        observers: Vec<Arc<dyn EventSink>>,
        recorded: Option<Recorded>,
        last_seq: u64,
    ) -> Self {
        let observers = Arc::new(observers);
        let (writer, queue) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(queue, logs, Arc::clone(&observers)));
        Journal {
            inner: Mutex::new(Inner {
                seq: last_seq,
                state: RunState::default(),
            }),
            writer,
            observers,
            recorded,
        }
    }

    /// Records one event, applies it to the state, and resolves once it is committed. Returns
    /// true when the run's record already held the event (a resumed run going through it again):
    /// then nothing was written.
    pub async fn emit(&self, event: RunEvent) -> Result<bool, EngineError> {
        match self.enqueue(event, true)? {
            Some(done) => match done.await {
                Ok(Ok(())) => Ok(false),
                Ok(Err(e)) => Err(append_error(&e).into()),
                Err(_) => Err(InternalError::WriterStopped.into()),
            },
            None => Ok(true),
        }
    }

    /// Records one event without waiting for the commit (events a provider reports while a
    /// call streams; they precede no side effect of their own). Order is kept.
    pub fn emit_nowait(&self, event: RunEvent) -> Result<(), EngineError> {
        self.enqueue(event, false).map(drop)
    }

    #[allow(clippy::type_complexity)]
    fn enqueue(
        &self,
        event: RunEvent,
        wait: bool,
    ) -> Result<Option<oneshot::Receiver<Result<(), Arc<AppendError>>>>, EngineError> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| EngineError::from(InternalError::JournalLockPoisoned))?;
        if let Some(recorded) = &self.recorded {
            match recorded.match_event(&event) {
                Matched::Recorded(record) => {
                    inner.state.apply(&record.event);
                    return Ok(None);
                }
                Matched::Diverged(divergence) => return Err(EngineError::Diverged(divergence)),
                Matched::New => {}
            }
        }
        let record = EventRecord {
            seq: inner.seq + 1,
            ts: now_rfc3339(),
            event,
        };
        inner.seq = record.seq;
        inner.state.apply(&record.event);
        let (done, receiver) = if wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        self.writer
            .send(Pending {
                record: Some(Box::new(record)),
                done,
            })
            .map_err(|_| EngineError::from(InternalError::WriterStopped))?;
        Ok(receiver)
    }

    /// Resolves once every event emitted so far is committed, and written by the logs that
    /// write behind their appends ([`EventLog::flush`]), or with the first failure.
    pub async fn flush(&self) -> Result<(), EngineError> {
        let (tx, rx) = oneshot::channel();
        self.writer
            .send(Pending {
                record: None,
                done: Some(tx),
            })
            .map_err(|_| EngineError::from(InternalError::WriterStopped))?;
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(append_error(&e).into()),
            Err(_) => Err(InternalError::WriterStopped.into()),
        }
    }

    /// Hands streamed answer text to the observers; nothing is recorded.
    pub fn text_delta(&self, movement: &str, text: &str) {
        for observer in self.observers.iter() {
            observer.text_delta(movement, text);
        }
    }

    /// A copy of the current state.
    pub fn state(&self) -> RunState {
        self.inner
            .lock()
            .map(|i| i.state.clone())
            .unwrap_or_default()
    }

    /// Reads the state without copying it.
    pub fn with_state<T>(&self, f: impl FnOnce(&RunState) -> T) -> Option<T> {
        self.inner.lock().ok().map(|i| f(&i.state))
    }

    /// The last `seq` written.
    pub fn seq(&self) -> u64 {
        self.inner.lock().map(|i| i.seq).unwrap_or(0)
    }

    pub(crate) fn recorded(&self) -> Option<&Recorded> {
        self.recorded.as_ref()
    }
}

fn append_error(e: &AppendError) -> RecordError {
    match e {
        AppendError::Fenced(why) => RecordError::Fenced(why.clone()),
        AppendError::Io(io) => RecordError::Append(std::io::Error::new(io.kind(), io.to_string())),
        AppendError::Store(e) => RecordError::Append(std::io::Error::other(e.to_string())),
    }
}

/// Commits batches in order; after the first failure every later event fails the same way (a
/// fenced writer writes nothing more).
async fn write_loop(
    mut queue: mpsc::UnboundedReceiver<Pending>,
    logs: Vec<Arc<dyn EventLog>>,
    observers: Arc<Vec<Arc<dyn EventSink>>>,
) {
    let mut failed: Option<Arc<AppendError>> = None;
    let mut batch = Vec::new();
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let records: Vec<EventRecord> = batch
            .iter_mut()
            .filter_map(|p| p.record.take().map(|record| *record))
            .collect();
        let flush = records.len() < batch.len();
        if failed.is_none() && !records.is_empty() {
            // Each event's JSON, written once for all the logs.
            match records
                .iter()
                .map(serde_json::value::to_raw_value)
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(json) => {
                    for log in &logs {
                        if let Err(e) = log.append_json(&records, &json).await {
                            failed = Some(Arc::new(e));
                            break;
                        }
                    }
                }
                Err(e) => failed = Some(Arc::new(std::io::Error::other(e).into())),
            }
            if failed.is_none() {
                for record in &records {
                    for observer in observers.iter() {
                        let _ = observer.record(record);
                    }
                }
            }
        }
        // A flush also waits for the logs that write behind their appends.
        if failed.is_none() && flush {
            for log in &logs {
                if let Err(e) = log.flush().await {
                    failed = Some(Arc::new(e));
                    break;
                }
            }
        }
        for pending in batch.drain(..) {
            if let Some(done) = pending.done {
                let _ = done.send(match &failed {
                    Some(e) => Err(Arc::clone(e)),
                    None => Ok(()),
                });
            }
        }
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default()
}
