//! The job commands when the store is at fault: a failed migration, a store that cannot be
//! opened or does not exist, a full disk under a worker, a PostgreSQL restart under a waiting
//! command, and what a clean exit leaves behind. Real `maestro` processes, real SQLite files,
//! real PostgreSQL clusters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use maestro_store::{Store, StoreUrl};
use maestro_testkit::ScriptedLlm;
use pretty_assertions::assert_eq;
use sqlx::Connection;

mod support;

use support::jobs::{Project, exited, stderr};

/// A store at schema 1 whose `job_comments` table was made by hand: migration 2 fails.
async fn store_that_fails_migration_2(project: &Project) -> StoreUrl {
    let path = project.path().join(".maestro/maestro.db");
    let url = StoreUrl::Sqlite { path: path.clone() };
    let store = Store::connect(&url).await.unwrap();
    store.migrate_to(1).await.unwrap();
    store.close().await;
    let mut raw = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE job_comments (id TEXT)")
        .execute(&mut raw)
        .await
        .unwrap();
    raw.close().await.unwrap();
    url
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_migration_prints_each_cause_once() {
    let project = Project::new();
    let url = store_that_fails_migration_2(&project).await;
    let out = project
        .maestro(&["submit", "one", "--task", "anything"])
        .await;
    assert_eq!(
        stderr(&out),
        format!(
            "error: migrating the store at `{url}` failed: while executing migration 2: error \
             returned from database: (code: 1) table job_comments already exists\n"
        )
    );
}

/// Runs `maestro ARGS` and checks that it failed well within the pool's 30 s acquire timeout.
async fn fails_at_once(project: &Project, args: &[&str]) -> String {
    let started = Instant::now();
    let out = project.maestro(args).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{args:?} took {:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains("pool timed out"), "{err}");
    err
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_is_not_a_database_or_corrupt_fails_at_once_with_the_cause() {
    let project = Project::new();
    let path = project.path().join(".maestro/maestro.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = fails_at_once(&project, &["jobs", "list"]).await;
    assert_eq!(
        err,
        format!(
            "error: cannot open the store at `sqlite://{}`: error returned from database: \
             (code: 26) file is not a database\n",
            path.display()
        )
    );
    let err = fails_at_once(&project, &["submit", "one", "--task", "x"]).await;
    assert!(err.contains("(code: 26) file is not a database"), "{err}");

    // A real store whose schema page is overwritten.
    std::fs::remove_file(&path).unwrap();
    project.submit("Before the damage", &[]).await;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100..4096].fill(0xa5);
    std::fs::write(&path, bytes).unwrap();
    let err = fails_at_once(&project, &["jobs", "list"]).await;
    assert!(err.contains("database disk image is malformed"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_postgres_fails_at_once_with_connection_refused() {
    let project = Project::new();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://maestro@127.0.0.1:{port}/maestro");
    for args in [
        &["jobs", "list", "--db", &url][..],
        &["submit", "one", "--task", "x", "--db", &url],
    ] {
        let err = fails_at_once(&project, args).await;
        assert!(
            err.contains(&format!("cannot open the store at `{url}`")),
            "{err}"
        );
        assert!(err.contains("Connection refused"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_store_is_corrupted_under_it_stops_and_says_why() {
    let server = ScriptedLlm::start([]).await;
    let project = Project::new();
    project.submit("Queued before", &[]).await;
    let path = project.path().join(".maestro/maestro.db");
    let worker = project.worker(&server.base_url(), &["--classes", "nothing-queued"]);
    // Let it register and claim (nothing) at least once.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let size = usize::try_from(std::fs::metadata(&path).unwrap().len()).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &vec![0xa5; size]))
        .unwrap();
    let (status, err) = exited(worker, Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(2), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: the worker stopped: its store can no longer be used: ")
            && (last.contains("database disk image is malformed")
                || last.contains("file is not a database")),
        "{err}"
    );
}
