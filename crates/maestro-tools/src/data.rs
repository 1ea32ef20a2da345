//! `SQLite`: one SQL statement against a database file inside the workspace. Read-only (the file
//! opened with `mode=ro`, `immutable=1` where it can be, and `query_only` set) unless the movement may edit and the file lies in a
//! writable directory. `ATTACH` and `VACUUM` are refused: they would reach files outside.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::config::ToolsConfig;
use crate::core::{blocking, off_runtime, open_workspace};
use crate::input::capped;
use crate::regular_file::{self, Access, OpenError};
use crate::{ToolContext, ToolOutput, TypedTool};

/// Most rows one query returns.
const MAX_ROWS: usize = 1000;

/// The input of a `SQLite` call.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SqliteInput {
    /// Path of the database file, relative to the workspace root (e.g. `input/data.db`).
    pub database: String,
    /// One SQL statement; use `?` placeholders for values.
    pub query: String,
    /// Values for the `?` placeholders, in order.
    #[serde(default)]
    pub params: Vec<Value>,
}

/// `SQLite`.
#[derive(Debug)]
pub struct SqliteTool {
    /// Where a movement that may edit can write (`writable_dirs`) and the output cap.
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for SqliteTool {
    type Input = SqliteInput;
    const NAME: &'static str = "SQLite";
    const DESCRIPTION: &'static str = "Run one SQL statement on a SQLite database file in the workspace; rows come back as JSON (read-only unless the movement can edit).";

    async fn run(&self, ctx: &ToolContext, input: SqliteInput) -> ToolOutput {
        let ws = match open_workspace(ctx) {
            Ok(ws) => ws,
            Err(e) => return e,
        };
        let path = match ws.resolve(&input.database) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let writable = ctx.edit
            && ws
                .resolve_writable(
                    &input.database,
                    &ctx.writable_dirs(&self.config.writable_dirs),
                )
                .is_ok();
        let db_path = path.abs.clone();
        match off_runtime(move || check_database_files(&db_path)).await {
            Ok(()) => {}
            Err(OpenError::NotFound) if writable => {}
            Err(OpenError::NotFound) => {
                return ToolOutput::error(format!(
                    "`{}` does not exist{}",
                    path.display(),
                    if ctx.edit {
                        " (new databases can be created only in the writable directories)"
                    } else {
                        ""
                    }
                ));
            }
            Err(e) => {
                return ToolOutput::error(e.explain(&path.display(), "SQLite", Access::Read));
            }
        }
        if first_keyword(&input.query).eq_ignore_ascii_case("vacuum") {
            return ToolOutput::error(
                "VACUUM is not available (it can write files outside the workspace)",
            );
        }
        let conn = match open(&path.abs, writable) {
            Ok(c) => c,
            Err(e) => {
                return ToolOutput::error(format!(
                    "cannot open `{}` as a SQLite database: {e}",
                    path.display()
                ));
            }
        };
        // A runaway query is interrupted at the time limit or on cancellation.
        let interrupt = conn.get_interrupt_handle();
        let limit = self
            .config
            .call_timeout
            .saturating_sub(Duration::from_secs(1));
        let cancel = ctx.cancel.clone();
        let watchdog = tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(limit) => {}
                _ = cancel.cancelled() => {}
            }
            interrupt.interrupt();
        });
        let cap = self.config.output_cap_bytes;
        let display = path.display();
        let out = blocking(move || run(&conn, &input, cap, writable, &display)).await;
        watchdog.abort();
        out
    }
}

