//! Keeping the leases of a worker's runs while they go on: one task for all of them, so that a
//! thousand runs cost two statements a tick rather than a thousand round trips.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use maestro_store::{Lease, LeaseKey, Store, StoreError};
use tokio::time::Instant;

use crate::store_log::StopLatch;

/// Keeps leases: every tick (a third of the lease, at most a second) it renews, in one
/// statement, the leases whose last renewal is a third of the lease old, and reads, in one
/// query, whether any other kept job was cancelled or taken over. A lost lease or a cancelled
/// job closes that run's stop latch, which stops the run: a cancel stops a run within about a
/// second, a lost lease within one heartbeat.
///
/// Cheap to clone. Its task starts with the first [`LeaseKeeper::keep`] and ends within a tick
/// of the last clone's drop.
#[derive(Debug, Clone)]
pub(crate) struct LeaseKeeper {
    inner: Arc<KeeperInner>,
}

#[derive(Debug)]
struct KeeperInner {
    store: Store,
    lease_for: Duration,
    /// By job and fencing token: a run that lost its lease may still be winding down when the
    /// same worker claims the job again.
    held: Mutex<HashMap<LeaseKey, Held>>,
    started: std::sync::Once,
}

#[derive(Debug)]
struct Held {
    lease: Lease,
    latch: Arc<StopLatch>,
    renewed_at: Instant,
}

/// One kept lease: dropping it stops keeping it.
#[derive(Debug)]
pub(crate) struct Kept {
    inner: Arc<KeeperInner>,
    key: LeaseKey,
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let Ok(mut held) = self.inner.held.lock() {
            held.remove(&self.key);
        }
    }
}

impl LeaseKeeper {
    pub(crate) fn new(store: Store, lease_for: Duration) -> LeaseKeeper {
        LeaseKeeper {
            inner: Arc::new(KeeperInner {
                store,
                lease_for,
                held: Mutex::new(HashMap::new()),
                started: std::sync::Once::new(),
            }),
        }
    }

    /// How long a claim holds.
    pub(crate) fn lease_for(&self) -> Duration {
        self.inner.lease_for
    }

    /// Keeps `lease` (just claimed) until the answer is dropped, closing `latch` when it is
    /// lost or the job is cancelled.
    pub(crate) fn keep(&self, lease: Lease, latch: Arc<StopLatch>) -> Kept {
        let key = lease.key();
        if let Ok(mut held) = self.inner.held.lock() {
            held.insert(
                key,
                Held {
                    lease,
                    latch,
                    renewed_at: Instant::now(),
                },
            );
        }
        self.inner.started.call_once(|| {
            tokio::spawn(keep_all(Arc::downgrade(&self.inner)));
        });
        Kept {
            inner: Arc::clone(&self.inner),
            key,
        }
    }
}

async fn keep_all(keeper: Weak<KeeperInner>) {
    let Some(lease_for) = keeper.upgrade().map(|k| k.lease_for) else {
        return;
    };
    let tick = (lease_for / 3).min(Duration::from_secs(1));
    let renew_every = lease_for / 3;
    let mut ticks = tokio::time::interval_at(Instant::now() + tick, tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(keeper) = keeper.upgrade() else {
            return;
        };
        keeper.tick(renew_every).await;
    }
}

impl KeeperInner {
    async fn tick(&self, renew_every: Duration) {
        // A tick that falls just short of a renewal renews now: the next one would be late.
        let due_by = Instant::now() + renew_every / 4;
        let (due, others): (Vec<Lease>, Vec<Lease>) = {
            let Ok(held) = self.held.lock() else {
                return;
            };
            let (due, others): (Vec<&Held>, Vec<&Held>) = held
                .values()
                .partition(|h| h.renewed_at + renew_every <= due_by);
            (
                due.into_iter().map(|h| h.lease.clone()).collect(),
                others.into_iter().map(|h| h.lease.clone()).collect(),
            )
        };
        if !due.is_empty() {
            let started = Instant::now();
            match self.store.renew_leases(&due, self.lease_for).await {
                Ok(answers) => {
                    for (lease, answer) in due.iter().zip(answers) {
                        match answer {
                            Ok(renewed) => self.renewed(renewed, started),
                            Err(e) => self.refused(lease, &e),
                        }
                    }
                }
                Err(e) => tracing::warn!(leases = due.len(), "renewing leases failed: {e}"),
            }
        }
        if !others.is_empty() {
            match self.store.check_leases(&others).await {
                Ok(refused) => {
                    for lease in &others {
                        if let Some(e) = refused.get(&lease.key()) {
                            self.refused(lease, e);
                        }
                    }
                }
                Err(e) => tracing::warn!(leases = others.len(), "reading leased jobs failed: {e}"),
            }
        }
    }

    fn renewed(&self, lease: Lease, at: Instant) {
        if let Ok(mut held) = self.held.lock()
            && let Some(h) = held.get_mut(&lease.key())
        {
            h.lease = lease;
            h.renewed_at = at;
        }
    }

    fn refused(&self, lease: &Lease, why: &StoreError) {
        match why {
            StoreError::LeaseLost { .. }
            | StoreError::JobCancelled(_)
            | StoreError::NoSuchJob(_) => {
                // Refused for good: it is not asked about again.
                let latch = self
                    .held
                    .lock()
                    .ok()
                    .and_then(|mut held| held.remove(&lease.key()))
                    .map(|h| h.latch);
                if let Some(latch) = latch {
                    latch.close(why.to_string());
                }
            }
            e => tracing::warn!(job = %lease.job_id, "keeping the lease failed: {e}"),
        }
    }
}
