//! One scheduler tick: every node runs it (each worker, every [`TICK`]), and the store's unique
//! key on `(schedule, slot)` makes each slot fire once however many nodes tick at once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use maestro_store::{NewJob, Schedule, Store, StoreError};
use time::OffsetDateTime;

use super::spec::{Misfire, Spec, to_chrono, to_time, zone};

/// How often a worker ticks.
pub const TICK: Duration = Duration::from_secs(1);

/// How late a slot may fire. A slot further in the past than this when a tick sees it passed
/// while no node was running: it is missed, and the schedule's misfire policy applies.
pub const GRACE: Duration = Duration::from_secs(5);

/// Slots one tick looks at per schedule; a longer outage is worked off over several ticks.
const MAX_SLOTS: usize = 1_000_000;

/// Who the audit log says submitted a scheduled job.
const SCHEDULER: &str = "scheduler";

/// What one tick did on this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Slots this node fired a job for (on time, or one catching up missed slots).
    pub fired: u64,
    /// Missed slots this node recorded.
    pub missed: u64,
}

/// Fires the slots due at `now` of every schedule that is not paused, and records the ones
/// missed by more than `grace`. A schedule whose stored spec or zone no longer parses is
/// skipped with a warning.
pub async fn tick(
    store: &Store,
    now: OffsetDateTime,
    grace: Duration,
) -> Result<TickReport, StoreError> {
    let mut report = TickReport::default();
    for schedule in store.schedules().await? {
        if schedule.paused {
            continue;
        }
        let (spec, tz) = match (schedule.spec.parse::<Spec>(), zone(&schedule.tz)) {
            (Ok(spec), Ok(tz)) => (spec, tz),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(schedule = %schedule.id, "not ticking a schedule: {e}");
                continue;
            }
        };
        let misfire = schedule.misfire.parse::<Misfire>().unwrap_or_default();
        tick_one(
            store,
            &schedule,
            &spec,
            tz,
            misfire,
            now,
            grace,
            &mut report,
        )
        .await?;
    }
    Ok(report)
}

#[expect(clippy::too_many_arguments, reason = "one schedule's parsed parts")]
async fn tick_one(
    store: &Store,
    schedule: &Schedule,
    spec: &Spec,
    tz: chrono_tz::Tz,
    misfire: Misfire,
    now: OffsetDateTime,
    grace: Duration,
    report: &mut TickReport,
) -> Result<(), StoreError> {
    // Slots before the last one fired, and before the schedule was added or resumed, are done.
    let floor = schedule
        .last_slot
        .map_or(schedule.updated_at, |last| last.max(schedule.updated_at));
    let now_c = to_chrono(now);
    let late = to_chrono(now - grace);
    let mut missed: Vec<DateTime<Utc>> = Vec::new();
    let mut due = Vec::new();
    let mut at = to_chrono(floor);
    while let Some(slot) = spec.next_after(at, tz) {
        if slot > now_c || missed.len() + due.len() >= MAX_SLOTS {
            break;
        }
        if slot < late {
            missed.push(slot);
        } else {
            due.push(slot);
        }
        at = slot;
    }
    let job = NewJob::new(schedule.piece.clone(), schedule.task.clone(), SCHEDULER);
    if let Some(last) = missed.last() {
        let count = i64::try_from(missed.len()).unwrap_or(i64::MAX);
        let catch_up = match misfire {
            Misfire::Skip => None,
            Misfire::CatchUpOnce => Some(&job),
        };
        if let Some(fired) = store
            .record_missed(
                &schedule.id,
                schedule.last_slot,
                to_time(*last),
                count,
                catch_up,
            )
            .await?
        {
            report.missed += u64::try_from(count).unwrap_or(0);
            if fired.is_some() {
                report.fired += 1;
            }
            tracing::info!(schedule = %schedule.id, missed = count, policy = misfire.as_str(), "slots missed");
        }
    }
    for slot in due {
        if store
            .fire_slot(&schedule.id, to_time(slot), &job)
            .await?
            .is_some()
        {
            report.fired += 1;
        }
    }
    Ok(())
}
