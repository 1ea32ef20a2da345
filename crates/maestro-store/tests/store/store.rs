//! The store's guarantees, on SQLite and on a real PostgreSQL cluster: migrations, the queue,
//! races between workers, fencing, event uniqueness, and exactly-once schedule slots.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::Db;
use maestro_store::{
    AuditAction, Backoff, Claimed, Classes, Clock, CommentKind, EventBatch, FailDisposition, JobId,
    JobQueue, JobStatus, ManualClock, NewEvent, NewJob, NewSchedule, Outcome, PoolSize,
    SCHEMA_VERSION, Store, StoreError, StoreUrl,
};
use pretty_assertions::assert_eq;
use serde_json::json;
use sqlx::Connection;
use time::OffsetDateTime;

const LEASE: Duration = Duration::from_secs(30);

fn event(seq: i64) -> NewEvent {
    NewEvent::new(seq, "tool_result", &json!({ "seq": seq })).unwrap()
}

fn completed(result: serde_json::Value) -> Outcome {
    Outcome {
        status: JobStatus::Completed,
        result: Some(result),
        reason: None,
    }
}

async fn submit(store: &Store, task: impl Into<String>, by: &str) -> JobId {
    store
        .submit(NewJob::new("default", task, by))
        .await
        .unwrap()
}

/// Claims any job with the default lease.
async fn claim(store: &Store, worker: &str) -> Option<Claimed> {
    store.claim(worker, &Classes::Any, LEASE).await.unwrap()
}

/// The sequence numbers of the job's stored events after `after`.
async fn stored_seqs(store: &Store, id: JobId, after: i64) -> Vec<i64> {
    let events = store.events(id, after).await.unwrap();
    events.iter().map(|e| e.seq).collect()
}

fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(OffsetDateTime::now_utc()))
}

on_both_backends!(
    migrations_are_idempotent,
    an_old_database_upgrades_in_place,
    submit_claim_finish,
    two_workers_race_for_each_job_and_exactly_one_wins,
    a_stale_worker_is_fenced_out_after_a_takeover,
    a_rescue_past_max_attempts_fails_the_job,
    a_lapsed_job_goes_back_to_its_place_in_the_queue,
    a_claim_reads_one_index_in_claim_order,
    events_are_unique_per_seq_and_batches_are_atomic,
    one_connection_serves_concurrent_queries_in_turn,
    batches_appended_together_are_fenced_one_by_one,
    a_large_group_without_repeats_is_written_whole_and_fenced,
    a_schedule_slot_fires_once_across_connections,
    missed_slots_are_recorded_once_across_connections,
    retryable_failures_back_off_then_fail,
    cancel_reaches_descendants_and_stops_the_worker,
    comments_blobs_workers_and_audit,
    a_job_is_claimed_by_id_and_a_stopped_one_reopened,
    an_answer_queues_a_waiting_job_again,
);

async fn migrations_are_idempotent(db: Db) {
    let first = db.open().await;
    assert_eq!(
        first.applied_migrations().await.unwrap(),
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    );
    first.close().await;
    let second = db.open().await;
    second.migrate_to(SCHEMA_VERSION).await.unwrap();
    assert_eq!(
        second.applied_migrations().await.unwrap(),
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    );
    submit(&second, "still works", "alice").await;
    // A build that knows only version 1 refuses the newer database instead of using it.
    let refused = second.migrate_to(1).await.unwrap_err().to_string();
    assert!(refused.contains("migration 2"), "{refused}");
}

async fn an_old_database_upgrades_in_place(db: Db) {
    // A database as version 1 left it, with rows written by version 1's columns.
    let old = Store::connect(&db.url).await.unwrap();
    old.migrate_to(1).await.unwrap();
    assert_eq!(old.applied_migrations().await.unwrap(), vec![1]);
    old.close().await;
    let id = JobId::new();
    let mut conn = sqlx::AnyConnection::connect(&db.raw_url()).await.unwrap();
    sqlx::query::<sqlx::Any>(
        "INSERT INTO jobs (id, piece, task, status, submitted_by, max_attempts, run_at, \
         created_at, updated_at, result) VALUES ($1, 'default', 'old task', 'completed', 'bob', \
         3, 1000, 1000, 2000, '{\"ok\":true}')",
    )
    .bind(id.to_string())
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query::<sqlx::Any>(
        "INSERT INTO job_events (job_id, seq, fence, kind, payload, created_at) \
         VALUES ($1, 1, 1, 'run_started', '{\"a\":1}', 1500)",
    )
    .bind(id.to_string())
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = db.open().await;
    assert_eq!(
        store.applied_migrations().await.unwrap(),
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    );
    let job = store.job(id).await.unwrap().unwrap();
    assert_eq!(
        (job.task.as_str(), job.status, job.result, job.schedule_id),
        (
            "old task",
            JobStatus::Completed,
            Some(json!({"ok": true})),
            None
        )
    );
    let events = store.events(id, 0).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload, json!({"a": 1}));
    // The tables version 2 added are there.
    store
        .add_comment(id, "bob", CommentKind::Note, "after the upgrade")
        .await
        .unwrap();
}

