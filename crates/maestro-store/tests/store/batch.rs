//! Finishing several runs in one transaction, on SQLite and on a real PostgreSQL cluster: each
//! job is fenced on its own lease, and the answer says per job whether its write took effect.

use crate::common;

use std::time::Duration;

use common::Db;
use maestro_store::{
    Classes, JobId, JobQueue, JobStatus, Lease, LeaseKey, NewJob, Outcome, Store, StoreError,
};
use pretty_assertions::assert_eq;
use serde_json::json;

const LEASE: Duration = Duration::from_secs(30);

on_both_backends!(
    a_stale_lease_in_a_batch_finishes_nothing_and_the_others_finish,
    a_batch_longer_than_one_statement_finishes_every_job,
    leases_renewed_and_checked_together_answer_each_alone,
    an_old_and_a_new_lease_on_one_job_are_told_apart,
);

fn outcome(status: JobStatus, result: serde_json::Value) -> Outcome {
    Outcome {
        status,
        result: Some(result),
        reason: None,
    }
}

/// What a finish answered, comparable as a whole.
#[derive(Debug, PartialEq)]
enum Answer {
    Written,
    LeaseLost {
        job: JobId,
        held: i64,
        current: i64,
        status: JobStatus,
    },
    Cancelled(JobId),
    Refused(JobId, JobStatus),
}

fn answer(result: &Result<(), StoreError>) -> Answer {
    match result {
        Ok(()) => Answer::Written,
        Err(StoreError::LeaseLost {
            job,
            held,
            current,
            status,
        }) => Answer::LeaseLost {
            job: *job,
            held: *held,
            current: *current,
            status: *status,
        },
        Err(StoreError::JobCancelled(job)) => Answer::Cancelled(*job),
        Err(StoreError::InvalidTransition { job, status, .. }) => Answer::Refused(*job, *status),
        Err(other) => panic!("unexpected error: {other:?}"),
    }
}

/// A job's state as the batch left it.
async fn state(
    store: &Store,
    id: JobId,
) -> (JobStatus, i64, Option<String>, Option<serde_json::Value>) {
    let job = store.job(id).await.unwrap().unwrap();
    (job.status, job.fence, job.lease_owner, job.result)
}

/// `n` jobs submitted, then claimed by worker `w` in one batch: their ids and leases, in order.
async fn submitted_and_claimed(store: &Store, n: usize) -> (Vec<JobId>, Vec<Lease>) {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            store
                .submit(NewJob::new("default", format!("job {i}"), "alice"))
                .await
                .unwrap(),
        );
    }
    let claimed = store
        .claim_batch("w", &Classes::Any, LEASE, n)
        .await
        .unwrap();
    (ids, claimed.iter().map(|c| c.lease.clone()).collect())
}

