//! The journal: the one place a run changes. It numbers each event (`seq`, gapless from 1),
//! stamps it, writes it to the durable sink (flushed) and the observers, then applies it to the
//! [`RunState`], all under one lock, so concurrent sub-movements still produce one ordered story.

use std::sync::{Arc, Mutex};

use time::format_description::well_known::Rfc3339;

use crate::error::{EngineError, InternalError, RecordError};
use crate::event::{EventRecord, EventSink, RunEvent};
use crate::state::RunState;

/// Appends events and keeps the state they add up to.
pub struct Journal {
    inner: Mutex<Inner>,
    durable: Arc<dyn EventSink>,
    observers: Vec<Arc<dyn EventSink>>,
}

struct Inner {
    seq: u64,
    state: RunState,
}

impl Journal {
    /// `durable` failing fails the run (the record must be complete); `observers` (progress
    /// printers, stdout) failing is ignored.
    pub fn new(durable: Arc<dyn EventSink>, observers: Vec<Arc<dyn EventSink>>) -> Self {
        Journal {
            inner: Mutex::new(Inner {
                seq: 0,
                state: RunState::default(),
            }),
            durable,
            observers,
        }
    }

    /// Records one event and applies it to the state.
    pub fn emit(&self, event: RunEvent) -> Result<(), EngineError> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| EngineError::from(InternalError::JournalLockPoisoned))?;
        let record = EventRecord {
            seq: inner.seq + 1,
            ts: now_rfc3339(),
            event,
        };
        self.durable.record(&record).map_err(RecordError::Append)?;
        for observer in &self.observers {
            let _ = observer.record(&record);
        }
        inner.seq = record.seq;
        inner.state.apply(&record.event);
        Ok(())
    }

    /// Hands streamed answer text to the observers; nothing is recorded.
    pub fn text_delta(&self, movement: &str, text: &str) {
        for observer in &self.observers {
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
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default()
}
