//! A run's `output/` kept in step with the job's outputs in the store while the run goes on,
//! so that they survive the run's node: the outputs recorded by the job's earlier runs are laid
//! out again when a run goes on from the job's record ([`OutputSync::restore`]), and what a tool
//! call changed under `output/` is recorded before the call's result is
//! ([`OutputSync::record_changes`], called by the run's [`crate::StoreLog`]). The end of the
//! run (or its park) still records the whole of `output/` in their place (`run.rs`).
//!
//! Which copy wins when the workspace already has a file at a recorded path with other bytes:
//! the newer one. The workspace's file wins when it was modified after the store's copy was
//! recorded: it is the effect of a call on this node whose result never reached the record (the
//! run was stopped in between); the resumed run is told that call was interrupted and its
//! effect is unknown, and goes on with the files as the call left them, as it always has on one
//! node. Otherwise the store's copy wins: it was recorded after the workspace's file was last
//! written, by a later run of the job on another node whose record this run goes on from, so
//! the workspace's copy is stale. Times are compared across nodes, whose clocks must agree as
//! the leases already need them to.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use maestro_store::{FileKind, JobId, Lease, NewFile, Store, StoreError, StoredFile};
use time::OffsetDateTime;
use tokio::sync::Mutex;

use crate::files::{FileLimits, InputError, JobPath, Stamp, output_is_empty, scan_outputs};

/// The run's view of its job's outputs in the store: the files under `output/` it knows the
/// store holds, each with the stamp its local copy had then.
pub(crate) struct OutputSync {
    store: Store,
    lease: Lease,
    workspace: PathBuf,
    limits: FileLimits,
    synced: Mutex<Synced>,
}

#[derive(Default)]
struct Synced {
    /// Path under `output/` to the stamp of the local copy the store holds the bytes of.
    known: HashMap<String, Stamp>,
    /// Whether this run recorded any change.
    recorded: bool,
}

impl std::fmt::Debug for OutputSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSync")
            .field("job", &self.lease.job_id)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

/// Why what changed under `output/` was not recorded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncError {
    /// The store refused or failed the write (a lost lease among them).
    #[error(transparent)]
    Store(StoreError),
    /// The scan of `output/` stopped before it finished (the runtime is shutting down).
    #[error("the scan of the run's `output/` stopped: {0}")]
    Scan(#[source] tokio::task::JoinError),
}

/// What restoring one recorded output comes to.
enum Restore {
    /// The workspace holds the store's bytes: nothing to write.
    Same(Stamp),
    /// The workspace's own content at the path is kept (see the module's note).
    Keep,
    /// The store's copy is written there.
    Write(PathBuf),
}

impl OutputSync {
    /// The sync of the run under `lease` in `workspace`, recording within `limits`.
    pub(crate) fn new(
        store: Store,
        lease: Lease,
        workspace: PathBuf,
        limits: FileLimits,
    ) -> OutputSync {
        OutputSync {
            store,
            lease,
            workspace,
            limits,
            synced: Mutex::new(Synced::default()),
        }
    }

    /// Whether this run recorded any change to the job's outputs.
    pub(crate) async fn recorded_any(&self) -> bool {
        self.synced.lock().await.recorded
    }