async fn submit_claim_finish(db: Db) {
    let store = db.open().await;
    let low = submit(&store, "low", "alice").await;
    let high = store
        .submit(NewJob {
            priority: 5,
            ..NewJob::new("default", "high", "alice")
        })
        .await
        .unwrap();
    let other_class = store
        .submit(NewJob {
            priority: 9,
            task_class: "gpu".into(),
            ..NewJob::new("default", "gpu", "alice")
        })
        .await
        .unwrap();
    let cpu = Classes::Only(vec!["default".into()]);

    let first = store.claim("w1", &cpu, LEASE).await.unwrap().unwrap();
    assert_eq!((first.job.id, first.job.status), (high, JobStatus::Running));
    assert_eq!((first.lease.fence, first.job.attempts), (1, 1));
    assert_eq!(first.job.lease_owner.as_deref(), Some("w1"));
    let second = store.claim("w1", &cpu, LEASE).await.unwrap().unwrap();
    assert_eq!(second.job.id, low);
    assert!(store.claim("w1", &cpu, LEASE).await.unwrap().is_none());
    let gpu = claim(&store, "w2").await.unwrap();
    assert_eq!(gpu.job.id, other_class);

    let renewed = store
        .heartbeat(&first.lease, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(renewed.expires_at > first.lease.expires_at);
    store
        .append_events(&renewed, &[event(1), event(2)])
        .await
        .unwrap();
    store
        .finish(&renewed, completed(json!("done")))
        .await
        .unwrap();
    let job = store.job(high).await.unwrap().unwrap();
    assert_eq!(
        (
            job.status,
            job.result,
            job.lease_owner,
            job.lease_expires_at
        ),
        (JobStatus::Completed, Some(json!("done")), None, None)
    );
    // A finished job is never claimed again.
    store
        .finish(&second.lease, completed(json!(1)))
        .await
        .unwrap();
    store.finish(&gpu.lease, completed(json!(2))).await.unwrap();
    assert!(claim(&store, "w1").await.is_none());
    assert_eq!(
        store.jobs(Some(JobStatus::Completed)).await.unwrap().len(),
        3
    );
    let audit: Vec<_> = store
        .audit_log(Some(high))
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.actor, e.action))
        .collect();
    assert_eq!(audit, vec![("alice".to_string(), AuditAction::Submit)]);
    // Finishing as a status the worker may not set is refused.
    let next = submit(&store, "x", "alice").await;
    let claimed = claim(&store, "w1").await.unwrap();
    assert_eq!(claimed.job.id, next);
    let refused = store
        .finish(
            &claimed.lease,
            Outcome {
                status: JobStatus::Queued,
                result: None,
                reason: None,
            },
        )
        .await;
    assert!(matches!(refused, Err(StoreError::InvalidTransition { .. })));
}

async fn two_workers_race_for_each_job_and_exactly_one_wins(db: Db) {
    // Two stores: two pools, so the claims really run on separate connections at once.
    let a = db.open().await;
    let b = db.open().await;
    for round in 0..25 {
        let id = submit(&a, format!("job {round}"), "alice").await;
        let (ra, rb) = tokio::join!(
            a.claim("a", &Classes::Any, LEASE),
            b.claim("b", &Classes::Any, LEASE)
        );
        let winners: Vec<_> = [ra.unwrap(), rb.unwrap()].into_iter().flatten().collect();
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!((winners[0].job.id, winners[0].lease.fence), (id, 1));
        a.finish(&winners[0].lease, completed(json!(round)))
            .await
            .unwrap();
    }
}

