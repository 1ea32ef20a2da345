//! Schedules and the slots they fired. Every node ticks every schedule; the primary key
//! `(schedule_id, slot_time)` of `schedule_fires` decides which node fires a slot, so a slot
//! fires exactly once however many nodes tick and no node leads.

use sqlx::Any;
use uuid::Uuid;

use crate::clock::{from_ms, to_ms};
use crate::error::{StoreError, StoreResult};
use crate::model::{AuditAction, JobId, NewJob, NewSchedule, Schedule};
use crate::rows::col;
use crate::store::Store;

impl Store {
    /// Adds a schedule and records it in the audit log; returns its id (a UUIDv7).
    pub async fn add_schedule(&self, schedule: &NewSchedule) -> StoreResult<String> {
        let id = Uuid::now_v7().to_string();
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        sqlx::query::<Any>(
            "INSERT INTO schedules (id, piece, task, spec, tz, misfire, created_by, created_at, \
             updated_at, owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9)",
        )
        .bind(id.clone())
        .bind(schedule.piece.clone())
        .bind(schedule.task.clone())
        .bind(schedule.spec.clone())
        .bind(schedule.tz.clone())
        .bind(schedule.misfire.clone())
        .bind(schedule.created_by.clone())
        .bind(now)
        .bind(schedule.owner.clone())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("add a schedule"))?;
        self.audit_in(
            &mut tx,
            &schedule.created_by,
            AuditAction::ScheduleAdd,
            None,
            Some(&id),
            Some(&schedule.spec),
        )
        .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a schedule"))?;
        Ok(id)
    }

    /// Fires one slot of a schedule: creates `job` for it unless the slot already fired.
    /// Exactly-once is the database's doing: `(schedule_id, slot_time)` is the primary key of
    /// `schedule_fires`, so of any number of nodes firing the same slot, one inserts the row and
    /// its job, and the others get `None`.
    pub async fn fire_slot(
        &self,
        schedule_id: &str,
        slot: time::OffsetDateTime,
        job: &NewJob,
    ) -> StoreResult<Option<JobId>> {
        let slot_ms = to_ms(slot);
        let mut tx = self.begin_write().await?;
        let claimed = sqlx::query::<Any>(
            "INSERT INTO schedule_fires (schedule_id, slot_time, fired_at) VALUES ($1, $2, $3) \
             ON CONFLICT (schedule_id, slot_time) DO NOTHING",
        )
        .bind(schedule_id.to_string())
        .bind(slot_ms)
        .bind(self.now_ms())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("claim a schedule slot"))?;
        if claimed.rows_affected() == 0 {
            return Ok(None);
        }
        let id = self
            .insert_job(&mut tx, job, Some((schedule_id, slot_ms)))
            .await?;
        sqlx::query::<Any>(
            "UPDATE schedule_fires SET job_id = $1 WHERE schedule_id = $2 AND slot_time = $3",
        )
        .bind(id.to_string())
        .bind(schedule_id.to_string())
        .bind(slot_ms)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("link a slot to its job"))?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a fired slot"))?;
        Ok(Some(id))
    }

    /// How many slots of the schedule have fired a job (slots skipped as missed do not count).
    pub async fn fired_slots(&self, schedule_id: &str) -> StoreResult<i64> {
        sqlx::query_scalar::<Any, i64>(
            "SELECT COUNT(job_id) FROM schedule_fires WHERE schedule_id = $1",
        )
        .bind(schedule_id.to_string())
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::query("count fired slots"))
    }

    /// Every schedule, oldest first, with what it fired so far.
    pub async fn schedules(&self) -> StoreResult<Vec<Schedule>> {
        sqlx::query::<Any>(
            "SELECT s.id, s.piece, s.task, s.spec, s.tz, s.misfire, s.paused, s.missed, \
             s.created_by, s.owner, s.created_at, s.updated_at, \
             (SELECT MAX(f.slot_time) FROM schedule_fires f WHERE f.schedule_id = s.id) AS last_slot, \
             (SELECT COUNT(f.job_id) FROM schedule_fires f WHERE f.schedule_id = s.id) AS fired \
             FROM schedules s ORDER BY s.created_at, s.id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("list schedules"))?
        .iter()
        .map(|row| {
            Ok(Schedule {
                id: col(row, "id")?,
                piece: col(row, "piece")?,
                task: col(row, "task")?,
                spec: col(row, "spec")?,
                tz: col(row, "tz")?,
                misfire: col(row, "misfire")?,
                paused: col::<i64>(row, "paused")? != 0,
                missed: col(row, "missed")?,
                fired: col(row, "fired")?,
                last_slot: col::<Option<i64>>(row, "last_slot")?.map(from_ms),
                created_by: col(row, "created_by")?,
                owner: col(row, "owner")?,
                created_at: from_ms(col(row, "created_at")?),
                updated_at: from_ms(col(row, "updated_at")?),
            })
        })
        .collect()
    }

    /// Pauses (`true`) or resumes (`false`) a schedule and records it in the audit log; `false`
    /// when no schedule has this id. Resuming moves `updated_at`, so the slots that passed while
    /// it was paused are neither fired nor counted as missed.
    pub async fn set_schedule_paused(
        &self,
        id: &str,
        paused: bool,
        actor: &str,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let changed =
            sqlx::query::<Any>("UPDATE schedules SET paused = $1, updated_at = $2 WHERE id = $3")
                .bind(i64::from(paused))
                .bind(self.now_ms())
                .bind(id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(StoreError::query("pause or resume a schedule"))?
                .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        let action = if paused {
            AuditAction::SchedulePause
        } else {
            AuditAction::ScheduleResume
        };
        self.audit_in(&mut tx, actor, action, None, Some(id), None)
            .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a schedule change"))?;
        Ok(true)
    }

    /// Changes a schedule's piece, task, spec, zone and misfire policy, keeping the slots it
    /// fired (so a changed spec does not fire a slot again), and records it in the audit log;
    /// `false` when no schedule has this id. `updated_at` moves, so slots of the old spec that
    /// passed are not caught up under the new one.
    pub async fn update_schedule(
        &self,
        id: &str,
        schedule: &NewSchedule,
        actor: &str,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let changed = sqlx::query::<Any>(
            "UPDATE schedules SET piece = $1, task = $2, spec = $3, tz = $4, misfire = $5, \
             updated_at = $6 WHERE id = $7",
        )
        .bind(schedule.piece.clone())
        .bind(schedule.task.clone())
        .bind(schedule.spec.clone())
        .bind(schedule.tz.clone())
        .bind(schedule.misfire.clone())
        .bind(self.now_ms())
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("update a schedule"))?
        .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        self.audit_in(
            &mut tx,
            actor,
            AuditAction::ScheduleUpdate,
            None,
            Some(id),
            Some(&schedule.spec),
        )
        .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a schedule change"))?;
        Ok(true)
    }

    /// Removes a schedule and its fired slots (its jobs stay) and records it in the audit log;
    /// `false` when no schedule has this id.
    pub async fn remove_schedule(&self, id: &str, actor: &str) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        sqlx::query::<Any>("DELETE FROM schedule_fires WHERE schedule_id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("remove a schedule's slots"))?;
        let removed = sqlx::query::<Any>("DELETE FROM schedules WHERE id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("remove a schedule"))?
            .rows_affected();
        if removed == 0 {
            return Ok(false);
        }
        self.audit_in(
            &mut tx,
            actor,
            AuditAction::ScheduleRemove,
            None,
            Some(id),
            None,
        )
        .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a schedule removal"))?;
        Ok(true)
    }

    /// Records `count` missed slots, the last of them `slot`, all after `after` (the last slot
    /// the caller saw fired): with `job`, one job fires for all of them (catch up once); without,
    /// none does (skip). Only the first node to record slots after `after` does so, so the
    /// missed slots are counted, and caught up, once. Returns whether this call recorded them,
    /// and the job it created.
    pub async fn record_missed(
        &self,
        schedule_id: &str,
        after: Option<time::OffsetDateTime>,
        slot: time::OffsetDateTime,
        count: i64,
        job: Option<&NewJob>,
    ) -> StoreResult<Option<Option<JobId>>> {
        let slot_ms = to_ms(slot);
        let mut tx = self.begin_write().await?;
        // Locks the schedule's row (PostgreSQL; SQLite has one writer anyway), so of two nodes
        // recording missed slots at once the second sees the first's row below.
        sqlx::query::<Any>("UPDATE schedules SET updated_at = updated_at WHERE id = $1")
            .bind(schedule_id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("lock a schedule"))?;
        let claimed = sqlx::query::<Any>(
            "INSERT INTO schedule_fires (schedule_id, slot_time, fired_at) \
             SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM schedule_fires \
             WHERE schedule_id = $1 AND slot_time > $4) \
             ON CONFLICT (schedule_id, slot_time) DO NOTHING",
        )
        .bind(schedule_id.to_string())
        .bind(slot_ms)
        .bind(self.now_ms())
        .bind(after.map(to_ms).unwrap_or(i64::MIN))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("claim missed schedule slots"))?;
        if claimed.rows_affected() == 0 {
            return Ok(None);
        }
        sqlx::query::<Any>("UPDATE schedules SET missed = missed + $1 WHERE id = $2")
            .bind(count)
            .bind(schedule_id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("count missed slots"))?;
        let id = match job {
            Some(job) => {
                let id = self
                    .insert_job(&mut tx, job, Some((schedule_id, slot_ms)))
                    .await?;
                sqlx::query::<Any>(
                    "UPDATE schedule_fires SET job_id = $1 WHERE schedule_id = $2 AND slot_time = $3",
                )
                .bind(id.to_string())
                .bind(schedule_id.to_string())
                .bind(slot_ms)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::query("link a slot to its job"))?;
                Some(id)
            }
            None => None,
        };
        tx.commit()
            .await
            .map_err(StoreError::query("commit missed slots"))?;
        Ok(Some(id))
    }
}
