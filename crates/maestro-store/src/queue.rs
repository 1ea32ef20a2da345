//! The job queue as the engine and the workers see it: no SQL, only jobs, leases and events.

use std::future::Future;
use std::time::Duration;

use crate::error::StoreResult;
use crate::model::{
    Claimed, Classes, FailDisposition, Job, JobId, JobStatus, Lease, NewEvent, NewJob, Outcome,
    StoredEvent,
};

/// A durable job queue with fenced leases.
///
/// What an implementation promises:
/// - **One owner.** A job is claimed by at most one worker at a time; every claim increments the
///   job's fencing token ([`Lease::fence`]) and its attempt count.
/// - **Fenced writes.** Every write made under a lease (heartbeat, events, outcome, failure,
///   release) happens only if the lease's token is still the job's newest and the job is still
///   `running`; otherwise nothing is written and the call returns
///   [`StoreError::LeaseLost`](crate::StoreError::LeaseLost) (or
///   [`StoreError::JobCancelled`](crate::StoreError::JobCancelled)). A slow worker and the one
///   that took its job over can therefore never both write.
/// - **Rescue.** A `running` job whose lease expired goes back to the queue (within a second: the
///   sweep that claims run), to be claimed again by any worker; if it has used up `max_attempts`
///   it ends `failed` instead.
/// - **Events are a gapless, duplicate-free stream per job.** `(job, seq)` is unique, so an
///   append that a replay repeats fails with
///   [`StoreError::EventExists`](crate::StoreError::EventExists) rather than duplicating, and a
///   batch is appended whole or not at all.
pub trait JobQueue: Send + Sync {
    /// Adds a `queued` job and records who submitted it.
    fn submit(&self, job: NewJob) -> impl Future<Output = StoreResult<JobId>> + Send;

    /// Claims the next job for `worker`: the highest priority, then the oldest, among the jobs
    /// of `classes` that are queued and due (jobs whose lease expired among them, once the sweep
    /// has put them back). `None` when there is nothing to do.
    fn claim(
        &self,
        worker: &str,
        classes: &Classes,
        lease_for: Duration,
    ) -> impl Future<Output = StoreResult<Option<Claimed>>> + Send;

    /// Extends the lease to `lease_for` from now; returns the renewed lease.
    fn heartbeat(
        &self,
        lease: &Lease,
        lease_for: Duration,
    ) -> impl Future<Output = StoreResult<Lease>> + Send;

    /// Appends events to the job's stream, all or none.
    fn append_events(
        &self,
        lease: &Lease,
        events: &[NewEvent],
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Ends (or parks) the run: `completed`, `aborted`, `exceeded`, `waiting_input` or
    /// `waiting_subtasks`. Releases the lease.
    fn finish(
        &self,
        lease: &Lease,
        outcome: Outcome,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Reports an infrastructure failure (endpoint unreachable after retries, …): the job is
    /// queued again after a backoff, or ends `failed` with `reason` once its attempts are used
    /// up.
    fn fail(
        &self,
        lease: &Lease,
        reason: &str,
    ) -> impl Future<Output = StoreResult<FailDisposition>> + Send;

    /// Hands the job back without counting the attempt (a worker shutting down).
    fn release(&self, lease: &Lease) -> impl Future<Output = StoreResult<()>> + Send;

    /// Cancels the job and every descendant that has not ended; returns the ids cancelled.
    fn cancel(
        &self,
        id: JobId,
        actor: &str,
    ) -> impl Future<Output = StoreResult<Vec<JobId>>> + Send;

    /// One job.
    fn job(&self, id: JobId) -> impl Future<Output = StoreResult<Option<Job>>> + Send;

    /// Jobs, oldest first, optionally only those in one status.
    fn jobs(&self, status: Option<JobStatus>)
    -> impl Future<Output = StoreResult<Vec<Job>>> + Send;

    /// The job's events with `seq > after`, in order.
    fn events(
        &self,
        id: JobId,
        after: i64,
    ) -> impl Future<Output = StoreResult<Vec<StoredEvent>>> + Send;
}