async fn a_stale_worker_is_fenced_out_after_a_takeover(db: Db) {
    let clock = manual_clock();
    let store = db.open().await.with_clock(clock.clone());
    let id = submit(&store, "slow", "alice").await;
    let slow = store
        .claim("slow", &Classes::Any, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    store.append_events(&slow.lease, &[event(1)]).await.unwrap();
    // Nobody else may take a live lease.
    assert!(claim(&store, "fast").await.is_none());

    clock.advance(Duration::from_secs(6));
    let fast = claim(&store, "fast").await.unwrap();
    assert_eq!(
        (fast.job.id, fast.lease.fence, fast.job.attempts),
        (id, 2, 2)
    );

    let lost = |r: Result<_, StoreError>| match r {
        Err(StoreError::LeaseLost {
            job,
            held,
            current,
            status,
        }) => (job, held, current, status),
        other => panic!("expected LeaseLost, got {other:?}"),
    };
    let expected = (id, 1, 2, JobStatus::Running);
    assert_eq!(
        lost(store.append_events(&slow.lease, &[event(2)]).await),
        expected
    );
    assert_eq!(
        lost(store.heartbeat(&slow.lease, LEASE).await.map(|_| ())),
        expected
    );
    assert_eq!(
        lost(store.finish(&slow.lease, completed(json!("stale"))).await),
        expected
    );
    assert_eq!(
        lost(store.fail(&slow.lease, "stale").await.map(|_| ())),
        expected
    );
    assert_eq!(lost(store.release(&slow.lease).await), expected);

    store.append_events(&fast.lease, &[event(2)]).await.unwrap();
    store
        .finish(&fast.lease, completed(json!("fast")))
        .await
        .unwrap();
    let events = store.events(id, 0).await.unwrap();
    let written: Vec<_> = events.iter().map(|e| (e.seq, e.fence)).collect();
    assert_eq!(written, vec![(1, 1), (2, 2)]);
    assert_eq!(
        store.job(id).await.unwrap().unwrap().result,
        Some(json!("fast"))
    );
}

async fn a_rescue_past_max_attempts_fails_the_job(db: Db) {
    let clock = manual_clock();
    let store = db.open().await.with_clock(clock.clone());
    let id = store
        .submit(NewJob {
            max_attempts: 2,
            ..NewJob::new("default", "crashes", "alice")
        })
        .await
        .unwrap();
    for attempt in 1..=2 {
        let claimed = claim(&store, "w").await.unwrap();
        assert_eq!(claimed.job.attempts, attempt);
        clock.advance(LEASE + Duration::from_secs(1));
    }
    assert!(claim(&store, "w").await.is_none());
    let job = store.job(id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Failed);
    assert!(job.reason.unwrap().contains("stopped renewing its lease"));
}

async fn a_lapsed_job_goes_back_to_its_place_in_the_queue(db: Db) {
    let clock = manual_clock();
    let store = db.open().await.with_clock(clock.clone());
    let gpu = Classes::Only(vec!["gpu".into()]);
    let submit_gpu = |task: &'static str| {
        store.submit(NewJob {
            task_class: "gpu".into(),
            ..NewJob::new("default", task, "alice")
        })
    };
    let older = submit_gpu("older").await.unwrap();
    clock.advance(Duration::from_millis(5));
    let newer = submit_gpu("newer").await.unwrap();
    let crashed = store.claim("crashed", &gpu, LEASE).await.unwrap().unwrap();
    assert_eq!(crashed.job.id, older);

    // A claim for another class finds nothing, but its sweep puts the lapsed job back.
    clock.advance(LEASE + Duration::from_secs(1));
    assert!(
        store
            .claim("cpu", &Classes::Only(vec!["default".into()]), LEASE)
            .await
            .unwrap()
            .is_none()
    );
    let job = store.job(older).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.attempts, job.fence, job.lease_owner),
        (JobStatus::Queued, 1, 1, None)
    );
    // Its old worker is shut out already, before anyone claims it again.
    match store.append_events(&crashed.lease, &[event(1)]).await {
        Err(StoreError::LeaseLost {
            job, held, status, ..
        }) => assert_eq!((job, held, status), (older, 1, JobStatus::Queued)),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(store.heartbeat(&crashed.lease, LEASE).await.is_err());

    // It keeps its place: older than the job that waited all along, so it is claimed first.
    let again = store.claim("gpu", &gpu, LEASE).await.unwrap().unwrap();
    assert_eq!(
        (again.job.id, again.job.attempts, again.lease.fence),
        (older, 2, 2)
    );
    let next = store.claim("gpu", &gpu, LEASE).await.unwrap().unwrap();
    assert_eq!(next.job.id, newer);
    assert!(store.events(older, 0).await.unwrap().is_empty());
}

