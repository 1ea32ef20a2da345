//! Subtasks: child jobs a run spawns under its lease, and the parent that waits for them.
//!
//! A parent parks as `waiting_subtasks`; it is queued again once none of its children is open
//! (queued, running or waiting). Whoever writes last does it: the child's end, the parent's
//! park, a cancel, and (for a writer that died between its commit and the wake) the sweep that
//! runs with the claims.

use sqlx::Any;

use crate::error::{StoreError, StoreResult};
use crate::fence::FENCED;
use crate::jobs::{JOB_COLUMNS, job_from_row};
use crate::model::{Job, JobId, Lease, NewJob};
use crate::rows::col;
use crate::store::{Store, WriteTx};

/// The statuses of a job that has not ended.
pub(crate) const OPEN: &str = "('queued', 'running', 'waiting_input', 'waiting_subtasks')";

/// A child job to spawn.
#[derive(Debug, Clone, PartialEq)]
pub struct NewChild {
    /// Names the spawn within its parent's run: the same key finds the same child, so a spawn
    /// repeated after a crash does not make a second one.
    pub key: String,
    /// The child's title, shown with its result when the parent goes on.
    pub title: String,
    /// A piece name, or `auto` for the classifier.
    pub piece: String,
    /// The task text the child starts with.
    pub task: String,
    /// The parent's workspace: the child's is `subtasks/<n>/` inside it.
    pub parent_workspace: Option<String>,
    /// The most children the parent may have.
    pub max_children: i64,
    /// Claims allowed before the child ends `failed`.
    pub max_attempts: i64,
}

/// What a spawn did.
#[derive(Debug, Clone, PartialEq)]
pub enum Spawned {
    /// A new child, queued.
    Created(Job),
    /// The child this key spawned before.
    Existing(Job),
    /// The parent already has `max_children` children.
    Full {
        /// How many children the parent has.
        children: i64,
    },
}

/// A child's workspace inside its parent's.
pub fn child_workspace(parent_workspace: &str, index: i64) -> String {
    format!(
        "{}/subtasks/{index}",
        parent_workspace.trim_end_matches('/')
    )
}

impl Store {
    /// Spawns a child of the job `parent` holds the lease of, in one transaction: fenced like
    /// every write under a lease (a worker that lost its job spawns nothing), idempotent by
    /// `child.key`, and refused past `child.max_children`. The child inherits the parent's
    /// class, priority and owner, and sits one level deeper.
    pub async fn spawn_child(&self, parent: &Lease, child: NewChild) -> StoreResult<Spawned> {
        let mut tx = self.begin_write().await?;
        let check = format!(
            "SELECT depth, priority, task_class, owner FROM jobs WHERE {FENCED}{}",
            self.backend.row_lock()
        );
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(check))
            .bind(parent.job_id.to_string())
            .bind(parent.fence)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::query("check a lease before spawning a child"))?;
        let Some(row) = row else {
            drop(tx);
            return Err(self.lease_error(parent).await);
        };
        let depth: i64 = col(&row, "depth")?;
        let priority: i64 = col(&row, "priority")?;
        let task_class: String = col(&row, "task_class")?;
        let owner: Option<String> = col(&row, "owner")?;
        let existing =
            format!("SELECT {JOB_COLUMNS} FROM jobs WHERE parent_id = $1 AND spawn_key = $2");
        let found = sqlx::query::<Any>(sqlx::AssertSqlSafe(existing))
            .bind(parent.job_id.to_string())
            .bind(child.key.clone())
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::query("find a spawned child"))?;
        if let Some(found) = found {
            drop(tx);
            return Ok(Spawned::Existing(job_from_row(&found)?));
        }
        let children: i64 =
            sqlx::query_scalar::<Any, i64>("SELECT COUNT(*) FROM jobs WHERE parent_id = $1")
                .bind(parent.job_id.to_string())
                .fetch_one(&mut *tx)
                .await
                .map_err(StoreError::query("count a job's children"))?;
        if children >= child.max_children {
            drop(tx);
            return Ok(Spawned::Full { children });
        }
        let index = children + 1;
        let mut job = NewJob::new(child.piece, child.task, format!("job:{}", parent.job_id));
        job.parent_id = Some(parent.job_id);
        job.priority = priority;
        job.task_class = task_class;
        job.owner = owner;
        job.max_attempts = child.max_attempts;
        job.workspace = child
            .parent_workspace
            .as_deref()
            .map(|w| child_workspace(w, index));
        let id = self.insert_job(&mut tx, &job, None).await?;
        sqlx::query::<Any>(
            "UPDATE jobs SET depth = $2, title = $3, child_index = $4, spawn_key = $5 WHERE id = $1",
        )
        .bind(id.to_string())
        .bind(depth + 1)
        .bind(child.title)
        .bind(index)
        .bind(child.key)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("describe a spawned child"))?;
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(id.to_string())
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::query("read a spawned child"))?;
        let created = job_from_row(&row)?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a spawn"))?;
        Ok(Spawned::Created(created))
    }

    /// A job's children, in the order they were spawned.
    pub async fn children(&self, parent: JobId) -> StoreResult<Vec<Job>> {
        let sql =
            format!("SELECT {JOB_COLUMNS} FROM jobs WHERE parent_id = $1 ORDER BY child_index, id");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(parent.to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list a job's children"))?
            .iter()
            .map(job_from_row)
            .collect()
    }

    /// Queues `parent` again when it waits for its subtasks and none of them is open; true
    /// when it did. Safe to call any number of times, from any node.
    pub async fn wake_parent(&self, parent: JobId) -> StoreResult<bool> {
        let now = self.now_ms();
        let sql = format!(
            "UPDATE jobs SET status = 'queued', run_at = $2, updated_at = $2, reason = NULL, \
             attempts = 0 WHERE id = $1 AND status = 'waiting_subtasks' AND NOT EXISTS \
             (SELECT 1 FROM jobs c WHERE c.parent_id = $1 AND c.status IN {OPEN})"
        );
        let done = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(parent.to_string())
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(StoreError::query("queue a parent whose subtasks ended"))?;
        let woken = done.rows_affected() == 1;
        if woken {
            self.changed_job(parent);
        }
        Ok(woken)
    }

    /// The sweep's part for subtasks: every parent waiting with no open child is queued again
    /// (a writer that died between its commit and its wake left it waiting).
    pub(crate) async fn wake_parents_in(&self, tx: &mut WriteTx, now: i64) -> StoreResult<()> {
        let sql = format!(
            "UPDATE jobs SET status = 'queued', run_at = $1, updated_at = $1, reason = NULL, \
             attempts = 0 WHERE status = 'waiting_subtasks' AND NOT EXISTS \
             (SELECT 1 FROM jobs c WHERE c.parent_id = jobs.id AND c.status IN {OPEN})"
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::query("queue parents whose subtasks ended"))?;
        Ok(())
    }
}
