//! A job's files: the inputs uploaded with it and the outputs its runs left behind, by path,
//! their bytes in the content-addressed `blobs` table. Paths are stored as the caller gives
//! them; the caller checks them (`maestro_app::JobPath`).

use sha2::{Digest, Sha256};
use sqlx::Any;
use sqlx::any::AnyRow;

use crate::clock::from_ms;
use crate::error::{StoreError, StoreResult};
use crate::fence::FENCED;
use crate::model::{JobId, Lease, NewJob};
use crate::rows::{col, parse_id};
use crate::store::{Store, WriteTx};

/// Which side of a run a job's file is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    /// Uploaded with the job; the run finds it under `input/`.
    Input,
    /// Left by a run under `output/`.
    Output,
}

impl FileKind {
    /// The name the `kind` column holds: `input` or `output`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Input => "input",
            FileKind::Output => "output",
        }
    }

    fn parse(text: &str) -> StoreResult<FileKind> {
        match text {
            "input" => Ok(FileKind::Input),
            "output" => Ok(FileKind::Output),
            other => Err(StoreError::Corrupt {
                what: format!("job file kind `{other}` (expected `input` or `output`)"),
            }),
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job's file as the store lists it (without its bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    /// The job it belongs to.
    pub job_id: JobId,
    /// Input or output.
    pub kind: FileKind,
    /// Relative, '/'-separated: under `input/` or `output/` of the run's workspace.
    pub path: String,
    /// The SHA-256 (lowercase hex) of its bytes, their key in `blobs`.
    pub hash: String,
    /// Its size in bytes.
    pub size: i64,
    /// When it was stored.
    pub created_at: time::OffsetDateTime,
}

/// A file to store for a job: its relative path and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    /// Relative, '/'-separated, already checked by the caller.
    pub path: String,
    /// Its content.
    pub bytes: Vec<u8>,
}

/// The key of `bytes` in the `blobs` table, as [`StoredFile::hash`] holds it: their SHA-256,
/// lowercase hex. Whoever holds a copy of a job's file tells whether it is the stored one by it.
pub fn blob_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

const FILE_COLUMNS: &str = "job_id, kind, path, hash, size, created_at";

fn file_from_row(row: &AnyRow) -> StoreResult<StoredFile> {
    Ok(StoredFile {
        job_id: parse_id(&col::<String>(row, "job_id")?)?,
        kind: FileKind::parse(&col::<String>(row, "kind")?)?,
        path: col(row, "path")?,
        hash: col(row, "hash")?,
        size: col(row, "size")?,
        created_at: from_ms(col(row, "created_at")?),
    })
}

impl Store {
    /// Queues `job` with its input files in one transaction: the blobs, the job and its file
    /// rows are all written, or none is, so a job never exists without its inputs.
    pub async fn submit_with_inputs(&self, job: NewJob, inputs: &[NewFile]) -> StoreResult<JobId> {
        let mut tx = self.begin_write().await?;
        let id = self.insert_job(&mut tx, &job, None).await?;
        self.put_files(&mut tx, id, FileKind::Input, inputs).await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a submit with its inputs"))?;
        self.changed_job(id);
        Ok(id)
    }

    /// Records the files a run of the job under `lease` left in its `output/`, in place of
    /// those recorded before (a file since removed is forgotten), in one transaction fenced by
    /// the lease: a run whose lease was lost records nothing.
    pub async fn record_outputs(&self, lease: &Lease, outputs: &[NewFile]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        self.check_lease_for_outputs(&mut tx, lease).await?;
        sqlx::query::<Any>("DELETE FROM job_files WHERE job_id = $1 AND kind = 'output'")
            .bind(lease.job_id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("forget a job's earlier outputs"))?;
        self.put_files(&mut tx, lease.job_id, FileKind::Output, outputs)
            .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a job's outputs"))
    }

