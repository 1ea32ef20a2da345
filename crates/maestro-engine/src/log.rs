//! Where a run's events are made durable ([`EventLog`]): `events.jsonl` ([`JsonlLog`]) and, in a
//! worker, the store. The journal's writer task hands each log a batch of records in `seq` order
//! and waits for it to commit before the side effect that follows the last event in the batch.

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::value::RawValue;

use crate::event::EventRecord;

/// What an append returns.
pub type AppendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), AppendError>> + Send + 'a>>;

/// A durable, ordered home for a run's events.
pub trait EventLog: Send + Sync {
    /// Appends `records` (consecutive `seq`, in order), all or none, and resolves once they are
    /// committed.
    fn append<'a>(&'a self, records: &'a [EventRecord]) -> AppendFuture<'a>;

    /// [`EventLog::append`], with each record's JSON already written (`json[i]` is
    /// `records[i]`'s, exactly as `serde_json::to_string` writes it): the journal serialises an
    /// event once for all of its logs. A log that stores the JSON text uses it; by default it
    /// is passed over.
    fn append_json<'a>(
        &'a self,
        records: &'a [EventRecord],
        json: &'a [Box<RawValue>],
    ) -> AppendFuture<'a> {
        let _ = json;
        self.append(records)
    }

    /// Resolves once everything appended so far is written (or with the first failure). A log
    /// whose appends resolve only once written has nothing to do; a log that writes after its
    /// append resolved ([`JsonlLog::behind`]) waits here. The journal calls it when the run
    /// flushes, before the run reports its end.
    fn flush(&self) -> AppendFuture<'_> {
        Box::pin(async { Ok(()) })
    }
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
///
/// One thread of the process (`file_writer`) writes the batches of every run's file, in the
/// order they were handed over; an append resolves once its batch is written. Many runs then
/// cost one busy thread rather than a blocking-pool task per batch, and batches nobody waits
/// for share its wake-ups (`LINGER`).
///
/// A log [`JsonlLog::behind`] another (a job's run, whose events the store holds first) does
/// not wait for its batches: the append resolves once the batch is handed to that thread, and
/// the file follows the store a moment later, never ahead of it. A failed write fails the next
/// append or [`EventLog::flush`].
#[derive(Debug)]
pub struct JsonlLog {
    path: PathBuf,
    file: Arc<std::fs::File>,
    /// Set for a log behind another: the first failed write, once the thread has seen it.
    behind: Option<Arc<Mutex<Option<std::io::Error>>>>,
}

impl JsonlLog {
    /// Opens (creating if needed) `path` for appending.
    pub fn append_to(path: &Path) -> std::io::Result<JsonlLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(JsonlLog::of(path, file))
    }

    fn of(path: &Path, file: std::fs::File) -> JsonlLog {
        JsonlLog {
            path: path.to_path_buf(),
            file: Arc::new(file),
            behind: None,
        }
    }

    /// The same log, written behind another that a run's events are committed to first (the
    /// job store): its appends resolve without waiting for the file, which is written in the
    /// same order by the process's file thread; [`EventLog::flush`] waits until it is. A kill
    /// then loses at most the file's last lines, which the store holds and a resumed run
    /// writes again ([`JsonlLog::rewrite`]).
    pub fn behind(mut self) -> JsonlLog {
        self.behind = Some(Arc::default());
        self
    }

    /// Makes `path` hold exactly `history` (replacing it atomically), then opens it for
    /// appending: a resumed run's file then matches the store it resumes from.
    pub fn rewrite(path: &Path, history: &[EventRecord]) -> std::io::Result<JsonlLog> {
        if history.is_empty() {
            // Nothing to keep (a run's first attempt): emptying the file is one open, and as
            // atomic as the rename below.
            std::fs::File::create(path)?;
            return JsonlLog::append_to(path);
        }
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

    /// The file the log appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl EventLog for JsonlLog {
    fn append<'a>(&'a self, records: &'a [EventRecord]) -> AppendFuture<'a> {
        Box::pin(async move {
            let lines = records
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<Vec<_>, _>>()
                .map_err(std::io::Error::other)?;
            self.write(lines.iter().map(String::as_str)).await
        })
    }

    fn append_json<'a>(
        &'a self,
        _records: &'a [EventRecord],
        json: &'a [Box<RawValue>],
    ) -> AppendFuture<'a> {
        Box::pin(self.write(json.iter().map(|line| line.get())))
    }

    fn flush(&self) -> AppendFuture<'_> {
        Box::pin(async move {
            let Some(failed) = &self.behind else {
                return Ok(());
            };
            if let Some(writer) = file_writer() {
                // The thread writes in order: once this empty write is done, so are the
                // batches handed over before it.
                let (done, written) = tokio::sync::oneshot::channel();
                let flush = FileWrite {
                    file: Arc::clone(&self.file),
                    text: String::new(),
                    done: Done::Tell(done),
                };
                if writer.send(flush).is_ok() {
                    let _ = written.await;
                }
            }
            match failed.lock().ok().and_then(|mut f| f.take()) {
                Some(e) => Err(AppendError::Io(e)),
                None => Ok(()),
            }
        })
    }
}