async fn a_claim_reads_one_index_in_claim_order(db: Db) {
    let store = db.open().await;
    let submit_many = |n: i64| {
        let store = store.clone();
        async move {
            for i in 0..n {
                store
                    .submit(NewJob {
                        priority: i % 3,
                        task_class: if i % 2 == 0 { "default" } else { "gpu" }.into(),
                        ..NewJob::new("default", format!("job {i}"), "alice")
                    })
                    .await
                    .unwrap();
            }
        }
    };
    // A young database, whose statistics the server has not taken yet, and a backlog that
    // arrived at once.
    submit_many(1_000).await;
    // The planner must not read every queued job and sort them: the claim goes down one index
    // in claim order and stops after the jobs it takes.
    for classes in [Classes::Any, Classes::Only(vec!["gpu".into()])] {
        let plan = store.claim_plan(&classes, 8).await.unwrap();
        assert!(plan.contains("jobs_queued"), "{classes:?}:\n{plan}");
        for costly in ["Sort", "Bitmap", "Seq Scan", "TEMP B-TREE"] {
            assert!(!plan.contains(costly), "{classes:?}: {costly} in\n{plan}");
        }
        // SQLite: no step reads the table itself from end to end.
        assert!(
            !plan.lines().any(|l| l.trim() == "SCAN jobs"),
            "{classes:?}:\n{plan}"
        );
    }
    // Explaining claimed nothing.
    assert_eq!(
        store.jobs(Some(JobStatus::Queued)).await.unwrap().len(),
        1_000
    );
}

async fn events_are_unique_per_seq_and_batches_are_atomic(db: Db) {
    let store = db.open().await;
    let id = submit(&store, "t", "alice").await;
    let lease = claim(&store, "w").await.unwrap().lease;
    store
        .append_events(&lease, &[event(1), event(2)])
        .await
        .unwrap();
    let replayed = store.append_events(&lease, &[event(2)]).await;
    assert!(
        matches!(replayed, Err(StoreError::EventExists { job, seq: 2 }) if job == id),
        "{replayed:?}"
    );
    let batch = store
        .append_events(&lease, &[event(3), event(4), event(1)])
        .await;
    assert!(
        matches!(batch, Err(StoreError::EventExists { seq: 1, .. })),
        "{batch:?}"
    );
    assert_eq!(stored_seqs(&store, id, 0).await, vec![1, 2]);
    assert_eq!(stored_seqs(&store, id, 1).await, vec![2]);
    store.append_events(&lease, &[event(3)]).await.unwrap();
}

/// `maestro run` opens its store with a single connection: the run's events, the lease's
/// heartbeat and reads take it in turn, and a rejected batch hands its transaction back before
/// it reads the stored events (with one connection, holding it would wait forever).
async fn one_connection_serves_concurrent_queries_in_turn(db: Db) {
    let store = Store::open_with(&db.url, PoolSize::Single).await.unwrap();
    let id = submit(&store, "t", "alice").await;
    let lease = claim(&store, "w").await.unwrap().lease;
    let (first, next, again) = ([event(1)], [event(2), event(3)], [event(1)]);
    store.append_events(&lease, &first).await.unwrap();
    let (appended, renewed, replayed, read) = tokio::join!(
        store.append_events(&lease, &next),
        store.heartbeat(&lease, LEASE),
        store.append_events(&lease, &again),
        store.events(id, 0),
    );
    appended.unwrap();
    assert_eq!(renewed.unwrap().fence, lease.fence);
    assert!(
        matches!(replayed, Err(StoreError::EventExists { seq: 1, .. })),
        "{replayed:?}"
    );
    assert!(!read.unwrap().is_empty());
    assert_eq!(stored_seqs(&store, id, 0).await, vec![1, 2, 3]);
}

/// How one batch of a group fared, comparable as a whole.
#[derive(Debug, PartialEq)]
enum Appended {
    Written,
    LeaseLost { held: i64, current: i64 },
    Cancelled,
    Exists { seq: i64 },
}

fn appended(result: &Result<(), StoreError>) -> Appended {
    match result {
        Ok(()) => Appended::Written,
        Err(StoreError::LeaseLost { held, current, .. }) => Appended::LeaseLost {
            held: *held,
            current: *current,
        },
        Err(StoreError::JobCancelled(_)) => Appended::Cancelled,
        Err(StoreError::EventExists { seq, .. }) => Appended::Exists { seq: *seq },
        Err(other) => panic!("unexpected store error: {other}"),
    }
}

