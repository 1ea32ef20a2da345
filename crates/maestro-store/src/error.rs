//! The store's one error type.

use crate::model::{JobId, JobStatus, UnknownName};

/// What went wrong in the store. The fencing errors ([`StoreError::LeaseLost`],
/// [`StoreError::JobCancelled`]) are the ones a worker must act on: stop the run and write nothing
/// more.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store URL is not one this crate opens.
    #[error(
        "store URL `{url}`: {problem}; expected `sqlite://PATH` (for example \
         `sqlite://.maestro/maestro.db`) or `postgres://USER@HOST:PORT/DATABASE`"
    )]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The SQLite file's directory could not be created.
    #[error("cannot create the directory `{path}` for the SQLite store: {source}")]
    CreateDir {
        /// The directory that could not be created.
        path: std::path::PathBuf,
        /// Why the file system refused it.
        #[source]
        source: std::io::Error,
    },
    /// The lock that serialises the processes migrating a SQLite store could not be taken.
    #[error(
        "cannot lock the directory of the SQLite store `{}` while its schema is brought up to \
         date: {source}",
        path.display()
    )]
    Lock {
        /// The SQLite database file whose directory is locked.
        path: std::path::PathBuf,
        /// Why the `flock` failed.
        #[source]
        source: std::io::Error,
    },
    /// A command that only reads was pointed at a SQLite store that does not exist (nothing
    /// was created).
    #[error(
        "the store `{url}`{} does not exist; check the URL, or create the store with a command \
         that writes (`maestro submit`, `maestro worker`)",
        origin.as_ref().map(|o| format!(" (from {o})")).unwrap_or_default()
    )]
    NotFound {
        /// The store's URL.
        url: String,
        /// Where the URL came from (`--db`, `MAESTRO_DB`, …), when the caller knows.
        origin: Option<crate::open::UrlOrigin>,
    },
    /// A command that writes was pointed at a SQLite store it cannot write.
    #[error(
        "the store `{url}` cannot be written ({source}); a command that writes needs write \
         access to the file and its directory, while read-only commands (`maestro jobs list`, \
         `maestro jobs show`) can still read it"
    )]
    ReadOnly {
        /// The store's URL.
        url: String,
        /// The error the write access check met.
        #[source]
        source: std::io::Error,
    },
    /// Connecting to the database failed.
    #[error("cannot open the store at `{url}`: {source}")]
    Connect {
        /// The store's URL (a PostgreSQL password shown as `***`).
        url: String,
        /// The driver's reason.
        #[source]
        source: sqlx::Error,
    },
    /// Applying the embedded migrations failed; the database is left at the last version that
    /// applied completely.
    #[error("migrating the store at `{url}` failed: {source}")]
    Migrate {
        /// The store's URL (a PostgreSQL password shown as `***`).
        url: String,
        /// The migrator's reason, naming the migration when one failed or is unknown.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// A statement failed.
    #[error("store query failed ({context}): {source}")]
    Query {
        /// What the statement was doing, e.g. `commit a cancel`.
        context: &'static str,
        /// The driver's reason.
        #[source]
        source: sqlx::Error,
    },
    /// A row held a value this version does not understand (a newer writer, or a hand edit).
    #[error("job store row is corrupt: {what}")]
    Corrupt {
        /// What could not be read and why, e.g. the column and the driver's reason.
        what: String,
    },
    /// No job has this id.
    #[error("no job with id {0}")]
    NoSuchJob(JobId),
    /// The worker's lease on the job is gone: another worker claimed it (its fencing token is
    /// newer), or the job was handed back. Nothing was written; the worker must stop the run.
    #[error(
        "lease lost on job {job}: this worker holds fencing token {held}, the job is now at \
         {current} ({status}); nothing was written"
    )]
    LeaseLost {
        /// The job the write was about.
        job: JobId,
        /// The fencing token the writer's lease carries.
        held: i64,
        /// The job's newest fencing token.
        current: i64,
        /// The job's status now.
        status: JobStatus,
    },
    /// The job was cancelled while the worker ran it. Nothing was written; stop the run.
    #[error("job {0} was cancelled; nothing was written")]
    JobCancelled(JobId),
    /// An event with this sequence number is already stored for the job: a replay must not
    /// append it again.
    #[error("job {job} already has an event with seq {seq}")]
    EventExists {
        /// The job whose stream already holds the event.
        job: JobId,
        /// The sequence number that is already stored.
        seq: i64,
    },
    /// A status change that the job's lifecycle does not allow.
    #[error("job {job}: cannot {action} a job that is {status}")]
    InvalidTransition {
        /// The job that was asked to change.
        job: JobId,
        /// What was asked, e.g. `answer` or `cancel`.
        action: &'static str,
        /// The job's status, which does not allow it.
        status: JobStatus,
    },
}

