//! Opening a store: the connection pool for either backend, the per-connection SQLite settings,
//! and the embedded migrations.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{Any, AnyConnection, AnyPool, Connection, Executor, SqlSafeStr, Transaction};

use crate::clock::{Clock, SystemClock};
use crate::error::{StoreError, StoreResult, sqlite_code};
use crate::open::Access;
use crate::url::StoreUrl;

/// Which database engine a store talks to. The SQL is shared; these are the few places where
/// the engines differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite, embedded: a `sqlite://PATH` URL.
    Sqlite,
    /// PostgreSQL: a `postgres://` or `postgresql://` URL.
    Postgres,
}

/// The placeholders of a statement with many parameters, written in the order the parameters
/// are bound: `$1, $2, …` on PostgreSQL, plain `?` on SQLite. SQLite finds a named or numbered
/// parameter (`$N`, `?N`) by scanning the statement's list of them, when it parses the
/// statement and again whenever its name is asked (sqlx asks for every parameter it binds), so
/// such a statement's cost grows with the square of its parameters; plain `?`s are not in that
/// list.
pub(crate) struct Marks {
    backend: Backend,
    next: usize,
}

impl Marks {
    pub(crate) fn new(backend: Backend) -> Marks {
        Marks { backend, next: 1 }
    }

    /// The next parameter's placeholder.
    pub(crate) fn mark(&mut self) -> String {
        let mut sql = String::new();
        self.write(&mut sql);
        sql
    }

    /// `rows` rows of `width` placeholders in parentheses, comma-separated: a `VALUES` list.
    pub(crate) fn rows(&mut self, rows: usize, width: usize) -> String {
        let mut sql = String::with_capacity(rows * width * 6);
        for row in 0..rows {
            sql.push_str(if row == 0 { "(" } else { ", (" });
            self.write_list(&mut sql, width);
            sql.push(')');
        }
        sql
    }

    /// `count` placeholders, comma-separated: an `IN` list.
    pub(crate) fn list(&mut self, count: usize) -> String {
        let mut sql = String::with_capacity(count * 6);
        self.write_list(&mut sql, count);
        sql
    }

    fn write_list(&mut self, sql: &mut String, count: usize) {
        for i in 0..count {
            if i > 0 {
                sql.push_str(", ");
            }
            self.write(sql);
        }
    }

    fn write(&mut self, sql: &mut String) {
        match self.backend {
            Backend::Sqlite => sql.push('?'),
            Backend::Postgres => {
                sql.push('$');
                sql.push_str(&self.next.to_string());
            }
        }
        self.next += 1;
    }
}

/// `items` in chunks of at most `max` (a power of two), each chunk's length a power of two: a
/// statement built per chunk then has one of a few shapes, which stay prepared in the
/// connection's statement cache, instead of one shape per length (each parsed anew).
pub(crate) fn pow2_chunks<T>(items: &[T], max: usize) -> impl Iterator<Item = &[T]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let take = if rest.len() >= max {
            max
        } else {
            1 << (usize::BITS - 1 - rest.len().leading_zeros())
        };
        let (chunk, tail) = rest.split_at(take);
        rest = tail;
        Some(chunk)
    })
}

impl Backend {
    /// How a write transaction starts. SQLite takes the write lock at once, so a transaction
    /// that reads then writes can never fail to upgrade (and waits `busy_timeout` instead).
    pub(crate) fn begin_write(self) -> &'static str {
        match self {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        }
    }

    /// Appended to the claim's inner SELECT: PostgreSQL workers skip rows another is claiming;
    /// SQLite has one writer at a time anyway.
    pub(crate) fn skip_locked(self) -> &'static str {
        match self {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// Appended to a fence check that precedes inserts: on PostgreSQL a claim (which updates
    /// the row) then waits until the writer commits, and the writer's check waits for a claim in
    /// progress, so a write and a takeover never interleave.
    pub(crate) fn share_lock(self) -> &'static str {
        match self {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR SHARE",
        }
    }

    /// Appended to a read of a row the transaction then writes beside (a parent spawning a
    /// child): PostgreSQL writers of the same row go one at a time; SQLite's do anyway.
    pub(crate) fn row_lock(self) -> &'static str {
        match self {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR UPDATE",
        }
    }
}

