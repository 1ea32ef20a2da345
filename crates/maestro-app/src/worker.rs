//! The worker: claims jobs of its profiles' task classes, runs each through the engine under a
//! fenced lease that a heartbeat keeps alive, and writes how it ended.
//!
//! One process may serve several profiles, each with its own concurrency. Shutting down
//! ([`Shutdown`]) stops claiming, lets runs in flight finish for the drain time, then hands the
//! rest back (their leases released, so another worker takes them at once).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use maestro_config::{Config, WorkerProfile};
use maestro_store::{Classes, JobId, Store, StoreError, WorkerInfo};
use time::OffsetDateTime;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::completer::Completer;
use crate::context::{JobContext, RunObserver};
use crate::lease::LeaseKeeper;
use crate::live::Subscription;
use crate::outcome::RunOutcome;
use crate::run::{Execution, Target, execute};
use crate::runtime_config::ConfigWatch;

/// One worker profile: a name, how many jobs at once, which task classes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name (`workers[].name`, or `default`).
    pub name: String,
    /// Jobs it runs at once (at least 1).
    pub concurrency: usize,
    /// The task classes it claims.
    pub classes: Classes,
}

impl Profile {
    /// The profile a `workers:` entry describes.
    pub fn from_config(profile: &WorkerProfile) -> Profile {
        Profile {
            name: profile.name.clone(),
            concurrency: usize::try_from(profile.concurrency.max(1)).unwrap_or(1),
            classes: classes(&profile.task_classes),
        }
    }
}

/// `Classes::Any` for an empty list.
pub fn classes(names: &[String]) -> Classes {
    if names.is_empty() {
        Classes::Any
    } else {
        Classes::Only(names.to_vec())
    }
}

/// How a worker process runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Shown by `maestro workers`.
    pub name: String,
    /// The profiles it serves, each with its own slots.
    pub profiles: Vec<Profile>,
    /// How long a claim holds; renewed every third of it.
    pub lease: Duration,
    /// How long runs in flight may go on after shutdown begins.
    pub drain: Duration,
    /// How long an idle slot waits before looking for work again.
    pub idle_poll: Duration,
    /// The model was chosen on the command line: it wins over a piece's `model`.
    pub model_from_flag: bool,
}

impl WorkerOptions {
    /// The default lease.
    pub const LEASE: Duration = Duration::from_secs(30);
    /// The default drain time.
    pub const DRAIN: Duration = Duration::from_secs(30);
}

/// Tells a running worker to stop: first [`Shutdown::stop_claiming`] (drain), then, or when
/// the drain time is up, [`Shutdown::hand_back`].
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    stop: CancellationToken,
    hand_back: CancellationToken,
}

impl Shutdown {
    /// A shutdown that has not begun.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Claim nothing more; runs in flight go on for the drain time.
    pub fn stop_claiming(&self) {
        self.stop.cancel();
    }

    /// Resolves once shutdown has begun (claiming stopped).
    pub async fn begun(&self) {
        self.stop.cancelled().await;
    }

    /// Stop the runs in flight now and release their leases.
    pub fn hand_back(&self) {
        self.stop.cancel();
        self.hand_back.cancel();
    }
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Runs that ended (or parked) and were recorded.
    pub finished: u64,
    /// Jobs queued again after an infrastructure failure, or ended `failed` for it.
    pub failed: u64,
    /// Jobs whose lease was lost or that were cancelled while running.
    pub fenced: u64,
    /// Jobs handed back at shutdown.
    pub handed_back: u64,
}

#[derive(Default)]
struct Counters {
    finished: AtomicU64,
    failed: AtomicU64,
    fenced: AtomicU64,
    handed_back: AtomicU64,
}

/// Why the worker could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Registering the worker failed.
    #[error("cannot register the worker")]
    Register(#[source] StoreError),
    /// The store became unusable while the worker ran (its file corrupt, not a database, or
    /// read-only): the worker stopped, handing back what it ran, so that a person can act and a
    /// supervisor can restart it.
    #[error("the worker stopped: its store can no longer be used")]
    StoreUnusable(#[source] StoreError),
}

/// A worker process: a store, the configuration runs use, and how to run.
#[derive(Debug, Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    job: JobContext,
    options: WorkerOptions,
    /// Wakes one idle slot before its next poll ([`Worker::wake`]).
    wake: Notify,
}

impl Worker {
    /// A worker on `store` whose runs use `config` with the store's configuration overlay laid
    /// over it ([`ConfigWatch`]): each job runs with the configuration current when it starts,
    /// so a change written through [`crate::put_config`] reaches the next job without a
    /// restart. It starts with [`Worker::run`].
    pub fn new(store: Store, config: Config, options: WorkerOptions) -> Worker {
        Worker::observed(store, config, options, None)
    }

