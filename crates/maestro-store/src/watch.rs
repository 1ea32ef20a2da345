//! Wakeups for whoever follows a job: a job's new events and status changes, from this
//! process and from the others sharing the store.
//!
//! Every write of this process that appends events or changes a job's status tells the
//! store's in-process channel once it has committed. On PostgreSQL the same writes notify
//! (`maestro_events`: `<job id>:<last seq>`, `maestro_jobs`: the job id; triggers added by
//! migration 7, so a notification goes out exactly when the write commits), and one listener
//! per store (shared by its clones, started by the first [`Store::watch`]) hands them to the
//! same channel. After the listener (re)connects it sends [`Change::Resync`], and while it is
//! not connected watchers look at the store every [`WATCH_POLL`]: a wakeup lost to a broken
//! connection costs a re-read, never an event. On SQLite, writes by other processes are found
//! by looking every [`WATCH_POLL`].
//!
//! A wakeup says only that something may have changed: the watcher reads the store, which is
//! the authority. So a watcher subscribes first ([`Store::watch`]), then reads, and a write
//! that commits in between wakes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::broadcast;

use crate::model::JobId;
use crate::store::{Backend, Store};

/// How often a watcher looks at the store when no notification can reach it: on SQLite (for
/// writes by other processes) and on PostgreSQL while the listener is not connected.
pub const WATCH_POLL: Duration = Duration::from_millis(250);

/// How often a watcher looks at the store anyway while the PostgreSQL listener is connected.
const PG_SAFETY_POLL: Duration = Duration::from_secs(5);

/// How many changes the channel holds for a watcher that falls behind (it then re-reads).
const CHANNEL_CAPACITY: usize = 4096;

/// The PostgreSQL channels the listener follows.
const CHANNELS: [&str; 2] = ["maestro_events", "maestro_jobs"];

/// Something that may have changed in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The job's events up to `seq` were committed.
    Events {
        /// The job.
        job: JobId,
        /// The last `seq` written.
        seq: i64,
    },
    /// The job's status changed.
    Status(JobId),
    /// Changes may have been missed (the listener reconnected): every watcher re-reads.
    Resync,
}

impl Change {
    fn concerns(self, job: JobId) -> bool {
        match self {
            Change::Events { job: j, .. } | Change::Status(j) => j == job,
            Change::Resync => true,
        }
    }
}

/// The store's side of watching: the in-process channel, and on PostgreSQL the listener.
#[derive(Debug)]
pub(crate) struct Notifier {
    /// Made by the first watcher: a store nobody watches (a local run's) never allocates the
    /// channel's slots.
    sender: OnceLock<broadcast::Sender<Change>>,
    /// PostgreSQL: the URL the listener connects to.
    listen_url: Option<String>,
    /// Whether the listener is connected and listening now.
    listening: Arc<AtomicBool>,
    listener: std::sync::Mutex<Option<ListenerTask>>,
}

/// The listener's task, stopped when the last clone of its store goes.
#[derive(Debug)]
struct ListenerTask(tokio::task::JoinHandle<()>);

impl Drop for ListenerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Notifier {
    pub(crate) fn new(backend: Backend, url: String) -> Notifier {
        Notifier {
            sender: OnceLock::new(),
            listen_url: (backend == Backend::Postgres).then_some(url),
            listening: Arc::new(AtomicBool::new(false)),
            listener: std::sync::Mutex::new(None),
        }
    }

    pub(crate) fn send(&self, change: Change) {
        if let Some(sender) = self.sender.get()
            && sender.receiver_count() > 0
        {
            let _ = sender.send(change);
        }
    }

    fn sender(&self) -> &broadcast::Sender<Change> {
        self.sender
            .get_or_init(|| broadcast::channel(CHANNEL_CAPACITY).0)
    }

