//! A job's files (inputs with the submit, outputs under the lease) and the wakeups of whoever
//! watches a job, on SQLite and on a real PostgreSQL cluster.

use crate::common;

use std::time::Duration;

use common::Db;
use maestro_store::{
    Backend, Change, Classes, FileKind, JobId, JobQueue, JobStatus, NewEvent, NewFile, NewJob,
    Outcome, Store, StoreError,
};
use pretty_assertions::assert_eq;
use serde_json::json;
use sqlx::Connection as _;

const LEASE: Duration = Duration::from_secs(30);
/// Long enough for any wakeup on a loaded machine; a wakeup that never comes fails the test.
const PATIENCE: Duration = Duration::from_secs(30);

fn file(path: &str, bytes: &[u8]) -> NewFile {
    NewFile {
        path: path.to_string(),
        bytes: bytes.to_vec(),
    }
}

on_both_backends!(
    inputs_are_stored_with_the_job_and_outputs_under_the_lease,
    an_input_given_twice_keeps_its_last_bytes,
    a_claim_says_which_jobs_have_inputs_and_stored_pieces,
    a_claim_whose_hints_cannot_be_read_still_claims_and_leaves_the_run_to_look,
    a_watcher_hears_of_events_and_status_changes_from_another_handle,
    changed_outputs_are_recorded_alone_under_the_lease,
);

/// A run records what changed in its `output/` as it goes: the changed files are written, the
/// removed ones forgotten, the others kept as they were; a lost lease records nothing.
async fn changed_outputs_are_recorded_alone_under_the_lease(db: Db) {
    let store = db.open().await;
    let id = store
        .submit(NewJob::new("default", "write", "alice"))
        .await
        .unwrap();
    let claimed = store
        .claim("w", &Classes::Any, LEASE)
        .await
        .unwrap()
        .unwrap();
    store
        .record_output_changes(
            &claimed.lease,
            &[
                file("a.txt", b"a"),
                file("b.txt", b"b"),
                file("c.txt", b"c"),
            ],
            &[],
        )
        .await
        .unwrap();
    store
        .record_output_changes(
            &claimed.lease,
            &[file("b.txt", b"b, again"), file("d.txt", b"d")],
            &["c.txt".to_string(), "never.txt".to_string()],
        )
        .await
        .unwrap();
    let outputs = |store: Store| async move {
        store
            .job_file_contents(id, FileKind::Output)
            .await
            .unwrap()
            .into_iter()
            .map(|(f, bytes)| (f.path, bytes, f.hash))
            .collect::<Vec<_>>()
    };
    let now = outputs(store.clone()).await;
    let listed: Vec<(&str, &[u8])> = now
        .iter()
        .map(|(path, bytes, _)| (path.as_str(), bytes.as_slice()))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("a.txt", &b"a"[..]),
            ("b.txt", &b"b, again"[..]),
            ("d.txt", &b"d"[..])
        ]
    );
    for (_, bytes, hash) in &now {
        assert_eq!(hash, &maestro_store::blob_hash(bytes));
    }

    // Taken over: the stale lease records nothing.
    store.release(&claimed.lease).await.unwrap();
    let refused = store
        .record_output_changes(
            &claimed.lease,
            &[file("late.txt", b"late")],
            &["a.txt".into()],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::LeaseLost { .. }),
        "{refused:?}"
    );
    assert_eq!(outputs(store.clone()).await, now);
}

async fn a_claim_says_which_jobs_have_inputs_and_stored_pieces(db: Db) {
    let store = db.open().await;
    let queue = |task: &'static str, inputs: Vec<NewFile>| {
        let store = store.clone();
        async move {
            store
                .submit_with_inputs(NewJob::new("default", task, "alice"), &inputs)
                .await
                .unwrap()
        }
    };
    let with = queue("with inputs", vec![file("in.txt", b"x")]).await;
    let without = queue("none", Vec::new()).await;
    let batch = store
        .claim_batch("w", &Classes::Any, LEASE, 10)
        .await
        .unwrap();
    let mut seen: Vec<(JobId, bool)> = batch.iter().map(|c| (c.job.id, c.has_inputs)).collect();
    seen.sort();
    let mut wanted = vec![(with, true), (without, false)];
    wanted.sort();
    assert_eq!(seen, wanted);

    // And whether the store holds a piece of the job's piece name: any version of it.
    store
        .put_piece("stored", Some("name: stored\n"), "alice")
        .await
        .unwrap();
    for piece in ["stored", "from-a-file"] {
        store
            .submit(NewJob::new(piece, "which piece", "alice"))
            .await
            .unwrap();
    }
    let mut pieces: Vec<(String, bool)> = store
        .claim_batch("w", &Classes::Any, LEASE, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.job.piece, c.piece_stored))
        .collect();
    pieces.sort();
    assert_eq!(
        pieces,
        vec![
            ("from-a-file".to_string(), false),
            ("stored".to_string(), true)
        ]
    );

    // The claim of one job says it too.
    let one = queue("two files", vec![file("a.txt", b"a"), file("b.txt", b"b")]).await;
    let claimed = store.claim("w", &Classes::Any, LEASE).await.unwrap();
    assert_eq!(
        claimed.map(|c| (c.job.id, c.has_inputs, c.piece_stored)),
        Some((one, true, false))
    );
}

