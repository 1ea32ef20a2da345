//! The job queue on SQL: submit, claim, fenced writes, rescue, cancel.

use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::{Any, Executor};

use crate::clock::{duration_ms, from_ms};
use crate::error::{StoreError, StoreResult};
use crate::model::{
    AuditAction, Claimed, Classes, FailDisposition, Job, JobId, JobStatus, Lease, NewEvent, NewJob,
    Outcome, StoredEvent,
};
use crate::queue::JobQueue;
use crate::rows::{col, parse_id, parse_json};
use crate::store::{Store, WriteTx};

pub(crate) const JOB_COLUMNS: &str = "id, piece, task, status, parent_id, priority, task_class, \
    workspace, submitted_by, attempts, max_attempts, fence, lease_owner, lease_expires_at, run_at, \
    result, reason, created_at, updated_at, schedule_id, scheduled_for, depth, title, child_index, \
    owner, piece_version, budget_max_tokens, budget_max_micro_usd";

/// How often a store sweeps the jobs whose worker vanished (their lease lapsed): those with
/// attempts left go back to the queue, the others end `failed`. The claim itself reads only
/// queued jobs, down one index in claim order; a lapsed job waits for the next sweep (at most
/// this long after a claim finds it due) rather than making every claim look for it.
const SWEEP_EVERY_MS: i64 = 1_000;

/// Why a job's worker vanished, written when a rescue finds its attempts used up.
const LOST_WORKER: &str = "the worker running this job stopped renewing its lease (it crashed or \
    hung) and the job has used all of its attempts";

pub(crate) fn job_from_row(row: &AnyRow) -> StoreResult<Job> {
    let status: String = col(row, "status")?;
    let result: Option<String> = col(row, "result")?;
    Ok(Job {
        id: parse_id(&col::<String>(row, "id")?)?,
        piece: col(row, "piece")?,
        task: col(row, "task")?,
        status: status.parse()?,
        parent_id: col::<Option<String>>(row, "parent_id")?
            .as_deref()
            .map(parse_id)
            .transpose()?,
        priority: col(row, "priority")?,
        task_class: col(row, "task_class")?,
        workspace: col(row, "workspace")?,
        submitted_by: col(row, "submitted_by")?,
        attempts: col(row, "attempts")?,
        max_attempts: col(row, "max_attempts")?,
        fence: col(row, "fence")?,
        lease_owner: col(row, "lease_owner")?,
        lease_expires_at: col::<Option<i64>>(row, "lease_expires_at")?.map(from_ms),
        run_at: from_ms(col(row, "run_at")?),
        result: result
            .as_deref()
            .map(|r| parse_json(r, "job result"))
            .transpose()?,
        reason: col(row, "reason")?,
        created_at: from_ms(col(row, "created_at")?),
        updated_at: from_ms(col(row, "updated_at")?),
        schedule_id: col(row, "schedule_id")?,
        scheduled_for: col::<Option<i64>>(row, "scheduled_for")?.map(from_ms),
        depth: col(row, "depth")?,
        title: col(row, "title")?,
        child_index: col(row, "child_index")?,
        owner: col(row, "owner")?,
        piece_version: col(row, "piece_version")?,
        budget: crate::budgets::BudgetLimits {
            max_tokens: col::<Option<i64>>(row, "budget_max_tokens")?.map(crate::budgets::unsigned),
            max_micro_usd: col::<Option<i64>>(row, "budget_max_micro_usd")?
                .map(crate::budgets::unsigned),
        },
    })
}

fn event_from_row(row: &AnyRow) -> StoreResult<StoredEvent> {
    Ok(StoredEvent {
        job_id: parse_id(&col::<String>(row, "job_id")?)?,
        seq: col(row, "seq")?,
        fence: col(row, "fence")?,
        kind: col(row, "kind")?,
        payload: parse_json(&col::<String>(row, "payload")?, "event payload")?,
        created_at: from_ms(col(row, "created_at")?),
    })
}