    /// Lays the outputs the store holds for the job out under the workspace's `output/`, each
    /// where the workspace does not already have it or has an older copy (see the module's
    /// note), and remembers which local copies hold the store's bytes. For a run that goes on
    /// from the job's record: a first claim has none (outputs are recorded only under a lease).
    pub(crate) async fn restore(&self, job: JobId) -> Result<(), InputError> {
        let recorded: Vec<StoredFile> = self
            .store
            .job_files(job)
            .await
            .map_err(InputError::OutputsStore)?
            .into_iter()
            .filter(|file| file.kind == FileKind::Output)
            .collect();
        if recorded.is_empty() {
            return Ok(());
        }
        let workspace = self.workspace.clone();
        let decided = tokio::task::spawn_blocking(move || {
            recorded
                .iter()
                .map(|file| (file.path.clone(), decide(&workspace, file)))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| self.stopped(e))?;
        let mut known = HashMap::new();
        let mut to_write = HashMap::new();
        for (path, restore) in decided {
            match restore {
                Restore::Same(stamp) => {
                    known.insert(path, stamp);
                }
                Restore::Keep => {}
                Restore::Write(abs) => {
                    to_write.insert(path, abs);
                }
            }
        }
        if !to_write.is_empty() {
            let contents = self
                .store
                .job_file_contents(job, FileKind::Output)
                .await
                .map_err(InputError::OutputsStore)?;
            let writes: Vec<(String, PathBuf, Vec<u8>)> = contents
                .into_iter()
                .filter_map(|(file, bytes)| {
                    let abs = to_write.remove(&file.path)?;
                    Some((file.path, abs, bytes))
                })
                .collect();
            let workspace = self.workspace.clone();
            let written = tokio::task::spawn_blocking(move || {
                let mut stamps = Vec::with_capacity(writes.len());
                for (path, abs, bytes) in writes {
                    let stamp =
                        write_output(&abs, &bytes).map_err(|source| InputError::Output {
                            path: path.clone(),
                            workspace: workspace.clone(),
                            source,
                        })?;
                    stamps.push((path, stamp));
                }
                Ok::<_, InputError>(stamps)
            })
            .await
            .map_err(|e| self.stopped(e))??;
            tracing::info!(
                job = %job,
                files = written.len(),
                "laid out the job's recorded outputs in the run's workspace"
            );
            known.extend(written);
        }
        self.synced.lock().await.known = known;
        Ok(())
    }

    /// A restore whose blocking task stopped before it finished (the runtime is shutting down).
    fn stopped(&self, e: tokio::task::JoinError) -> InputError {
        InputError::Output {
            path: String::new(),
            workspace: self.workspace.clone(),
            source: Box::new(e),
        }
    }

    /// Records what changed under the workspace's `output/` since the store last got it: the
    /// files whose stamp changed (or that are new) are written, the ones gone (or now over a
    /// limit) are forgotten, in one transaction fenced by the run's lease. Nothing is read and
    /// nothing is written to the store when nothing changed; a missing or empty `output/` with
    /// nothing recorded before costs one directory read.
    pub(crate) async fn record_changes(&self) -> Result<(), SyncError> {
        let mut synced = self.synced.lock().await;
        let root = self.workspace.join("output");
        if synced.known.is_empty() && output_is_empty(&root) {
            return Ok(());
        }
        let known = synced.known.clone();
        let limits = self.limits;
        let (changed, removed) = tokio::task::spawn_blocking(move || changes(&root, limits, known))
            .await
            .map_err(SyncError::Scan)?;
        if changed.is_empty() && removed.is_empty() {
            return Ok(());
        }
        let (files, stamps): (Vec<NewFile>, Vec<Stamp>) = changed.into_iter().unzip();
        self.store
            .record_output_changes(&self.lease, &files, &removed)
            .await
            .map_err(SyncError::Store)?;
        for path in &removed {
            synced.known.remove(path);
        }
        for (file, stamp) in files.into_iter().zip(stamps) {
            synced.known.insert(file.path, stamp);
        }
        synced.recorded = true;
        Ok(())
    }
}

/// The files under `root` that changed since `known` (new, or another stamp), with their bytes
/// and the stamp they had before they were read, and the known paths no longer there within
/// the limits. Blocks.
fn changes(
    root: &Path,
    limits: FileLimits,
    mut known: HashMap<String, Stamp>,
) -> (Vec<(NewFile, Stamp)>, Vec<String>) {
    let scan = scan_outputs(root, limits);
    let mut changed = Vec::new();
    for seen in scan.files {
        let before = known.remove(&seen.rel);
        if before == Some(seen.stamp) {
            continue;
        }
        // Opened without following a symlink, and only as a regular file; one that cannot be
        // read now is left as the store has it, and the end of the run says why.
        if let Ok(bytes) = maestro_tools::regular_file::read(&seen.abs) {
            changed.push((
                NewFile {
                    path: seen.rel,
                    bytes,
                },
                seen.stamp,
            ));
        }
    }
    // What is left of `known` is no longer under `output/` (or now over a limit).
    let mut removed: Vec<String> = known.into_keys().collect();
    removed.sort();
    (changed, removed)
}

/// Whether the workspace holds the store's copy of `file`, holds its own newer content there
/// (or something that is not a regular file), or gets the store's copy. Blocks.
fn decide(workspace: &Path, file: &StoredFile) -> Restore {
    // Checked when it was recorded; checked again, as it leads to a host path.
    let Ok(path) = JobPath::parse(&file.path) else {
        return Restore::Keep;
    };
    let rel = format!("output/{path}");
    // Inside the workspace, through no symlink; a link, directory or FIFO there is the
    // workspace's own and is left alone.
    let abs = match maestro_tools::workspace_file::writable_file(workspace, &rel) {
        Ok(abs) => abs,
        Err(e) => {
            tracing::warn!(
                job = %file.job_id,
                "the recorded output `{rel}` is not laid out: {e}"
            );
            return Restore::Keep;
        }
    };
    let Ok(meta) = std::fs::symlink_metadata(&abs) else {
        return Restore::Write(abs);
    };
    let stamp = Stamp::of(&meta);
    if i64::try_from(meta.len()).ok() == Some(file.size)
        && maestro_tools::regular_file::read(&abs)
            .is_ok_and(|bytes| maestro_store::blob_hash(&bytes) == file.hash)
    {
        return Restore::Same(stamp);
    }
    let modified = meta.modified().ok().map(OffsetDateTime::from);
    if modified.is_some_and(|modified| modified > file.created_at) {
        Restore::Keep
    } else {
        Restore::Write(abs)
    }
}

/// Writes `bytes` as the regular file `abs` (resolved by `writable_file`); its stamp after.
fn write_output(
    abs: &Path,
    bytes: &[u8],
) -> Result<Stamp, Box<dyn std::error::Error + Send + Sync>> {
    maestro_tools::regular_file::write(
        abs,
        bytes,
        maestro_tools::regular_file::Create::OrTruncate,
    )?;
    Ok(Stamp::of(&std::fs::symlink_metadata(abs)?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::{Duration, SystemTime};

    use maestro_store::{Claimed, Classes, JobQueue as _, NewJob, StoreUrl};
    use sqlx::Connection as _;

    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    async fn claim(store: &Store) -> Claimed {
        store
            .claim_batch("w", &Classes::Any, LEASE, 1)
            .await
            .unwrap()
            .remove(0)
    }

    fn sync(store: &Store, claimed: &Claimed, workspace: &Path) -> OutputSync {
        OutputSync::new(
            store.clone(),
            claimed.lease.clone(),
            workspace.to_path_buf(),
            FileLimits::default(),
        )
    }

    const HOUR: Duration = Duration::from_secs(3600);

    /// Writes `output/<path>`, modified at `modified` when given.
    fn put(workspace: &Path, path: &str, bytes: &str, modified: Option<SystemTime>) {
        let abs = workspace.join("output").join(path);
        std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
        std::fs::write(&abs, bytes).unwrap();
        if let Some(modified) = modified {
            let file = std::fs::File::options().write(true).open(&abs).unwrap();
            file.set_modified(modified).unwrap();
        }
    }

    fn local(workspace: &Path, path: &str) -> Option<String> {
        std::fs::read_to_string(workspace.join("output").join(path)).ok()
    }

    async fn stored(store: &Store, job: JobId) -> Vec<(String, String)> {
        store
            .job_file_contents(job, FileKind::Output)
            .await
            .unwrap()
            .into_iter()
            .map(|(file, bytes)| (file.path, String::from_utf8(bytes).unwrap()))
            .collect()
    }

    /// A run that goes on elsewhere gets what it lacks, keeps what it wrote after the store's
    /// copy was recorded, and has its stale copies replaced; then only what differs from the
    /// store is recorded.
    #[tokio::test]
    async fn a_resumed_run_gets_the_recorded_outputs_and_keeps_its_newer_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreUrl::Sqlite {
            path: dir.path().join("maestro.db"),
        })
        .await
        .unwrap();
        let job = store.submit(NewJob::new("p", "t", "alice")).await.unwrap();
        let first = claim(&store).await;
        let here = tempfile::tempdir().unwrap();
        for (path, bytes) in [
            ("missing.txt", "recorded"),
            ("same.txt", "same"),
            ("newer.txt", "recorded"),
            ("sub/older.txt", "recorded"),
        ] {
            put(here.path(), path, bytes, None);
        }
        sync(&store, &first, here.path())
            .record_changes()
            .await
            .unwrap();
        store.release(&first.lease).await.unwrap();
        let before = store.job_files(job).await.unwrap();

        let second = claim(&store).await;
        let there = tempfile::tempdir().unwrap();
        put(
            there.path(),
            "same.txt",
            "same",
            Some(SystemTime::now() - HOUR),
        );
        put(
            there.path(),
            "newer.txt",
            "written after the recording",
            Some(SystemTime::now() + HOUR),
        );
        put(
            there.path(),
            "sub/older.txt",
            "written before the recording",
            Some(SystemTime::now() - HOUR),
        );
        put(there.path(), "own.txt", "only here", None);
        std::fs::create_dir_all(there.path().join("output/elsewhere")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), there.path().join("output/link")).unwrap();
        let synced = sync(&store, &second, there.path());
        synced.restore(job).await.unwrap();
        assert_eq!(local(there.path(), "missing.txt").unwrap(), "recorded");
        assert_eq!(local(there.path(), "same.txt").unwrap(), "same");
        assert_eq!(
            local(there.path(), "newer.txt").unwrap(),
            "written after the recording"
        );
        assert_eq!(local(there.path(), "sub/older.txt").unwrap(), "recorded");
        assert_eq!(local(there.path(), "own.txt").unwrap(), "only here");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);

