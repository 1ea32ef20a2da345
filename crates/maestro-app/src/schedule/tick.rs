//! One scheduler tick: every node runs it (each worker, every [`TICK`]), and the store's unique
//! key on `(schedule, slot)` makes each slot fire once however many nodes tick at once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use maestro_store::{NewJob, Schedule, Store, StoreError};
use time::OffsetDateTime;

use super::spec::{Misfire, Spec, to_chrono, to_time, zone};
use super::zone::Zone;

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
            &tz,
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
    tz: &Zone,
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
    let mut job = NewJob::new(schedule.piece.clone(), schedule.task.clone(), SCHEDULER);
    job.owner = schedule.owner.clone();
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use maestro_store::{Clock as _, JobQueue as _, JobStatus, ManualClock, NewSchedule, StoreUrl};
    use pretty_assertions::assert_eq;

    use super::*;

    const T0: OffsetDateTime = time::macros::datetime!(2026-01-01 00:00:00 UTC);

    async fn store(dir: &tempfile::TempDir, clock: &Arc<ManualClock>) -> Store {
        let url: StoreUrl = format!("sqlite://{}", dir.path().join("m.db").display())
            .parse()
            .unwrap();
        Store::open(&url)
            .await
            .unwrap()
            .with_clock(Arc::clone(clock) as Arc<dyn maestro_store::Clock>)
    }

    async fn every_2s(store: &Store, misfire: Misfire) -> String {
        store
            .add_schedule(&NewSchedule {
                piece: "default".into(),
                task: "report".into(),
                spec: Spec::every("2s").unwrap().to_string(),
                tz: "UTC".into(),
                misfire: misfire.as_str().into(),
                created_by: "alice".into(),
                owner: None,
            })
            .await
            .unwrap()
    }

    /// The slots of the schedule's jobs, in seconds after T0.
    async fn job_slots(store: &Store, id: &str) -> Vec<i64> {
        let mut slots: Vec<i64> = store
            .jobs(Some(JobStatus::Queued))
            .await
            .unwrap()
            .iter()
            .filter(|j| j.schedule_id.as_deref() == Some(id))
            .map(|j| (j.scheduled_for.unwrap() - T0).whole_seconds())
            .collect();
        slots.sort_unstable();
        slots
    }

    async fn tick_at(store: &Store, clock: &ManualClock) -> TickReport {
        tick(store, clock.now(), GRACE).await.unwrap()
    }

    async fn downtime(misfire: Misfire) -> (TickReport, Vec<i64>, i64) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let store = store(&dir, &clock).await;
        let id = every_2s(&store, misfire).await;
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            tick_at(&store, &clock).await,
            TickReport {
                fired: 1,
                missed: 0
            }
        );
        // All nodes down for 12 s: slots 4, 6 and 8 are more than GRACE late at 14.
        clock.advance(Duration::from_secs(12));
        let report = tick_at(&store, &clock).await;
        assert_eq!(tick_at(&store, &clock).await, TickReport::default());
        let missed = store.schedules().await.unwrap()[0].missed;
        (report, job_slots(&store, &id).await, missed)
    }

    #[tokio::test]
    async fn misfire_skip_fires_none_of_the_missed_slots() {
        assert_eq!(
            downtime(Misfire::Skip).await,
            (
                TickReport {
                    fired: 3,
                    missed: 3
                },
                vec![2, 10, 12, 14],
                3
            )
        );
    }

    #[tokio::test]
    async fn misfire_catch_up_once_fires_one_job_for_them_all() {
        assert_eq!(
            downtime(Misfire::CatchUpOnce).await,
            (
                TickReport {
                    fired: 4,
                    missed: 3
                },
                vec![2, 8, 10, 12, 14],
                3
            )
        );
    }

    #[tokio::test]
    async fn two_nodes_ticking_together_fire_each_slot_once() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let a = store(&dir, &clock).await;
        let b = store(&dir, &clock).await;
        let id = every_2s(&a, Misfire::CatchUpOnce).await;
        let mut fired = 0;
        for _ in 0..20 {
            clock.advance(Duration::from_secs(1));
            let (ra, rb) = tokio::join!(tick_at(&a, &clock), tick_at(&b, &clock));
            fired += ra.fired + rb.fired;
        }
        assert_eq!(fired, 10);
        assert_eq!(
            job_slots(&a, &id).await,
            (1..=10).map(|n| n * 2).collect::<Vec<_>>()
        );
        assert_eq!(a.fired_slots(&id).await.unwrap(), 10);
    }

    #[tokio::test]
    async fn a_paused_schedule_fires_nothing_and_resumes_without_missing() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let store = store(&dir, &clock).await;
        let id = every_2s(&store, Misfire::CatchUpOnce).await;
        crate::schedule::set_paused(&store, &id, true, "alice")
            .await
            .unwrap();
        clock.advance(Duration::from_secs(20));
        assert_eq!(tick_at(&store, &clock).await, TickReport::default());
        crate::schedule::set_paused(&store, &id, false, "alice")
            .await
            .unwrap();
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            tick_at(&store, &clock).await,
            TickReport {
                fired: 1,
                missed: 0
            }
        );
        assert_eq!(job_slots(&store, &id).await, vec![22]);
        crate::schedule::remove_schedule(&store, &id, "alice")
            .await
            .unwrap();
        clock.advance(Duration::from_secs(10));
        assert_eq!(tick_at(&store, &clock).await, TickReport::default());
        assert!(matches!(
            crate::schedule::remove_schedule(&store, &id, "alice").await,
            Err(crate::schedule::ScheduleError::NoSuchSchedule(_))
        ));
    }

    /// The slots a daily schedule in New York fires over three days from `start`, ticking every
    /// 30 minutes with an hour's grace.
    async fn daily_in_new_york(at: &str, start: OffsetDateTime) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(start));
        let store = store(&dir, &clock).await;
        store
            .add_schedule(&NewSchedule {
                piece: "default".into(),
                task: at.into(),
                spec: Spec::daily(at).unwrap().to_string(),
                tz: "America/New_York".into(),
                misfire: "skip".into(),
                created_by: "alice".into(),
                owner: None,
            })
            .await
            .unwrap();
        for _ in 0..(3 * 48) {
            clock.advance(Duration::from_secs(1800));
            tick(&store, clock.now(), Duration::from_secs(3600))
                .await
                .unwrap();
        }
        let mut slots: Vec<String> = store
            .jobs(Some(JobStatus::Queued))
            .await
            .unwrap()
            .iter()
            .map(|j| to_chrono(j.scheduled_for.unwrap()).to_rfc3339())
            .collect();
        slots.sort();
        slots
    }

    #[tokio::test]
    async fn a_daily_schedule_fires_once_on_a_spring_forward_day() {
        assert_eq!(
            daily_in_new_york("02:30", time::macros::datetime!(2026-03-07 00:00:00 UTC)).await,
            [
                "2026-03-07T07:30:00+00:00",
                "2026-03-08T07:00:00+00:00",
                "2026-03-09T06:30:00+00:00"
            ]
        );
    }

    #[tokio::test]
    async fn a_daily_schedule_fires_once_on_a_fall_back_day() {
        assert_eq!(
            daily_in_new_york("01:30", time::macros::datetime!(2026-10-31 00:00:00 UTC)).await,
            [
                "2026-10-31T05:30:00+00:00",
                "2026-11-01T05:30:00+00:00",
                "2026-11-02T06:30:00+00:00"
            ]
        );
    }
}