impl Store {
    /// Inserts a job inside `tx` (shared by submit, spawns and the scheduler's slot firing). A
    /// job fired by a schedule belongs to the schedule's owner.
    pub(crate) async fn insert_job(
        &self,
        tx: &mut WriteTx,
        job: &NewJob,
        schedule: Option<(&str, i64)>,
    ) -> StoreResult<JobId> {
        let id = JobId::new();
        let now = self.now_ms();
        let run_at = job.run_at.map(crate::clock::to_ms).unwrap_or(now);
        sqlx::query::<Any>(
            "INSERT INTO jobs (id, piece, task, status, parent_id, priority, task_class, workspace, \
             submitted_by, max_attempts, run_at, created_at, updated_at, schedule_id, scheduled_for, \
             owner, budget_max_tokens, budget_max_micro_usd) VALUES ($1, $2, $3, 'queued', $4, $5, \
             $6, $7, $8, $9, $10, $11, $11, $12, $13, \
             COALESCE((SELECT owner FROM schedules WHERE id = $12), $14), $15, $16)",
        )
        .bind(id.to_string())
        .bind(job.piece.clone())
        .bind(job.task.clone())
        .bind(job.parent_id.map(|p| p.to_string()))
        .bind(job.priority)
        .bind(job.task_class.clone())
        .bind(job.workspace.clone())
        .bind(job.submitted_by.clone())
        .bind(job.max_attempts.max(1))
        .bind(run_at)
        .bind(now)
        .bind(schedule.map(|(s, _)| s.to_string()))
        .bind(schedule.map(|(_, slot)| slot))
        .bind(job.owner.clone())
        .bind(job.budget.max_tokens.map(crate::budgets::amount))
        .bind(job.budget.max_micro_usd.map(crate::budgets::amount))
        .execute(&mut **tx)
        .await
        .map_err(StoreError::query("insert a job"))?;
        self.audit_in(
            tx,
            &job.submitted_by,
            AuditAction::Submit,
            Some(id),
            None,
            None,
        )
        .await?;
        Ok(id)
    }
}

impl JobQueue for Store {
    async fn submit(&self, job: NewJob) -> StoreResult<JobId> {
        let mut tx = self.begin_write().await?;
        let id = self.insert_job(&mut tx, &job, None).await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a submit"))?;
        Ok(id)
    }

    async fn claim(
        &self,
        worker: &str,
        classes: &Classes,
        lease_for: Duration,
    ) -> StoreResult<Option<Claimed>> {
        Ok(self
            .claim_batch(worker, classes, lease_for, 1)
            .await?
            .into_iter()
            .next())
    }

    async fn heartbeat(&self, lease: &Lease, lease_for: Duration) -> StoreResult<Lease> {
        let now = self.now_ms();
        let expires = now.saturating_add(duration_ms(lease_for));
        self.fenced_update(
            lease,
            "lease_expires_at = $3, updated_at = $4",
            &[],
            &[expires, now],
            "renew a lease",
        )
        .await?;
        Ok(Lease {
            expires_at: from_ms(expires),
            ..lease.clone()
        })
    }

    async fn append_events(&self, lease: &Lease, events: &[NewEvent]) -> StoreResult<()> {
        self.append_alone(lease, events).await
    }

    async fn finish(&self, lease: &Lease, outcome: Outcome) -> StoreResult<()> {
        // A batch of one: one answer, for this lease.
        match self.finish_batch(&[(lease.clone(), outcome)]).await?.pop() {
            Some(answer) => answer,
            None => Err(self.lease_error(lease).await),
        }
    }