async fn a_claim_whose_hints_cannot_be_read_still_claims_and_leaves_the_run_to_look(db: Db) {
    let store = db.open().await;
    let id = store.submit(NewJob::new("default", "no hints", "alice"));
    let id = id.await.unwrap();
    // The table the piece hint reads is gone (a broken store, say): the claim still holds.
    let mut raw = sqlx::AnyConnection::connect(&db.raw_url()).await.unwrap();
    let rename = sqlx::query("ALTER TABLE pieces RENAME TO pieces_gone");
    rename.execute(&mut raw).await.unwrap();
    let claimed = store.claim("w", &Classes::Any, LEASE).await.unwrap();
    let claimed = claimed.expect("the queued job is claimed");
    assert_eq!(
        (
            claimed.job.id,
            claimed.job.status,
            claimed.has_inputs,
            claimed.piece_stored
        ),
        (id, JobStatus::Running, false, true)
    );
}

async fn inputs_are_stored_with_the_job_and_outputs_under_the_lease(db: Db) {
    let store = db.open().await;
    let id = store
        .submit_with_inputs(
            NewJob::new("default", "read the inputs", "alice"),
            &[file("data/a.csv", b"x,y\n1,2\n"), file("b.txt", b"same")],
        )
        .await
        .unwrap();
    let listed = store.job_files(id).await.unwrap();
    let names: Vec<(FileKind, &str, i64)> = listed
        .iter()
        .map(|f| (f.kind, f.path.as_str(), f.size))
        .collect();
    assert_eq!(
        names,
        vec![
            (FileKind::Input, "b.txt", 4),
            (FileKind::Input, "data/a.csv", 8)
        ]
    );
    let (meta, bytes) = store
        .job_file(id, FileKind::Input, "data/a.csv")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (meta.path.as_str(), bytes.as_slice()),
        ("data/a.csv", &b"x,y\n1,2\n"[..])
    );
    assert!(
        store
            .job_file(id, FileKind::Output, "data/a.csv")
            .await
            .unwrap()
            .is_none()
    );

    let claimed = store
        .claim("w", &Classes::Any, LEASE)
        .await
        .unwrap()
        .unwrap();
    // The same bytes as an input: one blob serves both.
    store
        .record_outputs(
            &claimed.lease,
            &[file("r.md", b"same"), file("old.txt", b"1")],
        )
        .await
        .unwrap();
    // A later park records what output/ holds then: a file removed since is forgotten.
    store
        .record_outputs(&claimed.lease, &[file("r.md", b"same, longer")])
        .await
        .unwrap();
    let outputs: Vec<(String, i64)> = store
        .job_file_contents(id, FileKind::Output)
        .await
        .unwrap()
        .into_iter()
        .map(|(f, bytes)| (f.path, i64::try_from(bytes.len()).unwrap()))
        .collect();
    assert_eq!(outputs, vec![("r.md".to_string(), 12)]);

    // A run whose job was cancelled under it records nothing more.
    store.cancel(id, "bob").await.unwrap();
    let refused = store
        .record_outputs(&claimed.lease, &[file("late.txt", b"late")])
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::JobCancelled { .. }),
        "{refused:?}"
    );
    assert!(
        store
            .job_file(id, FileKind::Output, "late.txt")
            .await
            .unwrap()
            .is_none()
    );
}

async fn an_input_given_twice_keeps_its_last_bytes(db: Db) {
    let store = db.open().await;
    // One path given twice (the app refuses it before): one row, the later bytes.
    let id = store
        .submit_with_inputs(
            NewJob::new("default", "twice", "alice"),
            &[file("a.txt", b"1"), file("a.txt", b"2")],
        )
        .await
        .unwrap();
    let (_, bytes) = store
        .job_file(id, FileKind::Input, "a.txt")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bytes, b"2");
    assert_eq!(store.jobs(None).await.unwrap().len(), 1);
}