/// How many connections a store's pool opens at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolSize {
    /// For a worker or a server, which runs several jobs and queries at once: up to 4 SQLite
    /// connections (in WAL mode readers never wait for the writer) or 8 PostgreSQL ones.
    Shared,
    /// For one process running one job (`maestro run`): a single connection, which its
    /// queries (the run's events, the lease's heartbeat) take in turn. Each SQLite connection
    /// is a thread of its own with its own caches and malloc arena (docs/benchmarks.md,
    /// "Footprint of a run").
    Single,
}

impl PoolSize {
    fn max_connections(self, backend: Backend) -> u32 {
        match (self, backend) {
            (PoolSize::Single, _) => 1,
            (PoolSize::Shared, Backend::Sqlite) => 4,
            (PoolSize::Shared, Backend::Postgres) => 8,
        }
    }
}

/// One embedded migration: version, description, and the SQL for each backend.
struct EmbeddedMigration {
    version: i64,
    description: &'static str,
    sqlite: &'static str,
    postgres: &'static str,
}

/// A PostgreSQL connection idle for this long is pinged before it is used again.
const PG_PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Every migration, oldest first. A released migration is never edited (its checksum is
/// recorded); a change is a new migration.
const MIGRATIONS: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "jobs",
        sqlite: include_str!("../migrations/sqlite/0001_jobs.sql"),
        postgres: include_str!("../migrations/postgres/0001_jobs.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "comments schedules",
        sqlite: include_str!("../migrations/sqlite/0002_comments_schedules.sql"),
        postgres: include_str!("../migrations/postgres/0002_comments_schedules.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "subtasks",
        sqlite: include_str!("../migrations/sqlite/0003_subtasks.sql"),
        postgres: include_str!("../migrations/postgres/0003_subtasks.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "queue indexes",
        sqlite: include_str!("../migrations/sqlite/0004_queue_indexes.sql"),
        postgres: include_str!("../migrations/postgres/0004_queue_indexes.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "auth",
        sqlite: include_str!("../migrations/sqlite/0005_auth.sql"),
        postgres: include_str!("../migrations/postgres/0005_auth.sql"),
    },
    EmbeddedMigration {
        version: 6,
        description: "pieces config",
        sqlite: include_str!("../migrations/sqlite/0006_pieces_config.sql"),
        postgres: include_str!("../migrations/postgres/0006_pieces_config.sql"),
    },
    EmbeddedMigration {
        version: 7,
        description: "job files",
        sqlite: include_str!("../migrations/sqlite/0007_job_files.sql"),
        postgres: include_str!("../migrations/postgres/0007_job_files.sql"),
    },
    EmbeddedMigration {
        version: 8,
        description: "budgets",
        sqlite: include_str!("../migrations/sqlite/0008_budgets.sql"),
        postgres: include_str!("../migrations/postgres/0008_budgets.sql"),
    },
    EmbeddedMigration {
        version: 9,
        description: "gateway keys and usage",
        sqlite: include_str!("../migrations/sqlite/0009_gateway.sql"),
        postgres: include_str!("../migrations/postgres/0009_gateway.sql"),
    },
    EmbeddedMigration {
        version: 10,
        description: "gateway rate windows",
        sqlite: include_str!("../migrations/sqlite/0010_gateway_rates.sql"),
        postgres: include_str!("../migrations/postgres/0010_gateway_rates.sql"),
    },
    EmbeddedMigration {
        version: 11,
        description: "knowledge base",
        sqlite: include_str!("../migrations/sqlite/0011_knowledge.sql"),
        postgres: include_str!("../migrations/postgres/0011_knowledge.sql"),
    },
    EmbeddedMigration {
        version: 12,
        description: "gateway key names",
        sqlite: include_str!("../migrations/sqlite/0012_gateway_key_names.sql"),
        postgres: include_str!("../migrations/postgres/0012_gateway_key_names.sql"),
    },
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 12;

fn migrator(backend: Backend, up_to: i64) -> Migrator {
    let migrations = MIGRATIONS
        .iter()
        .filter(|m| m.version <= up_to)
        .map(|m| {
            let sql = match backend {
                Backend::Sqlite => m.sqlite,
                Backend::Postgres => m.postgres,
            };
            Migration::new(
                m.version,
                Cow::Borrowed(m.description),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect();
    Migrator::with_migrations(migrations)
}

/// Retry delays for infrastructure failures: `base × 2^(attempt-1)`, at most `cap`, then
/// scaled by a random factor in [0.5, 1] so that jobs failed together do not retry together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failed attempt (default 1 s).
    pub base: Duration,
    /// The longest delay, before the random factor (default 5 min).
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The delay before the retry that follows attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: i64) -> Duration {
        let exponent = u32::try_from(attempt.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
        let full = self.base.saturating_mul(1 << exponent).min(self.cap);
        full.mul_f64(rand::random_range(0.5..=1.0))
    }
}

/// A job store: the queue, the runs' events and everything else Maestro keeps, on SQLite or
/// PostgreSQL. Cheap to clone (the pool is shared).
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) backoff: Backoff,
    /// When this store last failed the jobs whose workers vanished past `max_attempts` (Unix
    /// ms); the sweep runs at most once a second rather than on every claim.
    pub(crate) last_sweep: Arc<AtomicI64>,
    url: StoreUrl,
    /// Wakes watchers of a job when its events or status change ([`Store::watch`]).
    pub(crate) notifier: Arc<crate::watch::Notifier>,
    /// SQLite only: the task that checkpoints the write-ahead log, stopped with the last clone.
    _checkpointer: Option<Arc<Checkpointer>>,
    /// SQLite only: one write transaction at a time in this process ([`Store::begin_write`]).
    write_turn: Option<Arc<tokio::sync::Semaphore>>,
}

/// A write transaction ([`Store::begin_write`]), used as the connection it runs on (`&mut
/// *tx`). On SQLite it holds the store's write turn until it is committed or dropped.
#[derive(Debug)]
pub(crate) struct WriteTx {
    // Dropped first: a transaction dropped unfinished queues its rollback before the turn
    // passes on.
    tx: Transaction<'static, Any>,
    _turn: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl WriteTx {
    /// Commits the transaction, then passes the write turn on.
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    /// Undoes the transaction, then passes the write turn on.
    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }
}

impl std::ops::Deref for WriteTx {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }
}

/// Checkpoints a SQLite store's write-ahead log from a connection of its own, every
/// [`CHECKPOINT_EVERY`]. Left to SQLite, a checkpoint runs inside whichever commit crosses
/// `wal_autocheckpoint`: that writer (the one that commits every run's events) then copies the
/// log into the database and waits for two `fsync`s, 10 to 20 ms each on an ordinary disk,
/// while every run waiting on its commit waits too. A `PASSIVE` checkpoint on another
/// connection takes no lock a writer needs, so commits go on meanwhile.
/// `wal_autocheckpoint` stays on, at [`WAL_AUTOCHECKPOINT_PAGES`], in case this task falls
/// behind.
///
/// It also closes the pool when the last clone of a writable SQLite store is dropped without
/// [`Store::close`] (see [`Store::wait_dropped_closed`]): SQLite checkpoints the log and
/// removes the `-wal` and `-shm` files when the last connection to the database closes, and a
/// dropped pool's connections close on their own threads, which a process that exits right
/// after does not wait for.
#[derive(Debug)]
struct Checkpointer {
    task: tokio::task::JoinHandle<()>,
    pool: AnyPool,
}

/// The closes that dropping a store's last clone started, for [`Store::wait_dropped_closed`].
static CLOSING: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// How many writable SQLite stores of this process are open (have a clone left).
static OPEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
        OPEN.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if self.pool.is_closed() {
            return;
        }
        // `Drop` cannot await: the close runs as a task of the runtime, which a process about
        // to exit awaits with `Store::wait_dropped_closed`.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = self.pool.clone();
        let closing = runtime.spawn(async move { close_pool(&pool).await });
        if let Ok(mut all) = CLOSING.lock() {
            all.retain(|c| !c.is_finished());
            all.push(closing);
        }
    }
}

/// How long a close waits for connections still on their way back to the pool.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Closes the pool once the connections in use are back. A connection dropped by its last
/// user goes back through a task of the runtime; `Pool::close` only closes the idle ones, and a
/// connection merely dropped at exit is closed on its own thread after the process has gone
/// (leaving the `-wal` and `-shm` files behind).
async fn close_pool(pool: &AnyPool) {
    let started = tokio::time::Instant::now();
    while pool.size() > u32::try_from(pool.num_idle()).unwrap_or(u32::MAX)
        && started.elapsed() < CLOSE_WAIT
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    pool.close().await;
}

/// How often the background checkpoint runs.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// The write-ahead log's size (in 4 KiB pages: 64 MiB) past which a commit checkpoints it
/// itself, SQLite's own way (its default is 1,000 pages).
const WAL_AUTOCHECKPOINT_PAGES: u32 = 16_384;

impl Checkpointer {
    fn start(pool: AnyPool) -> Checkpointer {
        let for_drop = pool.clone();
        OPEN.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(CHECKPOINT_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                every.tick().await;
                if pool.is_closed() {
                    return;
                }
                // A checkpoint that fails (the database busy past `busy_timeout`, say) is
                // harmless: the next one, or a commit past `wal_autocheckpoint`, does it.
                let _ = sqlx::query::<Any>("PRAGMA wal_checkpoint(PASSIVE)")
                    .fetch_optional(&pool)
                    .await;
            }
        });
        Checkpointer {
            task,
            pool: for_drop,
        }
    }
}