    async fn fail(&self, lease: &Lease, reason: &str) -> StoreResult<FailDisposition> {
        let now = self.now_ms();
        let job = self
            .job(lease.job_id)
            .await?
            .ok_or(StoreError::NoSuchJob(lease.job_id))?;
        if job.attempts < job.max_attempts {
            let run_at = now.saturating_add(duration_ms(self.backoff.delay(job.attempts)));
            self.fenced_update(
                lease,
                "status = 'queued', reason = $3, lease_owner = NULL, lease_expires_at = NULL, \
                 run_at = $4, updated_at = $5",
                &[Some(reason.to_string())],
                &[run_at, now],
                "requeue a failed job",
            )
            .await?;
            self.changed_job(lease.job_id);
            Ok(FailDisposition::Requeued {
                run_at: from_ms(run_at),
            })
        } else {
            self.fenced_update(
                lease,
                "status = 'failed', reason = $3, lease_owner = NULL, lease_expires_at = NULL, \
                 updated_at = $4, finished_at = $4",
                &[Some(reason.to_string())],
                &[now],
                "fail a job",
            )
            .await?;
            self.changed_job(lease.job_id);
            if let Some(parent) = job.parent_id {
                self.wake_parent(parent).await?;
            }
            Ok(FailDisposition::Failed)
        }
    }

    async fn release(&self, lease: &Lease) -> StoreResult<()> {
        let now = self.now_ms();
        self.fenced_update(
            lease,
            "status = 'queued', attempts = attempts - 1, lease_owner = NULL, \
             lease_expires_at = NULL, run_at = $3, updated_at = $3",
            &[],
            &[now],
            "hand a job back",
        )
        .await?;
        self.changed_job(lease.job_id);
        Ok(())
    }

    async fn cancel(&self, id: JobId, actor: &str) -> StoreResult<Vec<JobId>> {
        let job = self.job(id).await?.ok_or(StoreError::NoSuchJob(id))?;
        if job.status.is_final() {
            return Err(StoreError::InvalidTransition {
                job: id,
                action: "cancel",
                status: job.status,
            });
        }
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        let rows = sqlx::query::<Any>(
            "WITH RECURSIVE tree (id) AS ( \
               SELECT id FROM jobs WHERE id = $1 \
               UNION ALL SELECT jobs.id FROM jobs JOIN tree ON jobs.parent_id = tree.id) \
             UPDATE jobs SET status = 'cancelled', reason = $2, lease_owner = NULL, \
               lease_expires_at = NULL, updated_at = $3, finished_at = $3 \
             WHERE id IN (SELECT id FROM tree) \
               AND status IN ('queued', 'running', 'waiting_input', 'waiting_subtasks') \
             RETURNING id",
        )
        .bind(id.to_string())
        .bind(format!("cancelled by {actor}"))
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::query("cancel a job"))?;
        let mut cancelled = rows
            .iter()
            .map(|row| parse_id(&col::<String>(row, "id")?))
            .collect::<StoreResult<Vec<JobId>>>()?;
        cancelled.sort();
        self.audit_in(&mut tx, actor, AuditAction::Cancel, Some(id), None, None)
            .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a cancel"))?;
        for job in &cancelled {
            self.changed_job(*job);
        }
        // A subtask cancelled on its own: its parent may have been waiting for it alone.
        if let Some(parent) = job.parent_id {
            self.wake_parent(parent).await?;
        }
        Ok(cancelled)
    }

    async fn job(&self, id: JobId) -> StoreResult<Option<Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("read a job"))?
            .as_ref()
            .map(job_from_row)
            .transpose()
    }

    async fn jobs(&self, status: Option<JobStatus>) -> StoreResult<Vec<Job>> {
        let sql =
            format!("SELECT {JOB_COLUMNS} FROM jobs WHERE ($1 = '' OR status = $1) ORDER BY id");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(status.map(JobStatus::as_str).unwrap_or("").to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list jobs"))?
            .iter()
            .map(job_from_row)
            .collect()
    }

    async fn events(&self, id: JobId, after: i64) -> StoreResult<Vec<StoredEvent>> {
        sqlx::query::<Any>(
            "SELECT job_id, seq, fence, kind, payload, created_at FROM job_events \
             WHERE job_id = $1 AND seq > $2 ORDER BY seq",
        )
        .bind(id.to_string())
        .bind(after)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("read events"))?
        .iter()
        .map(event_from_row)
        .collect()
    }
}

