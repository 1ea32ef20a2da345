//! Finishing runs: one transaction ends (or parks) several jobs, each fenced on its own lease,
//! and says per job whether its write took effect.

use std::collections::HashSet;

use sqlx::{Any, AnyConnection};

use crate::error::{StoreError, StoreResult};
use crate::model::{JobId, JobStatus, Lease, Outcome};
use crate::rows::{col, parse_id};
use crate::store::{Backend, Marks, Store};

/// The most finishes one statement carries (six parameters each); a longer batch is several
/// statements in the same transaction. Its parameters are plain `?`s on SQLite (see
/// [`Marks`]).
const PER_STATEMENT: usize = 50;

/// Whether finishing as `status` ends the job (`true`) or parks it (`false`); `queued` and
/// `running` are not a run's end.
fn ends_job(lease: &Lease, status: JobStatus) -> StoreResult<bool> {
    match status {
        // A run that ended `failed` (not an infrastructure failure, which goes through
        // `fail`) or was stopped by its own user (`cancelled`) ends the job so.
        JobStatus::Completed
        | JobStatus::Aborted
        | JobStatus::Exceeded
        | JobStatus::Failed
        | JobStatus::Cancelled => Ok(true),
        JobStatus::WaitingInput | JobStatus::WaitingSubtasks => Ok(false),
        status @ (JobStatus::Queued | JobStatus::Running) => Err(StoreError::InvalidTransition {
            job: lease.job_id,
            action: "finish a run as",
            status,
        }),
    }
}

/// One finish, ready to bind.
struct Row<'a> {
    /// Its place in the caller's batch.
    at: usize,
    lease: &'a Lease,
    status: &'static str,
    result: Option<String>,
    reason: Option<String>,
    ends: bool,
}

impl Store {
    /// Ends (or parks) several runs in one transaction: what [`JobQueue::finish`] does for one
    /// lease, for each of `finishes`. Each job's write is fenced on its own lease (job id and
    /// fencing token, and the job still `running`), so a worker that lost one lease changes
    /// nothing for that job while the others finish. The answer has one entry per finish, in
    /// order: `Ok(())` when the write took effect, otherwise why not
    /// ([`StoreError::LeaseLost`], [`StoreError::JobCancelled`],
    /// [`StoreError::InvalidTransition`], …), exactly as [`JobQueue::finish`] would say. The
    /// outer error means the transaction failed and nothing was written.
    ///
    /// [`JobQueue::finish`]: crate::JobQueue::finish
    pub async fn finish_batch(
        &self,
        finishes: &[(Lease, Outcome)],
    ) -> StoreResult<Vec<StoreResult<()>>> {
        let mut answers: Vec<Option<StoreResult<()>>> = Vec::with_capacity(finishes.len());
        let mut rows = Vec::with_capacity(finishes.len());
        for (at, (lease, outcome)) in finishes.iter().enumerate() {
            match ends_job(lease, outcome.status) {
                Ok(ends) => {
                    answers.push(None);
                    rows.push(Row {
                        at,
                        lease,
                        status: outcome.status.as_str(),
                        result: outcome.result.as_ref().map(|r| r.to_string()),
                        reason: outcome.reason.clone(),
                        ends,
                    });
                }
                Err(e) => answers.push(Some(Err(e))),
            }
        }
        if !rows.is_empty() {
            let now = self.now_ms();
            let statements = statements(&rows);
            // Per statement, the jobs it changed.
            let mut written = Vec::with_capacity(statements.len());
            if let ([statement], Backend::Postgres) = (statements.as_slice(), self.backend) {
                // One statement is atomic by itself: PostgreSQL saves the BEGIN and COMMIT
                // round trips. (SQLite keeps `BEGIN IMMEDIATE`, so that the write lock is
                // waited for rather than refused.)
                let mut conn = self
                    .pool
                    .acquire()
                    .await
                    .map_err(StoreError::query("finish jobs"))?;
                written.push(finish_rows(&mut conn, self.backend, statement, now).await?);
            } else {
                let mut tx = self.begin_write().await?;
                for statement in &statements {
                    written.push(finish_rows(&mut tx, self.backend, statement, now).await?);
                }
                tx.commit()
                    .await
                    .map_err(StoreError::query("commit finished jobs"))?;
            }
            // The parents to look at: a park for subtasks that all ended already, and the
            // parent of each child that ended (it goes back to the queue when it waits for no
            // other open child).
            let mut wake = Vec::new();
            for (statement, changed) in statements.iter().zip(written) {
                for row in statement.iter() {
                    let Some((_, parent)) = changed.iter().find(|(id, _)| *id == row.lease.job_id)
                    else {
                        continue;
                    };
                    answers[row.at] = Some(Ok(()));
                    self.changed_job(row.lease.job_id);
                    if row.status == JobStatus::WaitingSubtasks.as_str() {
                        wake.push(row.lease.job_id);
                    } else if let (true, Some(parent)) = (row.ends, parent) {
                        wake.push(*parent);
                    }
                }
            }
            wake.sort();
            wake.dedup();
            for parent in wake {
                self.wake_parent(parent).await?;
            }
        }
        let mut out = Vec::with_capacity(answers.len());
        for (answer, (lease, _)) in answers.into_iter().zip(finishes) {
            out.push(match answer {
                Some(answer) => answer,
                // Rare: a lost lease or a cancel. Read why, as a single finish does.
                None => Err(self.lease_error(lease).await),
            });
        }
        Ok(out)
    }
}

