//! Which database a store URL names, and which of the places a URL can come from wins.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::StoreError;
use crate::open::{Access, UrlOrigin};

/// A parsed store URL. Its `Debug`, like its `Display`, masks a PostgreSQL password, so that
/// no log line or error shows it.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite://PATH`: an embedded database file (created, with its directory, on first open).
    /// A relative path is relative to the working directory.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// `postgres://…` or `postgresql://…`: a PostgreSQL database, passed to the driver as is.
    Postgres {
        /// The whole URL, password included (its `Display` shows the password as `***`).
        url: String,
    },
}

impl StoreUrl {
    /// Where the embedded store lives inside a project: `.maestro/maestro.db`.
    pub const DEFAULT_SQLITE_PATH: &'static str = ".maestro/maestro.db";

    /// The embedded default for a project rooted at `root`.
    pub fn default_in(root: &Path) -> StoreUrl {
        StoreUrl::Sqlite {
            path: root.join(StoreUrl::DEFAULT_SQLITE_PATH),
        }
    }

    /// Picks the URL by precedence: the `--db` flag, then `MAESTRO_DB`, then the config key
    /// `store.url`, then the embedded default under `root`. Empty strings count as absent.
    pub fn resolve(
        flag: Option<&str>,
        env: Option<&str>,
        config: Option<&str>,
        root: &Path,
    ) -> Result<(StoreUrl, UrlOrigin), StoreError> {
        let given = [
            (flag, UrlOrigin::Flag),
            (env, UrlOrigin::Env),
            (config, UrlOrigin::Config),
        ];
        for (value, origin) in given {
            if let Some(text) = value.map(str::trim).filter(|text| !text.is_empty()) {
                return Ok((text.parse()?, origin));
            }
        }
        Ok((StoreUrl::default_in(root), UrlOrigin::Default))
    }

    /// The URL the driver connects to. SQLite files are opened read-write and created when
    /// missing, or read-only.
    pub(crate) fn driver_url(&self, access: Access) -> String {
        match self {
            StoreUrl::Sqlite { path } => match access {
                Access::ReadWrite => format!("sqlite://{}?mode=rwc", path.display()),
                Access::ReadOnly => format!("sqlite://{}?mode=ro", path.display()),
                Access::Immutable => {
                    format!("sqlite://{}?mode=ro&immutable=true", path.display())
                }
            },
            StoreUrl::Postgres { url } => url.clone(),
        }
    }
}

impl FromStr for StoreUrl {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |problem: &str| StoreError::BadUrl {
            url: text.to_string(),
            problem: problem.to_string(),
        };
        if let Some(path) = text.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(bad("the SQLite path is empty"));
            }
            if path.contains('?') {
                return Err(bad(
                    "query parameters are not accepted; the store sets the SQLite options itself",
                ));
            }
            return Ok(StoreUrl::Sqlite {
                path: PathBuf::from(path),
            });
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres {
                url: text.to_string(),
            });
        }
        Err(bad("unknown scheme"))
    }
}

impl fmt::Display for StoreUrl {
    /// The URL as a person reads it; a PostgreSQL password is masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Sqlite { path } => write!(f, "sqlite://{}", path.display()),
            StoreUrl::Postgres { url } => f.write_str(&maestro_protocol::mask_url_password(url)),
        }
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            StoreUrl::Postgres { url } => f
                .debug_struct("Postgres")
                .field("url", &maestro_protocol::mask_url_password(url))
                .finish(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_postgres_password_never_prints() {
        let url = StoreUrl::Postgres {
            url: "postgres://maestro:s3cret@db.internal:5432/jobs".into(),
        };
        for shown in [format!("{url}"), format!("{url:?}"), format!("{url:#?}")] {
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(
                shown.contains("maestro:***@db.internal:5432/jobs"),
                "{shown}"
            );
        }
    }

    #[test]
    fn flag_beats_env_beats_config_beats_default() {
        let root = Path::new("/proj");
        let pg = "postgres://u@h/db";
        assert_eq!(
            StoreUrl::resolve(Some("sqlite://a.db"), Some(pg), Some(pg), root).unwrap(),
            (
                StoreUrl::Sqlite {
                    path: "a.db".into()
                },
                UrlOrigin::Flag
            )
        );
        assert_eq!(
            StoreUrl::resolve(None, Some(pg), Some("sqlite://c.db"), root).unwrap(),
            (StoreUrl::Postgres { url: pg.into() }, UrlOrigin::Env)
        );
        assert_eq!(
            StoreUrl::resolve(Some(" "), Some(""), Some("sqlite://c.db"), root).unwrap(),
            (
                StoreUrl::Sqlite {
                    path: "c.db".into()
                },
                UrlOrigin::Config
            )
        );
        assert_eq!(
            StoreUrl::resolve(None, None, None, root).unwrap(),
            (
                StoreUrl::Sqlite {
                    path: "/proj/.maestro/maestro.db".into()
                },
                UrlOrigin::Default
            )
        );
    }

    #[test]
    fn bad_urls_name_the_problem_and_the_accepted_forms() {
        let err = "mysql://x".parse::<StoreUrl>().unwrap_err().to_string();
        assert_eq!(
            err,
            "store URL `mysql://x`: unknown scheme; expected `sqlite://PATH` (for example \
             `sqlite://.maestro/maestro.db`) or `postgres://USER@HOST:PORT/DATABASE`"
        );
        assert!(matches!(
            StoreUrl::resolve(Some("sqlite://"), None, None, Path::new("/")),
            Err(StoreError::BadUrl { .. })
        ));
    }

    #[test]
    fn display_masks_a_postgres_password() {
        let url: StoreUrl = "postgres://me:secret@db:5432/maestro".parse().unwrap();
        assert_eq!(url.to_string(), "postgres://me:***@db:5432/maestro");
    }
}