/// The batches of several runs in one transaction: a stale attempt's batch, a cancelled job's
/// and a batch with a `seq` already stored are refused, each alone, and every other batch
/// (before and after them in the group) is written.
async fn batches_appended_together_are_fenced_one_by_one(db: Db) {
    let clock = manual_clock();
    let store = db.open().await.with_clock(clock.clone());
    let ids: Vec<JobId> = {
        let mut ids = Vec::new();
        for task in ["a", "b", "c", "d"] {
            ids.push(submit(&store, task, "alice").await);
        }
        ids
    };
    let mut leases = Vec::new();
    for _ in &ids {
        let claimed = store
            .claim("first", &Classes::Any, Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        leases.push(claimed.lease);
    }
    leases.sort_by_key(|l| ids.iter().position(|id| *id == l.job_id));
    let [a, b_stale, c, d] = <[_; 4]>::try_from(leases).unwrap();
    // b's attempt 1 stalls past its lease and attempt 2 takes over; the others keep theirs.
    clock.advance(Duration::from_secs(6));
    for lease in [&a, &c, &d] {
        store.heartbeat(lease, LEASE).await.unwrap();
    }
    let b_new = claim(&store, "second").await.unwrap();
    assert_eq!((b_new.job.id, b_new.lease.fence), (ids[1], 2));
    let b_new = b_new.lease;
    store.cancel(ids[2], "carol").await.unwrap();
    store.append_events(&d, &[event(1)]).await.unwrap();

    let batch = |lease: &maestro_store::Lease, seqs: &[i64]| EventBatch {
        lease: lease.clone(),
        events: seqs.iter().map(|s| event(*s)).collect(),
    };
    let results = store
        .append_batches(&[
            batch(&a, &[1, 2]),
            batch(&b_stale, &[1]),
            batch(&b_new, &[1]),
            batch(&c, &[1]),
            batch(&d, &[2, 1]),
            batch(&d, &[2]),
            batch(&a, &[3]),
        ])
        .await;
    assert_eq!(
        results.iter().map(appended).collect::<Vec<_>>(),
        vec![
            Appended::Written,
            Appended::LeaseLost {
                held: 1,
                current: 2
            },
            Appended::Written,
            Appended::Cancelled,
            Appended::Exists { seq: 1 },
            Appended::Written,
            Appended::Written,
        ]
    );
    let mut stored = Vec::new();
    for id in &ids {
        let events = store.events(*id, 0).await.unwrap();
        stored.push(events.iter().map(|e| (e.seq, e.fence)).collect::<Vec<_>>());
    }
    assert_eq!(
        stored,
        vec![
            vec![(1, 1), (2, 1), (3, 1)],
            vec![(1, 2)],
            vec![],
            vec![(1, 1), (2, 1)],
        ]
    );
    // An empty group, and a group of one, behave as single appends do.
    assert!(store.append_batches(&[]).await.is_empty());
    assert_eq!(
        appended(&store.append_batches(&[batch(&b_stale, &[2])]).await[0]),
        Appended::LeaseLost {
            held: 1,
            current: 2
        }
    );
}

/// A group with no `seq` stored twice (the common case, written with one fence read and as
/// few INSERTs as the parameters allow): 30 runs of 40 events, more rows than one INSERT
/// carries, with one cancelled job among them, are written in order and the cancelled job's
/// batch alone is refused.
async fn a_large_group_without_repeats_is_written_whole_and_fenced(db: Db) {
    let store = db.open().await;
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(submit(&store, format!("run {i}"), "alice").await);
    }
    let leases: Vec<maestro_store::Lease> = store
        .claim_batch("w", &Classes::Any, LEASE, 30)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.lease)
        .collect();
    let cancelled = leases[11].job_id;
    store.cancel(cancelled, "carol").await.unwrap();
    let batches: Vec<EventBatch> = leases
        .iter()
        .map(|lease| EventBatch {
            lease: lease.clone(),
            events: (1..=40).map(event).collect(),
        })
        .collect();
    let results = store.append_batches(&batches).await;
    let expected: Vec<Appended> = leases
        .iter()
        .map(|l| {
            if l.job_id == cancelled {
                Appended::Cancelled
            } else {
                Appended::Written
            }
        })
        .collect();
    assert_eq!(results.iter().map(appended).collect::<Vec<_>>(), expected);
    for lease in &leases {
        let seqs = stored_seqs(&store, lease.job_id, 0).await;
        if lease.job_id == cancelled {
            assert_eq!(seqs, Vec::<i64>::new());
        } else {
            assert_eq!(seqs, (1..=40).collect::<Vec<i64>>());
        }
    }
}

