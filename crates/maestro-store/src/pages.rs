//! Jobs a page at a time, newest first, for the server's listings.

use sqlx::Any;

use crate::error::{StoreError, StoreResult};
use crate::jobs::{JOB_COLUMNS, job_from_row};
use crate::model::{Job, JobId, JobStatus};
use crate::store::Store;

/// Which jobs a page holds. Every field narrows the listing; the default lists every job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only jobs in this status.
    pub status: Option<JobStatus>,
    /// Only jobs submitted with this piece (as submitted: a name or `auto`).
    pub piece: Option<String>,
    /// Only the children of this job.
    pub parent: Option<JobId>,
    /// Only the jobs of this owner (an email).
    pub owner: Option<String>,
}

impl Store {
    /// Up to `limit` jobs that match `filter`, newest first, starting after the job `before`
    /// (the last id of the previous page: ids are UUIDv7, so they sort by submission time).
    pub async fn jobs_page(
        &self,
        filter: &JobFilter,
        before: Option<JobId>,
        limit: u32,
    ) -> StoreResult<Vec<Job>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs \
             WHERE ($1 = '' OR status = $1) AND ($2 = '' OR piece = $2) \
             AND ($3 = '' OR parent_id = $3) AND ($4 = '' OR id < $4) \
             AND ($6 = '' OR owner = $6) \
             ORDER BY id DESC LIMIT $5"
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(
                filter
                    .status
                    .map(JobStatus::as_str)
                    .unwrap_or("")
                    .to_string(),
            )
            .bind(filter.piece.clone().unwrap_or_default())
            .bind(filter.parent.map(|p| p.to_string()).unwrap_or_default())
            .bind(before.map(|b| b.to_string()).unwrap_or_default())
            .bind(i64::from(limit))
            .bind(filter.owner.clone().unwrap_or_default())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list a page of jobs"))?
            .iter()
            .map(job_from_row)
            .collect()
    }

    /// How many jobs are in each status (statuses with none are left out).
    pub async fn job_counts(&self) -> StoreResult<Vec<(JobStatus, i64)>> {
        let rows = sqlx::query_as::<Any, (String, i64)>(
            "SELECT status, COUNT(*) FROM jobs GROUP BY status",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("count jobs by status"))?;
        rows.into_iter()
            .map(|(status, n)| Ok((status.parse()?, n)))
            .collect()
    }
}
