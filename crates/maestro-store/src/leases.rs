//! Keeping many leases at once: one statement renews the leases of a worker's runs, and one
//! query tells which of them were cancelled or taken, instead of a round trip per run.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use sqlx::Any;

use crate::clock::{duration_ms, from_ms};
use crate::error::{StoreError, StoreResult};
use crate::model::{JobStatus, Lease, LeaseKey};
use crate::rows::{col, parse_id};
use crate::store::{Marks, Store, pow2_chunks};

/// The most leases one statement carries; the statements go in chunks of a power of two leases
/// with plain `?` parameters on SQLite (see `ROWS_PER_INSERT` in events.rs).
const PER_STATEMENT: usize = 64;

impl Store {
    /// Renews every lease in `leases` for `lease_for` from now, as [`JobQueue::heartbeat`]
    /// does for one: each renewal is fenced on its own lease, so a lost lease or a cancelled
    /// job is refused alone. The answer has one entry per lease, in order: the renewed lease,
    /// or why it could not be ([`StoreError::LeaseLost`], [`StoreError::JobCancelled`],
    /// [`StoreError::NoSuchJob`]). The outer error means the store failed; some statements may
    /// have renewed their leases by then, which is harmless.
    ///
    /// [`JobQueue::heartbeat`]: crate::JobQueue::heartbeat
    pub async fn renew_leases(
        &self,
        leases: &[Lease],
        lease_for: Duration,
    ) -> StoreResult<Vec<StoreResult<Lease>>> {
        let now = self.now_ms();
        let expires = now.saturating_add(duration_ms(lease_for));
        let mut renewed = HashSet::with_capacity(leases.len());
        for chunk in pow2_chunks(leases, PER_STATEMENT) {
            let mut marks = Marks::new(self.backend);
            let values = marks.rows(chunk.len(), 2);
            let sql = format!(
                "WITH kept (job_id, held) AS (VALUES {values}) \
                 UPDATE jobs SET lease_expires_at = {}, updated_at = {} FROM kept \
                 WHERE jobs.id = kept.job_id AND jobs.fence = kept.held \
                   AND jobs.status = 'running' \
                 RETURNING id, fence",
                marks.mark(),
                marks.mark(),
            );
            let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
            for lease in chunk {
                query = query.bind(lease.job_id.to_string()).bind(lease.fence);
            }
            query = query.bind(expires).bind(now);
            for row in query
                .fetch_all(&self.pool)
                .await
                .map_err(StoreError::query("renew leases"))?
            {
                renewed.insert(LeaseKey {
                    job: parse_id(&col::<String>(&row, "id")?)?,
                    fence: col::<i64>(&row, "fence")?,
                });
            }
        }
        let refused: Vec<&Lease> = leases
            .iter()
            .filter(|lease| !renewed.contains(&lease.key()))
            .collect();
        let mut why = self.refusals(&refused).await?;
        Ok(leases
            .iter()
            .map(|lease| match why.remove(&lease.key()) {
                Some(e) => Err(e),
                None if renewed.contains(&lease.key()) => Ok(Lease {
                    expires_at: from_ms(expires),
                    ..lease.clone()
                }),
                // Renewed by nobody, refused for no reason: the job changed between the two
                // statements and is held again by this very lease, which cannot be.
                None => Err(StoreError::LeaseLost {
                    job: lease.job_id,
                    held: lease.fence,
                    current: lease.fence,
                    status: JobStatus::Running,
                }),
            })
            .collect())
    }

    /// Which of `leases` no longer hold, by job and fencing token (two leases on one job, an
    /// old claim winding down and a new one, are told apart), and why: the job was cancelled,
    /// another claim took it, it ended, or it is gone. A lease that still holds has no entry.
    /// One query per 64 leases; nothing is written.
    pub async fn check_leases(
        &self,
        leases: &[Lease],
    ) -> StoreResult<HashMap<LeaseKey, StoreError>> {
        let refs: Vec<&Lease> = leases.iter().collect();
        self.refusals(&refs).await
    }

    async fn refusals(&self, leases: &[&Lease]) -> StoreResult<HashMap<LeaseKey, StoreError>> {
        let mut now_held = HashMap::with_capacity(leases.len());
        for chunk in pow2_chunks(leases, PER_STATEMENT) {
            let sql = format!(
                "SELECT id, fence, status FROM jobs WHERE id IN ({})",
                Marks::new(self.backend).list(chunk.len())
            );
            let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
            for lease in chunk {
                query = query.bind(lease.job_id.to_string());
            }
            for row in query
                .fetch_all(&self.pool)
                .await
                .map_err(StoreError::query("read the fences of leased jobs"))?
            {
                let id = parse_id(&col::<String>(&row, "id")?)?;
                let status: JobStatus = col::<String>(&row, "status")?.parse()?;
                now_held.insert(id, (col::<i64>(&row, "fence")?, status));
            }
        }
        Ok(leases
            .iter()
            .filter_map(|lease| {
                let why = match now_held.get(&lease.job_id) {
                    None => StoreError::NoSuchJob(lease.job_id),
                    Some((_, JobStatus::Cancelled)) => StoreError::JobCancelled(lease.job_id),
                    Some((fence, JobStatus::Running)) if *fence == lease.fence => return None,
                    Some((fence, status)) => StoreError::LeaseLost {
                        job: lease.job_id,
                        held: lease.fence,
                        current: *fence,
                        status: *status,
                    },
                };
                Some((lease.key(), why))
            })
            .collect())
    }
}