impl StoreError {
    /// True when the store cannot be used until a person acts: its file is corrupt or not a
    /// database, cannot be written or cannot be opened (SQLite). A worker stops on such an error
    /// instead of retrying; a full disk, a busy database or a server that went away are not
    /// among them (they pass).
    pub fn is_unusable(&self) -> bool {
        let source = match self {
            StoreError::Connect { source, .. } | StoreError::Query { source, .. } => source,
            StoreError::Migrate {
                source: sqlx::migrate::MigrateError::Execute(source),
                ..
            } => source,
            _ => return false,
        };
        sqlite_code(source).is_some_and(|code| SQLITE_UNUSABLE.contains(&code))
    }

    /// True when the store did not answer, for now: no connection could be had in time, the
    /// connection broke, the server is shutting down or starting, or a SQLite database stayed
    /// locked. Asking again later may succeed; a server answers 503 with `Retry-After`.
    pub fn is_unavailable(&self) -> bool {
        let source = match self {
            StoreError::Connect { source, .. } | StoreError::Query { source, .. } => source,
            _ => return false,
        };
        match source {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => true,
            sqlx::Error::Database(db) => match db.code() {
                // PostgreSQL: a connection exception (class 08), a server shutting down or
                // starting (57P01 to 57P03).
                Some(code)
                    if code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03") =>
                {
                    true
                }
                // SQLite: the database stayed busy or locked past the busy timeout.
                _ => sqlite_code(source).is_some_and(|code| matches!(code, 5 | 6)),
            },
            _ => false,
        }
    }

    pub(crate) fn query(context: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| StoreError::Query { context, source }
    }
}

/// Results of store operations.
pub type StoreResult<T> = Result<T, StoreError>;

impl From<UnknownName> for StoreError {
    fn from(e: UnknownName) -> StoreError {
        StoreError::Corrupt {
            what: e.to_string(),
        }
    }
}

/// The SQLite errors after which a store cannot be used until a person acts: the file is
/// corrupt or not a database, it cannot be written, or it cannot be opened.
pub(crate) const SQLITE_UNUSABLE: [i64; 4] = [
    8,  // SQLITE_READONLY
    11, // SQLITE_CORRUPT
    14, // SQLITE_CANTOPEN
    26, // SQLITE_NOTADB
];

/// The primary SQLite result code of a database error (extended codes carry it in their low
/// byte).
pub(crate) fn sqlite_code(e: &sqlx::Error) -> Option<i64> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    db.code()?.parse::<i64>().ok().map(|code| code & 0xff)
}

#[cfg(test)]
mod tests {
    use super::StoreError;

    #[test]
    fn a_connection_that_cannot_be_had_or_broke_is_unavailable_and_a_bad_query_is_not() {
        let query = |source| StoreError::Query {
            context: "test",
            source,
        };
        for source in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::Io(std::io::ErrorKind::BrokenPipe.into()),
        ] {
            assert!(query(source).is_unavailable());
        }
        for source in [sqlx::Error::RowNotFound, sqlx::Error::Protocol("x".into())] {
            assert!(!query(source).is_unavailable());
        }
        assert!(!StoreError::Corrupt { what: "x".into() }.is_unavailable());
    }
}
