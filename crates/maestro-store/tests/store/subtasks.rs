//! Subtasks in the store, on SQLite and on a real PostgreSQL cluster: spawning under a lease
//! (fenced, idempotent, limited), and a parent that waits until every child has ended.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::Db;
use maestro_store::{
    Claimed, Classes, FailDisposition, JobId, JobQueue, JobStatus, Lease, ManualClock, NewChild,
    NewJob, Outcome, Spawned, Store, StoreError,
};
use pretty_assertions::assert_eq;
use sqlx::Connection;
use time::OffsetDateTime;

const LEASE: Duration = Duration::from_secs(30);

fn outcome(status: JobStatus) -> Outcome {
    Outcome {
        status,
        result: None,
        reason: None,
    }
}

fn child(key: &str, max_children: i64) -> NewChild {
    NewChild {
        key: key.into(),
        title: format!("title {key}"),
        piece: "default".into(),
        task: format!("task {key}"),
        parent_workspace: Some("/w/parent/".into()),
        max_children,
        max_attempts: 1,
    }
}

async fn claim_id(store: &Store, id: JobId) -> Claimed {
    store
        .claim_job(id, "w", LEASE, false)
        .await
        .unwrap()
        .unwrap()
}

async fn spawn(store: &Store, lease: &Lease, key: &str) -> JobId {
    match store.spawn_child(lease, child(key, 10)).await.unwrap() {
        Spawned::Created(job) => job.id,
        other => panic!("expected a new child, got {other:?}"),
    }
}

async fn status(store: &Store, id: JobId) -> JobStatus {
    store.job(id).await.unwrap().unwrap().status
}

/// A parent claimed under a lease, with class and priority its children inherit.
async fn running_parent(store: &Store) -> Claimed {
    let id = store
        .submit(NewJob {
            priority: 7,
            task_class: "docs".into(),
            ..NewJob::new("default", "parent", "alice")
        })
        .await
        .unwrap();
    claim_id(store, id).await
}

on_both_backends!(
    a_spawn_is_fenced_idempotent_and_limited,
    a_parent_waits_until_every_child_has_ended,
    a_park_after_the_children_ended_queues_the_parent_at_once,
    a_cancelled_child_or_the_sweep_wakes_the_parent,
);

async fn a_spawn_is_fenced_idempotent_and_limited(db: Db) {
    let store = db.open().await;
    let parent = running_parent(&store).await;
    let first = match store
        .spawn_child(&parent.lease, child("a", 2))
        .await
        .unwrap()
    {
        Spawned::Created(job) => job,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (
            first.parent_id,
            first.depth,
            first.child_index,
            first.title.as_deref(),
            first.workspace.as_deref(),
            first.task_class.as_str(),
            first.priority,
            first.status,
            first.submitted_by.clone(),
        ),
        (
            Some(parent.job.id),
            1,
            Some(1),
            Some("title a"),
            Some("/w/parent/subtasks/1"),
            "docs",
            7,
            JobStatus::Queued,
            format!("job:{}", parent.job.id),
        )
    );
    // The same key again (a spawn repeated after a crash) finds the same child.
    match store
        .spawn_child(&parent.lease, child("a", 2))
        .await
        .unwrap()
    {
        Spawned::Existing(job) => assert_eq!(job.id, first.id),
        other => panic!("{other:?}"),
    }
    let second = spawn(&store, &parent.lease, "b").await;
    assert_eq!(
        store.job(second).await.unwrap().unwrap().child_index,
        Some(2)
    );
    assert_eq!(
        store
            .spawn_child(&parent.lease, child("c", 2))
            .await
            .unwrap(),
        Spawned::Full { children: 2 }
    );
    let children: Vec<JobId> = store
        .children(parent.job.id)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(children, vec![first.id, second]);

    // A worker that lost the parent spawns nothing.
    store.release(&parent.lease).await.unwrap();
    let refused = store.spawn_child(&parent.lease, child("d", 10)).await;
    assert!(
        matches!(refused, Err(StoreError::LeaseLost { .. })),
        "{refused:?}"
    );
    assert_eq!(store.children(parent.job.id).await.unwrap().len(), 2);
}

