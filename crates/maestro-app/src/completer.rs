//! Writing how runs ended, several at once: the runs of a worker that end while an earlier
//! write is under way are written together in one transaction ([`Store::finish_batch`]), each
//! fenced on its own lease, and each run learns whether its own write took effect before it
//! goes on.

use maestro_store::{JobQueue, Lease, Outcome, Store, StoreResult};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// The most finishes one transaction writes.
const MAX_BATCH: usize = 256;

/// One run's end, waiting to be written, and where its answer goes.
struct Finish {
    lease: Lease,
    outcome: Outcome,
    answer: oneshot::Sender<StoreResult<()>>,
}

/// Hands a run's end to the task that writes ends in batches. Cheap to clone; the task stops
/// once every clone is dropped and what was handed to it is written.
#[derive(Debug, Clone)]
pub(crate) struct Completer {
    store: Store,
    queue: mpsc::UnboundedSender<Finish>,
}

impl Completer {
    /// Starts the writing task on the current runtime.
    pub(crate) fn start(store: Store) -> (Completer, JoinHandle<()>) {
        let (queue, ready) = mpsc::unbounded_channel();
        let task = tokio::spawn(write_batches(store.clone(), ready));
        (Completer { store, queue }, task)
    }

    /// Ends (or parks) the run held by `lease`, as [`JobQueue::finish`] does, in a batch with
    /// the other runs that are ending now. Returns once the write is committed or refused.
    pub(crate) async fn finish(&self, lease: &Lease, outcome: Outcome) -> StoreResult<()> {
        let (answer, answered) = oneshot::channel();
        let finish = Finish {
            lease: lease.clone(),
            outcome: outcome.clone(),
            answer,
        };
        if self.queue.send(finish).is_err() {
            // The writing task is gone (it can only have panicked): write this end alone.
            return self.store.finish(lease, outcome).await;
        }
        match answered.await {
            Ok(answer) => answer,
            Err(_) => self.store.finish(lease, outcome).await,
        }
    }
}

/// Writes whatever ends are ready, in one transaction, until every [`Completer`] is dropped.
async fn write_batches(store: Store, mut ready: mpsc::UnboundedReceiver<Finish>) {
    let mut batch = Vec::new();
    while ready.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (finishes, answers): (Vec<_>, Vec<_>) = batch
            .drain(..)
            .map(|f| ((f.lease, f.outcome), f.answer))
            .unzip();
        match store.finish_batch(&finishes).await {
            Ok(written) => {
                for (answer, result) in answers.into_iter().zip(written) {
                    // A run that stopped waiting needs no answer.
                    let _ = answer.send(result);
                }
            }
            Err(e) => {
                // Nothing was written: each end is written alone, so that each run learns
                // its own answer.
                tracing::warn!(
                    "writing {} run ends together failed, writing them one by one: {e}",
                    finishes.len()
                );
                for ((lease, outcome), answer) in finishes.into_iter().zip(answers) {
                    let _ = answer.send(store.finish(&lease, outcome).await);
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use maestro_store::{Classes, JobStatus, NewJob, StoreError, StoreUrl};
    use pretty_assertions::assert_eq;
    use tokio::task::JoinSet;

    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ends_handed_over_at_once_are_each_fenced_on_their_own_lease() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::Sqlite {
            path: dir.path().join(".maestro/maestro.db"),
        };
        let store = Store::open(&url).await.unwrap();
        for i in 0..6 {
            store
                .submit(NewJob::new("default", format!("job {i}"), "alice"))
                .await
                .unwrap();
        }
        let claimed = store
            .claim_batch("w", &Classes::Any, LEASE, 6)
            .await
            .unwrap();
        // Another worker took job 2 over: this worker's end for it must change nothing.
        let stale = claimed[2].job.id;
        store
            .take_over_job(stale, "other", LEASE)
            .await
            .unwrap()
            .unwrap();

        let (completer, task) = Completer::start(store.clone());
        let mut runs = JoinSet::new();
        for (i, c) in claimed.iter().enumerate() {
            let completer = completer.clone();
            let lease = c.lease.clone();
            runs.spawn(async move {
                let outcome = Outcome {
                    status: JobStatus::Completed,
                    result: Some(serde_json::json!(i)),
                    reason: None,
                };
                let written = completer.finish(&lease, outcome).await;
                (
                    i,
                    matches!(written, Err(StoreError::LeaseLost { .. })),
                    written.is_ok(),
                )
            });
        }
        let mut answers = runs.join_all().await;
        answers.sort();
        let expected: Vec<_> = (0..6).map(|i| (i, i == 2, i != 2)).collect();
        assert_eq!(answers, expected);
        drop(completer);
        task.await.unwrap();

        let mut states = Vec::new();
        for c in &claimed {
            let job = store.job(c.job.id).await.unwrap().unwrap();
            states.push((job.status, job.lease_owner, job.result));
        }
        let expected: Vec<_> = (0..6)
            .map(|i| match i {
                2 => (JobStatus::Running, Some("other".to_string()), None),
                _ => (JobStatus::Completed, None, Some(serde_json::json!(i))),
            })
            .collect();
        assert_eq!(states, expected);
    }
}