/// Serialises the processes opening one SQLite store while its schema is brought up to date:
/// an exclusive `flock` on the directory that holds the database, released on drop. The
/// directory rather than the file: closing a descriptor of the database file would drop the
/// POSIX locks SQLite's own connections in this process hold on it.
struct MigrationLock {
    _held: Option<std::fs::File>,
}

impl MigrationLock {
    async fn take(url: &StoreUrl, mode: OpenMode) -> StoreResult<MigrationLock> {
        let StoreUrl::Sqlite { path } = url else {
            // PostgreSQL: sqlx's migrator takes `pg_advisory_lock` around the migrations.
            return Ok(MigrationLock { _held: None });
        };
        let dir = match path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            Some(dir) => dir.to_path_buf(),
            None => std::path::PathBuf::from("."),
        };
        if mode == OpenMode::Create {
            std::fs::create_dir_all(&dir).map_err(|source| StoreError::CreateDir {
                path: dir.clone(),
                source,
            })?;
        }
        let locked = tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(&dir)?;
            file.lock()?;
            Ok::<_, std::io::Error>(file)
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|locked| locked)
        .map_err(|source| StoreError::Lock {
            path: path.clone(),
            source,
        })?;
        Ok(MigrationLock {
            _held: Some(locked),
        })
    }
}

