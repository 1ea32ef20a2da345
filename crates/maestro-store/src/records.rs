//! What the store keeps beside the queue: the audit log, content-addressed blobs, workers and
//! their heartbeats and comments on jobs.

use sha2::{Digest, Sha256};
use sqlx::Any;

use crate::clock::{from_ms, to_ms};
use crate::error::{StoreError, StoreResult};
use crate::model::{AuditAction, AuditEntry, Comment, CommentKind, JobId, WorkerInfo};
use crate::rows::{col, parse_id};
use crate::store::{Store, WriteTx};

impl Store {
    /// Appends to the audit log inside `tx`.
    pub(crate) async fn audit_in(
        &self,
        tx: &mut WriteTx,
        actor: &str,
        action: AuditAction,
        job: Option<JobId>,
        schedule: Option<&str>,
        detail: Option<&str>,
    ) -> StoreResult<()> {
        sqlx::query::<Any>(
            "INSERT INTO audit_log (at, actor, action, job_id, schedule_id, detail) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(self.now_ms())
        .bind(actor.to_string())
        .bind(action.as_str().to_string())
        .bind(job.map(|j| j.to_string()))
        .bind(schedule.map(str::to_string))
        .bind(detail.map(str::to_string))
        .execute(&mut **tx)
        .await
        .map_err(StoreError::query("write the audit log"))?;
        Ok(())
    }

    /// The audit log, oldest first; only the entries about `job` when one is given. An action
    /// this build does not know reads back as [`AuditAction::Unknown`].
    pub async fn audit_log(&self, job: Option<JobId>) -> StoreResult<Vec<AuditEntry>> {
        sqlx::query::<Any>(
            "SELECT id, at, actor, action, job_id, schedule_id, detail FROM audit_log \
             WHERE ($1 = '' OR job_id = $1) ORDER BY id",
        )
        .bind(job.map(|j| j.to_string()).unwrap_or_default())
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("read the audit log"))?
        .iter()
        .map(audit_from_row)
        .collect()
    }

    /// One page of the whole audit log, newest first: at most `limit` entries whose id is less
    /// than `before` (`None`: from the newest). The last entry's id is the cursor of the next
    /// (older) page; a page shorter than `limit` is the last one.
    pub async fn audit_page_newest(
        &self,
        before: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<AuditEntry>> {
        sqlx::query::<Any>(
            "SELECT id, at, actor, action, job_id, schedule_id, detail FROM audit_log \
             WHERE ($1 = 0 OR id < $1) ORDER BY id DESC LIMIT $2",
        )
        .bind(before.unwrap_or(0))
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("read a page of the audit log"))?
        .iter()
        .map(audit_from_row)
        .collect()
    }

    /// One page of the whole audit log, oldest first: at most `limit` entries whose id is
    /// greater than `after` (`None`: from the first). The last entry's id is the cursor of the
    /// next page; a page shorter than `limit` is the last one for now.
    pub async fn audit_page(&self, after: Option<i64>, limit: i64) -> StoreResult<Vec<AuditEntry>> {
        sqlx::query::<Any>(
            "SELECT id, at, actor, action, job_id, schedule_id, detail FROM audit_log \
             WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after.unwrap_or(0))
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("read a page of the audit log"))?
        .iter()
        .map(audit_from_row)
        .collect()
    }

    /// Appends one entry to the audit log: `actor` did `action`, to `job` when given, with
    /// `detail` (never a secret).
    pub async fn record_audit(
        &self,
        actor: &str,
        action: AuditAction,
        job: Option<JobId>,
        detail: Option<&str>,
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        self.audit_in(&mut tx, actor, action, job, None, detail)
            .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit an audit entry"))
    }

    /// Stores `data` once under its SHA-256 (lowercase hex), which it returns. Storing the same
    /// bytes again is a no-op.
    pub async fn put_blob(&self, data: &[u8]) -> StoreResult<String> {
        let hash = hex::encode(Sha256::digest(data));
        sqlx::query::<Any>(
            "INSERT INTO blobs (hash, size, data, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (hash) DO NOTHING",
        )
        .bind(hash.clone())
        .bind(i64::try_from(data.len()).unwrap_or(i64::MAX))
        .bind(data.to_vec())
        .bind(self.now_ms())
        .execute(&self.pool)
        .await
        .map_err(StoreError::query("store a blob"))?;
        Ok(hash)
    }

    /// The bytes stored under `hash`.
    pub async fn blob(&self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        sqlx::query_scalar::<Any, Vec<u8>>("SELECT data FROM blobs WHERE hash = $1")
            .bind(hash.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("read a blob"))
    }

    /// Records a worker process (or refreshes it, by id) with a heartbeat now.
    pub async fn register_worker(&self, worker: &WorkerInfo) -> StoreResult<()> {
        let classes =
            serde_json::to_string(&worker.task_classes).map_err(|e| StoreError::Corrupt {
                what: format!("task classes: {e}"),
            })?;
        sqlx::query::<Any>(
            "INSERT INTO workers (id, name, profile, task_classes, host, pid, started_at, heartbeat_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
        )
        .bind(worker.id.clone())
        .bind(worker.name.clone())
        .bind(worker.profile.clone())
        .bind(classes)
        .bind(worker.host.clone())
        .bind(worker.pid)
        .bind(to_ms(worker.started_at))
        .bind(self.now_ms())
        .execute(&self.pool)
        .await
        .map_err(StoreError::query("register a worker"))?;
        Ok(())
    }

