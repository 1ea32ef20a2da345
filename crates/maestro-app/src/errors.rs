//! An error and its causes as one line for a person.

use std::error::Error;

/// `error: cause: cause …` as one line, each cause once. Many errors put their source into
/// their own message as well (sqlx's do, and the store's errors keep theirs, since workers log
/// them with `{}`), so a cause whose text the message before it already contains is skipped:
/// `migrating the store at … failed: while executing migration 2: … table job_comments already
/// exists` instead of the same cause three times over.
pub fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut previous = line.clone();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !text.is_empty() && !previous.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        previous = text;
        cause = e.source();
    }
    line
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use maestro_store::{Store, StoreUrl};
    use pretty_assertions::assert_eq;
    use sqlx::Connection;

    #[derive(Debug, thiserror::Error)]
    #[error("reading the plan")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_that_are_not_in_the_message_are_appended() {
        let e = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(error_chain(&e), "reading the plan: disk on fire");
    }

    /// A migration that fails: the table it creates exists already.
    #[tokio::test]
    async fn a_failed_migration_names_each_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
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

        let e = Store::open(&url).await.unwrap_err();
        assert_eq!(
            error_chain(&e),
            format!(
                "migrating the store at `{url}` failed: while executing migration 2: error \
                 returned from database: (code: 1) table job_comments already exists"
            )
        );
    }
}
