//! Following one job from anywhere: its committed events in order, each once, its status
//! changes, and — when this process runs it — the model's text as it streams. The stream a
//! front end sends (the server's `GET /jobs/{id}/events`, `maestro jobs events --follow`).
//!
//! The store is the authority: the watch replays what it holds after the caller's cursor,
//! then wakes on the store's notifications ([`Store::watch`]: this process's writes, other
//! processes' through PostgreSQL's notifications or, on SQLite, by looking every
//! [`maestro_store::WATCH_POLL`]) and reads again. It subscribes before it reads and keeps the
//! `seq` of the last event it handed out, so an event committed while it switches from replay
//! to live is handed out once, never missed. A park (`waiting_input`, `waiting_subtasks`) does
//! not end it: it follows the job through the answer and the next run, and ends only when the
//! job has ended and every event was handed out.

use std::collections::VecDeque;
use std::sync::Arc;

use maestro_protocol::EventRecord;
use maestro_store::{Job, JobId, JobQueue, JobStatus, Store, StoreError, StoreWatch};

use crate::jobs::JobError;
use crate::live::{Live, Subscription};
use crate::worker::Worker;

/// One thing a [`JobWatch`] hands out.
#[derive(Debug, Clone, PartialEq)]
pub enum Watched {
    /// A committed event, in `seq` order, each once.
    Event(Arc<EventRecord>),
    /// The job's status: its status when the watch began, first, then each change seen. A
    /// change to `queued` or `running` comes before the events of the run it starts; a park or
    /// an end comes after the events of the run that led to it.
    Status(JobStatus),
    /// A piece of the model's answer while `movement`'s call streams: only while this
    /// process runs the job, never stored, never replayed; it does not move the cursor.
    TextDelta {
        /// The movement whose call streams.
        movement: String,
        /// The text that arrived.
        text: String,
    },
    /// The cursor the watch was asked for (`after`) is past the job's last event: the watch
    /// goes on from `last_seq`, the job's last event, instead. Handed out first, at most once.
    Resync {
        /// The job's last event when the watch began.
        last_seq: i64,
    },
}

/// A watch on one job ([`watch_job`]).
#[derive(Debug)]
pub struct JobWatch {
    store: Store,
    worker: Option<Worker>,
    job: JobId,
    wake: StoreWatch,
    /// The `seq` of the last event handed out (or of the caller's cursor).
    cursor: i64,
    /// The `seq` of the last event read from the store (handed out, pending or skipped).
    read_to: i64,
    /// The last status handed out.
    status: JobStatus,
    /// Read from the store, to hand out before anything else.
    pending: VecDeque<Watched>,
    /// This process's run of the job, while there is one.
    live: Option<Subscription>,
    /// The job has ended and every event is in `pending`: nothing more after them.
    ended: bool,
    /// Reads of the store that failed in a row.
    failures: u32,
    /// The error that stopped the watch: the store cannot be used any more.
    stopped: Option<StoreError>,
}

/// Watches `job`: its events after `after` (all of them when `None`), then live, with its
/// status first and each change of it; with `worker`, the text the model streams while that
/// worker runs the job. See [`Watched`] for what comes when, and [`JobWatch::next`] for the
/// end.
pub async fn watch_job(
    store: &Store,
    worker: Option<&Worker>,
    job: JobId,
    after: Option<i64>,
) -> Result<JobWatch, JobError> {
    // Subscribed before anything is read: a change committed from now on wakes the watch.
    let wake = store.watch();
    let current = store.job(job).await?.ok_or(JobError::NoSuchJob(job))?;
    let mut pending = VecDeque::new();
    let mut cursor = after.unwrap_or(0).max(0);
    if cursor > 0 {
        let last_seq = store.last_event_seq(job).await?;
        if cursor > last_seq {
            pending.push_back(Watched::Resync { last_seq });
            cursor = last_seq;
        }
    }
    pending.push_back(Watched::Status(current.status));
    let mut watch = JobWatch {
        store: store.clone(),
        worker: worker.cloned(),
        job,
        wake,
        cursor,
        read_to: cursor,
        status: current.status,
        pending,
        live: None,
        ended: false,
        failures: 0,
        stopped: None,
    };
    // The status was just read: the events read now hold every event of a job already ended.
    watch.read_events(&current).await?;
    Ok(watch)
}

impl JobWatch {
    /// The job watched.
    pub fn job(&self) -> JobId {
        self.job
    }

    /// The `seq` of the last event handed out (or of the cursor the watch started from): the
    /// `after` to give a new watch that goes on where this one stops.
    pub fn last_seq(&self) -> i64 {
        self.cursor
    }