/// How long a SQLite writer waits for the lock before giving up.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;

/// How a store is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// For commands that write: a SQLite store that does not exist yet is created (with its
    /// directory), and the schema is brought up to date.
    Create,
    /// For commands that only read: the store must exist (a SQLite file that does not is
    /// [`StoreError::NotFound`], nothing is created). A SQLite store that cannot be written
    /// (a read-only file, directory or file system) is opened read-only, unmigrated.
    Existing,
}

/// The settings every SQLite connection gets (the pool's and the one that opens the store).
async fn sqlite_setup(conn: &mut AnyConnection, access: Access) -> Result<(), sqlx::Error> {
    // First, so that the statements below wait for a lock another process holds.
    let busy = format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}");
    conn.execute(sqlx::AssertSqlSafe(busy)).await?;
    if access == Access::ReadWrite {
        // WAL: readers never block the writer. NORMAL is durable across process crashes (a
        // power cut may lose the last commits, never corrupt).
        conn.execute("PRAGMA journal_mode = WAL").await?;
    }
    conn.execute("PRAGMA synchronous = NORMAL").await?;
    conn.execute("PRAGMA foreign_keys = ON").await?;
    // Pages are read straight from the file's mapping instead of copied in by a `pread` each
    // time they leave the connection's small page cache.
    conn.execute("PRAGMA mmap_size = 268435456").await?;
    // Checkpoints are the background task's (see `Checkpointer`).
    let pages = format!("PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}");
    conn.execute(sqlx::AssertSqlSafe(pages)).await?;
    // A query that reads the schema fails here, not later, on a file that is not a database
    // or is corrupt at its start.
    conn.execute("SELECT count(*) FROM sqlite_schema").await?;
    Ok(())
}

/// The settings every PostgreSQL connection gets.
async fn postgres_setup(conn: &mut AnyConnection) -> Result<(), sqlx::Error> {
    // The claim reads queued jobs down the `jobs_queued` index in claim order and stops after
    // the few it takes. Statistics taken before a burst of submits make the planner expect a
    // handful of queued rows, and it then prefers a bitmap scan of every queued job followed by
    // a sort: a cost that grows with the backlog. Every query of the store is a lookup by key or
    // a range down an index, so bitmap scans are never the better plan here.
    conn.execute("SET enable_bitmapscan = off").await?;
    Ok(())
}

