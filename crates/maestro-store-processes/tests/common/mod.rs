//! One database per test, on either backend; the same test bodies run on both.
#![allow(dead_code)]

use maestro_store::{Store, StoreUrl};
use maestro_testkit::PgCluster;

/// A fresh database and what keeps it alive.
pub(crate) struct Db {
    pub url: StoreUrl,
    _sqlite_dir: Option<tempfile::TempDir>,
    _pg: Option<PgCluster>,
}

impl Db {
    pub(crate) fn sqlite() -> Db {
        let dir = tempfile::tempdir().unwrap();
        Db {
            url: StoreUrl::Sqlite {
                path: dir.path().join(".maestro/maestro.db"),
            },
            _sqlite_dir: Some(dir),
            _pg: None,
        }
    }

    pub(crate) fn postgres() -> Db {
        let cluster = PgCluster::start();
        Db {
            url: StoreUrl::Postgres { url: cluster.url() },
            _sqlite_dir: None,
            _pg: Some(cluster),
        }
    }

    /// A store with every migration applied.
    pub(crate) async fn open(&self) -> Store {
        Store::open(&self.url).await.unwrap()
    }

    /// The URL a plain sqlx connection uses (for writing rows the way an old version did).
    pub(crate) fn raw_url(&self) -> String {
        match &self.url {
            StoreUrl::Sqlite { path } => format!("sqlite://{}", path.display()),
            StoreUrl::Postgres { url } => url.clone(),
        }
    }
}

/// Runs an async test body against SQLite and against PostgreSQL, as two tests
/// `<name>::sqlite` and `<name>::postgres`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::common::Db::sqlite()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(
                no_postgres,
                ignore = "PostgreSQL is not installed: apt-get install postgresql \
                          (scripts/prerequisites.sh)"
            )]
            async fn postgres() {
                let db = tokio::task::spawn_blocking(super::common::Db::postgres)
                    .await
                    .unwrap();
                super::$name(db).await;
            }
        }
    )*};
}
