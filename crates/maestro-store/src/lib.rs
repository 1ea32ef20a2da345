//! Durable state for Maestro: a job queue with fenced leases, each run's event stream, large
//! tool results by content hash, workers with heartbeats, comments, schedules and the audit
//! log, on SQLite (embedded, the default: `.maestro/maestro.db`) or PostgreSQL (several nodes).
//!
//! The engine and the workers use the queue through [`JobQueue`] and know no SQL. A store is
//! opened from a URL ([`StoreUrl`]: `sqlite://PATH` or `postgres://…`) with [`Store::open`],
//! which also brings the schema up to date.
//!
//! ```no_run
//! # async fn demo() -> Result<(), maestro_store::StoreError> {
//! use std::time::Duration;
//! use maestro_store::{Classes, JobQueue, JobStatus, NewJob, Outcome, Store, StoreUrl};
//!
//! let store = Store::open(&"sqlite://.maestro/maestro.db".parse()?).await?;
//! let id = store.submit(NewJob::new("default", "fix the tests", "alice")).await?;
//! if let Some(claimed) = store.claim("worker-1", &Classes::Any, Duration::from_secs(30)).await? {
//!     // ... run it, appending events under `claimed.lease` ...
//!     store.finish(&claimed.lease, Outcome {
//!         status: JobStatus::Completed, result: None, reason: None,
//!     }).await?;
//! }
//! # let _ = id; Ok(()) }
//! ```

mod auth;
mod budgets;
mod clock;
mod config_versions;
mod error;
mod events;
mod fence;
mod files;
mod finish;
mod gateway;
mod gateway_keys;
mod jobs;
mod knowledge;
mod leases;
mod model;
mod open;
mod pages;
mod pieces;
mod queue;
mod records;
mod rows;
mod schedules;
mod store;
mod subtasks;
mod url;
mod watch;

pub use auth::{
    NewToken, StoredLogin, StoredSession, StoredShare, StoredToken, StoredUser, secret_hash,
};
pub use budgets::{BudgetCap, BudgetLimits, BudgetRefusal, BudgetState, Charge, ReservationId};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config_versions::{ConfigPut, ConfigVersion};
pub use error::{StoreError, StoreResult};
pub use events::EventBatch;
pub use files::{FileKind, NewFile, StoredFile, blob_hash};
pub use gateway::{UsageGroup, UsageTotal};
pub use knowledge::{
    ChunkHit, Ingested, KnowledgeScope, MAX_QUERY_TERMS, NewChunk, NewDocument, SHARED_OWNER,
    StoredDocument, query_terms,
};
pub use model::{
    AuditAction, AuditEntry, Claimed, Classes, Comment, CommentKind, FailDisposition, Job, JobId,
    JobStatus, Lease, LeaseKey, NewEvent, NewJob, NewSchedule, Outcome, Schedule, StoredEvent,
    WorkerInfo,
};
pub use open::UrlOrigin;
pub use pages::JobFilter;
pub use pieces::StoredPieceVersion;
pub use queue::JobQueue;
pub use store::{Backend, Backoff, OpenMode, PoolSize, SCHEMA_VERSION, Store};
pub use subtasks::{NewChild, Spawned, child_workspace};
pub use url::StoreUrl;
pub use watch::{Change, StoreWatch, WATCH_POLL};