async fn a_stale_lease_in_a_batch_finishes_nothing_and_the_others_finish(db: Db) {
    let store = db.open().await;
    let (ids, leases) = submitted_and_claimed(&store, 5).await;
    assert_eq!(
        leases
            .iter()
            .map(|l| (l.job_id, l.fence))
            .collect::<Vec<_>>(),
        ids.iter().map(|id| (*id, 1)).collect::<Vec<_>>()
    );
    // Job 1 is taken over by another worker (its fencing token moves to 2), job 2 is
    // cancelled: this worker's leases on both are stale.
    let other = store
        .take_over_job(ids[1], "other", LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.lease.fence, 2);
    store.cancel(ids[2], "carol").await.unwrap();

    let answers = store
        .finish_batch(&[
            (
                leases[0].clone(),
                outcome(JobStatus::Completed, json!("zero")),
            ),
            (
                leases[1].clone(),
                outcome(JobStatus::Completed, json!("stale")),
            ),
            (
                leases[2].clone(),
                outcome(JobStatus::Completed, json!("late")),
            ),
            // Not a run's end: refused, the job stays running.
            (leases[3].clone(), outcome(JobStatus::Running, json!("no"))),
            (
                leases[4].clone(),
                outcome(JobStatus::WaitingInput, json!("Which branch?")),
            ),
            // The same job twice: the first finish fences out the second.
            (
                leases[0].clone(),
                outcome(JobStatus::Aborted, json!("again")),
            ),
        ])
        .await
        .unwrap();
    assert_eq!(
        answers.iter().map(answer).collect::<Vec<_>>(),
        vec![
            Answer::Written,
            Answer::LeaseLost {
                job: ids[1],
                held: 1,
                current: 2,
                status: JobStatus::Running
            },
            Answer::Cancelled(ids[2]),
            Answer::Refused(ids[3], JobStatus::Running),
            Answer::Written,
            Answer::LeaseLost {
                job: ids[0],
                held: 1,
                current: 1,
                status: JobStatus::Completed
            },
        ]
    );
    let mut states = Vec::new();
    for id in &ids {
        states.push(state(&store, *id).await);
    }
    assert_eq!(
        states,
        vec![
            (JobStatus::Completed, 1, None, Some(json!("zero"))),
            (JobStatus::Running, 2, Some("other".into()), None),
            (JobStatus::Cancelled, 1, None, None),
            (JobStatus::Running, 1, Some("w".into()), None),
            (
                JobStatus::WaitingInput,
                1,
                None,
                Some(json!("Which branch?"))
            ),
        ]
    );
    // The worker that holds job 1 now finishes it, in a batch of its own.
    let answers = store
        .finish_batch(&[(
            other.lease.clone(),
            outcome(JobStatus::Completed, json!("new")),
        )])
        .await
        .unwrap();
    assert_eq!(
        answers.iter().map(answer).collect::<Vec<_>>(),
        vec![Answer::Written]
    );
    assert_eq!(
        state(&store, ids[1]).await,
        (JobStatus::Completed, 2, None, Some(json!("new")))
    );
    // A single finish is a batch of one: the stale lease is refused the same way.
    let single = store
        .finish(&leases[1], outcome(JobStatus::Completed, json!("stale")))
        .await;
    assert_eq!(
        answer(&single),
        Answer::LeaseLost {
            job: ids[1],
            held: 1,
            current: 2,
            status: JobStatus::Completed
        }
    );
    assert_eq!(store.finish_batch(&[]).await.unwrap().len(), 0);
}

async fn a_batch_longer_than_one_statement_finishes_every_job(db: Db) {
    const JOBS: usize = 230;
    let store = db.open().await;
    for i in 0..JOBS {
        store
            .submit(NewJob::new("default", format!("job {i}"), "alice"))
            .await
            .unwrap();
    }
    let claimed = store
        .claim_batch("w", &Classes::Any, LEASE, JOBS)
        .await
        .unwrap();
    assert_eq!(claimed.len(), JOBS);
    // The last job was taken over: only it stays running.
    let stale = claimed[JOBS - 1].job.id;
    store
        .take_over_job(stale, "other", LEASE)
        .await
        .unwrap()
        .unwrap();
    let finishes: Vec<(Lease, Outcome)> = claimed
        .iter()
        .enumerate()
        .map(|(i, c)| (c.lease.clone(), outcome(JobStatus::Completed, json!(i))))
        .collect();
    let answers = store.finish_batch(&finishes).await.unwrap();
    let written = answers.iter().filter(|a| a.is_ok()).count();
    assert_eq!((answers.len(), written), (JOBS, JOBS - 1));
    assert!(matches!(
        answers[JOBS - 1],
        Err(StoreError::LeaseLost { .. })
    ));
    for (i, c) in claimed.iter().enumerate().take(JOBS - 1) {
        assert_eq!(
            state(&store, c.job.id).await,
            (JobStatus::Completed, 1, None, Some(json!(i)))
        );
    }
    assert_eq!(store.jobs(Some(JobStatus::Running)).await.unwrap().len(), 1);
}

