//! A new store opened by several processes at once, as a service manager starts a worker and a
//! submit together: every process opens it, none fails on the migrations another is applying,
//! and the schema ends complete.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

use maestro_store::{SCHEMA_VERSION, Store, StoreUrl};
use maestro_testkit::PgCluster;
use pretty_assertions::assert_eq;
use sqlx::Connection;

const ROUNDS: usize = 20;
const PROCESSES: usize = 3;

/// Starts `PROCESSES` openers of `url` at once and checks that each opened it and that the
/// schema is complete afterwards.
async fn open_at_once(url: &StoreUrl) {
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_maestro-store-open"))
                .arg(url.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outcomes: Vec<(bool, String)> = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|child| {
                let out = child.wait_with_output().unwrap();
                (
                    out.status.success(),
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    ),
                )
            })
            .collect()
    })
    .await
    .unwrap();
    for (ok, output) in &outcomes {
        assert!(ok, "an opener of {url} failed: {output}");
        assert_eq!(output.trim(), "opened");
    }
    let store = Store::connect(url).await.unwrap();
    // Every migration once, oldest first, up to the newest (versions may skip numbers).
    let applied = store.applied_migrations().await.unwrap();
    assert_eq!(applied.first(), Some(&1), "{applied:?}");
    assert_eq!(applied.last(), Some(&SCHEMA_VERSION), "{applied:?}");
    assert!(applied.windows(2).all(|w| w[0] < w[1]), "{applied:?}");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_sqlite_store_opened_by_three_processes_at_once_opens_in_each() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..ROUNDS {
        let url = StoreUrl::Sqlite {
            path: dir
                .path()
                .join(format!("round-{round}/.maestro/maestro.db")),
        };
        open_at_once(&url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn a_new_postgres_store_opened_by_three_processes_at_once_opens_in_each() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let mut admin = sqlx::PgConnection::connect(&cluster.url()).await.unwrap();
    for round in 0..ROUNDS {
        let name = format!("round_{round}");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .unwrap();
        let url = StoreUrl::Postgres {
            url: format!("postgres://maestro@127.0.0.1:{}/{name}", cluster.port),
        };
        open_at_once(&url).await;
    }
    admin.close().await.unwrap();
}
