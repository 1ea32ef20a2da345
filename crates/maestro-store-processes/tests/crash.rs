//! kill -9 of a worker process in the middle of appending events: another worker rescues the
//! job once the lease expires, sees exactly the events that were committed, and holds a newer
//! fencing token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Db;
use maestro_store::{Classes, JobQueue, JobStatus, NewEvent, NewJob, Outcome, StoreError};
use pretty_assertions::assert_eq;
use serde_json::json;

const CHILD_LEASE: Duration = Duration::from_millis(1500);

on_both_backends!(a_killed_worker_leaves_only_committed_events_and_its_job_is_rescued);

async fn a_killed_worker_leaves_only_committed_events_and_its_job_is_rescued(db: Db) {
    let store = db.open().await;
    let id = store
        .submit(NewJob::new("default", "long run", "alice"))
        .await
        .unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_maestro-store-crash-worker"))
        .arg(db.url.to_string())
        .args(["doomed", &CHILD_LEASE.as_millis().to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(
        lines.next().unwrap().unwrap(),
        format!("claimed {id} fence 1")
    );
    // Let it commit a few pairs (renewing its lease in between), then SIGKILL it mid-loop.
    let mut committed = 0;
    while committed < 10 {
        let line = lines.next().unwrap().unwrap();
        committed = line.strip_prefix("committed ").unwrap().parse().unwrap();
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Whatever it printed before dying was committed; at most one more pair may have been
    // committed without being printed.
    for line in lines {
        committed = line
            .unwrap()
            .strip_prefix("committed ")
            .unwrap()
            .parse()
            .unwrap();
    }

    // While the dead worker's lease lasts, nobody may take the job.
    assert!(
        store
            .claim("rescuer", &Classes::Any, Duration::from_secs(30))
            .await
            .unwrap()
            .is_none()
    );
    let started = Instant::now();
    let rescued = loop {
        if let Some(c) = store
            .claim("rescuer", &Classes::Any, Duration::from_secs(30))
            .await
            .unwrap()
        {
            break c;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (rescued.job.id, rescued.lease.fence, rescued.job.attempts),
        (id, 2, 2)
    );

    let events = store.events(id, 0).await.unwrap();
    let stored = i64::try_from(events.len()).unwrap();
    assert!(
        stored == committed || stored == committed + 2,
        "printed {committed} committed, found {stored}"
    );
    let expected: Vec<_> = (1..=stored)
        .map(|seq| (seq, 1, json!({ "seq": seq, "by": "doomed" })))
        .collect();
    let found: Vec<_> = events
        .into_iter()
        .map(|e| (e.seq, e.fence, e.payload))
        .collect();
    assert_eq!(found, expected);

    // The dead worker's token is stale; the rescuer carries on from the next seq.
    let stale = maestro_store::Lease {
        fence: 1,
        worker: "doomed".into(),
        ..rescued.lease.clone()
    };
    let next = NewEvent::new(stored + 1, "tool_result", &json!("after rescue")).unwrap();
    assert!(matches!(
        store
            .append_events(&stale, std::slice::from_ref(&next))
            .await,
        Err(StoreError::LeaseLost {
            held: 1,
            current: 2,
            ..
        })
    ));
    store.append_events(&rescued.lease, &[next]).await.unwrap();
    store
        .finish(
            &rescued.lease,
            Outcome {
                status: JobStatus::Completed,
                result: Some(json!("rescued")),
                reason: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store.events(id, 0).await.unwrap().len(),
        usize::try_from(stored + 1).unwrap()
    );
}