impl JsonlLog {
    /// Hands `lines` to the file writer, one line each, and waits until they are written.
    async fn write<'l>(&self, lines: impl Iterator<Item = &'l str>) -> Result<(), AppendError> {
        let mut text = String::new();
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        let file = Arc::clone(&self.file);
        let stopped = || std::io::Error::other("the events.jsonl writer stopped");
        match (file_writer(), &self.behind) {
            (Some(writer), Some(failed)) => {
                // A write that failed since the last append fails this one (and the run).
                if let Some(e) = failed.lock().ok().and_then(|mut f| f.take()) {
                    return Err(AppendError::Io(e));
                }
                let done = Done::Note(Arc::clone(failed));
                writer
                    .send(FileWrite { file, text, done })
                    .map_err(|_| stopped())?;
            }
            (Some(writer), None) => {
                let (done, written) = tokio::sync::oneshot::channel();
                let done = Done::Tell(done);
                writer
                    .send(FileWrite { file, text, done })
                    .map_err(|_| stopped())?;
                written.await.map_err(|_| stopped())??;
            }
            // No thread could be started: the runtime's blocking pool does it.
            (None, _) => tokio::task::spawn_blocking(move || (&*file).write_all(text.as_bytes()))
                .await
                .map_err(std::io::Error::other)??,
        }
        Ok(())
    }
}

/// One batch for the file writer.
struct FileWrite {
    file: Arc<std::fs::File>,
    text: String,
    done: Done,
}

/// Who learns how a batch's write went.
enum Done {
    /// The append waiting for it.
    Tell(tokio::sync::oneshot::Sender<std::io::Result<()>>),
    /// A log behind another: the first failure is kept for its next append or flush.
    Note(Arc<Mutex<Option<std::io::Error>>>),
}

/// How long the file thread, woken by a batch nobody waits for, lets more arrive before it
/// writes: the files of a thousand runs then cost a wake-up every few milliseconds, not one a
/// batch. A batch someone waits for (an append without a store ahead of it, or a flush) is
/// written at once.
const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// The process's `events.jsonl` writer: a thread that writes each batch it is handed, in
/// order, and says when it is written. Started on first use; `None` if no thread can be
/// started.
fn file_writer() -> Option<&'static FileWriter> {
    static WRITER: OnceLock<Option<&'static FileWriter>> = OnceLock::new();
    *WRITER.get_or_init(|| {
        let writer: &'static FileWriter = Box::leak(Box::default());
        std::thread::Builder::new()
            .name("maestro-events".into())
            .spawn(move || writer.serve())
            .ok()
            .map(|_| writer)
    })
}

