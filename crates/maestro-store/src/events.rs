//! Appending runs' events: one run's batch in a transaction of its own
//! ([`JobQueue::append_events`](crate::JobQueue::append_events)), or the batches of many runs in
//! one transaction ([`Store::append_batches`]), each batch fenced by its own lease.

use std::collections::HashSet;

use sqlx::Any;

use crate::error::{StoreError, StoreResult};
use crate::fence::FENCED;
use crate::model::{Lease, LeaseKey, NewEvent};
use crate::rows::{col, parse_id};
use crate::store::{Marks, Store, WriteTx, pow2_chunks};

/// The most rows one INSERT of [`Store::append_batches`] carries (six parameters each), and
/// the most leases one fence check reads. Kept small on PostgreSQL's account too; on SQLite
/// the parameters are plain `?`s (see [`Marks`]: with `$N` ones, at 500 rows and 2,500
/// parameters, SQLite's lookup of them took a tenth of the CPU of 1,000 concurrent runs).
/// The statements go in chunks of a power of two rows ([`pow2_chunks`]).
const ROWS_PER_INSERT: usize = 64;

/// One run's events to append under its lease, as part of [`Store::append_batches`].
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// The run's lease: the batch is written only while its fencing token is the job's newest.
    pub lease: Lease,
    /// The events to append, in `seq` order; the batch is appended all or nothing.
    pub events: Vec<NewEvent>,
}

/// An insert refused because one of its `seq`s is already stored.
struct Duplicate;

/// The savepoint around one batch's rows in a group: a refused insert (which aborts a
/// PostgreSQL transaction) is undone alone.
const SAVEPOINT: &str = "SAVEPOINT append_batch";
const RELEASE: &str = "RELEASE SAVEPOINT append_batch";
const ROLLBACK_TO: &str = "ROLLBACK TO SAVEPOINT append_batch";

fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
}