    /// Notes that the worker is alive.
    pub async fn worker_heartbeat(&self, worker_id: &str) -> StoreResult<()> {
        sqlx::query::<Any>("UPDATE workers SET heartbeat_at = $1 WHERE id = $2")
            .bind(self.now_ms())
            .bind(worker_id.to_string())
            .execute(&self.pool)
            .await
            .map_err(StoreError::query("record a worker heartbeat"))?;
        Ok(())
    }

    /// Workers whose last heartbeat is at most `within` old.
    pub async fn live_workers(&self, within: std::time::Duration) -> StoreResult<Vec<WorkerInfo>> {
        let since = self.now_ms() - crate::clock::duration_ms(within);
        sqlx::query::<Any>(
            "SELECT id, name, profile, task_classes, host, pid, started_at, heartbeat_at \
             FROM workers WHERE heartbeat_at >= $1 ORDER BY name, id",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("list workers"))?
        .iter()
        .map(|row| {
            let classes: String = col(row, "task_classes")?;
            Ok(WorkerInfo {
                id: col(row, "id")?,
                name: col(row, "name")?,
                profile: col(row, "profile")?,
                task_classes: serde_json::from_str(&classes).map_err(|e| StoreError::Corrupt {
                    what: format!("worker task classes `{classes}`: {e}"),
                })?,
                host: col(row, "host")?,
                pid: col(row, "pid")?,
                started_at: from_ms(col(row, "started_at")?),
                heartbeat_at: from_ms(col(row, "heartbeat_at")?),
            })
        })
        .collect()
    }

    /// Adds a comment to a job; an answer is also recorded in the audit log.
    pub async fn add_comment(
        &self,
        job: JobId,
        author: &str,
        kind: CommentKind,
        body: &str,
    ) -> StoreResult<i64> {
        let mut tx = self.begin_write().await?;
        let id = sqlx::query_scalar::<Any, i64>(
            "INSERT INTO job_comments (job_id, author, kind, body, created_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(job.to_string())
        .bind(author.to_string())
        .bind(kind.as_str().to_string())
        .bind(body.to_string())
        .bind(self.now_ms())
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::query("add a comment"))?;
        if kind == CommentKind::Answer {
            self.audit_in(&mut tx, author, AuditAction::Answer, Some(job), None, None)
                .await?;
        }
        tx.commit()
            .await
            .map_err(StoreError::query("commit a comment"))?;
        Ok(id)
    }

    /// A job's comments, oldest first.
    pub async fn comments(&self, job: JobId) -> StoreResult<Vec<Comment>> {
        sqlx::query::<Any>(
            "SELECT id, job_id, author, kind, body, created_at FROM job_comments \
             WHERE job_id = $1 ORDER BY id",
        )
        .bind(job.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("read comments"))?
        .iter()
        .map(|row| {
            Ok(Comment {
                id: col(row, "id")?,
                job_id: parse_id(&col::<String>(row, "job_id")?)?,
                author: col(row, "author")?,
                kind: CommentKind::parse(&col::<String>(row, "kind")?)?,
                body: col(row, "body")?,
                created_at: from_ms(col(row, "created_at")?),
            })
        })
        .collect()
    }
}

impl Store {
    /// Answers the question a `waiting_input` job asked: stores the answer as a comment and
    /// queues the job again (its run goes on where it asked), in one transaction, recorded in
    /// the audit log. A job that is not waiting for input is refused.
    pub async fn answer(&self, job: JobId, author: &str, text: &str) -> StoreResult<i64> {
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        let requeued = sqlx::query::<Any>(
            // A park is not a failure: the attempts start over (the fencing token does not).
            "UPDATE jobs SET status = 'queued', run_at = $2, updated_at = $2, reason = NULL, \
             attempts = 0 WHERE id = $1 AND status = 'waiting_input'",
        )
        .bind(job.to_string())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("requeue an answered job"))?;
        if requeued.rows_affected() != 1 {
            drop(tx);
            let current = crate::JobQueue::job(self, job)
                .await?
                .ok_or(StoreError::NoSuchJob(job))?;
            return Err(StoreError::InvalidTransition {
                job,
                action: "answer",
                status: current.status,
            });
        }
        let id = sqlx::query_scalar::<Any, i64>(
            "INSERT INTO job_comments (job_id, author, kind, body, created_at) \
             VALUES ($1, $2, 'answer', $3, $4) RETURNING id",
        )
        .bind(job.to_string())
        .bind(author.to_string())
        .bind(text.to_string())
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::query("add an answer"))?;
        self.audit_in(&mut tx, author, AuditAction::Answer, Some(job), None, None)
            .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit an answer"))?;
        self.changed_job(job);
        Ok(id)
    }

    /// The answers given to a job's questions, oldest first.
    pub async fn answers(&self, job: JobId) -> StoreResult<Vec<String>> {
        Ok(self
            .comments(job)
            .await?
            .into_iter()
            .filter(|c| c.kind == CommentKind::Answer)
            .map(|c| c.body)
            .collect())
    }
}

fn audit_from_row(row: &sqlx::any::AnyRow) -> StoreResult<AuditEntry> {
    Ok(AuditEntry {
        id: col(row, "id")?,
        at: from_ms(col(row, "at")?),
        actor: col(row, "actor")?,
        action: AuditAction::from_name(&col::<String>(row, "action")?),
        job_id: col::<Option<String>>(row, "job_id")?
            .as_deref()
            .map(parse_id)
            .transpose()?,
        schedule_id: col(row, "schedule_id")?,
        detail: col(row, "detail")?,
    })
}
