//! Keeping a claimed job's lease while its run goes on.

use std::sync::Arc;
use std::time::Duration;

use maestro_store::{JobQueue, JobStatus, Lease, Store, StoreError};
use tokio_util::sync::CancellationToken;

use crate::store_log::Fence;

/// Keeps the lease: a heartbeat every third of it, and a look at the job's status every second
/// (so that a cancel stops the run within about a second). A lost lease or a cancelled job
/// closes the fence, which stops the run.
pub(crate) async fn keep_lease(
    store: Store,
    mut lease: Lease,
    lease_for: Duration,
    fence: Arc<Fence>,
    done: CancellationToken,
) {
    let tick = (lease_for / 3).min(Duration::from_secs(1));
    let beat_every = lease_for / 3;
    let mut last_beat = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            _ = fence.stop_run.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        if last_beat.elapsed() >= beat_every {
            match store.heartbeat(&lease, lease_for).await {
                Ok(renewed) => {
                    lease = renewed;
                    last_beat = tokio::time::Instant::now();
                }
                Err(e @ (StoreError::LeaseLost { .. } | StoreError::JobCancelled(_))) => {
                    fence.close(e.to_string());
                    return;
                }
                Err(e) => tracing::warn!(job = %lease.job_id, "renewing the lease failed: {e}"),
            }
        } else {
            match store.job(lease.job_id).await {
                Ok(Some(job)) if job.status == JobStatus::Cancelled => {
                    fence.close(format!("job {} was cancelled", job.id));
                    return;
                }
                Ok(Some(job)) if job.fence != lease.fence => {
                    fence.close(format!(
                        "lease lost on job {}: fencing token {} is now {}",
                        job.id, lease.fence, job.fence
                    ));
                    return;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(job = %lease.job_id, "reading the job failed: {e}"),
            }
        }
    }
}