impl Store {
    /// Appends `events` under `lease` in a transaction of its own, all or none.
    pub(crate) async fn append_alone(&self, lease: &Lease, events: &[NewEvent]) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        if let Some(refused) = self.fence_refusal(&mut tx, lease).await? {
            return Err(refused);
        }
        match self.insert_events(&mut tx, lease, events, now).await? {
            Ok(()) => {
                tx.commit()
                    .await
                    .map_err(StoreError::query("commit appended events"))?;
                self.appended(lease, events);
                Ok(())
            }
            Err(Duplicate) => {
                // A refused insert aborts a PostgreSQL transaction: read outside it.
                drop(tx);
                Err(self.duplicate(&self.pool, lease, events).await)
            }
        }
    }

    /// Appends several runs' batches in one transaction (one commit, so one disk flush, for all
    /// of them), in order. Each batch is fenced by its own lease and written whole or not at
    /// all, exactly as [`crate::JobQueue::append_events`] would write it alone; a batch that is refused
    /// (a lost lease, a cancelled job, a `seq` already stored) leaves the others written. The
    /// result at index `i` is batch `i`'s.
    ///
    /// When the transaction fails as a whole (a PostgreSQL deadlock with a concurrent cancel,
    /// say), each batch is appended again in a transaction of its own, so that no batch fails
    /// for another's sake.
    pub async fn append_batches(&self, batches: &[EventBatch]) -> Vec<StoreResult<()>> {
        match self.append_together(batches).await {
            Ok(results) => results,
            Err(_) => {
                let mut results = Vec::with_capacity(batches.len());
                for batch in batches {
                    results.push(self.append_alone(&batch.lease, &batch.events).await);
                }
                results
            }
        }
    }

    /// Every batch in one transaction: one read checks every batch's fence, and the rows of
    /// all the batches that may write go in as few INSERTs as the parameters allow. When one of
    /// them holds a `seq` already stored (rare: a resumed run's writer that repeats itself), the
    /// transaction is undone and [`Store::append_each`] sorts the batches out one by one. The
    /// outer error is the transaction's, the inner ones the batches'.
    async fn append_together(&self, batches: &[EventBatch]) -> StoreResult<Vec<StoreResult<()>>> {
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        let writing: Vec<&EventBatch> = batches.iter().filter(|b| !b.events.is_empty()).collect();
        let held = self.fences_held(&mut tx, &writing).await?;
        let mut placed = Vec::with_capacity(batches.len());
        let mut rows = Vec::new();
        for batch in batches {
            let lease = &batch.lease;
            if batch.events.is_empty() || held.contains(&lease.key()) {
                rows.extend(batch.events.iter().map(|event| (lease, event)));
                placed.push(Ok(()));
            } else {
                placed.push(Err(self.lease_error_in(&mut *tx, lease).await));
            }
        }
        for chunk in pow2_chunks(&rows, ROWS_PER_INSERT) {
            let sql = format!(
                "INSERT INTO job_events (job_id, seq, fence, kind, payload, created_at) VALUES {}",
                Marks::new(self.backend).rows(chunk.len(), 6)
            );
            let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
            for (lease, event) in chunk {
                query = query
                    .bind(lease.job_id.to_string())
                    .bind(event.seq)
                    .bind(lease.fence)
                    .bind(event.kind.clone())
                    .bind(event.payload.get().to_string())
                    .bind(now);
            }
            match query.execute(&mut *tx).await {
                Ok(_) => {}
                Err(err) if is_unique_violation(&err) => {
                    drop(tx);
                    return self.append_each(batches).await;
                }
                Err(source) => {
                    return Err(StoreError::Query {
                        context: "append events",
                        source,
                    });
                }
            }
        }
        tx.commit()
            .await
            .map_err(StoreError::query("commit appended events"))?;
        self.appended_all(batches, &placed);
        Ok(placed)
    }

    /// Tells this process's watchers of a batch appended.
    fn appended(&self, lease: &Lease, events: &[NewEvent]) {
        if let Some(last) = events.iter().map(|e| e.seq).max() {
            self.changed_events(lease.job_id, last);
        }
    }

    /// Tells this process's watchers of every batch `placed` says was appended.
    fn appended_all(&self, batches: &[EventBatch], placed: &[StoreResult<()>]) {
        for (batch, result) in batches.iter().zip(placed) {
            if result.is_ok() {
                self.appended(&batch.lease, &batch.events);
            }
        }
    }

    /// The leases among `batches` that may write now, read inside `tx` in one query per
    /// [`ROWS_PER_INSERT`] batches. On PostgreSQL their jobs' rows are then share-locked until
    /// `tx` ends, so a takeover waits for the commit.
    async fn fences_held(
        &self,
        tx: &mut WriteTx,
        batches: &[&EventBatch],
    ) -> StoreResult<HashSet<LeaseKey>> {
        let mut held = HashSet::with_capacity(batches.len());
        for chunk in pow2_chunks(batches, ROWS_PER_INSERT) {
            let sql = format!(
                "SELECT id, fence FROM jobs WHERE status = 'running' AND id IN ({}){}",
                Marks::new(self.backend).list(chunk.len()),
                self.backend.share_lock()
            );
            let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
            for batch in chunk {
                query = query.bind(batch.lease.job_id.to_string());
            }
            for row in query
                .fetch_all(&mut **tx)
                .await
                .map_err(StoreError::query("check leases before appending events"))?
            {
                held.insert(LeaseKey {
                    job: parse_id(&col::<String>(&row, "id")?)?,
                    fence: col::<i64>(&row, "fence")?,
                });
            }
        }
        Ok(held)
    }

    /// Every batch in one transaction, each behind its own fence check and savepoint, so that a
    /// batch refused for a `seq` already stored leaves the others written.
    async fn append_each(&self, batches: &[EventBatch]) -> StoreResult<Vec<StoreResult<()>>> {
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        let mut placed = Vec::with_capacity(batches.len());
        for batch in batches {
            if batch.events.is_empty() {
                placed.push(Ok(()));
                continue;
            }
            if let Some(refused) = self.fence_refusal(&mut tx, &batch.lease).await? {
                placed.push(Err(refused));
                continue;
            }
            run(&mut tx, SAVEPOINT).await?;
            match self
                .insert_events(&mut tx, &batch.lease, &batch.events, now)
                .await?
            {
                Ok(()) => {
                    run(&mut tx, RELEASE).await?;
                    placed.push(Ok(()));
                }
                Err(Duplicate) => {
                    run(&mut tx, ROLLBACK_TO).await?;
                    run(&mut tx, RELEASE).await?;
                    let refused = self.duplicate(&mut *tx, &batch.lease, &batch.events).await;
                    placed.push(Err(refused));
                }
            }
        }
        tx.commit()
            .await
            .map_err(StoreError::query("commit appended events"))?;
        self.appended_all(batches, &placed);
        Ok(placed)
    }

    /// Why `lease` may not write now, read inside `tx`; `None` when it may. On PostgreSQL the
    /// job's row is then share-locked until `tx` ends, so a takeover waits for the commit.
    async fn fence_refusal(
        &self,
        tx: &mut WriteTx,
        lease: &Lease,
    ) -> StoreResult<Option<StoreError>> {
        let check = format!(
            "SELECT fence FROM jobs WHERE {}{}",
            FENCED,
            self.backend.share_lock()
        );
        let owned = sqlx::query::<Any>(sqlx::AssertSqlSafe(check))
            .bind(lease.job_id.to_string())
            .bind(lease.fence)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::query("check a lease before appending events"))?;
        Ok(match owned {
            Some(_) => None,
            None => Some(self.lease_error_in(&mut **tx, lease).await),
        })
    }

    /// Inserts `events` (one statement: all rows or none).
    async fn insert_events(
        &self,
        tx: &mut WriteTx,
        lease: &Lease,
        events: &[NewEvent],
        now: i64,
    ) -> StoreResult<Result<(), Duplicate>> {
        let rows: Vec<String> = (0..events.len())
            .map(|i| {
                let p = 4 + i * 3;
                format!("($1, ${p}, $2, ${}, ${}, $3)", p + 1, p + 2)
            })
            .collect();
        let sql = format!(
            "INSERT INTO job_events (job_id, seq, fence, kind, payload, created_at) VALUES {}",
            rows.join(", ")
        );
        let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(lease.job_id.to_string())
            .bind(lease.fence)
            .bind(now);
        for event in events {
            query = query
                .bind(event.seq)
                .bind(event.kind.clone())
                .bind(event.payload.get().to_string());
        }
        match query.execute(&mut **tx).await {
            Ok(_) => Ok(Ok(())),
            Err(err) if is_unique_violation(&err) => Ok(Err(Duplicate)),
            Err(source) => Err(StoreError::Query {
                context: "append events",
                source,
            }),
        }
    }

    /// The error for a batch one of whose `seq`s is already stored: the first such `seq`, read
    /// through `executor` (inside the transaction that refused it, or after).
    async fn duplicate<'e>(
        &self,
        executor: impl sqlx::Executor<'e, Database = Any>,
        lease: &Lease,
        events: &[NewEvent],
    ) -> StoreError {
        let stored = sqlx::query_scalar::<Any, i64>("SELECT seq FROM job_events WHERE job_id = $1")
            .bind(lease.job_id.to_string())
            .fetch_all(executor)
            .await;
        let stored = match stored {
            Ok(stored) => stored,
            Err(source) => {
                return StoreError::Query {
                    context: "read a job's event numbers",
                    source,
                };
            }
        };
        let seq = events
            .iter()
            .map(|e| e.seq)
            .find(|seq| stored.contains(seq))
            .unwrap_or_else(|| events.first().map_or(0, |e| e.seq));
        StoreError::EventExists {
            job: lease.job_id,
            seq,
        }
    }
}

async fn run(tx: &mut WriteTx, statement: &'static str) -> StoreResult<()> {
    sqlx::query::<Any>(statement)
        .execute(&mut **tx)
        .await
        .map_err(StoreError::query("mark a batch of events"))?;
    Ok(())
}
