//! The job commands when the store is at fault: a failed migration, a store that cannot be
//! opened or does not exist, a full disk under a worker, a PostgreSQL restart under a waiting
//! command, and what a clean exit leaves behind. Real `maestro` processes, real SQLite files,
//! real PostgreSQL clusters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use maestro_store::{Store, StoreUrl};
use pretty_assertions::assert_eq;
use sqlx::Connection;

mod support;

use support::jobs::{Project, stderr};

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
