//! The documentation keeps up with the schema: docs/store.md lists every migration file, and
//! docs/jobs.md every column of the `jobs` table.

use std::path::Path;

use maestro_store::{Store, StoreUrl};
use sqlx::Connection;

fn repo_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn store_md_lists_every_migration_file() {
    let doc = repo_file("docs/store.md");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    for backend in ["sqlite", "postgres"] {
        for entry in std::fs::read_dir(dir.join(backend)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(
                doc.contains(&format!("`{name}`")),
                "docs/store.md does not list the migration {backend}/{name}"
            );
        }
    }
}

#[tokio::test]
async fn jobs_md_lists_every_column_of_the_jobs_table() {
    let doc = repo_file("docs/jobs.md");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("maestro.db");
    Store::open(&StoreUrl::Sqlite { path: path.clone() })
        .await
        .unwrap()
        .close()
        .await;
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info('jobs')")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    assert!(columns.len() > 20, "{columns:?}");
    let missing: Vec<&String> = columns
        .iter()
        .filter(|column| !doc.contains(&format!("| `{column}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/jobs.md does not describe the jobs columns {missing:?}"
    );
}
