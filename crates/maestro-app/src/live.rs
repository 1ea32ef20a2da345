//! Live events of the runs in flight, in process: every committed event, and the model's text
//! as it streams. A subscriber that falls behind is never waited for: it loses its place in the
//! channel ("lagged") and reads what it missed from the store, by `seq`, then goes on live.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use maestro_engine::EventSink;
use maestro_protocol::EventRecord;
use maestro_store::{JobId, JobQueue, Store, StoreError};
use tokio::sync::broadcast;

/// How many items a channel holds for its slowest subscriber before that one lags, unless the
/// run asks otherwise.
pub const LIVE_CAPACITY: usize = 1024;

/// One thing a run's subscriber receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Live {
    /// A committed event, in `seq` order, each once.
    Event(Arc<EventRecord>),
    /// A piece of the model's answer while `movement`'s call streams: live only, never stored,
    /// not replayed after a lag.
    TextDelta {
        /// The movement whose call streams.
        movement: String,
        /// The text that arrived.
        text: String,
    },
    /// A note for the person watching, live only: which piece the classifier chose and why,
    /// which model the endpoint serves.
    Note(String),
}

/// The live channels of one process's runs, by job. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct LiveRuns {
    runs: Arc<Mutex<HashMap<JobId, Weak<LiveRun>>>>,
    capacity: usize,
}

impl Default for LiveRuns {
    fn default() -> LiveRuns {
        LiveRuns::with_capacity(LIVE_CAPACITY)
    }
}

impl LiveRuns {
    /// Channels that hold `capacity` items for their slowest subscriber.
    pub(crate) fn with_capacity(capacity: usize) -> LiveRuns {
        LiveRuns {
            runs: Arc::default(),
            capacity: capacity.max(1),
        }
    }

    /// The live side of `job`'s run, made when the run starts; it lasts while a clone of the
    /// returned handle does, and its subscribers end then.
    pub(crate) fn open(&self, job: JobId) -> Arc<LiveRun> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(run) = runs.get(&job).and_then(Weak::upgrade) {
            return run;
        }
        let run = Arc::new(LiveRun {
            sender: OnceLock::new(),
            capacity: self.capacity,
        });
        runs.insert(job, Arc::downgrade(&run));
        run
    }

    /// Forgets `job`'s run once nothing holds it any more.
    pub(crate) fn close(&self, job: JobId) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if runs.get(&job).is_some_and(|run| run.strong_count() == 0) {
            runs.remove(&job);
        }
    }

    /// A receiver on `job`'s run in flight here, if there is one.
    pub(crate) fn receiver(&self, job: JobId) -> Option<broadcast::Receiver<Live>> {
        let run = {
            let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            runs.get(&job).and_then(Weak::upgrade)
        };
        run.map(|run| run.subscribe())
    }
}

/// The live side of one run: its channel, made by the first subscriber, so that a run no one
/// watches allocates none (a thousand runs in a worker would otherwise hold a thousand
/// buffers).
#[derive(Debug)]
pub(crate) struct LiveRun {
    sender: OnceLock<broadcast::Sender<Live>>,
    capacity: usize,
}

impl LiveRun {
    fn subscribe(&self) -> broadcast::Receiver<Live> {
        self.sender
            .get_or_init(|| broadcast::channel(self.capacity).0)
            .subscribe()
    }

    /// Hands `item` to the subscribers, if there are any; it is made only then.
    fn send(&self, item: impl FnOnce() -> Live) {
        if let Some(sender) = self.sender.get()
            && sender.receiver_count() > 0
        {
            let _ = sender.send(item());
        }
    }

    /// Tells the run's subscribers `text`, live only.
    pub(crate) fn note(&self, text: String) {
        self.send(|| Live::Note(text));
    }
}

/// The engine's observer that feeds a run's channel. It costs nothing while no one listens.
pub(crate) struct LiveSink {
    pub(crate) run: Arc<LiveRun>,
}

impl LiveSink {
    /// Tells the run's subscribers `text`, live only.
    pub(crate) fn note(&self, text: String) {
        self.run.note(text);
    }
}

