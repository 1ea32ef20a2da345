//! Pieces kept in the store, so that every node sharing it sees them. Each write is a new
//! version of its name (one more than the newest); a deletion is a version without text (a
//! tombstone), so a job that started with an older version can still read it.

use sqlx::Any;
use sqlx::any::AnyRow;

use crate::clock::from_ms;
use crate::error::{StoreError, StoreResult};
use crate::model::JobId;
use crate::rows::col;
use crate::store::Store;

/// One stored version of a piece.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPieceVersion {
    /// The piece's name (`[a-z0-9][a-z0-9._-]*`, checked by the caller).
    pub name: String,
    /// Its version: 1 for the first write of the name, one more for each write after.
    pub version: i64,
    /// The piece's YAML; `None` for a deletion.
    pub yaml: Option<String>,
    /// Who wrote this version.
    pub created_by: String,
    /// When it was written.
    pub created_at: time::OffsetDateTime,
}

/// How many times a write that lost the race for the next version number tries again.
const PUT_TRIES: usize = 16;

const PIECE_COLUMNS: &str = "name, version, yaml, created_by, created_at";

fn piece_from_row(row: &AnyRow) -> StoreResult<StoredPieceVersion> {
    Ok(StoredPieceVersion {
        name: col(row, "name")?,
        version: col(row, "version")?,
        yaml: col(row, "yaml")?,
        created_by: col(row, "created_by")?,
        created_at: from_ms(col(row, "created_at")?),
    })
}

impl Store {
    /// Writes a new version of the piece `name` (`yaml: None` writes a deletion) and returns
    /// it. The version is one more than the newest of the name, taken and written in one
    /// transaction; of writers racing for the same number the database keeps one (the primary
    /// key `(name, version)`), and the others take the next number.
    pub async fn put_piece(
        &self,
        name: &str,
        yaml: Option<&str>,
        by: &str,
    ) -> StoreResult<StoredPieceVersion> {
        let mut tries = 0;
        loop {
            tries += 1;
            let now = self.now_ms();
            let mut tx = self.begin_write().await?;
            let written = sqlx::query::<Any>(
                "INSERT INTO pieces (name, version, yaml, created_by, created_at) \
                 SELECT $1, COALESCE(MAX(version), 0) + 1, $2, $3, $4 FROM pieces WHERE name = $1 \
                 ON CONFLICT (name, version) DO NOTHING \
                 RETURNING name, version, yaml, created_by, created_at",
            )
            .bind(name.to_string())
            .bind(yaml.map(str::to_string))
            .bind(by.to_string())
            .bind(now)
            .fetch_optional(&mut *tx)
            .await;
            let written = match written {
                Ok(row) => row,
                // PostgreSQL: a racing writer committed the same number first.
                Err(e) if is_unique_violation(&e) && tries < PUT_TRIES => continue,
                Err(e) => return Err(StoreError::query("write a piece version")(e)),
            };
            let Some(row) = written else {
                drop(tx);
                if tries < PUT_TRIES {
                    continue;
                }
                return Err(StoreError::Corrupt {
                    what: format!("piece `{name}`: no free version number after {PUT_TRIES} tries"),
                });
            };
            let stored = piece_from_row(&row)?;
            tx.commit()
                .await
                .map_err(StoreError::query("commit a piece version"))?;
            return Ok(stored);
        }
    }

    /// Which of `names` the store holds a piece of (any version): one query per 500 names.
    pub(crate) async fn stored_piece_names(
        &self,
        names: &[String],
    ) -> StoreResult<std::collections::HashSet<String>> {
        crate::rows::distinct_among(
            &self.pool,
            self.backend,
            |_| "SELECT DISTINCT name FROM pieces WHERE name IN".to_string(),
            &[],
            names,
            "read which pieces are stored",
        )
        .await
    }

    /// The newest version of the piece `name`, a deletion included; `None` when the name was
    /// never written.
    pub async fn piece_latest(&self, name: &str) -> StoreResult<Option<StoredPieceVersion>> {
        let sql = format!(
            "SELECT {PIECE_COLUMNS} FROM pieces WHERE name = $1 ORDER BY version DESC LIMIT 1"
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(name.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("read a piece"))?
            .as_ref()
            .map(piece_from_row)
            .transpose()
    }

    /// Version `version` of the piece `name`; `None` when there is no such version.
    pub async fn piece_at(
        &self,
        name: &str,
        version: i64,
    ) -> StoreResult<Option<StoredPieceVersion>> {
        let sql = format!("SELECT {PIECE_COLUMNS} FROM pieces WHERE name = $1 AND version = $2");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(name.to_string())
            .bind(version)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("read a piece version"))?
            .as_ref()
            .map(piece_from_row)
            .transpose()
    }

    /// The newest version of every piece that is not deleted, by name.
    pub async fn pieces_latest(&self) -> StoreResult<Vec<StoredPieceVersion>> {
        let sql = format!(
            "SELECT {PIECE_COLUMNS} FROM pieces p WHERE version = \
             (SELECT MAX(version) FROM pieces q WHERE q.name = p.name) \
             AND yaml IS NOT NULL ORDER BY name"
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list pieces"))?
            .iter()
            .map(piece_from_row)
            .collect()
    }

    /// Deletes the piece `name` by writing a deletion as its next version; `None` (nothing
    /// written) when the name has no live version.
    pub async fn delete_piece(
        &self,
        name: &str,
        by: &str,
    ) -> StoreResult<Option<StoredPieceVersion>> {
        match self.piece_latest(name).await? {
            Some(latest) if latest.yaml.is_some() => self.put_piece(name, None, by).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Records the stored piece version a job's run started with (once: a later call, by a
    /// resumed run, changes nothing). `false` when the job already had one or does not exist.
    pub async fn set_job_piece_version(&self, job: JobId, version: i64) -> StoreResult<bool> {
        let changed = sqlx::query::<Any>(
            "UPDATE jobs SET piece_version = $1 WHERE id = $2 AND piece_version IS NULL",
        )
        .bind(version)
        .bind(job.to_string())
        .execute(&self.pool)
        .await
        .map_err(StoreError::query("record a job's piece version"))?
        .rows_affected();
        Ok(changed > 0)
    }
}

/// A unique constraint refused the row (PostgreSQL `23505`, SQLite `2067`/`1555`).
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => matches!(db.kind(), sqlx::error::ErrorKind::UniqueViolation),
        _ => false,
    }
}