async fn a_parent_waits_until_every_child_has_ended(db: Db) {
    let store = db.open().await;
    let parent = running_parent(&store).await;
    let a = spawn(&store, &parent.lease, "a").await;
    let b = spawn(&store, &parent.lease, "b").await;
    store
        .finish(&parent.lease, outcome(JobStatus::WaitingSubtasks))
        .await
        .unwrap();
    assert_eq!(
        status(&store, parent.job.id).await,
        JobStatus::WaitingSubtasks
    );

    // Only the children are claimable; the parent holds no slot.
    let classes = Classes::Only(vec!["docs".into()]);
    let claimed = store.claim_batch("w", &classes, LEASE, 10).await.unwrap();
    let mut ids: Vec<JobId> = claimed.iter().map(|c| c.job.id).collect();
    ids.sort();
    let mut expected = vec![a, b];
    expected.sort();
    assert_eq!(ids, expected);

    let lease_of = |id: JobId| {
        claimed
            .iter()
            .find(|c| c.job.id == id)
            .unwrap()
            .lease
            .clone()
    };
    store
        .finish(&lease_of(a), outcome(JobStatus::Completed))
        .await
        .unwrap();
    assert_eq!(
        status(&store, parent.job.id).await,
        JobStatus::WaitingSubtasks
    );
    // The last child ends failed (its attempts used up): the parent is queued again, its
    // attempts starting over.
    assert_eq!(
        store.fail(&lease_of(b), "endpoint down").await.unwrap(),
        FailDisposition::Failed
    );
    let woken = store.job(parent.job.id).await.unwrap().unwrap();
    assert_eq!((woken.status, woken.attempts), (JobStatus::Queued, 0));
    let again = store.claim("w", &classes, LEASE).await.unwrap().unwrap();
    assert_eq!(again.job.id, parent.job.id);
    assert!(again.lease.fence > parent.lease.fence);
}

async fn a_park_after_the_children_ended_queues_the_parent_at_once(db: Db) {
    let store = db.open().await;
    let parent = running_parent(&store).await;
    let a = spawn(&store, &parent.lease, "a").await;
    let child = claim_id(&store, a).await;
    store
        .finish(&child.lease, outcome(JobStatus::Completed))
        .await
        .unwrap();
    // The parent was still running when its child ended: nothing to wake then.
    assert_eq!(status(&store, parent.job.id).await, JobStatus::Running);
    store
        .finish(&parent.lease, outcome(JobStatus::WaitingSubtasks))
        .await
        .unwrap();
    assert_eq!(status(&store, parent.job.id).await, JobStatus::Queued);
}

async fn a_cancelled_child_or_the_sweep_wakes_the_parent(db: Db) {
    let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
    let store = db.open().await.with_clock(clock.clone());
    let parent = running_parent(&store).await;
    let a = spawn(&store, &parent.lease, "a").await;
    store
        .finish(&parent.lease, outcome(JobStatus::WaitingSubtasks))
        .await
        .unwrap();
    assert_eq!(store.cancel(a, "bob").await.unwrap(), vec![a]);
    assert_eq!(status(&store, parent.job.id).await, JobStatus::Queued);

    // A parent left waiting although its children ended (the writer of the last end died
    // before its wake): the sweep that runs with the claims queues it again.
    let other = running_parent(&store).await;
    let b = spawn(&store, &other.lease, "b").await;
    store
        .finish(&other.lease, outcome(JobStatus::WaitingSubtasks))
        .await
        .unwrap();
    let mut conn = sqlx::AnyConnection::connect(&db.raw_url()).await.unwrap();
    sqlx::query::<sqlx::Any>("UPDATE jobs SET status = 'completed' WHERE id = $1")
        .bind(b.to_string())
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        status(&store, other.job.id).await,
        JobStatus::WaitingSubtasks
    );
    clock.advance(Duration::from_secs(2));
    let mut claimed: Vec<JobId> = store
        .claim_batch("w", &Classes::Any, LEASE, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.job.id)
        .collect();
    claimed.sort();
    let mut expected = vec![parent.job.id, other.job.id];
    expected.sort();
    assert_eq!(claimed, expected);
}