    /// Records what changed in the `output/` of the run under `lease` since it last recorded
    /// it: `changed` files are written (in place of their earlier bytes), `removed` paths are
    /// forgotten, and every other output stays as it is. One transaction fenced by the lease,
    /// as [`Store::record_outputs`]: a run whose lease was lost records nothing.
    pub async fn record_output_changes(
        &self,
        lease: &Lease,
        changed: &[NewFile],
        removed: &[String],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        self.check_lease_for_outputs(&mut tx, lease).await?;
        for path in removed {
            sqlx::query::<Any>(
                "DELETE FROM job_files WHERE job_id = $1 AND kind = 'output' AND path = $2",
            )
            .bind(lease.job_id.to_string())
            .bind(path.clone())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("forget a job's removed output"))?;
        }
        self.put_files(&mut tx, lease.job_id, FileKind::Output, changed)
            .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a job's changed outputs"))
    }

    /// Checks, inside `tx`, that `lease` is still the job's newest and the job still running,
    /// and holds the row until `tx` ends: outputs are written only by the run that owns the job.
    async fn check_lease_for_outputs(&self, tx: &mut WriteTx, lease: &Lease) -> StoreResult<()> {
        let check = format!(
            "SELECT fence FROM jobs WHERE {FENCED}{}",
            self.backend.share_lock()
        );
        let owned = sqlx::query::<Any>(sqlx::AssertSqlSafe(check))
            .bind(lease.job_id.to_string())
            .bind(lease.fence)
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::query("check a lease before recording outputs"))?;
        if owned.is_none() {
            return Err(self.lease_error_in(&mut **tx, lease).await);
        }
        Ok(())
    }

    /// Writes `files`' blobs and rows inside `tx` (a row already there for a path is replaced).
    async fn put_files(
        &self,
        tx: &mut WriteTx,
        job: JobId,
        kind: FileKind,
        files: &[NewFile],
    ) -> StoreResult<()> {
        let now = self.now_ms();
        for file in files {
            let hash = blob_hash(&file.bytes);
            let size = i64::try_from(file.bytes.len()).unwrap_or(i64::MAX);
            sqlx::query::<Any>(
                "INSERT INTO blobs (hash, size, data, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (hash) DO NOTHING",
            )
            .bind(hash.clone())
            .bind(size)
            .bind(file.bytes.clone())
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::query("store a job file's bytes"))?;
            sqlx::query::<Any>(
                "INSERT INTO job_files (job_id, kind, path, hash, size, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (job_id, kind, path) DO UPDATE SET hash = excluded.hash, \
                 size = excluded.size, created_at = excluded.created_at",
            )
            .bind(job.to_string())
            .bind(kind.as_str().to_string())
            .bind(file.path.clone())
            .bind(hash)
            .bind(size)
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::query("record a job file"))?;
        }
        Ok(())
    }

    /// A job's files, inputs first, each kind by path.
    pub async fn job_files(&self, job: JobId) -> StoreResult<Vec<StoredFile>> {
        let sql =
            format!("SELECT {FILE_COLUMNS} FROM job_files WHERE job_id = $1 ORDER BY kind, path");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(job.to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list a job's files"))?
            .iter()
            .map(file_from_row)
            .collect()
    }

    /// One of a job's files with its bytes; `None` when the job has no such file.
    pub async fn job_file(
        &self,
        job: JobId,
        kind: FileKind,
        path: &str,
    ) -> StoreResult<Option<(StoredFile, Vec<u8>)>> {
        let sql = "SELECT f.job_id, f.kind, f.path, f.hash, f.size, f.created_at, b.data \
             FROM job_files f JOIN blobs b ON b.hash = f.hash \
             WHERE f.job_id = $1 AND f.kind = $2 AND f.path = $3";
        let row = sqlx::query::<Any>(sql)
            .bind(job.to_string())
            .bind(kind.as_str().to_string())
            .bind(path.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("read a job file"))?;
        row.map(|row| Ok((file_from_row(&row)?, col::<Vec<u8>>(&row, "data")?)))
            .transpose()
    }

    /// Which of `jobs` have input files: one query per 500 jobs.
    pub(crate) async fn jobs_with_inputs(
        &self,
        jobs: &[JobId],
    ) -> StoreResult<std::collections::HashSet<JobId>> {
        let ids: Vec<String> = jobs.iter().map(ToString::to_string).collect();
        crate::rows::distinct_among(
            &self.pool,
            self.backend,
            |marks| {
                format!(
                    "SELECT DISTINCT job_id FROM job_files WHERE kind = {} AND job_id IN",
                    marks.mark()
                )
            },
            &[FileKind::Input.as_str().to_string()],
            &ids,
            "read which jobs have input files",
        )
        .await?
        .iter()
        .map(|id| parse_id(id))
        .collect()
    }

    /// Every file of one kind with its bytes, by path (a run's inputs, to lay out in its
    /// workspace).
    pub async fn job_file_contents(
        &self,
        job: JobId,
        kind: FileKind,
    ) -> StoreResult<Vec<(StoredFile, Vec<u8>)>> {
        let sql = "SELECT f.job_id, f.kind, f.path, f.hash, f.size, f.created_at, b.data \
                   FROM job_files f JOIN blobs b ON b.hash = f.hash \
                   WHERE f.job_id = $1 AND f.kind = $2 ORDER BY f.path";
        sqlx::query::<Any>(sql)
            .bind(job.to_string())
            .bind(kind.as_str().to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("read a job's files"))?
            .iter()
            .map(|row| Ok((file_from_row(row)?, col::<Vec<u8>>(row, "data")?)))
            .collect()
    }
}