async fn a_watcher_hears_of_events_and_status_changes_from_another_handle(db: Db) {
    let writer = db.open().await;
    let watcher = db.open().await;
    let id = writer
        .submit(NewJob::new("default", "watched", "alice"))
        .await
        .unwrap();
    let mut watch = watcher.watch();
    let mut own = writer.watch();
    if watcher.backend() == Backend::Postgres {
        // The listener says when it listens; from then on nothing committed is missed.
        wait_for(&mut watch, |c| c == Change::Resync).await;
    }
    let claimed = writer
        .claim("w", &Classes::Any, LEASE)
        .await
        .unwrap()
        .unwrap();
    let events: Vec<NewEvent> = (1..=3)
        .map(|seq| NewEvent::new(seq, "tool_result", &json!({ "seq": seq })).unwrap())
        .collect();
    writer.append_events(&claimed.lease, &events).await.unwrap();
    writer
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
    // The writer's own process hears of each change at once.
    wait_for(&mut own, |c| c == Change::Status(id)).await;
    wait_for(&mut own, |c| c == Change::Events { job: id, seq: 3 }).await;
    wait_for(&mut own, |c| c == Change::Status(id)).await;
    match watcher.backend() {
        // Another handle hears of them through the database's notifications, in commit order.
        Backend::Postgres => {
            wait_for(&mut watch, |c| c == Change::Status(id)).await;
            wait_for(&mut watch, |c| c == Change::Events { job: id, seq: 3 }).await;
            wait_for(&mut watch, |c| c == Change::Status(id)).await;
        }
        // SQLite has no notifications between handles: a watcher looks every WATCH_POLL.
        Backend::Sqlite => {
            tokio::time::timeout(PATIENCE, watch.changed(id))
                .await
                .expect("a poll wakes the watcher");
        }
    }
    assert_eq!(watcher.last_event_seq(id).await.unwrap(), 3);
    assert_eq!(
        watcher
            .last_event_seq(maestro_store::JobId::new())
            .await
            .unwrap(),
        0
    );
}

async fn wait_for(watch: &mut maestro_store::StoreWatch, wanted: impl Fn(Change) -> bool) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            if wanted(watch.recv().await) {
                return;
            }
        }
    })
    .await
    .expect("the change was announced");
}

/// The notifications themselves, as any PostgreSQL client sees them: one per statement and job
/// appending events (its last seq), one per status change, none for a write rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn postgres_notifies_appended_events_and_status_changes_on_commit() {
    let db = tokio::task::spawn_blocking(Db::postgres).await.unwrap();
    let store: Store = db.open().await;
    let mut listener = sqlx::postgres::PgListener::connect(&db.raw_url())
        .await
        .unwrap();
    listener
        .listen_all(["maestro_events", "maestro_jobs"])
        .await
        .unwrap();
    let id = store
        .submit(NewJob::new("default", "notified", "alice"))
        .await
        .unwrap();
    let claimed = store
        .claim("w", &Classes::Any, LEASE)
        .await
        .unwrap()
        .unwrap();
    let events: Vec<NewEvent> = (1..=5)
        .map(|seq| NewEvent::new(seq, "tool_result", &json!({ "seq": seq })).unwrap())
        .collect();
    store.append_events(&claimed.lease, &events).await.unwrap();
    // A duplicate is refused and rolled back: no notification for it.
    assert!(
        store
            .append_events(&claimed.lease, &events[..1])
            .await
            .is_err()
    );
    store
        .finish(
            &claimed.lease,
            Outcome {
                status: JobStatus::Completed,
                result: None,
                reason: None,
            },
        )
        .await
        .unwrap();
    let mut heard = Vec::new();
    while heard.len() < 3 {
        let n = tokio::time::timeout(PATIENCE, listener.recv())
            .await
            .unwrap()
            .unwrap();
        heard.push(format!("{} {}", n.channel(), n.payload()));
    }
    assert_eq!(
        heard,
        vec![
            format!("maestro_jobs {id}"),
            format!("maestro_events {id}:5"),
            format!("maestro_jobs {id}"),
        ]
    );
    // Nothing else was sent.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listener.recv())
            .await
            .is_err()
    );
}

/// The listener's connection dies (its backend is terminated): the watchers are told to re-read
/// (`Resync`), the listener connects and listens again, and later commits are heard as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn a_listener_whose_connection_dies_resyncs_and_listens_again() {
    let db = tokio::task::spawn_blocking(Db::postgres).await.unwrap();
    let writer = db.open().await;
    let watcher = db.open().await;
    let id = writer
        .submit(NewJob::new("default", "watched", "alice"))
        .await
        .unwrap();
    let mut watch = watcher.watch();
    wait_for(&mut watch, |c| c == Change::Resync).await;
    let mut admin = sqlx::postgres::PgConnection::connect(&db.raw_url())
        .await
        .unwrap();
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE pid <> pg_backend_pid() AND query ILIKE 'LISTEN%'",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(killed, vec![true], "one listening connection");
    // Told at the loss, and again once it listens anew: re-read then.
    wait_for(&mut watch, |c| c == Change::Resync).await;
    wait_for(&mut watch, |c| c == Change::Resync).await;
    let claimed = writer
        .claim("w", &Classes::Any, LEASE)
        .await
        .unwrap()
        .unwrap();
    let event = NewEvent::new(1, "tool_result", &json!({ "seq": 1 })).unwrap();
    writer
        .append_events(&claimed.lease, &[event])
        .await
        .unwrap();
    wait_for(&mut watch, |c| c == Change::Events { job: id, seq: 1 }).await;
}