/// The batches handed to the file thread, and how to wake it.
#[derive(Default)]
struct FileWriter {
    queue: Mutex<Queue>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct Queue {
    batches: Vec<FileWrite>,
    /// A queued batch is waited for: write without lingering.
    urgent: bool,
    /// The thread waits on `wake` (for a first batch, or lingering).
    waiting: bool,
    /// The thread is gone (it panicked): nothing queued will be written.
    stopped: bool,
}

/// The batches could not be handed over: the thread is gone.
struct Stopped;

impl FileWriter {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `batch`; the thread is woken for the first batch of a quiet moment, and for any
    /// batch someone waits for.
    fn send(&self, batch: FileWrite) -> Result<(), Stopped> {
        let urgent = matches!(batch.done, Done::Tell(_));
        let mut queue = self.lock();
        if queue.stopped {
            return Err(Stopped);
        }
        queue.batches.push(batch);
        let first = queue.batches.len() == 1;
        queue.urgent |= urgent;
        if queue.waiting && (first || urgent) {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// The thread's loop: takes what is queued (after [`LINGER`] unless it is waited for) and
    /// writes it, in order.
    fn serve(&self) {
        /// Marks the writer stopped if the loop unwinds.
        struct Guard<'a>(&'a FileWriter);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                self.0.lock().stopped = true;
            }
        }
        let _guard = Guard(self);
        loop {
            let batches = {
                let mut queue = self.lock();
                while queue.batches.is_empty() {
                    queue.waiting = true;
                    queue = self.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
                    queue.waiting = false;
                }
                if !queue.urgent {
                    queue.waiting = true;
                    queue = self
                        .wake
                        .wait_timeout_while(queue, LINGER, |q| !q.urgent)
                        .map(|(q, _)| q)
                        .unwrap_or_else(|p| p.into_inner().0);
                    queue.waiting = false;
                }
                queue.urgent = false;
                std::mem::take(&mut queue.batches)
            };
            for batch in batches {
                let written = if batch.text.is_empty() {
                    Ok(())
                } else {
                    (&*batch.file).write_all(batch.text.as_bytes())
                };
                match batch.done {
                    // The run may have stopped waiting; nothing to tell then.
                    Done::Tell(done) => {
                        let _ = done.send(written);
                    }
                    Done::Note(failed) => {
                        if let Err(e) = written
                            && let Ok(mut failed) = failed.lock()
                            && failed.is_none()
                        {
                            *failed = Some(e);
                        }
                    }
                }
            }
        }
    }
}

/// Keeps every record in memory; for tests and benchmarks.
#[derive(Debug, Default)]
pub struct MemoryLog {
    records: Mutex<Vec<EventRecord>>,
}

impl MemoryLog {
    /// Every record appended so far, in order.
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::event::{RunEvent, read_events};

    fn started(seq: u64) -> EventRecord {
        EventRecord {
            seq,
            ts: "2026-01-01T00:00:00Z".into(),
            event: RunEvent::MovementStarted {
                movement: format!("m{seq}"),
                iteration: 1,
                movement_iteration: 1,
                parent: None,
                prompt_log: None,
            },
        }
    }

