//! Where a run's events are made durable ([`EventLog`]): `events.jsonl` ([`JsonlLog`]) and, in a
//! worker, the store. The journal's writer task hands each log a batch of records in `seq` order
//! and waits for it to commit before the side effect that follows the last event in the batch.

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use crate::event::EventRecord;

/// What an append returns.
pub type AppendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), AppendError>> + Send + 'a>>;

/// A durable, ordered home for a run's events.
pub trait EventLog: Send + Sync {
    /// Appends `records` (consecutive `seq`, in order), all or none, and resolves once they are
    /// committed.
    fn append<'a>(&'a self, records: &'a [EventRecord]) -> AppendFuture<'a>;
}

/// Why an append failed.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The run is no longer this writer's: its lease was taken over or the job was cancelled.
    /// The run stops and writes nothing more.
    #[error("the run is no longer ours to write: {0}")]
    Fenced(String),
    /// The log cannot be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The store refused or failed the write.
    #[error(transparent)]
    Store(Box<dyn std::error::Error + Send + Sync>),
}

/// `events.jsonl`: one JSON line per event, written off the runtime's threads and flushed to
/// the operating system per batch, so a killed process loses nothing it recorded.
pub struct JsonlLog {
    path: PathBuf,
    file: Arc<Mutex<std::fs::File>>,
}

impl JsonlLog {
    /// Opens (creating if needed) `path` for appending.
    pub fn append_to(path: &Path) -> std::io::Result<JsonlLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(JsonlLog {
            path: path.to_path_buf(),
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Makes `path` hold exactly `history` (replacing it atomically), then opens it for
    /// appending: a resumed run's file then matches the store it resumes from.
    pub fn rewrite(path: &Path, history: &[EventRecord]) -> std::io::Result<JsonlLog> {
        let mut text = String::new();
        for record in history {
            text.push_str(&serde_json::to_string(record).map_err(std::io::Error::other)?);
            text.push('\n');
        }
        let partial = path.with_extension("jsonl.partial");
        std::fs::write(&partial, text)?;
        std::fs::rename(&partial, path)?;
        JsonlLog::append_to(path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl EventLog for JsonlLog {
    fn append<'a>(&'a self, records: &'a [EventRecord]) -> AppendFuture<'a> {
        Box::pin(async move {
            let mut text = String::new();
            for record in records {
                text.push_str(&serde_json::to_string(record).map_err(std::io::Error::other)?);
                text.push('\n');
            }
            let file = Arc::clone(&self.file);
            tokio::task::spawn_blocking(move || {
                let mut file = file
                    .lock()
                    .map_err(|_| std::io::Error::other("events.jsonl writer poisoned"))?;
                file.write_all(text.as_bytes())
            })
            .await
            .map_err(std::io::Error::other)??;
            Ok(())
        })
    }
}

/// Keeps every record in memory; for tests and benchmarks.
#[derive(Default)]
pub struct MemoryLog {
    records: Mutex<Vec<EventRecord>>,
}

impl MemoryLog {
    pub fn records(&self) -> Vec<EventRecord> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl EventLog for MemoryLog {
    fn append<'a>(&'a self, records: &'a [EventRecord]) -> AppendFuture<'a> {
        Box::pin(async move {
            self.records
                .lock()
                .map_err(|_| std::io::Error::other("memory log poisoned"))?
                .extend_from_slice(records);
            Ok(())
        })
    }
}