impl EventSink for LiveSink {
    fn record(&self, record: &EventRecord) -> std::io::Result<()> {
        self.run.send(|| Live::Event(Arc::new(record.clone())));
        Ok(())
    }

    fn text_delta(&self, movement: &str, text: &str) {
        self.run.send(|| Live::TextDelta {
            movement: movement.to_string(),
            text: text.to_string(),
        });
    }
}

/// A subscription to one job's events: what its run commits, each event once and in `seq`
/// order, with the model's text between them. It ends when the run in this process ends (or
/// at once, after what the store holds, when no run of the job is in flight here).
#[derive(Debug)]
pub struct Subscription {
    job: JobId,
    store: Option<Store>,
    receiver: Option<broadcast::Receiver<Live>>,
    /// The last event handed out.
    after: u64,
    /// Events read from the store, to hand out before the channel.
    backlog: VecDeque<EventRecord>,
    /// Times this subscriber fell behind and read from the store instead.
    lags: u64,
}

impl Subscription {
    /// A subscription to `job` that hands out events after `after`, reading from `store`
    /// whatever the channel no longer holds.
    pub(crate) fn new(
        job: JobId,
        store: Option<Store>,
        receiver: Option<broadcast::Receiver<Live>>,
        after: u64,
    ) -> Subscription {
        Subscription {
            job,
            store,
            receiver,
            after,
            backlog: VecDeque::new(),
            lags: 0,
        }
    }

    /// The job this subscription follows.
    pub fn job(&self) -> JobId {
        self.job
    }

    /// The `seq` of the last event handed out.
    pub fn last_seq(&self) -> u64 {
        self.after
    }

    /// How often the subscriber fell behind the run and caught up from the store.
    pub fn lags(&self) -> u64 {
        self.lags
    }

    /// The next item, or `None` once the run ended and every event it committed was handed
    /// out. An error is the store's, met while catching up; the subscription can be asked
    /// again.
    pub async fn next(&mut self) -> Option<Result<Live, StoreError>> {
        loop {
            if let Some(record) = self.backlog.pop_front() {
                if record.seq <= self.after {
                    continue;
                }
                self.after = record.seq;
                return Some(Ok(Live::Event(Arc::new(record))));
            }
            let Some(receiver) = self.receiver.as_mut() else {
                // The run is not (or no longer) in flight here: what the store holds, once.
                return match self.catch_up().await {
                    Ok(()) if self.backlog.is_empty() => None,
                    Ok(()) => {
                        self.store = None;
                        continue;
                    }
                    Err(e) => Some(Err(e)),
                };
            };
            match receiver.recv().await {
                Ok(Live::Event(record)) if record.seq <= self.after => {}
                Ok(Live::Event(record)) if record.seq == self.after + 1 => {
                    self.after = record.seq;
                    return Some(Ok(Live::Event(record)));
                }
                Ok(Live::Event(record)) => {
                    // A gap: the run committed events before this subscription began.
                    if let Err(e) = self.catch_up().await {
                        return Some(Err(e));
                    }
                    if self.store.is_none() || self.backlog.is_empty() {
                        // No store to read from: hand out what is here.
                        self.backlog.push_back((*record).clone());
                    }
                }
                Ok(delta) => return Some(Ok(delta)),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.lags += 1;
                    if let Err(e) = self.catch_up().await {
                        return Some(Err(e));
                    }
                }
                Err(broadcast::error::RecvError::Closed) => {
                    self.receiver = None;
                }
            }
        }
    }

    /// Reads the events after the last one handed out from the store into the backlog.
    async fn catch_up(&mut self) -> Result<(), StoreError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let after = i64::try_from(self.after).unwrap_or(i64::MAX);
        for stored in store.events(self.job, after).await? {
            let record: EventRecord =
                serde_json::from_value(stored.payload).map_err(|e| StoreError::Corrupt {
                    what: format!("an event of job {}: {e}", self.job),
                })?;
            if record.seq > self.after {
                self.backlog.push_back(record);
            }
        }
        Ok(())
    }
}