/// One statement: the fenced UPDATE of every row, joined to their values; the ids of the jobs
/// it changed, with their parents.
async fn finish_rows(
    conn: &mut AnyConnection,
    backend: Backend,
    rows: &[&Row<'_>],
    now: i64,
) -> StoreResult<Vec<(JobId, Option<JobId>)>> {
    let mut marks = Marks::new(backend);
    let values = marks.rows(rows.len(), 6);
    // The fence is checked per row: a stale lease matches no row of `jobs`, and only its
    // own job is left out.
    let sql = format!(
        "WITH finished (job_id, held, new_status, new_result, new_reason, ends) AS \
               (VALUES {values}) \
             UPDATE jobs SET status = finished.new_status, result = finished.new_result, \
               reason = finished.new_reason, lease_owner = NULL, lease_expires_at = NULL, \
               updated_at = {}, finished_at = NULLIF(finished.ends, 0) \
             FROM finished \
             WHERE jobs.id = finished.job_id AND jobs.fence = finished.held \
               AND jobs.status = 'running' \
             RETURNING id, parent_id",
        marks.mark()
    );
    let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
    for row in rows {
        query = query
            .bind(row.lease.job_id.to_string())
            .bind(row.lease.fence)
            .bind(row.status.to_string())
            .bind(row.result.clone())
            .bind(row.reason.clone())
            .bind(if row.ends { now } else { 0 });
    }
    query = query.bind(now);
    query
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::query("finish jobs"))?
        .iter()
        .map(|row| {
            let parent = col::<Option<String>>(row, "parent_id")?
                .as_deref()
                .map(parse_id)
                .transpose()?;
            Ok((parse_id(&col::<String>(row, "id")?)?, parent))
        })
        .collect()
}

/// Splits the rows into statements of at most [`PER_STATEMENT`], none naming a job twice (a
/// second finish of the same job goes to a later statement, where the first one's write fences
/// it out, as if the two were sent one after the other).
fn statements<'r, 'a>(rows: &'r [Row<'a>]) -> Vec<Vec<&'r Row<'a>>> {
    let mut statements: Vec<(HashSet<JobId>, Vec<&Row>)> = Vec::new();
    for row in rows {
        let free = statements
            .iter_mut()
            .find(|(ids, rows)| rows.len() < PER_STATEMENT && !ids.contains(&row.lease.job_id));
        match free {
            Some((ids, rows)) => {
                ids.insert(row.lease.job_id);
                rows.push(row);
            }
            None => statements.push((HashSet::from([row.lease.job_id]), vec![row])),
        }
    }
    statements.into_iter().map(|(_, rows)| rows).collect()
}