    /// Why the watch ended early: the store became unusable ([`StoreError::is_unusable`]:
    /// corrupt, not a database, read-only). `None` when it ended with the job.
    pub fn take_error(&mut self) -> Option<StoreError> {
        self.stopped.take()
    }

    /// The next item; `None` once the job has ended (completed, aborted, exceeded, failed,
    /// cancelled) and every event was handed out. A store that fails meanwhile is warned
    /// about and read again after a pause that doubles from [`crate::POLL`] up to 5 s; one
    /// that cannot be used any more ends the watch ([`JobWatch::take_error`] says why).
    pub async fn next(&mut self) -> Option<Watched> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                if let Watched::Event(record) = &item {
                    if seq(record) <= self.cursor {
                        continue;
                    }
                    self.cursor = seq(record);
                }
                return Some(item);
            }
            if self.ended {
                return None;
            }
            if let Some(live) = self.live.as_mut() {
                // While the run goes on here, its events and text come from it; it ends once
                // its end (or park) is written, a cancel or a lost lease included, and the
                // status is read from the store then.
                match live.next().await {
                    Some(Ok(Live::Event(record))) => {
                        if seq(&record) > self.cursor {
                            self.cursor = seq(&record);
                            return Some(Watched::Event(record));
                        }
                    }
                    Some(Ok(Live::TextDelta { movement, text })) => {
                        return Some(Watched::TextDelta { movement, text });
                    }
                    Some(Ok(Live::Note(_))) => {}
                    Some(Err(e)) => {
                        tracing::warn!(job = %self.job, "following the run live failed: {e}");
                        self.live = None;
                    }
                    None => self.live = None,
                }
                continue;
            }
            self.refresh_logged().await;
            if self.pending.is_empty() && !self.ended {
                if self.follow_live() {
                    continue;
                }
                self.wake.changed(self.job).await;
            }
        }
    }

    /// Subscribes to this process's run of the job when there is one.
    fn follow_live(&mut self) -> bool {
        if self.status != JobStatus::Running {
            return false;
        }
        let Some(worker) = &self.worker else {
            return false;
        };
        let after = u64::try_from(self.cursor).unwrap_or(0);
        self.live = worker.subscribe(self.job, after);
        self.live.is_some()
    }

    /// [`JobWatch::refresh`], a failure warned about and followed by a pause.
    async fn refresh_logged(&mut self) {
        match self.refresh().await {
            Ok(()) => {
                if self.failures > 0 {
                    tracing::warn!("the store answers again");
                }
                self.failures = 0;
            }
            Err(e) if e.is_unusable() => {
                self.ended = true;
                self.stopped = Some(e);
            }
            Err(e) => {
                let pause = crate::jobs::POLL
                    .saturating_mul(1 << self.failures.min(8))
                    .min(std::time::Duration::from_secs(5));
                self.failures += 1;
                tracing::warn!("reading the store failed (trying again in {pause:?}): {e}");
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// Reads the job's status, then its events after the cursor, into `pending`.
    async fn refresh(&mut self) -> Result<(), StoreError> {
        let Some(job) = self.store.job(self.job).await? else {
            // Gone (deleted): nothing more will come.
            self.ended = true;
            return Ok(());
        };
        self.read_events(&job).await
    }

    /// The events after what is handed out or pending, and `job`'s status (read before them)
    /// when it changed: before them when it starts a run, after them when it parks or ends.
    async fn read_events(&mut self, job: &Job) -> Result<(), StoreError> {
        let after = self.read_to.max(self.cursor);
        let stored = self.store.events(self.job, after).await?;
        let changed = job.status != self.status;
        let starts = matches!(job.status, JobStatus::Queued | JobStatus::Running);
        if changed && starts {
            self.pending.push_back(Watched::Status(job.status));
        }
        for event in stored {
            self.read_to = self.read_to.max(event.seq);
            match serde_json::from_value::<EventRecord>(event.payload) {
                Ok(record) => self.pending.push_back(Watched::Event(Arc::new(record))),
                // Not an event this version reads: said, and passed over, so that the events
                // after it still come.
                Err(e) => tracing::warn!(
                    job = %self.job,
                    "event {} of the job cannot be read, passing over it: {e}",
                    event.seq
                ),
            }
        }
        if changed && !starts {
            self.pending.push_back(Watched::Status(job.status));
        }
        self.status = job.status;
        if job.status.is_final() {
            self.ended = true;
        }
        Ok(())
    }
}

/// An event's `seq` as the store numbers it.
fn seq(record: &EventRecord) -> i64 {
    i64::try_from(record.seq).unwrap_or(i64::MAX)
}
