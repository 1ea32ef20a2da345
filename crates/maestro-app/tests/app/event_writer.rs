//! The worker's event writer on SQLite and on a real PostgreSQL cluster: the events of
//! concurrent runs are committed together, each run waits for its own, and a stale attempt is
//! refused (its stop latch closed) without failing the others'.

use std::sync::Arc;
use std::time::Duration;

use maestro_app::{AppendFailure, EventWriter, StopLatch, StoreLog};
use maestro_engine::{EventRecord, RunEvent};
use maestro_store::{Classes, JobId, JobQueue, Lease, ManualClock, NewJob, Store, StoreUrl};
use maestro_testkit::PgCluster;
use pretty_assertions::assert_eq;
use time::OffsetDateTime;

fn started(seq: u64, movement: &str) -> EventRecord {
    EventRecord {
        seq,
        ts: "2026-01-01T00:00:00Z".into(),
        event: RunEvent::MovementStarted {
            movement: movement.into(),
            iteration: 1,
            movement_iteration: 1,
            parent: None,
            prompt_log: None,
        },
    }
}

/// How one run's append went, comparable as a whole.
#[derive(Debug, PartialEq)]
enum Appended {
    Written,
    Fenced,
}

fn appended(result: Result<(), AppendFailure>) -> Appended {
    match result {
        Ok(()) => Appended::Written,
        Err(AppendFailure::Fenced(_)) => Appended::Fenced,
        Err(other) => panic!("unexpected append failure: {other}"),
    }
}

async fn claim_one(store: &Store, worker: &str, lease_for: Duration) -> Lease {
    store
        .claim(worker, &Classes::Any, lease_for)
        .await
        .unwrap()
        .unwrap()
        .lease
}

async fn stale_run_is_refused_alone(url: StoreUrl) {
    let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
    let store = Store::open(&url).await.unwrap().with_clock(clock.clone());
    let mut ids: Vec<JobId> = Vec::new();
    for task in ["a", "b", "c"] {
        ids.push(
            store
                .submit(NewJob::new("default", task, "alice"))
                .await
                .unwrap(),
        );
    }
    let short = Duration::from_secs(5);
    let a = claim_one(&store, "first", short).await;
    let b_stale = claim_one(&store, "first", short).await;
    let c = claim_one(&store, "first", short).await;
    assert_eq!(vec![a.job_id, b_stale.job_id, c.job_id], ids);
    // b's first attempt stalls past its lease and a second attempt takes the job over.
    clock.advance(Duration::from_secs(6));
    store.heartbeat(&a, Duration::from_secs(30)).await.unwrap();
    store.heartbeat(&c, Duration::from_secs(30)).await.unwrap();
    let b_new = claim_one(&store, "second", Duration::from_secs(30)).await;
    assert_eq!((b_new.job_id, b_new.fence), (ids[1], 2));

    let writer = EventWriter::new(store.clone());
    let log = |lease: &Lease| {
        let latch = Arc::new(StopLatch::default());
        (
            StoreLog::new(writer.clone(), lease.clone(), Arc::clone(&latch)),
            latch,
        )
    };
    let (log_a, fence_a) = log(&a);
    let (log_stale, fence_stale) = log(&b_stale);
    let (log_new, fence_new) = log(&b_new);
    let (log_c, fence_c) = log(&c);
    // All four are queued before the writer task first runs (this test's runtime has one
    // thread), so they share one commit.
    let first = [started(1, "plan")];
    let both = [started(1, "plan"), started(2, "build")];
    let (ra, rstale, rnew, rc) = tokio::join!(
        log_a.append_records(&both),
        log_stale.append_records(&first),
        log_new.append_records(&first),
        log_c.append_records(&first),
    );
    assert_eq!(
        [ra, rstale, rnew, rc].map(appended),
        [
            Appended::Written,
            Appended::Fenced,
            Appended::Written,
            Appended::Written
        ]
    );
    assert_eq!(
        [&fence_a, &fence_stale, &fence_new, &fence_c].map(|f| f.closed().is_some()),
        [false, true, false, false]
    );
    assert!(fence_stale.stop_run.is_cancelled());
    // The stale run writes nothing more.
    assert_eq!(
        appended(log_stale.append_records(&[started(2, "build")]).await),
        Appended::Fenced
    );

    // The next commit goes on for the others.
    let (check, build) = ([started(3, "check")], [started(2, "build")]);
    let (ra, rc) = tokio::join!(log_a.append_records(&check), log_c.append_records(&build));
    assert_eq!(
        [ra, rc].map(appended),
        [Appended::Written, Appended::Written]
    );
    let mut stored = Vec::new();
    for id in &ids {
        let events = store.events(*id, 0).await.unwrap();
        stored.push(
            events
                .iter()
                .map(|e| {
                    let movement = e.payload["movement"].as_str().unwrap().to_string();
                    (e.seq, e.fence, movement)
                })
                .collect::<Vec<_>>(),
        );
    }
    let row = |seq: i64, fence: i64, movement: &str| (seq, fence, movement.to_string());
    assert_eq!(
        stored,
        vec![
            vec![row(1, 1, "plan"), row(2, 1, "build"), row(3, 1, "check")],
            vec![row(1, 2, "plan")],
            vec![row(1, 1, "plan"), row(2, 1, "build")],
        ]
    );
}

#[tokio::test]
async fn stale_run_is_refused_alone_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    stale_run_is_refused_alone(StoreUrl::Sqlite {
        path: dir.path().join(".maestro/maestro.db"),
    })
    .await;
}

#[tokio::test]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn stale_run_is_refused_alone_on_postgres() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    stale_run_is_refused_alone(StoreUrl::Postgres { url: cluster.url() }).await;
}
