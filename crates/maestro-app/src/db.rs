//! Which store a command works on: `--db`, then `MAESTRO_DB`, then `store.url`, then the
//! project's `.maestro/maestro.db`.

use maestro_config::Config;
use maestro_store::{OpenMode, PoolSize, Store, StoreError, StoreUrl, UrlOrigin};

/// The environment variable naming the store.
pub const ENV_DB: &str = "MAESTRO_DB";

/// The store URL for `flag` (the `--db` value) under `config`, and where it came from. A
/// relative SQLite path in `store.url` starts at the project root, like the other paths of a
/// configuration file; one given with `--db` or `MAESTRO_DB` starts at the current directory.
pub fn store_url(flag: Option<&str>, config: &Config) -> Result<(StoreUrl, UrlOrigin), StoreError> {
    let env = std::env::var(ENV_DB).ok();
    let (url, origin) = StoreUrl::resolve(
        flag,
        env.as_deref(),
        config.store.url.as_deref(),
        &config.root,
    )?;
    let url = match (url, origin) {
        (StoreUrl::Sqlite { path }, UrlOrigin::Config) if path.is_relative() => StoreUrl::Sqlite {
            path: config.root.join(path),
        },
        (url, _) => url,
    };
    Ok((url, origin))
}

/// Opens (and migrates) the store [`store_url`] names, with a pool of `size`; a SQLite store
/// that does not exist is created. For commands that write.
pub async fn open_store(
    flag: Option<&str>,
    config: &Config,
    size: PoolSize,
) -> Result<Store, StoreError> {
    open_store_in(flag, config, size, OpenMode::Create).await
}

/// Opens the store [`store_url`] names, which must exist: for commands that only read (list,
/// show, follow, wait). Nothing is created; a store that does not exist is
/// [`StoreError::NotFound`], naming the URL and where it came from. A SQLite store that cannot
/// be written (a read-only file, directory or file system) is opened read-only.
pub async fn open_store_existing(
    flag: Option<&str>,
    config: &Config,
    size: PoolSize,
) -> Result<Store, StoreError> {
    open_store_in(flag, config, size, OpenMode::Existing).await
}

/// Opens the store [`store_url`] names in `mode`.
pub async fn open_store_in(
    flag: Option<&str>,
    config: &Config,
    size: PoolSize,
    mode: OpenMode,
) -> Result<Store, StoreError> {
    let (url, origin) = store_url(flag, config)?;
    match Store::open_in(&url, size, mode).await {
        Err(StoreError::NotFound { url, .. }) => Err(StoreError::NotFound {
            url,
            origin: Some(origin),
        }),
        opened => opened,
    }
}

/// Opens (and migrates) the store at `url`, with a pool of `size`.
pub async fn open_url(url: &StoreUrl, size: PoolSize) -> Result<Store, StoreError> {
    Store::open_with(url, size).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::path::PathBuf;

    fn config(url: Option<&str>) -> Config {
        Config {
            root: PathBuf::from("/proj"),
            store: maestro_config::StoreConfig {
                url: url.map(str::to_string),
            },
            ..Config::default()
        }
    }

    #[test]
    fn a_relative_sqlite_path_in_the_config_starts_at_the_project_root() {
        assert_eq!(
            store_url(None, &config(Some("sqlite://data/jobs.db")))
                .unwrap()
                .0,
            StoreUrl::Sqlite {
                path: "/proj/data/jobs.db".into()
            }
        );
        // The flag wins, and its relative path is the current directory's.
        assert_eq!(
            store_url(
                Some("sqlite://here.db"),
                &config(Some("sqlite://data/jobs.db"))
            )
            .unwrap(),
            (
                StoreUrl::Sqlite {
                    path: "here.db".into()
                },
                UrlOrigin::Flag
            )
        );
    }
}