impl Store {
    /// The jobs that belong to `owner` (optionally in one status), oldest first: what a user who
    /// is not an admin may list.
    pub async fn jobs_of(&self, owner: &str, status: Option<JobStatus>) -> StoreResult<Vec<Job>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE owner = $1 AND ($2 = '' OR status = $2) \
             ORDER BY id"
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(owner.to_string())
            .bind(status.map(JobStatus::as_str).unwrap_or("").to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list a user's jobs"))?
            .iter()
            .map(job_from_row)
            .collect()
    }

    /// Claims the job `id` itself, for a worker that must run that job and no other (`maestro
    /// run` runs the job it just submitted; `maestro run --resume` continues one). The job must
    /// be queued, or running with an expired lease; with `reopen`, a job that ended `cancelled`
    /// or `failed` is claimed too (its attempts start over), so a stopped run can be continued
    /// from its events. `None` when the job is running under a live lease or ended otherwise.
    pub async fn claim_job(
        &self,
        id: JobId,
        worker: &str,
        lease_for: Duration,
        reopen: bool,
    ) -> StoreResult<Option<Claimed>> {
        let reopened = if reopen {
            " OR status IN ('cancelled', 'failed')"
        } else {
            ""
        };
        self.claim_by_id(id, worker, lease_for, reopened).await
    }

    /// Claims the running job `id` although its lease has not lapsed: for a caller that knows
    /// the holder is gone (a local run whose process no longer exists). The holder is fenced out
    /// like any stale worker.
    pub async fn take_over_job(
        &self,
        id: JobId,
        worker: &str,
        lease_for: Duration,
    ) -> StoreResult<Option<Claimed>> {
        self.claim_by_id(id, worker, lease_for, " OR status = 'running'")
            .await
    }

    async fn claim_by_id(
        &self,
        id: JobId,
        worker: &str,
        lease_for: Duration,
        reopened: &str,
    ) -> StoreResult<Option<Claimed>> {
        let now = self.now_ms();
        let expires = now.saturating_add(duration_ms(lease_for));
        let sql = format!(
            "UPDATE jobs SET status = 'running', \
             attempts = CASE WHEN status IN ('cancelled', 'failed') THEN 1 ELSE attempts + 1 END, \
             fence = fence + 1, lease_owner = $2, lease_expires_at = $3, updated_at = $4, \
             started_at = COALESCE(started_at, $4), finished_at = NULL, reason = NULL \
             WHERE id = $1 AND (status = 'queued' \
               OR (status = 'running' AND lease_expires_at < $4){reopened}) \
             RETURNING {JOB_COLUMNS}"
        );
        let mut tx = self.begin_write().await?;
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(id.to_string())
            .bind(worker.to_string())
            .bind(expires)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::query("claim a job by id"))?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a claim"))?;
        let Some(row) = row else { return Ok(None) };
        let job = job_from_row(&row)?;
        self.changed_job(job.id);
        let lease = Lease {
            job_id: job.id,
            worker: worker.to_string(),
            fence: job.fence,
            expires_at: from_ms(expires),
        };
        let mut claimed = Claimed {
            job,
            lease,
            has_inputs: true,
            piece_stored: true,
        };
        self.claim_hints(std::slice::from_mut(&mut claimed)).await;
        Ok(Some(claimed))
    }
}