impl Store {
    /// Opens the store and brings its schema up to date (migrations are idempotent: an
    /// up-to-date database is left alone, an older one is upgraded in place). A SQLite store
    /// that does not exist is created ([`OpenMode::Create`]).
    pub async fn open(url: &StoreUrl) -> StoreResult<Store> {
        Store::open_with(url, PoolSize::Shared).await
    }

    /// [`Store::open`] with a pool of `size`.
    ///
    /// Any number of processes may open the same new store at once: the migrations are applied
    /// by one of them while the others wait, and those then find the schema current. On SQLite
    /// the openers take an exclusive `flock` on the database's directory for the connection and
    /// the migrations; on PostgreSQL the migrator holds an advisory lock (`pg_advisory_lock`)
    /// while it applies them.
    pub async fn open_with(url: &StoreUrl, size: PoolSize) -> StoreResult<Store> {
        Store::open_in(url, size, OpenMode::Create).await
    }

    /// Opens a store that must exist already ([`OpenMode::Existing`]): for commands that only
    /// read. A SQLite store that cannot be written is opened read-only.
    pub async fn open_existing(url: &StoreUrl, size: PoolSize) -> StoreResult<Store> {
        Store::open_in(url, size, OpenMode::Existing).await
    }

    /// Opens the store in `mode`. A store that cannot be opened fails at once with the
    /// database's own reason (a corrupt or read-only file, a refused connection), not after the
    /// pool's acquire timeout.
    pub async fn open_in(url: &StoreUrl, size: PoolSize, mode: OpenMode) -> StoreResult<Store> {
        if mode == OpenMode::Existing
            && let StoreUrl::Sqlite { path } = url
            && !path.is_file()
        {
            return Err(StoreError::NotFound {
                url: url.to_string(),
                origin: None,
            });
        }
        let _lock = MigrationLock::take(url, mode).await?;
        Store::connect_in(url, size, mode, true).await
    }

    /// Opens the store without migrating it (creating a SQLite file that does not exist).
    pub async fn connect(url: &StoreUrl) -> StoreResult<Store> {
        Store::connect_in(url, PoolSize::Shared, OpenMode::Create, false).await
    }