async fn a_schedule_slot_fires_once_across_connections(db: Db) {
    let a = db.open().await;
    let b = db.open().await;
    let schedule = a
        .add_schedule(&NewSchedule {
            piece: "report".into(),
            task: "daily report".into(),
            spec: "daily 09:00".into(),
            tz: "UTC".into(),
            misfire: "skip".into(),
            created_by: "alice".into(),
            owner: None,
        })
        .await
        .unwrap();
    let job = NewJob::new("report", "daily report", "scheduler");
    for day in 0..10 {
        let slot = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000 + day);
        let (fa, fb) = tokio::join!(
            a.fire_slot(&schedule, slot, &job),
            b.fire_slot(&schedule, slot, &job)
        );
        let fired: Vec<_> = [fa.unwrap(), fb.unwrap()].into_iter().flatten().collect();
        assert_eq!(fired.len(), 1, "slot {slot}: {fired:?}");
        let created = a.job(fired[0]).await.unwrap().unwrap();
        assert_eq!(
            (created.schedule_id.as_deref(), created.scheduled_for),
            (Some(schedule.as_str()), Some(slot))
        );
    }
    assert_eq!(a.fired_slots(&schedule).await.unwrap(), 10);
    assert_eq!(a.jobs(Some(JobStatus::Queued)).await.unwrap().len(), 10);
    // The database itself refuses a second row for a slot, whoever writes it.
    let mut conn = sqlx::AnyConnection::connect(&db.raw_url()).await.unwrap();
    let slot_ms =
        (OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000)).unix_timestamp() * 1000;
    let duplicate = sqlx::query::<sqlx::Any>(
        "INSERT INTO schedule_fires (schedule_id, slot_time, fired_at) VALUES ($1, $2, 0)",
    )
    .bind(schedule.clone())
    .bind(slot_ms)
    .execute(&mut conn)
    .await;
    match duplicate {
        Err(sqlx::Error::Database(e)) => assert!(e.is_unique_violation(), "{e}"),
        other => panic!("expected a unique violation, got {other:?}"),
    }
}

async fn retryable_failures_back_off_then_fail(db: Db) {
    let clock = manual_clock();
    let store = db
        .open()
        .await
        .with_clock(clock.clone())
        .with_backoff(Backoff {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(15),
        });
    let id = store
        .submit(NewJob {
            max_attempts: 3,
            ..NewJob::new("default", "flaky endpoint", "alice")
        })
        .await
        .unwrap();
    let mut delays = Vec::new();
    for _ in 0..2 {
        let claimed = claim(&store, "w").await.unwrap();
        let FailDisposition::Requeued { run_at } = store
            .fail(&claimed.lease, "endpoint unreachable")
            .await
            .unwrap()
        else {
            panic!("requeue expected before max_attempts");
        };
        let delay = run_at - clock.now();
        delays.push(delay);
        // Not claimable before its backoff has passed.
        assert!(claim(&store, "w").await.is_none());
        clock.advance(Duration::from_secs(16));
    }
    // 10 s then min(20 s, cap 15 s), each scaled by a jitter in [0.5, 1].
    assert!(delays[0] >= time::Duration::seconds(5) && delays[0] <= time::Duration::seconds(10));
    assert!(
        delays[1] >= time::Duration::milliseconds(7500) && delays[1] <= time::Duration::seconds(15)
    );
    let last = claim(&store, "w").await.unwrap();
    assert_eq!(last.job.attempts, 3);
    assert_eq!(
        store
            .fail(&last.lease, "endpoint unreachable")
            .await
            .unwrap(),
        FailDisposition::Failed
    );
    let job = store.job(id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.reason.as_deref()),
        (JobStatus::Failed, Some("endpoint unreachable"))
    );
}

async fn cancel_reaches_descendants_and_stops_the_worker(db: Db) {
    let store = db.open().await;
    let parent = submit(&store, "parent", "alice").await;
    let running = claim(&store, "w").await.unwrap();
    let child = store
        .submit(NewJob {
            parent_id: Some(parent),
            ..NewJob::new("default", "child", "w")
        })
        .await
        .unwrap();
    let grandchild = store
        .submit(NewJob {
            parent_id: Some(child),
            ..NewJob::new("default", "grandchild", "w")
        })
        .await
        .unwrap();
    let unrelated = submit(&store, "other", "bob").await;

    let mut expected = vec![parent, child, grandchild];
    expected.sort();
    assert_eq!(store.cancel(parent, "carol").await.unwrap(), expected);
    let refused = store.append_events(&running.lease, &[event(1)]).await;
    assert!(
        matches!(refused, Err(StoreError::JobCancelled(id)) if id == parent),
        "{refused:?}"
    );
    assert!(matches!(
        store.cancel(parent, "carol").await,
        Err(StoreError::InvalidTransition { .. })
    ));
    assert_eq!(
        store.job(unrelated).await.unwrap().unwrap().status,
        JobStatus::Queued
    );
    let next = claim(&store, "w").await.unwrap();
    assert_eq!(next.job.id, unrelated);
    let audit: Vec<_> = store
        .audit_log(Some(parent))
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.actor, e.action))
        .collect();
    assert_eq!(
        audit,
        vec![
            ("alice".to_string(), AuditAction::Submit),
            ("carol".to_string(), AuditAction::Cancel)
        ]
    );
}

