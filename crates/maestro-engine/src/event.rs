//! The sinks a run's events flow into ([`EventSink`], [`JsonlSink`]) and reading an
//! `events.jsonl` back. The events themselves ([`RunEvent`], [`EventRecord`]) live in
//! `maestro-protocol`, where every reader of a run finds them.
//!
//! Events are the run's source of truth: the [`crate::Journal`] appends each one to every sink
//! and applies it to the [`crate::RunState`], so replaying `events.jsonl` rebuilds the state.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

pub use maestro_protocol::{
    CallPurpose, ContextLevel, EventRecord, JudgeKind, OutcomeSource, RecordedAnswer, ReminderKind,
    RunEvent, SelectionTarget,
};

/// Somewhere events go.
///
/// An implementation promises to handle records in the order it receives them (the journal calls
/// it in `seq` order, under its lock, so it must be quick) and, when it is durable, to have the
/// line on disk before it returns.
pub trait EventSink: Send + Sync {
    /// Takes one committed event; an error is the sink's own and does not stop the run.
    fn record(&self, record: &EventRecord) -> std::io::Result<()>;

    /// A piece of a model's answer arrived while `movement`'s call streams. Live displays show
    /// it; it is not an event and is not recorded (the whole answer is, in the transcript).
    fn text_delta(&self, movement: &str, text: &str) {
        let _ = (movement, text);
    }
}

/// JSON lines into any writer, flushed after each line: `events.jsonl`, or stdout for
/// `--events jsonl`.
pub struct JsonlSink<W: Write + Send> {
    writer: Mutex<W>,
}

impl JsonlSink<BufWriter<File>> {
    /// Creates (or appends to) a JSONL file.
    pub fn append_to(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(JsonlSink::new(BufWriter::new(file)))
    }
}

impl<W: Write + Send> std::fmt::Debug for JsonlSink<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlSink").finish_non_exhaustive()
    }
}

impl<W: Write + Send> JsonlSink<W> {
    /// Writes each record as one JSON line to `writer`, flushing after each.
    pub fn new(writer: W) -> Self {
        JsonlSink {
            writer: Mutex::new(writer),
        }
    }
}

impl<W: Write + Send> EventSink for JsonlSink<W> {
    fn record(&self, record: &EventRecord) -> std::io::Result<()> {
        let line = serde_json::to_string(record).map_err(std::io::Error::other)?;
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| std::io::Error::other("event sink poisoned"))?;
        writer.write_all(line.as_bytes())?;
        writer.write_all(b"\n")?;
        writer.flush()
    }
}

/// Reads an `events.jsonl` file back, naming the line that cannot be read.
pub fn read_events(path: &Path) -> Result<Vec<EventRecord>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line)
                .map_err(|e| format!("{}:{}: not a run event: {e}", path.display(), i + 1))
        })
        .collect()
}