    /// A worker whose runs' committed events `observer` also sees (a server's metrics).
    pub fn observed(
        store: Store,
        config: Config,
        options: WorkerOptions,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> Worker {
        let watch = ConfigWatch::new(store.clone(), config.clone());
        Worker::with_config_watch(store, watch, options, observer)
    }

    /// [`Worker::observed`] sharing `watch` (a server that also serves the configuration holds
    /// one watch for both); its base is the worker's configuration.
    pub fn with_config_watch(
        store: Store,
        watch: ConfigWatch,
        options: WorkerOptions,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> Worker {
        let mut job = JobContext::new(
            store.clone(),
            Arc::clone(watch.base()),
            LeaseKeeper::new(store, options.lease),
            options.model_from_flag,
        );
        job.watch = Some(watch);
        job.observer = observer;
        Worker {
            inner: Arc::new(Inner {
                job,
                options,
                wake: Notify::new(),
            }),
        }
    }

    /// The watch on the configuration this worker's jobs run with.
    pub fn config_watch(&self) -> Option<&ConfigWatch> {
        self.inner.job.watch.as_ref()
    }

    /// A job was just queued in this process: one idle slot looks for it now instead of at
    /// its next poll. When no slot is idle, the next slot to become idle looks at once. Jobs
    /// queued elsewhere are found by polling, every [`WorkerOptions::idle_poll`].
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// A subscription to the run of `job` while this worker runs it: the events after `after`
    /// (from the store), then live, with the model's text as it streams; `None` when the job
    /// does not run here.
    pub fn subscribe(&self, job: JobId, after: u64) -> Option<Subscription> {
        let store = self.inner.job.store.clone();
        self.inner
            .job
            .live
            .receiver(job)
            .map(|receiver| Subscription::new(job, Some(store), Some(receiver), after))
    }

    /// Registers the profiles and runs until `shutdown`, then drains and hands back.
    pub async fn run(&self, shutdown: Shutdown) -> Result<WorkerStats, WorkerError> {
        let inner = &self.inner;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".to_string());
        let now = OffsetDateTime::now_utc();
        let mut ids = Vec::new();
        for profile in &inner.options.profiles {
            let info = WorkerInfo {
                id: uuid::Uuid::now_v7().to_string(),
                name: inner.options.name.clone(),
                profile: profile.name.clone(),
                task_classes: match &profile.classes {
                    Classes::Any => Vec::new(),
                    Classes::Only(names) => names.clone(),
                },
                host: host.clone(),
                pid: i64::from(std::process::id()),
                started_at: now,
                heartbeat_at: now,
            };
            inner
                .job
                .store
                .register_worker(&info)
                .await
                .map_err(WorkerError::Register)?;
            ids.push((info.id, profile.clone()));
        }
        let done = CancellationToken::new();
        let beat = tokio::spawn(worker_heartbeats(
            inner.job.store.clone(),
            ids.iter().map(|(id, _)| id.clone()).collect(),
            inner.options.lease / 3,
            done.clone(),
        ));
        let ticker = tokio::spawn(scheduler_ticks(
            inner.job.store.clone(),
            shutdown.stop.clone(),
        ));
        let counters = Arc::new(Counters::default());
        let unusable = Arc::new(std::sync::Mutex::new(None));
        let (completer, completing) = Completer::start(inner.job.store.clone());
        let mut slots = JoinSet::new();
        for (id, profile) in &ids {
            slots.spawn(profile_slots(
                Arc::clone(&self.inner),
                ProfileRun {
                    worker_id: id.clone(),
                    classes: profile.classes.clone(),
                    concurrency: profile.concurrency,
                    shutdown: shutdown.clone(),
                    counters: Arc::clone(&counters),
                    completer: completer.clone(),
                    unusable: Arc::clone(&unusable),
                },
            ));
        }
        // The slots hold the other clones: the completer stops once they are done.
        drop(completer);
        let drain = inner.options.drain;
        let deadline = {
            let shutdown = shutdown.clone();
            async move {
                shutdown.stop.cancelled().await;
                tokio::time::sleep(drain).await;
            }
        };
        tokio::select! {
            _ = join_all(&mut slots) => {}
            _ = deadline => {
                tracing::info!("drain time is up: handing the runs in flight back");
                shutdown.hand_back();
                join_all(&mut slots).await;
            }
        }
        if let Err(e) = completing.await {
            tracing::error!("writing run ends stopped: {e}");
        }
        done.cancel();
        let _ = beat.await;
        let _ = ticker.await;
        if let Some(e) = unusable.lock().ok().and_then(|mut e| e.take()) {
            return Err(WorkerError::StoreUnusable(e));
        }
        Ok(WorkerStats {
            finished: counters.finished.load(Ordering::Relaxed),
            failed: counters.failed.load(Ordering::Relaxed),
            fenced: counters.fenced.load(Ordering::Relaxed),
            handed_back: counters.handed_back.load(Ordering::Relaxed),
        })
    }
}

async fn join_all(set: &mut JoinSet<()>) {
    while let Some(joined) = set.join_next().await {
        if let Err(e) = joined {
            tracing::error!("a worker profile's slots stopped: {e}");
        }
    }
}

async fn worker_heartbeats(
    store: Store,
    ids: Vec<String>,
    every: Duration,
    done: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        for id in &ids {
            if let Err(e) = store.worker_heartbeat(id).await {
                tracing::warn!("worker heartbeat failed: {e}");
            }
        }
        // Reservations of model calls whose process died before settling them go back to
        // their budgets (docs/budgets.md).
        if let Err(e) = store.budget_sweep().await {
            tracing::warn!("budget sweep failed: {e}");
        }
    }
}

/// Ticks the scheduler until the worker stops claiming. Every worker does: the store makes
/// each slot fire once, so no worker leads.
/// Ticks the scheduler until `stop`, as every worker does: a node that runs no worker (`maestro
/// serve --no-worker`) still fires schedules.
pub async fn scheduler_ticks(store: Store, stop: CancellationToken) {
    loop {
        if let Err(e) = crate::schedule::tick(&store, store.now(), crate::schedule::GRACE).await {
            tracing::warn!("scheduler tick failed: {e}");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(crate::schedule::TICK) => {}
        }
    }
}

/// One profile's slots: one transaction claims a job for every idle slot, each job runs on its
/// own task, and a slot that frees up is filled at once; slots left idle look again when woken
/// ([`Worker::wake`]) or at the next poll. At shutdown it claims nothing more and waits for
/// its runs (which the hand-back stops).
async fn profile_slots(inner: Arc<Inner>, profile: ProfileRun) {
    let ProfileRun {
        worker_id,
        classes,
        concurrency,
        shutdown,
        counters,
        completer,
        unusable,
    } = profile;
    let mut runs = JoinSet::new();
    while !shutdown.stop.is_cancelled() {
        let idle = concurrency.saturating_sub(runs.len());
        if idle == 0 {
            tokio::select! {
                _ = shutdown.stop.cancelled() => {}
                Some(joined) = runs.join_next() => report(joined),
            }
            continue;
        }
        match inner
            .job
            .store
            .claim_batch(&worker_id, &classes, inner.options.lease, idle)
            .await
        {
            Ok(batch) => {
                let filled = batch.len() == idle;
                for claimed in batch {
                    let inner = Arc::clone(&inner);
                    let hand_back = shutdown.hand_back.clone();
                    let counters = Arc::clone(&counters);
                    let completer = completer.clone();
                    runs.spawn(async move {
                        let execution = Execution {
                            target: Target::Job(Box::new(claimed)),
                            stop: None,
                            hand_back,
                            completer,
                        };
                        let counter = match execute(&inner.job, execution).await {
                            RunOutcome::Ended(_) => &counters.finished,
                            RunOutcome::Failed { .. } => &counters.failed,
                            RunOutcome::Fenced { .. } => &counters.fenced,
                            RunOutcome::HandedBack => &counters.handed_back,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                    });
                }
                if !filled {
                    idle_wait(&inner, &shutdown, &mut runs).await;
                }
            }
            Err(e) if e.is_unusable() => {
                // Retrying cannot help: stop, hand the runs back, and say why.
                tracing::error!("claiming jobs failed and the store cannot be used: {e}");
                if let Ok(mut first) = unusable.lock()
                    && first.is_none()
                {
                    *first = Some(e);
                }
                shutdown.hand_back();
            }
            Err(e) => {
                tracing::warn!("claiming jobs failed: {e}");
                tokio::select! {
                    _ = shutdown.stop.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
    while let Some(joined) = runs.join_next().await {
        report(joined);
    }
}

/// The least time between two claims while the queue has nothing for this profile's idle
/// slots: when many runs end together, their freed slots are filled by one claim rather than
/// one claim each, and a parent queued by its last subtask's end still starts at once.
const RECLAIM_GAP: Duration = Duration::from_millis(20);

/// Waits after a claim that left slots idle: until the worker is woken, the idle poll comes
/// round, or a run ends (and [`RECLAIM_GAP`] has passed since the claim).
async fn idle_wait(inner: &Inner, shutdown: &Shutdown, runs: &mut JoinSet<()>) {
    let claimed_at = tokio::time::Instant::now();
    let poll = tokio::time::sleep(inner.options.idle_poll);
    tokio::pin!(poll);
    let mut freed = false;
    loop {
        tokio::select! {
            _ = shutdown.stop.cancelled() => return,
            _ = inner.wake.notified() => return,
            _ = &mut poll => return,
            _ = tokio::time::sleep_until(claimed_at + RECLAIM_GAP), if freed => return,
            Some(joined) = runs.join_next() => {
                report(joined);
                freed = true;
            }
        }
    }
}

/// What one profile's slots run with.
struct ProfileRun {
    worker_id: String,
    classes: Classes,
    concurrency: usize,
    shutdown: Shutdown,
    counters: Arc<Counters>,
    completer: Completer,
    /// The error that made the store unusable, which stops the worker.
    unusable: Arc<std::sync::Mutex<Option<StoreError>>>,
}

fn report(joined: Result<(), tokio::task::JoinError>) {
    if let Err(e) = joined {
        tracing::error!("a run stopped: {e}");
    }
}