    /// Starts the PostgreSQL listener unless it runs already.
    fn ensure_listener(&self) {
        let Some(url) = &self.listen_url else {
            return;
        };
        let mut task = self.listener.lock().unwrap_or_else(|p| p.into_inner());
        if task.as_ref().is_some_and(|t| !t.0.is_finished()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        *task = Some(ListenerTask(runtime.spawn(listen(
            url.clone(),
            self.sender().clone(),
            Arc::clone(&self.listening),
        ))));
    }

    fn poll(&self) -> Duration {
        if self.listen_url.is_some() && self.listening.load(Ordering::Acquire) {
            PG_SAFETY_POLL
        } else {
            WATCH_POLL
        }
    }
}

/// The listener: connects, listens, forwards each notification, and after every (re)connect
/// tells the watchers to re-read. A broken connection is not left to reconnect by itself
/// (its re-`LISTEN` would come after the watchers' re-read): it is dropped, and the next one
/// sends [`Change::Resync`] once it listens.
async fn listen(url: String, sender: broadcast::Sender<Change>, listening: Arc<AtomicBool>) {
    let mut pause = WATCH_POLL;
    loop {
        match PgListener::connect(&url).await {
            Ok(mut listener) => match listener.listen_all(CHANNELS).await {
                Ok(()) => {
                    listening.store(true, Ordering::Release);
                    let _ = sender.send(Change::Resync);
                    pause = WATCH_POLL;
                    loop {
                        match listener.try_recv().await {
                            Ok(Some(notification)) => {
                                if let Some(change) =
                                    parse(notification.channel(), notification.payload())
                                {
                                    let _ = sender.send(change);
                                }
                            }
                            Ok(None) => {
                                tracing::warn!(
                                    "the store's notification connection was lost; reconnecting"
                                );
                                break;
                            }
                            Err(e) => {
                                tracing::warn!(
                                    "the store's notification connection failed ({e}); reconnecting"
                                );
                                break;
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!("listening for the store's notifications failed: {e}"),
            },
            Err(e) => tracing::warn!("connecting for the store's notifications failed: {e}"),
        }
        listening.store(false, Ordering::Release);
        let _ = sender.send(Change::Resync);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(PG_SAFETY_POLL);
    }
}

/// A notification's change; `None` for a payload this build does not understand.
fn parse(channel: &str, payload: &str) -> Option<Change> {
    match channel {
        "maestro_events" => {
            let (job, seq) = payload.split_once(':')?;
            Some(Change::Events {
                job: job.parse().ok()?,
                seq: seq.parse().ok()?,
            })
        }
        "maestro_jobs" => Some(Change::Status(payload.parse().ok()?)),
        _ => None,
    }
}

/// One watcher's wakeups ([`Store::watch`]).
#[derive(Debug)]
pub struct StoreWatch {
    receiver: broadcast::Receiver<Change>,
    notifier: Arc<Notifier>,
}

impl StoreWatch {
    /// The next change this process heard of (no polling): for a caller that wants to know
    /// which change it was.
    pub async fn recv(&mut self) -> Change {
        match self.receiver.recv().await {
            Ok(change) => change,
            Err(_) => Change::Resync,
        }
    }

    /// Waits until something about `job` may have changed: a change of it was committed,
    /// changes may have been missed ([`Change::Resync`], a watcher that fell behind), or the
    /// poll interval passed. The caller then reads the store.
    pub async fn changed(&mut self, job: JobId) {
        let poll = tokio::time::sleep(self.notifier.poll());
        tokio::pin!(poll);
        loop {
            tokio::select! {
                _ = &mut poll => return,
                received = self.receiver.recv() => match received {
                    Ok(change) if change.concerns(job) => return,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        (&mut poll).await;
                        return;
                    }
                },
            }
        }
    }
}

impl Store {
    /// Subscribes to the store's changes; read the store after this, so that a change
    /// committed meanwhile wakes [`StoreWatch::changed`]. On PostgreSQL the first call starts
    /// the store's listener.
    pub fn watch(&self) -> StoreWatch {
        let receiver = self.notifier.sender().subscribe();
        self.notifier.ensure_listener();
        StoreWatch {
            receiver,
            notifier: Arc::clone(&self.notifier),
        }
    }

    /// The `seq` of `job`'s last stored event (0 when it has none).
    pub async fn last_event_seq(&self, job: JobId) -> crate::StoreResult<i64> {
        let last = sqlx::query_scalar::<sqlx::Any, Option<i64>>(
            "SELECT MAX(seq) FROM job_events WHERE job_id = $1",
        )
        .bind(job.to_string())
        .fetch_one(&self.pool)
        .await
        .map_err(crate::StoreError::query("read a job's last event number"))?;
        Ok(last.unwrap_or(0))
    }

    /// Tells this process's watchers that `job`'s events up to `seq` were committed.
    pub(crate) fn changed_events(&self, job: JobId, seq: i64) {
        self.notifier.send(Change::Events { job, seq });
    }

    /// Tells this process's watchers that `job`'s status changed.
    pub(crate) fn changed_job(&self, job: JobId) {
        self.notifier.send(Change::Status(job));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_parse_and_garbage_is_ignored() {
        let job = JobId::new();
        assert_eq!(
            parse("maestro_events", &format!("{job}:42")),
            Some(Change::Events { job, seq: 42 })
        );
        assert_eq!(
            parse("maestro_jobs", &job.to_string()),
            Some(Change::Status(job))
        );
        assert_eq!(parse("maestro_events", "nope"), None);
        assert_eq!(parse("maestro_jobs", "x"), None);
        assert_eq!(parse("other", &job.to_string()), None);
    }
}
