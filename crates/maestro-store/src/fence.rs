//! Fenced writes: the condition every write under a lease carries, and why such a write
//! matched no row.

use sqlx::Any;

use crate::error::{StoreError, StoreResult};
use crate::model::{JobStatus, Lease};
use crate::rows::col;
use crate::store::Store;

/// The condition every fenced write carries: the lease's token is the job's newest and the
/// job is still running.
pub(crate) const FENCED: &str = "id = $1 AND fence = $2 AND status = 'running'";

impl Store {
    /// Why a fenced write matched no row: the job is gone, cancelled, or owned by a newer claim.
    pub(crate) async fn lease_error(&self, lease: &Lease) -> StoreError {
        self.lease_error_in(&self.pool, lease).await
    }

    /// [`Store::lease_error`], read through `executor` (inside a transaction, say).
    pub(crate) async fn lease_error_in<'e>(
        &self,
        executor: impl sqlx::Executor<'e, Database = Any>,
        lease: &Lease,
    ) -> StoreError {
        let row = sqlx::query::<Any>("SELECT fence, status FROM jobs WHERE id = $1")
            .bind(lease.job_id.to_string())
            .fetch_optional(executor)
            .await;
        let row = match row {
            Ok(Some(row)) => row,
            Ok(None) => return StoreError::NoSuchJob(lease.job_id),
            Err(source) => {
                return StoreError::Query {
                    context: "read a job's fence",
                    source,
                };
            }
        };
        let status = col::<String>(&row, "status")
            .and_then(|s| s.parse::<JobStatus>().map_err(StoreError::from));
        let current = col::<i64>(&row, "fence");
        match (status, current) {
            (Ok(JobStatus::Cancelled), _) => StoreError::JobCancelled(lease.job_id),
            (Ok(status), Ok(current)) => StoreError::LeaseLost {
                job: lease.job_id,
                held: lease.fence,
                current,
                status,
            },
            (Err(e), _) | (_, Err(e)) => e,
        }
    }

    /// Runs a fenced UPDATE (parameters $1 = job id, $2 = fence, then `extra`); a write that
    /// matched no row becomes the lease error.
    pub(crate) async fn fenced_update(
        &self,
        lease: &Lease,
        set: &str,
        extra: &[Option<String>],
        ints: &[i64],
        context: &'static str,
    ) -> StoreResult<()> {
        let sql = format!("UPDATE jobs SET {set} WHERE {FENCED}");
        let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(lease.job_id.to_string())
            .bind(lease.fence);
        for text in extra {
            query = query.bind(text.clone());
        }
        for int in ints {
            query = query.bind(*int);
        }
        let done = query
            .execute(&self.pool)
            .await
            .map_err(StoreError::query(context))?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(self.lease_error(lease).await)
        }
    }
}