    /// Many runs appending at once through the one writer: each file gets its own batches,
    /// whole and in order, and each append has resolved only once its batch is in the file.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_runs_each_get_their_batches_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let runs: Vec<_> = (0..20)
            .map(|run| {
                let path = dir.path().join(format!("run-{run}.jsonl"));
                tokio::spawn(async move {
                    let log = JsonlLog::append_to(&path).unwrap();
                    for batch in 0..25u64 {
                        let records = [started(batch * 2 + 1), started(batch * 2 + 2)];
                        log.append(&records).await.unwrap();
                        let written = read_events(&path).unwrap();
                        assert_eq!(written.len() as u64, batch * 2 + 2);
                    }
                    path
                })
            })
            .collect();
        for run in runs {
            let path = run.await.unwrap();
            let seqs: Vec<u64> = read_events(&path).unwrap().iter().map(|r| r.seq).collect();
            assert_eq!(seqs, (1..=50).collect::<Vec<_>>(), "{}", path.display());
        }
    }

    /// A batch nobody waits for (a log behind the store) lingers a moment for others to share
    /// the thread's wake-up, then is written without a flush or any batch after it; one that is
    /// waited for, handed over while others linger, is written with them, after them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lingering_batches_are_written_without_a_flush_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let ten_s = std::time::Duration::from_secs(10);
        // A waited-for batch first, so that the thread runs and then waits for the next.
        let waited_path = dir.path().join("waited.jsonl");
        let waited = JsonlLog::append_to(&waited_path).unwrap();
        waited.append(&[started(1)]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let behind_path = dir.path().join("behind.jsonl");
        let behind = JsonlLog::append_to(&behind_path).unwrap().behind();
        behind.append(&[started(1)]).await.unwrap();
        let deadline = std::time::Instant::now() + ten_s;
        while read_events(&behind_path).unwrap().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "a batch nobody waits for was never written"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        // Lingering batches, then one that is waited for: all written, in order, by the time
        // the waited-for one returns.
        for seq in 2..=20 {
            behind.append(&[started(seq)]).await.unwrap();
        }
        tokio::time::timeout(ten_s, waited.append(&[started(2)]))
            .await
            .expect("a waited-for batch was left lingering")
            .unwrap();
        let seqs: Vec<u64> = read_events(&behind_path)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
        assert_eq!(read_events(&waited_path).unwrap().len(), 2);
    }

    /// Keeps the JSON the journal hands it.
    #[derive(Default)]
    struct JsonKept(Mutex<Vec<String>>);

    impl EventLog for JsonKept {
        fn append<'a>(&'a self, _records: &'a [EventRecord]) -> AppendFuture<'a> {
            Box::pin(async {
                Err(std::io::Error::other("the journal should hand over JSON").into())
            })
        }

        fn append_json<'a>(
            &'a self,
            _records: &'a [EventRecord],
            json: &'a [Box<RawValue>],
        ) -> AppendFuture<'a> {
            self.0
                .lock()
                .unwrap()
                .extend(json.iter().map(|j| j.get().to_string()));
            Box::pin(async { Ok(()) })
        }
    }

    /// The journal writes each event's JSON once, and every log gets the same text: the line in
    /// `events.jsonl` is byte for byte what the store keeps, and what the record serialises to.
    #[tokio::test]
    async fn every_log_gets_the_same_json_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let kept = Arc::new(JsonKept::default());
        let journal = crate::journal::Journal::new(
            vec![
                Arc::new(JsonlLog::append_to(&path).unwrap()),
                kept.clone() as Arc<dyn EventLog>,
            ],
            Vec::new(),
        );
        for n in 1..=3 {
            journal.emit(started(n).event).await.unwrap();
        }
        let lines: Vec<String> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(lines, *kept.0.lock().unwrap());
        let records = read_events(&path).unwrap();
        let again: Vec<String> = records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect();
        assert_eq!(lines, again);
        assert_eq!(records.len(), 3);
    }

    #[tokio::test]
    async fn a_failed_write_is_the_appends_error() {
        // A file opened read-only: the write fails, and the append says so.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, "").unwrap();
        let log = JsonlLog::of(&path, std::fs::File::open(&path).unwrap());
        assert!(matches!(
            log.append(&[started(1)]).await,
            Err(AppendError::Io(_))
        ));
    }

    /// A log that refuses every append after the first `accept` events.
    struct RefusesAfter {
        accept: usize,
        kept: Mutex<Vec<u64>>,
    }

    impl EventLog for RefusesAfter {
        fn append<'a>(&'a self, records: &'a [EventRecord]) -> AppendFuture<'a> {
            let mut kept = self.kept.lock().unwrap();
            let result = if kept.len() + records.len() <= self.accept {
                kept.extend(records.iter().map(|r| r.seq));
                Ok(())
            } else {
                Err(AppendError::Fenced("lease lost".into()))
            };
            Box::pin(async move { result })
        }
    }

    /// An event queued without waiting is committed before the next awaited one returns (so
    /// before the side effect that follows it), and its failure fails that next emit.
    #[tokio::test]
    async fn a_queued_event_is_committed_before_the_next_awaited_one_returns() {
        let log = Arc::new(RefusesAfter {
            accept: 3,
            kept: Mutex::default(),
        });
        let journal =
            crate::journal::Journal::new(vec![log.clone() as Arc<dyn EventLog>], Vec::new());
        journal.emit_nowait(started(1).event).unwrap();
        journal.emit_nowait(started(2).event).unwrap();
        journal.emit(started(3).event).await.unwrap();
        assert_eq!(*log.kept.lock().unwrap(), vec![1, 2, 3]);
        // The fourth is refused while queued; the awaited fifth reports it, and nothing after
        // the refusal is written.
        journal.emit_nowait(started(4).event).unwrap();
        let refused = journal.emit(started(5).event).await;
        assert!(
            matches!(&refused, Err(crate::EngineError::Record(crate::error::RecordError::Fenced(why))) if why == "lease lost"),
            "{refused:?}"
        );
        assert_eq!(*log.kept.lock().unwrap(), vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn a_rewrite_with_no_history_empties_the_file_and_appends_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(
            &path,
            "a line from an attempt that wrote nothing to the store\n",
        )
        .unwrap();
        let log = JsonlLog::rewrite(&path, &[]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        log.append(&[started(1)]).await.unwrap();
        let seqs: Vec<u64> = read_events(&path).unwrap().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![1]);
        // With a history, the file holds exactly it.
        let log = JsonlLog::rewrite(&path, &[started(1), started(2)]).unwrap();
        log.append(&[started(3)]).await.unwrap();
        let seqs: Vec<u64> = read_events(&path).unwrap().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        assert!(!dir.path().join("events.jsonl.partial").exists());
    }

    /// A log behind the store does not hold the run up: its append resolves while the file
    /// cannot take the batch yet (a FIFO nobody reads, past its buffer), and its flush resolves
    /// once the batch is written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_log_behind_the_store_does_not_wait_for_its_file() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        // Read and write, so that opening it does not wait for a reader.
        let fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut reader = fifo.try_clone().unwrap();
        let log = JsonlLog::of(&path, fifo).behind();
        // One event of 200 KB: more than a pipe holds.
        let mut big = started(1);
        big.event = RunEvent::MovementStarted {
            movement: "m".repeat(200_000),
            iteration: 1,
            movement_iteration: 1,
            parent: None,
            prompt_log: None,
        };
        let want = serde_json::to_string(&big).unwrap().len() + 1;
        tokio::time::timeout(std::time::Duration::from_secs(10), log.append(&[big]))
            .await
            .expect("the append waited for the file")
            .unwrap();
        let read = std::thread::spawn(move || {
            let mut got = vec![0u8; want];
            reader.read_exact(&mut got).unwrap();
            got
        });
        log.flush().await.unwrap();
        let got = read.join().unwrap();
        assert!(got.ends_with(b"\n") && got.len() == want);
    }

    /// A failed write behind the store fails the log's next append, or its flush.
    #[tokio::test]
    async fn a_failed_write_behind_the_store_is_reported_by_the_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, "").unwrap();
        let log = JsonlLog::of(&path, std::fs::File::open(&path).unwrap()).behind();
        log.append(&[started(1)]).await.unwrap();
        assert!(matches!(log.flush().await, Err(AppendError::Io(_))));
        let log = JsonlLog::of(&path, std::fs::File::open(&path).unwrap()).behind();
        log.append(&[started(1)]).await.unwrap();
        log.flush().await.unwrap_err();
        // Sticky until reported once; the append after a failed one reports it.
        log.append(&[started(2)]).await.unwrap();
        let next = loop {
            match log.append(&[started(3)]).await {
                Ok(()) => tokio::task::yield_now().await,
                Err(e) => break e,
            }
        };
        assert!(matches!(next, AppendError::Io(_)), "{next}");
    }
}
