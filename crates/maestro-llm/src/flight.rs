//! Work that one caller does while the others wait for it together: asking an endpoint for a
//! model's context length or for its models, and, in `maestro-app`, checking the store's
//! configuration overlay and building the tools its runs share.
//!
//! A `tokio` mutex alone would do it, but it hands the lock to its waiters one at a time, each
//! hand-over a wake-up behind whatever else the runtime has queued. A thousand runs starting at
//! once then pass through it in turn, long after the work they waited for was done. Here the
//! callers that find the work under way wait on a [`Notify`] instead, and are all woken
//! together when its holder lets go, however it lets go (finished, failed, or dropped
//! half-way); each then looks again.

use std::ops::{Deref, DerefMut};

use tokio::sync::{Mutex, MutexGuard, Notify};

/// A lock whose waiters are woken together.
#[derive(Debug, Default)]
pub struct Flight<T> {
    lock: Mutex<T>,
    released: Notify,
}

/// The lock, held by the caller doing the work. Dropping it releases the lock, then wakes
/// everyone who waited.
#[derive(Debug)]
pub struct Leading<'a, T> {
    // Fields are dropped in order: the lock first, since a caller woken before it is free
    // would find it held, and wait again for a wake-up that has already been given.
    guard: MutexGuard<'a, T>,
    _wake: Wake<'a>,
}

/// What [`Flight::lead_unless`] gives a caller.
#[derive(Debug)]
pub enum Turn<'a, T, R> {
    /// What the caller needed, found without doing the work.
    Done(R),
    /// The lock: the caller does the work.
    Lead(Leading<'a, T>),
}

/// Wakes everyone waiting on a [`Notify`] when dropped.
#[derive(Debug)]
struct Wake<'a>(&'a Notify);

impl Drop for Wake<'_> {
    fn drop(&mut self) {
        self.0.notify_waiters();
    }
}

impl<T> Flight<T> {
    /// A flight over `value`.
    pub fn new(value: T) -> Flight<T> {
        Flight {
            lock: Mutex::new(value),
            released: Notify::new(),
        }
    }

    /// The lock for a caller that must do the work, or `None` once `settled` says there is
    /// nothing left to do. `settled` is asked first without the lock (`None`), then with it:
    /// while another caller holds the lock, this one waits until it lets go, then asks again.
    pub async fn lead(
        &self,
        mut settled: impl FnMut(Option<&T>) -> bool,
    ) -> Option<Leading<'_, T>> {
        match self.lead_unless(|held| settled(held).then_some(())).await {
            Turn::Done(()) => None,
            Turn::Lead(leading) => Some(leading),
        }
    }

    /// [`Flight::lead`] for a caller that finds what it needs (a kept answer) rather than
    /// only learning that it is there: what `found` finds, or the lock to do the work.
    pub async fn lead_unless<R>(
        &self,
        mut found: impl FnMut(Option<&T>) -> Option<R>,
    ) -> Turn<'_, T, R> {
        loop {
            // Registered before looking, so that a release after the look still wakes us.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Some(done) = found(None) {
                return Turn::Done(done);
            }
            match self.lock.try_lock() {
                Ok(guard) => {
                    let leading = Leading {
                        guard,
                        _wake: Wake(&self.released),
                    };
                    return match found(Some(&*leading)) {
                        Some(done) => Turn::Done(done),
                        None => Turn::Lead(leading),
                    };
                }
                Err(_) => released.await,
            }
        }
    }

    /// The lock, waited for in turn: for a caller that needs work done after it asked, not
    /// work already under way.
    pub async fn lock(&self) -> Leading<'_, T> {
        Leading {
            guard: self.lock.lock().await,
            _wake: Wake(&self.released),
        }
    }
}

impl<T> Deref for Leading<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for Leading<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_that_find_the_work_under_way_wait_for_it_without_taking_the_lock() {
        let flight = Arc::new(Flight::new(()));
        let done = Arc::new(AtomicBool::new(false));
        let locked = Arc::new(AtomicUsize::new(0));
        let leader = flight.lead(|_| done.load(Ordering::SeqCst)).await.unwrap();
        let waiters: Vec<_> = (0..200)
            .map(|_| {
                let (flight, done, locked) = (flight.clone(), done.clone(), locked.clone());
                tokio::spawn(async move {
                    let led = flight
                        .lead(|held| {
                            if held.is_some() {
                                locked.fetch_add(1, Ordering::SeqCst);
                            }
                            done.load(Ordering::SeqCst)
                        })
                        .await;
                    led.is_some()
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        done.store(true, Ordering::SeqCst);
        drop(leader);
        for waiter in waiters {
            assert!(!waiter.await.unwrap(), "a waiter did the work again");
        }
        // With a plain queue on the lock, every waiter would have been handed it in turn.
        assert_eq!(locked.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leader_dropped_half_way_wakes_the_waiters_and_one_of_them_leads() {
        let flight = Arc::new(Flight::new(0u32));
        let leader = flight.lead(|_| false).await.unwrap();
        let waiters: Vec<_> = (0..20)
            .map(|_| {
                let flight = flight.clone();
                tokio::spawn(async move {
                    // Settled once someone has done the work.
                    match flight.lead(|n| n.is_some_and(|n| *n > 0)).await {
                        Some(mut n) => {
                            *n += 1;
                            true
                        }
                        None => false,
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(leader); // gave up without doing the work
        let mut led = 0;
        for waiter in waiters {
            let waited = tokio::time::timeout(Duration::from_secs(10), waiter).await;
            led += usize::from(waited.expect("a waiter was never woken").unwrap());
        }
        assert_eq!(led, 1);
        assert_eq!(*flight.lock().await, 1);
    }
}