        // What the workspace has of its own is recorded with the next change; what it got
        // from the store is not written again.
        synced.record_changes().await.unwrap();
        assert_eq!(
            stored(&store, job).await,
            vec![
                ("missing.txt".into(), "recorded".into()),
                ("newer.txt".into(), "written after the recording".into()),
                ("own.txt".into(), "only here".into()),
                ("same.txt".into(), "same".into()),
                ("sub/older.txt".into(), "recorded".into()),
            ]
        );
        let after = store.job_files(job).await.unwrap();
        for path in ["missing.txt", "same.txt", "sub/older.txt"] {
            let at = |files: &[StoredFile]| {
                files
                    .iter()
                    .find(|f| f.path == path)
                    .map(|f| f.created_at)
                    .unwrap()
            };
            assert_eq!(at(&before), at(&after), "{path} was recorded again");
        }
        // A file removed is forgotten.
        std::fs::remove_file(there.path().join("output/missing.txt")).unwrap();
        synced.record_changes().await.unwrap();
        assert_eq!(stored(&store, job).await.len(), 4);
        assert!(synced.recorded_any().await);
    }

    /// A run whose `output/` did not change since the store last got it writes nothing: its
    /// check does not queue for the store's write lock (held here by another connection).
    #[tokio::test]
    async fn nothing_changed_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maestro.db");
        let store = Store::open(&StoreUrl::Sqlite { path: path.clone() })
            .await
            .unwrap();
        let job = store.submit(NewJob::new("p", "t", "alice")).await.unwrap();
        let first = claim(&store).await;
        let ws = tempfile::tempdir().unwrap();
        let synced = sync(&store, &first, ws.path());
        put(ws.path(), "a.txt", "a", None);
        synced.record_changes().await.unwrap();

        let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        sqlx::raw_sql("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), synced.record_changes())
            .await
            .expect("a check with nothing changed waited for the store's write lock")
            .unwrap();
        sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
        assert_eq!(
            stored(&store, job).await,
            vec![("a.txt".into(), "a".into())]
        );

        // A lost lease records nothing.
        store.release(&first.lease).await.unwrap();
        put(ws.path(), "b.txt", "b", None);
        let refused = synced.record_changes().await.unwrap_err();
        assert!(
            matches!(refused, SyncError::Store(StoreError::LeaseLost { .. })),
            "{refused:?}"
        );
        assert_eq!(stored(&store, job).await.len(), 1);
    }
}