/// `renew_leases` and `check_leases` over 250 leases (several statements): a taken, a cancelled
/// and an ended job are refused with the same errors a single heartbeat gives, and every other
/// lease is renewed.
async fn leases_renewed_and_checked_together_answer_each_alone(db: Db) {
    let store = db.open().await;
    let (ids, leases) = submitted_and_claimed(&store, 250).await;
    assert!(store.check_leases(&leases).await.unwrap().is_empty());

    let taken = leases[7].job_id;
    store
        .take_over_job(taken, "other", LEASE)
        .await
        .unwrap()
        .unwrap();
    let cancelled = leases[120].job_id;
    store.cancel(cancelled, "carol").await.unwrap();
    let ended = leases[230].job_id;
    store
        .finish(&leases[230], outcome(JobStatus::Completed, json!("done")))
        .await
        .unwrap();
    let refused = |e: &StoreError| match e {
        StoreError::LeaseLost {
            job,
            held,
            current,
            status,
        } => Answer::LeaseLost {
            job: *job,
            held: *held,
            current: *current,
            status: *status,
        },
        StoreError::JobCancelled(job) => Answer::Cancelled(*job),
        other => panic!("unexpected error: {other:?}"),
    };
    let expected = vec![
        (
            taken,
            Answer::LeaseLost {
                job: taken,
                held: 1,
                current: 2,
                status: JobStatus::Running,
            },
        ),
        (cancelled, Answer::Cancelled(cancelled)),
        (
            ended,
            Answer::LeaseLost {
                job: ended,
                held: 1,
                current: 1,
                status: JobStatus::Completed,
            },
        ),
    ];
    let mut checked: Vec<(JobId, Answer)> = store
        .check_leases(&leases)
        .await
        .unwrap()
        .iter()
        .map(|(key, e)| (key.job, refused(e)))
        .collect();
    checked.sort_by_key(|(id, _)| ids.iter().position(|i| i == id));
    assert_eq!(checked, expected);

    let before = store.job(leases[0].job_id).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let answers = store
        .renew_leases(&leases, Duration::from_secs(90))
        .await
        .unwrap();
    assert_eq!(answers.len(), 250);
    let mut refusals = Vec::new();
    for (lease, answer) in leases.iter().zip(&answers) {
        match answer {
            Ok(renewed) => {
                assert_eq!((renewed.job_id, renewed.fence), (lease.job_id, lease.fence));
                assert!(renewed.expires_at > lease.expires_at);
                let job = store.job(lease.job_id).await.unwrap().unwrap();
                assert_eq!(job.lease_expires_at, Some(renewed.expires_at));
            }
            Err(e) => refusals.push((lease.job_id, refused(e))),
        }
    }
    assert_eq!(refusals, expected);
    let after = store.job(leases[0].job_id).await.unwrap().unwrap();
    assert!(after.updated_at > before.updated_at);
    // The refused jobs were not touched: the taken one keeps its new owner's lease.
    let job = store.job(taken).await.unwrap().unwrap();
    assert_eq!(job.lease_owner.as_deref(), Some("other"));
    let renewed_to = answers[0].as_ref().unwrap().expires_at;
    assert!(job.lease_expires_at.unwrap() < renewed_to);
}

/// A worker may hold an old lease (a run winding down after losing it) and a new claim on the
/// same job: kept together, the old one is refused and the new one renewed.
async fn an_old_and_a_new_lease_on_one_job_are_told_apart(db: Db) {
    let store = db.open().await;
    let (ids, leases) = submitted_and_claimed(&store, 1).await;
    let new = store
        .take_over_job(ids[0], "w", LEASE)
        .await
        .unwrap()
        .unwrap()
        .lease;
    let both = [leases[0].clone(), new.clone()];
    let refused: Vec<LeaseKey> = store
        .check_leases(&both)
        .await
        .unwrap()
        .into_keys()
        .collect();
    assert_eq!(
        refused,
        vec![LeaseKey {
            job: ids[0],
            fence: 1
        }]
    );
    let answers = store.renew_leases(&both, LEASE).await.unwrap();
    assert!(matches!(
        answers[0],
        Err(StoreError::LeaseLost {
            held: 1,
            current: 2,
            ..
        })
    ));
    assert_eq!(answers[1].as_ref().unwrap().fence, 2);
}