    /// Connects once directly (so that an error comes at once, with its cause), applies the
    /// migrations on that connection when `migrate` (and the store is writable), then builds
    /// the pool, whose connections open as they are needed.
    async fn connect_in(
        url: &StoreUrl,
        size: PoolSize,
        mode: OpenMode,
        migrate: bool,
    ) -> StoreResult<Store> {
        install_default_drivers();
        let backend = match url {
            StoreUrl::Sqlite { path } => {
                if mode == OpenMode::Create
                    && let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty())
                {
                    std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                        path: dir.to_path_buf(),
                        source,
                    })?;
                }
                Backend::Sqlite
            }
            StoreUrl::Postgres { .. } => Backend::Postgres,
        };
        let connect_error = |source| StoreError::Connect {
            url: url.to_string(),
            source,
        };
        let (mut first, access) =
            match Store::first_connection(url, backend, Access::ReadWrite).await {
                Ok(conn) => (conn, Access::ReadWrite),
                Err(e)
                    if backend == Backend::Sqlite
                        && mode == OpenMode::Existing
                        && matches!(sqlite_code(&e), Some(8 | 14)) =>
                {
                    // Not writable here: a reader can still read it.
                    match Store::first_connection(url, backend, Access::ReadOnly).await {
                        Ok(conn) => (conn, Access::ReadOnly),
                        Err(_) => {
                            match Store::first_connection(url, backend, Access::Immutable).await {
                                Ok(conn) => (conn, Access::Immutable),
                                Err(_) => return Err(connect_error(e)),
                            }
                        }
                    }
                }
                Err(e) => {
                    if let StoreUrl::Sqlite { path } = url
                        && matches!(sqlite_code(&e), Some(8 | 14))
                        && let Err(source) = std::fs::OpenOptions::new().append(true).open(path)
                    {
                        return Err(StoreError::ReadOnly {
                            url: url.to_string(),
                            source,
                        });
                    }
                    return Err(connect_error(e));
                }
            };
        if migrate && access == Access::ReadWrite {
            let migrated = migrator(backend, SCHEMA_VERSION)
                .run_to(SCHEMA_VERSION, &mut first)
                .await
                .map_err(|source| StoreError::Migrate {
                    url: url.to_string(),
                    source,
                });
            if let Err(e) = migrated {
                let _ = first.close().await;
                return Err(e);
            }
        }
        first.close().await.map_err(connect_error)?;

        let mut options = AnyPoolOptions::new()
            .max_connections(size.max_connections(backend))
            .acquire_timeout(Duration::from_secs(30))
            // A connection given back inside a transaction that could not be ended (a COMMIT
            // and then its ROLLBACK failed: a full disk, a server gone) is closed, never
            // pooled: its next user would find it in that transaction.
            .after_release(|conn, _meta| {
                Box::pin(async move {
                    if conn.is_in_transaction() {
                        // A dropped transaction's rollback is queued: let it run, then look.
                        conn.ping().await?;
                    }
                    Ok(!conn.is_in_transaction())
                })
            });
        if backend == Backend::Sqlite {
            // A connection to a file does not go stale: no ping before each use (a round
            // trip to the connection's thread per query).
            options = options
                .test_before_acquire(false)
                .after_connect(move |conn, _meta| Box::pin(sqlite_setup(conn, access)));
        } else {
            // A ping before each use is a second round trip per statement. A connection used
            // within the last second is known to be alive (a server that went away since fails
            // the statement as it would have failed a ping); one idle for longer is pinged, and
            // a broken one is replaced.
            options = options
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for >= PG_PING_AFTER_IDLE {
                            conn.ping().await?;
                        }
                        Ok(true)
                    })
                })
                .after_connect(|conn, _meta| Box::pin(postgres_setup(conn)));
        }
        let pool = options
            .connect_lazy(&url.driver_url(access))
            .map_err(connect_error)?;
        let checkpointer = (backend == Backend::Sqlite && access == Access::ReadWrite)
            .then(|| Arc::new(Checkpointer::start(pool.clone())));
        Ok(Store {
            pool,
            backend,
            clock: Arc::new(SystemClock),
            backoff: Backoff::default(),
            last_sweep: Arc::new(AtomicI64::new(i64::MIN)),
            url: url.clone(),
            notifier: Arc::new(crate::watch::Notifier::new(backend, url.driver_url(access))),
            _checkpointer: checkpointer,
            write_turn: (backend == Backend::Sqlite)
                .then(|| Arc::new(tokio::sync::Semaphore::new(1))),
        })
    }

    /// One connection, set up as the pool's are.
    async fn first_connection(
        url: &StoreUrl,
        backend: Backend,
        access: Access,
    ) -> Result<AnyConnection, sqlx::Error> {
        let mut conn = AnyConnection::connect(&url.driver_url(access)).await?;
        let setup = match backend {
            Backend::Sqlite => sqlite_setup(&mut conn, access).await,
            Backend::Postgres => postgres_setup(&mut conn).await,
        };
        match setup {
            Ok(()) => Ok(conn),
            Err(e) => {
                let _ = conn.close_hard().await;
                Err(e)
            }
        }
    }

    /// Applies the embedded migrations up to `version` (tests use it to build an old
    /// database; [`Store::open`] applies them all).
    pub async fn migrate_to(&self, version: i64) -> StoreResult<()> {
        migrator(self.backend, version)
            .run_to(version, &self.pool)
            .await
            .map_err(|source| StoreError::Migrate {
                url: self.url.to_string(),
                source,
            })
    }

    /// The versions of the migrations applied to this database, oldest first.
    pub async fn applied_migrations(&self) -> StoreResult<Vec<i64>> {
        sqlx::query_scalar::<Any, i64>(
            "SELECT version FROM _sqlx_migrations WHERE success = TRUE ORDER BY version",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::query("read applied migrations"))
    }

    /// Replaces the clock (tests move time instead of sleeping).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Store {
        self.clock = clock;
        self
    }

    /// Replaces the retry delays.
    pub fn with_backoff(mut self, backoff: Backoff) -> Store {
        self.backoff = backoff;
        self
    }

    /// Which engine this store runs on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL it was opened with.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// Closes every connection (waits for queries in flight). On SQLite the last connection to
    /// close checkpoints the write-ahead log and removes the `-wal` and `-shm` files. Dropping
    /// the last clone of a store closes it the same way.
    pub async fn close(&self) {
        if let Some(checkpointer) = &self._checkpointer {
            checkpointer.task.abort();
        }
        close_pool(&self.pool).await;
    }

    /// Waits until the stores whose last clone was dropped without [`Store::close`] are
    /// closed, and (for at most [`CLOSE_WAIT`]) until the clones that tasks still hold are
    /// dropped too: a background task notices that its work is over at its next turn. A process
    /// awaits it before it exits (the CLI does after every command), so that SQLite removes the
    /// `-wal` and `-shm` files.
    pub async fn wait_dropped_closed() {
        let started = tokio::time::Instant::now();
        loop {
            let closing = CLOSING
                .lock()
                .map(|mut all| std::mem::take(&mut *all))
                .unwrap_or_default();
            let none_closing = closing.is_empty();
            for close in closing {
                let _ = close.await;
            }
            if none_closing {
                if OPEN.load(std::sync::atomic::Ordering::Acquire) == 0
                    || started.elapsed() >= CLOSE_WAIT
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    /// Begins a write transaction. On SQLite it first waits for this store's write turn, so
    /// that the process's writers (the events writer, the run ends, the claims, submits)
    /// queue here, each woken when the last is done, instead of in SQLite's busy
    /// handler, which sleeps 1, 2, 5, 10 ms and longer between its tries for the lock.
    pub(crate) async fn begin_write(&self) -> StoreResult<WriteTx> {
        // The semaphore is never closed, so an acquire cannot fail.
        let turn = match &self.write_turn {
            Some(turns) => Arc::clone(turns).acquire_owned().await.ok(),
            None => None,
        };
        let tx = self
            .pool
            .begin_with(self.backend.begin_write())
            .await
            .map_err(StoreError::query("begin a write transaction"))?;
        Ok(WriteTx { tx, _turn: turn })
    }

    /// The current time by the store's clock.
    pub fn now(&self) -> time::OffsetDateTime {
        self.clock.now()
    }

    pub(crate) fn now_ms(&self) -> i64 {
        crate::clock::to_ms(self.clock.now())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_powers_of_two_and_keep_every_item_in_order() {
        let items: Vec<usize> = (0..200).collect();
        let chunks: Vec<&[usize]> = pow2_chunks(&items, 64).collect();
        let lengths: Vec<usize> = chunks.iter().map(|c| c.len()).collect();
        assert_eq!(lengths, vec![64, 64, 64, 8]);
        assert_eq!(chunks.concat(), items);
        let lengths: Vec<usize> = pow2_chunks(&items[..45], 64).map(<[usize]>::len).collect();
        assert_eq!(lengths, vec![32, 8, 4, 1]);
        assert_eq!(pow2_chunks::<usize>(&[], 64).count(), 0);
    }

    /// Writers of one process that find the write lock taken wait their turn in the order they
    /// asked, each woken when the last one is done. Left to SQLite's busy handler, a writer that
    /// has waited long sleeps longer between its tries, and one that asked later takes the lock
    /// first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writers_of_one_process_write_in_the_order_they_asked() {
        use crate::{JobQueue, NewJob};
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::Sqlite {
            path: dir.path().join("maestro.db"),
        };
        let store = Store::open(&url).await.unwrap();
        let submit = |task: &'static str| {
            let store = store.clone();
            tokio::spawn(async move { store.submit(NewJob::new("p", task, "t")).await })
        };
        let held = store.begin_write().await.unwrap();
        let first = submit("first");
        // By now the first writer's busy handler sleeps 20 ms and more between tries.
        tokio::time::sleep(Duration::from_millis(60)).await;
        let second = submit("second");
        tokio::time::sleep(Duration::from_millis(5)).await;
        held.commit().await.unwrap();
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        let order: Vec<String> =
            sqlx::query_scalar::<Any, String>("SELECT task FROM jobs ORDER BY rowid")
                .fetch_all(&store.pool)
                .await
                .unwrap();
        assert_eq!(order, ["first", "second"]);
    }

    #[test]
    fn placeholders_are_numbered_on_postgres_and_plain_on_sqlite() {
        let mut pg = Marks::new(Backend::Postgres);
        assert_eq!(pg.rows(2, 2), "($1, $2), ($3, $4)");
        assert_eq!(pg.mark(), "$5");
        assert_eq!(pg.list(2), "$6, $7");
        let mut lite = Marks::new(Backend::Sqlite);
        assert_eq!(lite.rows(2, 2), "(?, ?), (?, ?)");
        assert_eq!(lite.list(3), "?, ?, ?");
    }
}