async fn comments_blobs_workers_and_audit(db: Db) {
    let store = db.open().await;
    let id = submit(&store, "asks", "alice").await;
    store
        .add_comment(id, "run", CommentKind::Question, "Which branch?")
        .await
        .unwrap();
    store
        .add_comment(id, "alice", CommentKind::Answer, "main")
        .await
        .unwrap();
    let comments: Vec<_> = store
        .comments(id)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.author, c.kind, c.body))
        .collect();
    assert_eq!(
        comments,
        vec![
            ("run".into(), CommentKind::Question, "Which branch?".into()),
            ("alice".into(), CommentKind::Answer, "main".into())
        ]
    );
    let actions: Vec<_> = store
        .audit_log(Some(id))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(actions, vec![AuditAction::Submit, AuditAction::Answer]);

    let big = vec![7u8; 300_000];
    let hash = store.put_blob(&big).await.unwrap();
    assert_eq!(store.put_blob(&big).await.unwrap(), hash);
    assert_eq!(store.blob(&hash).await.unwrap(), Some(big));
    assert_eq!(store.blob("0000").await.unwrap(), None);

    let worker = maestro_store::WorkerInfo {
        id: "w-1".into(),
        name: "builder".into(),
        profile: "default".into(),
        task_classes: vec!["default".into(), "gpu".into()],
        host: "node-a".into(),
        pid: 42,
        started_at: OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000),
        heartbeat_at: OffsetDateTime::UNIX_EPOCH,
    };
    store.register_worker(&worker).await.unwrap();
    store.worker_heartbeat("w-1").await.unwrap();
    let live = store.live_workers(Duration::from_secs(60)).await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(
        (&live[0].name, &live[0].task_classes, live[0].started_at),
        (&worker.name, &worker.task_classes, worker.started_at)
    );
}

async fn a_job_is_claimed_by_id_and_a_stopped_one_reopened(db: Db) {
    let clock = manual_clock();
    let store = db.open().await.with_clock(clock.clone());
    let older = submit(&store, "older", "alice").await;
    let mine = submit(&store, "mine", "alice").await;
    // the named job, not the oldest one
    let claimed = store
        .claim_job(mine, "local", LEASE, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((claimed.job.id, claimed.job.attempts), (mine, 1));
    // a live lease is nobody else's to take
    assert!(
        store
            .claim_job(mine, "other", LEASE, true)
            .await
            .unwrap()
            .is_none()
    );
    store
        .append_events(&claimed.lease, &[event(1)])
        .await
        .unwrap();
    store
        .finish(
            &claimed.lease,
            Outcome {
                status: JobStatus::Cancelled,
                result: None,
                reason: Some("cancelled".into()),
            },
        )
        .await
        .unwrap();
    // an ended job is claimed only when reopening, which fences the earlier claim out
    assert!(
        store
            .claim_job(mine, "local", LEASE, false)
            .await
            .unwrap()
            .is_none()
    );
    let again = store
        .claim_job(mine, "local", LEASE, true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (again.job.status, again.job.attempts, again.lease.fence),
        (JobStatus::Running, 1, 2)
    );
    assert!(
        store
            .append_events(&claimed.lease, &[event(2)])
            .await
            .is_err()
    );
    store
        .append_events(&again.lease, &[event(2)])
        .await
        .unwrap();
    // an expired lease is claimable by id too
    clock.advance(LEASE + Duration::from_secs(1));
    let rescued = store
        .claim_job(mine, "rescuer", LEASE, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rescued.lease.fence, 3);
    // the older job was never touched
    assert_eq!(
        store.job(older).await.unwrap().unwrap().status,
        JobStatus::Queued
    );
}

async fn an_answer_queues_a_waiting_job_again(db: Db) {
    let store = db.open().await;
    let id = submit(&store, "plan", "alice").await;
    assert!(matches!(
        store.answer(id, "bob", "too early").await,
        Err(StoreError::InvalidTransition { .. })
    ));
    for round in ["Italian", "Six"] {
        let claimed = claim(&store, "w1").await.unwrap();
        assert_eq!(claimed.job.attempts, 1, "a park is not a failed attempt");
        store
            .finish(
                &claimed.lease,
                Outcome {
                    status: JobStatus::WaitingInput,
                    result: None,
                    reason: None,
                },
            )
            .await
            .unwrap();
        assert!(
            claim(&store, "w1").await.is_none(),
            "a waiting job holds no slot"
        );
        store.answer(id, "bob", round).await.unwrap();
        assert_eq!(
            store.job(id).await.unwrap().unwrap().status,
            JobStatus::Queued
        );
    }
    assert_eq!(store.answers(id).await.unwrap(), vec!["Italian", "Six"]);
    let answers = store
        .audit_log(Some(id))
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.action == AuditAction::Answer)
        .count();
    assert_eq!(answers, 2);
}

