//! Which store a command works on: `--db`, then `MAESTRO_DB`, then `store.url`, then the
//! project's `.maestro/maestro.db`.

use maestro_config::Config;
use maestro_store::{PoolSize, Store, StoreError, StoreUrl, UrlOrigin};

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

/// Opens (and migrates) the store [`store_url`] names, with a pool of `size`.
pub async fn open_store(
    flag: Option<&str>,
    config: &Config,
    size: PoolSize,
) -> Result<Store, StoreError> {
    let (url, _origin) = store_url(flag, config)?;
    Store::open_with(&url, size).await
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