impl Store {
    /// Claims up to `max` jobs in one transaction, in claim order (priority, then age), each
    /// with its own lease: a worker with several free slots fills them at once.
    pub async fn claim_batch(
        &self,
        worker: &str,
        classes: &Classes,
        lease_for: Duration,
        max: usize,
    ) -> StoreResult<Vec<Claimed>> {
        let now = self.now_ms();
        let expires = now.saturating_add(duration_ms(lease_for));
        let last_sweep = self.last_sweep.load(Ordering::Relaxed);
        let sweep = now.saturating_sub(last_sweep) >= SWEEP_EVERY_MS || now < last_sweep;
        let query = claim_query(self.claim_sql(classes, max), worker, expires, now, classes);
        let rows = if !sweep && self.backend == crate::store::Backend::Postgres {
            // One statement is atomic by itself: PostgreSQL saves the BEGIN and COMMIT round
            // trips. (SQLite keeps `BEGIN IMMEDIATE`, so that the write lock is waited for
            // rather than refused.)
            query
                .fetch_all(&self.pool)
                .await
                .map_err(StoreError::query("claim jobs"))?
        } else {
            self.claim_in_transaction(query, sweep, now).await?
        };
        let mut claimed = rows
            .iter()
            .map(|row| {
                let job = job_from_row(row)?;
                let lease = Lease {
                    job_id: job.id,
                    worker: worker.to_string(),
                    fence: job.fence,
                    expires_at: from_ms(expires),
                };
                Ok(Claimed {
                    job,
                    lease,
                    has_inputs: true,
                    piece_stored: true,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        self.claim_hints(&mut claimed).await;
        for one in &claimed {
            self.changed_job(one.job.id);
        }
        claimed.sort_by(|a, b| {
            (b.job.priority, a.job.run_at, a.job.id).cmp(&(a.job.priority, b.job.run_at, b.job.id))
        });
        Ok(claimed)
    }

    /// Reads, once for all of `claimed`, which jobs have input files and which piece names the
    /// store holds. The jobs are claimed already: a hint that cannot be read stays `true`, and
    /// the run reads for itself, rather than failing the claim and leaving its jobs leased.
    async fn claim_hints(&self, claimed: &mut [Claimed]) {
        let ids: Vec<JobId> = claimed.iter().map(|c| c.job.id).collect();
        let mut names: Vec<String> = claimed.iter().map(|c| c.job.piece.clone()).collect();
        names.sort();
        names.dedup();
        match self.jobs_with_inputs(&ids).await {
            Ok(with) => {
                for one in claimed.iter_mut() {
                    one.has_inputs = with.contains(&one.job.id);
                }
            }
            Err(e) => tracing::warn!("reading which claimed jobs have input files failed: {e}"),
        }
        match self.stored_piece_names(&names).await {
            Ok(stored) => {
                for one in claimed.iter_mut() {
                    one.piece_stored = stored.contains(&one.job.piece);
                }
            }
            Err(e) => tracing::warn!("reading which claimed jobs' pieces are stored failed: {e}"),
        }
    }

    /// The claim's statement: queued jobs of `classes`, due, in claim order, at most `max`.
    fn claim_sql(&self, classes: &Classes, max: usize) -> String {
        let class_filter = match classes {
            Classes::Any => String::new(),
            Classes::Only(names) => {
                let marks: Vec<String> = (0..names.len()).map(|i| format!("${}", i + 4)).collect();
                format!(" AND task_class IN ({})", marks.join(", "))
            }
        };
        format!(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, fence = fence + 1, \
             lease_owner = $1, lease_expires_at = $2, updated_at = $3, \
             started_at = COALESCE(started_at, $3) \
             WHERE id IN (SELECT id FROM jobs \
               WHERE status = 'queued' AND run_at <= $3{class_filter} \
               ORDER BY priority DESC, run_at, id LIMIT {max}{lock}) \
             RETURNING {JOB_COLUMNS}",
            lock = self.backend.skip_locked(),
            max = max.clamp(1, 1_000)
        )
    }

    /// How the database would run a claim of up to `max` jobs of `classes`: its query plan,
    /// one line per step. Nothing is claimed. On PostgreSQL this is the generic plan, the one a
    /// worker's prepared claim settles on after its first few runs; on SQLite, `EXPLAIN QUERY
    /// PLAN`. For an operator whose queue drains slowly, and for the tests that hold the claim
    /// to one ordered index scan however many jobs are queued.
    pub async fn claim_plan(&self, classes: &Classes, max: usize) -> StoreResult<String> {
        let sql = self.claim_sql(classes, max);
        let (rows, column) = match self.backend {
            crate::store::Backend::Sqlite => {
                let explain = format!("EXPLAIN QUERY PLAN {sql}");
                let rows = claim_query(explain, "", 0, 0, classes)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(StoreError::query("explain a claim"))?;
                (rows, "detail")
            }
            crate::store::Backend::Postgres => {
                let quoted = |name: &String| format!("'{}'", name.replace('\'', "''"));
                let mut arguments = vec!["''".to_string(), "0".into(), "0".into()];
                if let Classes::Only(names) = classes {
                    arguments.extend(names.iter().map(quoted));
                }
                let mut conn = self
                    .pool
                    .acquire()
                    .await
                    .map_err(StoreError::query("explain a claim"))?;
                let explained = generic_plan(&mut conn, &sql, &arguments.join(", ")).await;
                if explained.is_err() {
                    // A prepared statement outlives a transaction: a connection that may still
                    // hold `maestro_claim_plan` is closed rather than given back to the pool.
                    drop(conn.detach());
                }
                let rows = explained.map_err(StoreError::query("explain a claim"))?;
                (rows, "QUERY PLAN")
            }
        };
        let lines = rows
            .iter()
            .map(|row| col::<String>(row, column))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(lines.join("\n"))
    }

    /// The claim inside a write transaction, after the sweep when one is due: jobs whose
    /// worker vanished go back to the queue, or end `failed` when that was their last attempt,
    /// and parents whose subtasks all ended go back to the queue.
    async fn claim_in_transaction<'q>(
        &self,
        claim: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments>,
        sweep: bool,
        now: i64,
    ) -> StoreResult<Vec<sqlx::any::AnyRow>> {
        let mut tx = self.begin_write().await?;
        if sweep {
            sqlx::query::<Any>(
                "UPDATE jobs SET status = 'failed', reason = $1, lease_owner = NULL, \
                 lease_expires_at = NULL, finished_at = $2, updated_at = $2 \
                 WHERE status = 'running' AND lease_expires_at < $2 AND attempts >= max_attempts",
            )
            .bind(LOST_WORKER)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("fail jobs whose workers vanished"))?;
            // The others go back to the queue, where the claim finds them in the same order
            // (priority, then age) as any queued job. They keep their fencing token: a fenced
            // write needs the job `running`, so their old worker is shut out already, and the
            // next claim raises the token.
            sqlx::query::<Any>(
                "UPDATE jobs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL, \
                 updated_at = $1 \
                 WHERE status = 'running' AND lease_expires_at < $1 AND attempts < max_attempts",
            )
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("requeue jobs whose workers vanished"))?;
            self.wake_parents_in(&mut tx, now).await?;
            self.last_sweep.store(now, Ordering::Relaxed);
        }
        let rows = claim
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::query("claim jobs"))?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a claim"))?;
        Ok(rows)
    }
}