/// Two nodes coming back at once see different last missed slots; one records them (and its
/// catch-up job), the other records nothing.
async fn missed_slots_are_recorded_once_across_connections(db: Db) {
    let a = db.open().await;
    let b = db.open().await;
    let schedule = a
        .add_schedule(&NewSchedule {
            piece: "report".into(),
            task: "tick".into(),
            spec: "every 2s".into(),
            tz: "UTC".into(),
            misfire: "catch_up_once".into(),
            created_by: "alice".into(),
            owner: None,
        })
        .await
        .unwrap();
    let job = NewJob::new("report", "tick", "scheduler");
    let at = |s: i64| OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(1_800_000_000 + s);
    for round in 0..5 {
        let base = round * 100;
        let (ra, rb) = tokio::join!(
            a.record_missed(&schedule, Some(at(base)), at(base + 8), 4, Some(&job)),
            b.record_missed(&schedule, Some(at(base)), at(base + 10), 5, Some(&job))
        );
        let recorded: Vec<_> = [ra.unwrap(), rb.unwrap()].into_iter().flatten().collect();
        assert_eq!(recorded.len(), 1, "round {round}: {recorded:?}");
        assert!(recorded[0].is_some());
    }
    let listed = a.schedules().await.unwrap();
    assert_eq!(listed[0].fired, 5);
    assert!(
        (20..=25).contains(&listed[0].missed),
        "{}",
        listed[0].missed
    );
}

/// SQLite: events committed go to the write-ahead log, and a background checkpoint (not the
/// committing writer) copies them into the database file within a couple of seconds, with no
/// write after them to set it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_checkpoints_its_log_in_the_background() {
    let db = Db::sqlite();
    let store = db.open().await;
    let StoreUrl::Sqlite { path } = &db.url else {
        unreachable!()
    };
    let id = submit(&store, "fill the log", "test").await;
    let claimed = claim(&store, "w1").await.unwrap();
    assert_eq!(claimed.job.id, id);
    // About 2 MB of events: far below `wal_autocheckpoint`, so only the background task
    // can move them into the database file.
    let filler = "x".repeat(2_000);
    let events: Vec<NewEvent> = (1..=1_000)
        .map(|seq| NewEvent::new(seq, "tool_result", &json!({ "text": filler })).unwrap())
        .collect();
    store.append_events(&claimed.lease, &events).await.unwrap();
    let size = || std::fs::metadata(path).unwrap().len();
    let before = size();
    assert!(
        before < 1_000_000,
        "the events went to the log, not the file: {before} bytes"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while size() < 2_000_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint within 5 s: the database file is still {} bytes",
            size()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stored_seqs(&store, id, 0).await.len(), 1_000);
}

/// SQLite removes the write-ahead log when the last connection closes: after `close`, and
/// after the last clone is dropped once the dropped stores are waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_or_dropping_a_sqlite_store_removes_its_wal_files() {
    let db = common::Db::sqlite();
    let StoreUrl::Sqlite { path } = &db.url else {
        unreachable!()
    };
    let side_files = || {
        ["-wal", "-shm"]
            .into_iter()
            .filter(|suffix| {
                let mut name = path.clone().into_os_string();
                name.push(suffix);
                std::path::Path::new(&name).exists()
            })
            .collect::<Vec<_>>()
    };
    let store = db.open().await;
    store
        .submit(NewJob::new("default", "closed", "alice"))
        .await
        .unwrap();
    assert_eq!(side_files(), vec!["-wal", "-shm"]);
    store.close().await;
    assert_eq!(side_files(), Vec::<&str>::new());

    let store = db.open().await;
    let clone = store.clone();
    store
        .submit(NewJob::new("default", "dropped", "alice"))
        .await
        .unwrap();
    drop(store);
    drop(clone);
    Store::wait_dropped_closed().await;
    assert_eq!(side_files(), Vec::<&str>::new());
}
