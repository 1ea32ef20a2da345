//! How a store is opened: where its URL came from, and what a connection may do. A leaf: the
//! URL, the errors and the store all read it.

use std::fmt;

/// Where the chosen store URL came from, for messages such as "store: sqlite://… (from
/// MAESTRO_DB)".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlOrigin {
    /// The `--db` flag.
    Flag,
    /// The `MAESTRO_DB` environment variable.
    Env,
    /// The configuration key `store.url`.
    Config,
    /// Nothing was given: the embedded `.maestro/maestro.db`.
    Default,
}

impl fmt::Display for UrlOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UrlOrigin::Flag => "--db",
            UrlOrigin::Env => "MAESTRO_DB",
            UrlOrigin::Config => "config store.url",
            UrlOrigin::Default => "default",
        })
    }
}

/// Whether a SQLite connection may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    ReadWrite,
    ReadOnly,
    /// Read-only where SQLite cannot even create its shared-memory file beside the database (a
    /// read-only directory or file system): the file is taken not to change while it is open.
    Immutable,
}