/// The database and the files SQLite keeps beside it must be regular files: SQLite opens them
/// with blocking calls, so a FIFO planted as `data.db-wal` would hang the call.
fn check_database_files(db: &Path) -> Result<(), OpenError> {
    regular_file::open_read(db)?;
    for suffix in ["-wal", "-shm", "-journal"] {
        match regular_file::open_read(&companion(db, suffix)) {
            Ok(_) | Err(OpenError::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Opens the database. Read-only databases are opened through a URI with `mode=ro`, and with
/// `immutable=1` when no write-ahead log holds pending changes, so SQLite takes no locks and
/// creates no `-wal`, `-shm` or `-journal` file next to it (in `input/`, say).
fn open(path: &Path, writable: bool) -> rusqlite::Result<Connection> {
    let conn = if writable {
        Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?
    } else if std::fs::symlink_metadata(companion(path, "-wal")).is_ok_and(|m| m.len() > 0) {
        // Changes still in the log (a writer is open, or crashed). Reading them needs the
        // `-shm` index, which SQLite would create here: read a checkpointed copy instead.
        open_snapshot(path)?
    } else {
        open_immutable(path)?
    };
    conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_ATTACHED, 0)?;
    if !writable {
        conn.pragma_update(None, "query_only", true)?;
    }
    conn.authorizer(Some(move |ctx: AuthContext<'_>| match ctx.action {
        AuthAction::Attach { .. } | AuthAction::Detach { .. } => Authorization::Deny,
        AuthAction::Pragma {
            pragma_name,
            pragma_value: Some(_),
        } if !writable
            || matches!(
                pragma_name.to_ascii_lowercase().as_str(),
                "query_only"
                    | "writable_schema"
                    | "temp_store_directory"
                    | "data_store_directory"
                    | "trusted_schema"
            ) =>
        {
            Authorization::Deny
        }
        _ => Authorization::Allow,
    }))?;
    Ok(conn)
}

fn companion(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn open_immutable(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(
        format!("file:{}?mode=ro&immutable=1", uri_path(path)),
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
}

/// Copies the database and its log to a private directory, folds the log in there, and opens
/// the copy immutably; the copy is removed at once (the open connection keeps reading it).
fn open_snapshot(path: &Path) -> rusqlite::Result<Connection> {
    let io = |e: std::io::Error| rusqlite::Error::ToSqlConversionFailure(Box::new(e));
    let dir = std::env::temp_dir().join(format!("maestro-sqlite-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&dir).map_err(io)?;
    let copy = dir.join("db");
    let result = (|| {
        for suffix in ["", "-wal"] {
            let bytes = regular_file::read(&companion(path, suffix))
                .map_err(|e| io(std::io::Error::other(e)))?;
            std::fs::write(companion(&copy, suffix), bytes).map_err(io)?;
        }
        let writer = Connection::open(&copy)?;
        writer.pragma_update(None, "journal_mode", "DELETE")?;
        drop(writer);
        open_immutable(&copy)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `path` percent-encoded for a `file:` URI (everything but unreserved characters and `/`).
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    path.as_os_str()
        .as_bytes()
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn first_keyword(sql: &str) -> &str {
    let mut s = sql.trim_start();
    // Skip leading `-- comments`.
    while let Some(rest) = s.strip_prefix("--") {
        s = rest
            .split_once('\n')
            .map(|(_, r)| r)
            .unwrap_or("")
            .trim_start();
    }
    s.split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("")
}

fn run(
    conn: &Connection,
    input: &SqliteInput,
    cap: usize,
    writable: bool,
    display: &str,
) -> ToolOutput {
    let read_only_hint = if writable {
        ""
    } else {
        " (the database is open read-only: this movement cannot edit, or the file is outside the writable directories)"
    };
    let mut stmt = match conn.prepare(&input.query) {
        Ok(s) => s,
        Err(e) => {
            return ToolOutput::error(format!("SQL error in `{display}`: {e}{read_only_hint}"));
        }
    };
    let params: Vec<SqlValue> = input.params.iter().map(to_sql).collect();
    if stmt.parameter_count() != params.len() {
        return ToolOutput::error(format!(
            "the statement has {} `?` placeholder(s) but {} param(s) were given",
            stmt.parameter_count(),
            params.len()
        ));
    }
    let columns: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
    if columns.is_empty() {
        return match stmt.execute(rusqlite::params_from_iter(params)) {
            Ok(n) => ToolOutput::ok(format!("ok; {n} row(s) changed")),
            Err(e) => ToolOutput::error(format!("SQL error in `{display}`: {e}{read_only_hint}")),
        };
    }
    let mut rows = match stmt.query(rusqlite::params_from_iter(params)) {
        Ok(r) => r,
        Err(e) => {
            return ToolOutput::error(format!("SQL error in `{display}`: {e}{read_only_hint}"));
        }
    };
    let mut out: Vec<Value> = Vec::new();
    let mut more = false;
    loop {
        match rows.next() {
            Ok(Some(row)) => {
                if out.len() == MAX_ROWS {
                    more = true;
                    break;
                }
                let mut obj = serde_json::Map::new();
                for (i, name) in columns.iter().enumerate() {
                    let v = row.get_ref(i).map(to_json).unwrap_or(Value::Null);
                    obj.insert(name.clone(), v);
                }
                out.push(Value::Object(obj));
            }
            Ok(None) => break,
            Err(e) => return ToolOutput::error(format!("SQL error in `{display}`: {e}")),
        }
    }
    let mut text = serde_json::to_string_pretty(&out).unwrap_or_default();
    text.push('\n');
    if more {
        text.push_str(&format!(
            "[stopped after {MAX_ROWS} rows; add LIMIT/OFFSET or a WHERE clause]\n"
        ));
    }
    capped(text, cap)
}

fn to_sql(v: &Value) -> SqlValue {
    match v {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(i64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => SqlValue::Integer(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => SqlValue::Text(s.clone()),
        other => SqlValue::Text(other.to_string()),
    }
}

fn to_json(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::String(format!("<blob, {} bytes>", b.len())),
    }
}