/// The claim's statement (or its `EXPLAIN`) with its parameters bound.
fn claim_query<'q>(
    sql: String,
    worker: &str,
    expires: i64,
    now: i64,
    classes: &Classes,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments> {
    let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
        .bind(worker.to_string())
        .bind(expires)
        .bind(now);
    if let Classes::Only(names) = classes {
        for name in names {
            query = query.bind(name.clone());
        }
    }
    query
}

/// PostgreSQL's generic plan of `sql` (the claim), run with `arguments` (SQL literals): what a
/// prepared claim settles on after its first few runs. The setting ends with the transaction;
/// the prepared statement is deallocated.
async fn generic_plan(
    conn: &mut sqlx::AnyConnection,
    sql: &str,
    arguments: &str,
) -> Result<Vec<AnyRow>, sqlx::Error> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    tx.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        .await?;
    tx.execute(sqlx::AssertSqlSafe(format!(
        "PREPARE maestro_claim_plan AS {sql}"
    )))
    .await?;
    let rows = sqlx::query::<Any>(sqlx::AssertSqlSafe(format!(
        "EXPLAIN EXECUTE maestro_claim_plan({arguments})"
    )))
    .fetch_all(&mut *tx)
    .await?;
    tx.execute("DEALLOCATE maestro_claim_plan").await?;
    tx.rollback().await?;
    Ok(rows)
}
