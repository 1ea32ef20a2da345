//! A job's files: the inputs uploaded with it, laid out in its run's `input/` before the run
//! starts, and the outputs its run leaves in `output/`, recorded when it ends or parks. Both
//! live in the store (their bytes in its content-addressed blobs), so any node can list and
//! read them after the worker that ran the job is gone; no host path is ever handed out.

use std::fmt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use maestro_config::FilesConfig;
use maestro_store::{FileKind, JobId, JobQueue, NewFile, Store, StoreError, StoredFile};
use serde::Serialize;
use time::OffsetDateTime;

/// A file uploaded with a job: where its run finds it under `input/`, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// Relative to `input/`, '/'-separated (`data/a.csv`); checked by [`JobPath::parse`].
    pub path: String,
    /// Its content.
    pub bytes: Bytes,
}

/// The limits on one job's files ([`FilesConfig`]): inputs beyond them are refused at
/// submit; outputs beyond them are not recorded (the run is not failed: a note on the job says
/// which file and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    /// The largest single file, in bytes.
    pub max_file_bytes: u64,
    /// The most one job's inputs, or its outputs, may hold together, in bytes.
    pub max_total_bytes: u64,
    /// The most input files, or output files, of one job.
    pub max_files: usize,
}

const MIB: u64 = 1024 * 1024;

impl Default for FileLimits {
    fn default() -> FileLimits {
        FileLimits::from_config(&FilesConfig::default())
    }
}

impl FileLimits {
    /// The limits the configuration's `files:` section sets.
    pub fn from_config(files: &FilesConfig) -> FileLimits {
        FileLimits {
            max_file_bytes: files.max_upload_mb.saturating_mul(MIB),
            max_total_bytes: files.max_job_mb.saturating_mul(MIB),
            max_files: usize::try_from(files.max_files).unwrap_or(usize::MAX),
        }
    }
}

/// The longest path a job's file may have, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// The longest name one segment of such a path may have, in bytes.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// A checked path of a job's file: relative, '/'-separated, confined to the directory it is
/// under (`input/` or `output/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobPath(String);

impl JobPath {
    /// Checks `path`: not empty, relative (no leading `/`), no empty, `.` or `..` segment, no
    /// backslash, NUL or other control character, at most [`MAX_PATH_BYTES`] bytes and
    /// [`MAX_SEGMENT_BYTES`] per segment. The error says what is wrong.
    pub fn parse(path: &str) -> Result<JobPath, FileError> {
        let bad = |problem: &'static str| {
            Err(FileError::BadPath {
                path: path.escape_debug().to_string(),
                problem,
            })
        };
        if path.is_empty() {
            return bad("it is empty; give a relative path such as `data/a.csv`");
        }
        if path.len() > MAX_PATH_BYTES {
            return bad("it is longer than 1024 bytes");
        }
        if path.starts_with('/') {
            return bad("it is absolute; give it relative to the job's directory, e.g. `a.csv`");
        }
        if path.contains('\0') {
            return bad("it contains a NUL byte");
        }
        if path.contains('\\') {
            return bad("it contains a backslash; separate directories with `/`");
        }
        if path.chars().any(char::is_control) {
            return bad("it contains a control character");
        }
        for segment in path.split('/') {
            match segment {
                "" => return bad("it has an empty segment (`//` or a trailing `/`)"),
                "." => return bad("it has a `.` segment; write the path without it"),
                ".." => return bad("it has a `..` segment, which would leave the job's directory"),
                s if s.len() > MAX_SEGMENT_BYTES => {
                    return bad("one of its segments is longer than 255 bytes");
                }
                _ => {}
            }
        }
        Ok(JobPath(path.to_string()))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A job's file as a front end lists it: no host path, no hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobFile {
    /// Relative to `input/` or `output/`, '/'-separated.
    pub path: String,
    /// `input` (uploaded with the job) or `output` (left by its run).
    #[serde(serialize_with = "kind_name")]
    pub kind: FileKind,
    /// Its size in bytes.
    pub size: u64,
    /// When it was stored.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

fn kind_name<S: serde::Serializer>(kind: &FileKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind.as_str())
}

impl From<StoredFile> for JobFile {
    fn from(file: StoredFile) -> JobFile {
        JobFile {
            path: file.path,
            kind: file.kind,
            size: u64::try_from(file.size).unwrap_or(0),
            created_at: file.created_at,
        }
    }
}

/// Why a job's files were refused or cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path is not one a job's file may have.
    #[error("the file path \"{path}\" is not allowed: {problem}")]
    BadPath {
        /// The path as given (escaped).
        path: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// Two files were given the same path.
    #[error("the file path \"{path}\" is given twice; each file needs a path of its own")]
    Duplicate {
        /// The path.
        path: String,
    },
    /// One file is larger than `files.max_upload_mb`.
    #[error(
        "the file \"{path}\" is {size} bytes, over the limit of {limit} bytes per file \
         (`files.max_upload_mb` in the configuration)"
    )]
    TooLarge {
        /// The file's path.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The files together are larger than `files.max_job_mb`.
    #[error(
        "the files come to {total} bytes, over the limit of {limit} bytes per job \
         (`files.max_job_mb` in the configuration)"
    )]
    TotalTooLarge {
        /// Their total size.
        total: u64,
        /// The limit.
        limit: u64,
    },
    /// More files than `files.max_files`.
    #[error(
        "{count} files were given, over the limit of {limit} per job (`files.max_files` in \
         the configuration)"
    )]
    TooMany {
        /// How many were given.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// No job has this id.
    #[error("no job with id {0}")]
    NoSuchJob(JobId),
    /// The job has no file at this path.
    #[error(
        "job {job} has no file \"{path}\" among its outputs or inputs (its files are listed \
         by `job_files`)"
    )]
    NoSuchFile {
        /// The job.
        job: JobId,
        /// The path asked for.
        path: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks a job's uploads against `limits` and their paths, and turns them into the store's
/// files.
pub(crate) fn check_uploads(
    uploads: Vec<Upload>,
    limits: &FileLimits,
) -> Result<Vec<NewFile>, FileError> {
    if uploads.len() > limits.max_files {
        return Err(FileError::TooMany {
            count: uploads.len(),
            limit: limits.max_files,
        });
    }
    let mut seen = std::collections::HashSet::new();
    let mut total: u64 = 0;
    let mut files = Vec::with_capacity(uploads.len());
    for upload in uploads {
        let path = JobPath::parse(&upload.path)?;
        if !seen.insert(path.clone()) {
            return Err(FileError::Duplicate { path: path.0 });
        }
        let size = u64::try_from(upload.bytes.len()).unwrap_or(u64::MAX);
        if size > limits.max_file_bytes {
            return Err(FileError::TooLarge {
                path: path.0,
                size,
                limit: limits.max_file_bytes,
            });
        }
        total = total.saturating_add(size);
        if total > limits.max_total_bytes {
            return Err(FileError::TotalTooLarge {
                total,
                limit: limits.max_total_bytes,
            });
        }
        files.push(NewFile {
            path: path.0,
            bytes: upload.bytes.to_vec(),
        });
    }
    Ok(files)
}

/// A job's files, inputs first, each kind by path. Works from any node: it reads the store.
pub async fn job_files(store: &Store, job: JobId) -> Result<Vec<JobFile>, FileError> {
    let files = store.job_files(job).await?;
    if files.is_empty() && store.job(job).await?.is_none() {
        return Err(FileError::NoSuchJob(job));
    }
    Ok(files.into_iter().map(JobFile::from).collect())
}

/// One of a job's files with its bytes, by path: its output of that path when there is one,
/// else its input (a run that rewrote an input in `output/` is read as it left it; take
/// [`job_files`]' `kind` to tell them apart). Works from any node: the bytes come from the
/// store.
pub async fn read_job_file(
    store: &Store,
    job: JobId,
    path: &str,
) -> Result<(JobFile, Bytes), FileError> {
    let path = JobPath::parse(path)?;
    for kind in [FileKind::Output, FileKind::Input] {
        if let Some((file, bytes)) = store.job_file(job, kind, path.as_str()).await? {
            return Ok((JobFile::from(file), Bytes::from(bytes)));
        }
    }
    if store.job(job).await?.is_none() {
        return Err(FileError::NoSuchJob(job));
    }
    Err(FileError::NoSuchFile { job, path: path.0 })
}

/// Why the job's inputs, or the outputs its earlier runs recorded, could not be laid out in
/// the workspace a run starts in.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The store failed.
    #[error("reading the job's input files failed")]
    Store(#[source] StoreError),
    /// A file could not be written.
    #[error("the input file `input/{path}` cannot be written in the run's workspace")]
    Write {
        /// The file's path under `input/`.
        path: String,
        /// The run's workspace (not in the message, which a job's reason carries).
        workspace: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The store failed while the recorded outputs were read.
    #[error("reading the job's recorded output files failed")]
    OutputsStore(#[source] StoreError),
    /// A recorded output could not be written back.
    #[error("the recorded output file `output/{path}` cannot be written in the run's workspace")]
    Output {
        /// The file's path under `output/`.
        path: String,
        /// The run's workspace (not in the message, which a job's reason carries).
        workspace: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Lays the job's input files out under `workspace/input/` (rewriting a file already there:
/// a resumed run finds the same content); their paths, for the run's task. A symlink at a
/// file's place is replaced, never written through.
pub(crate) async fn lay_out_inputs(
    store: &Store,
    job: JobId,
    workspace: &Path,
) -> Result<Vec<String>, InputError> {
    let inputs = store
        .job_file_contents(job, FileKind::Input)
        .await
        .map_err(InputError::Store)?;
    if inputs.is_empty() {
        return Ok(Vec::new());
    }
    let workspace = workspace.to_path_buf();
    let shown = workspace.clone();
    tokio::task::spawn_blocking(move || {
        let mut paths = Vec::with_capacity(inputs.len());
        for (file, bytes) in inputs {
            write_input(&workspace, &file.path, &bytes).map_err(|source| InputError::Write {
                path: file.path.clone(),
                workspace: workspace.clone(),
                source,
            })?;
            paths.push(file.path);
        }
        Ok(paths)
    })
    .await
    .unwrap_or_else(|e| {
        Err(InputError::Write {
            path: String::new(),
            workspace: shown,
            source: Box::new(e),
        })
    })
}

fn write_input(
    workspace: &Path,
    path: &str,
    bytes: &[u8],
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Checked when it was stored; checked again, as it leads to a host path.
    let path = JobPath::parse(path)?;
    let rel = format!("input/{path}");
    let target = workspace.join(&rel);
    if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(&target)?;
    }
    let abs = maestro_tools::workspace_file::writable_file(workspace, &rel)?;
    maestro_tools::regular_file::write(
        &abs,
        bytes,
        maestro_tools::regular_file::Create::OrTruncate,
    )?;
    Ok(())
}

/// How many input files the run's task names; the rest are counted.
const NAMED_INPUTS: usize = 20;

/// What the run's task says about its files: where the inputs are, and that what it leaves in
/// `output/` is delivered.
pub(crate) fn inputs_note(paths: &[String]) -> String {
    let mut note = String::from("\n\nFiles for this task are in `input/`:");
    for path in paths.iter().take(NAMED_INPUTS) {
        note.push_str(&format!("\n- input/{path}"));
    }
    if paths.len() > NAMED_INPUTS {
        note.push_str(&format!("\n- and {} more", paths.len() - NAMED_INPUTS));
    }
    note.push_str("\nFiles you leave in `output/` are delivered with the result.");
    note
}

/// What [`collect_outputs`] found under `output/`.
#[derive(Debug, Default)]
pub(crate) struct Outputs {
    /// The files to record.
    pub files: Vec<NewFile>,
    /// The files left out, each with why, for a note on the job.
    pub skipped: Vec<String>,
}

/// The regular files under `workspace/output/`, by path, within `limits`. Symlinks are never
/// followed (a link to a host file is skipped, not read), nor are FIFOs, sockets or devices
/// read; a file over a limit is skipped and said why.
pub(crate) async fn collect_outputs(workspace: &Path, limits: FileLimits) -> Outputs {
    let root = workspace.join("output");
    // Most runs leave nothing: a missing or empty `output/` is seen here, without a task on the
    // blocking pool (a thousand runs ending together would start hundreds of its threads).
    if output_is_empty(&root) {
        return Outputs::default();
    }
    tokio::task::spawn_blocking(move || {
        let scan = scan_outputs(&root, limits);
        let mut outputs = Outputs {
            files: Vec::with_capacity(scan.files.len()),
            skipped: scan.skipped,
        };
        for seen in scan.files {
            // Opened without following a symlink, and only as a regular file.
            match maestro_tools::regular_file::read(&seen.abs) {
                Ok(bytes) => outputs.files.push(NewFile {
                    path: seen.rel,
                    bytes,
                }),
                Err(e) => outputs
                    .skipped
                    .push(format!("output/{}: cannot be read ({e})", seen.rel)),
            }
        }
        outputs
    })
    .await
    .unwrap_or_else(|e| Outputs {
        files: Vec::new(),
        skipped: vec![format!("output/: could not be read ({e})")],
    })
}

/// Whether `root` (a workspace's `output/`) is missing, unreadable or empty: one directory read,
/// on the calling thread.
pub(crate) fn output_is_empty(root: &Path) -> bool {
    match std::fs::read_dir(root) {
        // What the walk finds in a directory it cannot read: nothing.
        Err(_) => true,
        Ok(mut entries) => entries.next().is_none(),
    }
}

/// What tells that a file under `output/` changed without reading it: its size, modification
/// time and inode, as a scan saw them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    size: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl Stamp {
    /// The stamp of the file `meta` describes.
    pub(crate) fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt as _;
        Stamp {
            size: meta.len(),
            modified: meta.modified().ok(),
            inode: meta.ino(),
        }
    }
}

/// A regular file a scan of `output/` found within the limits.
#[derive(Debug)]
pub(crate) struct Seen {
    /// Relative to `output/`, '/'-separated.
    pub rel: String,
    /// Its host path.
    pub abs: PathBuf,
    /// Its size and times when the scan saw it.
    pub stamp: Stamp,
}

/// What [`scan_outputs`] found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// The files within the limits, by path.
    pub files: Vec<Seen>,
    /// The files left out, each with why.
    pub skipped: Vec<String>,
}

/// The regular files under `root` (a workspace's `output/`), by path, that are within `limits`
/// (counted in path order, by their size on disk), with their stamps; nothing is read. Symlinks
/// are never followed, FIFOs, sockets and devices are left out. Blocks: call it off the runtime.
pub(crate) fn scan_outputs(root: &Path, limits: FileLimits) -> Scan {
    let mut found = Vec::new();
    let mut scan = Scan::default();
    walk(root, "", &mut found, &mut scan.skipped);
    found.sort();
    let mut total: u64 = 0;
    for (rel, abs) in found {
        if scan.files.len() >= limits.max_files {
            scan.skipped.push(format!(
                "output/{rel}: more than {} files (`files.max_files`)",
                limits.max_files
            ));
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&abs) else {
            // Gone since the walk saw it.
            continue;
        };
        let size = meta.len();
        if size > limits.max_file_bytes {
            scan.skipped.push(format!(
                "output/{rel}: {size} bytes, over {} per file (`files.max_upload_mb`)",
                limits.max_file_bytes
            ));
            continue;
        }
        if total.saturating_add(size) > limits.max_total_bytes {
            scan.skipped.push(format!(
                "output/{rel}: {size} bytes would take the job's outputs over {} bytes \
                 (`files.max_job_mb`)",
                limits.max_total_bytes
            ));
            continue;
        }
        total = total.saturating_add(size);
        scan.files.push(Seen {
            rel,
            abs,
            stamp: Stamp::of(&meta),
        });
    }
    scan
}

/// Every regular file under `dir` (relative to `output/` as `prefix`), without following a
/// symlink; what is not a regular file or a directory is noted in `skipped`.
fn walk(dir: &Path, prefix: &str, found: &mut Vec<(String, PathBuf)>, skipped: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            skipped.push(format!(
                "output/{prefix}{}: its name is not UTF-8",
                name.to_string_lossy()
            ));
            continue;
        };
        let rel = format!("{prefix}{name}");
        // `file_type` of a directory entry does not follow a symlink.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk(&entry.path(), &format!("{rel}/"), found, skipped);
        } else if kind.is_file() {
            match JobPath::parse(&rel) {
                Ok(_) => found.push((rel, entry.path())),
                Err(e) => skipped.push(format!("output/{rel}: {e}")),
            }
        } else if kind.is_symlink() {
            skipped.push(format!(
                "output/{rel}: a symlink (only regular files are delivered)"
            ));
        } else {
            skipped.push(format!("output/{rel}: not a regular file"));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn paths_outside_the_jobs_directory_are_refused_with_the_reason() {
        for good in ["a.txt", "data/a.csv", "deep/er/x", "..a", "a..", ".hidden"] {
            assert_eq!(JobPath::parse(good).unwrap().as_str(), good);
        }
        let cases = [
            ("", "empty"),
            ("/etc/passwd", "absolute"),
            ("../x", "`..`"),
            ("a/../../x", "`..`"),
            ("a/..", "`..`"),
            ("a//b", "empty segment"),
            ("a/", "empty segment"),
            ("./a", "`.` segment"),
            ("a\\..\\b", "backslash"),
            ("a\0b", "NUL"),
            ("a\nb", "control"),
        ];
        for (bad, why) in cases {
            let err = JobPath::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        let long = "a/".repeat(600) + "b";
        assert!(
            JobPath::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("1024")
        );
        let segment = "x".repeat(256);
        assert!(
            JobPath::parse(&segment)
                .unwrap_err()
                .to_string()
                .contains("255")
        );
    }

    #[test]
    fn uploads_over_a_limit_or_given_twice_are_refused() {
        let limits = FileLimits {
            max_file_bytes: 4,
            max_total_bytes: 6,
            max_files: 2,
        };
        let up = |path: &str, bytes: &[u8]| Upload {
            path: path.into(),
            bytes: Bytes::copy_from_slice(bytes),
        };
        assert_eq!(
            check_uploads(vec![up("a", b"1234"), up("b", b"12")], &limits)
                .unwrap()
                .len(),
            2
        );
        let too_large = check_uploads(vec![up("a", b"12345")], &limits).unwrap_err();
        assert!(
            matches!(
                too_large,
                FileError::TooLarge {
                    size: 5,
                    limit: 4,
                    ..
                }
            ),
            "{too_large}"
        );
        let total = check_uploads(vec![up("a", b"1234"), up("b", b"123")], &limits).unwrap_err();
        assert!(
            matches!(total, FileError::TotalTooLarge { total: 7, limit: 6 }),
            "{total}"
        );
        let many = check_uploads(vec![up("a", b""), up("b", b""), up("c", b"")], &limits);
        assert!(matches!(
            many,
            Err(FileError::TooMany { count: 3, limit: 2 })
        ));
        let twice = check_uploads(vec![up("a", b""), up("a", b"")], &limits).unwrap_err();
        assert!(matches!(twice, FileError::Duplicate { .. }), "{twice}");
        let bad = check_uploads(vec![up("../a", b"")], &limits).unwrap_err();
        assert!(matches!(bad, FileError::BadPath { .. }), "{bad}");
    }

    #[tokio::test]
    async fn outputs_are_regular_files_only_and_symlinks_are_not_followed() {
        let ws = tempfile::tempdir().unwrap();
        let out = ws.path().join("output");
        std::fs::create_dir_all(out.join("sub")).unwrap();
        std::fs::write(out.join("a.txt"), b"a").unwrap();
        std::fs::write(out.join("sub/b.txt"), b"bb").unwrap();
        std::fs::write(out.join("big.bin"), vec![0u8; 100]).unwrap();
        // A host file outside the workspace, reached by a link to it and a linked directory.
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("secret"), b"host secret").unwrap();
        std::os::unix::fs::symlink(secret.path().join("secret"), out.join("leak")).unwrap();
        std::os::unix::fs::symlink(secret.path(), out.join("dir")).unwrap();
        let fifo = out.join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let limits = FileLimits {
            max_file_bytes: 10,
            max_total_bytes: 1000,
            max_files: 10,
        };
        let outputs = collect_outputs(ws.path(), limits).await;
        let files: Vec<(&str, &[u8])> = outputs
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.bytes.as_slice()))
            .collect();
        assert_eq!(files, vec![("a.txt", &b"a"[..]), ("sub/b.txt", &b"bb"[..])]);
        let skipped = outputs.skipped.join("\n");
        for why in [
            "output/leak: a symlink",
            "output/dir: a symlink",
            "output/pipe: not a regular file",
            "output/big.bin: 100 bytes, over 10 per file",
        ] {
            assert!(skipped.contains(why), "{why} in:\n{skipped}");
        }
        assert!(!skipped.contains("host secret"));
    }

    /// A run that left nothing in `output/` (missing or empty) is looked at on the spot: its
    /// end takes no thread of the blocking pool, even while every one of them is busy.
    #[test]
    fn an_empty_output_needs_no_blocking_thread() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let limits = FileLimits {
            max_file_bytes: 10,
            max_total_bytes: 1000,
            max_files: 10,
        };
        let missing = tempfile::tempdir().unwrap();
        let empty = tempfile::tempdir().unwrap();
        std::fs::create_dir(empty.path().join("output")).unwrap();
        let full = tempfile::tempdir().unwrap();
        std::fs::create_dir(full.path().join("output")).unwrap();
        std::fs::write(full.path().join("output/a.txt"), b"a").unwrap();
        rt.block_on(async {
            // The pool's one thread is taken until `release` is sent.
            let (release, held) = std::sync::mpsc::channel::<()>();
            let busy = tokio::task::spawn_blocking(move || held.recv());
            for ws in [missing.path(), empty.path()] {
                let outputs = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    collect_outputs(ws, limits),
                )
                .await
                .unwrap_or_else(|_| panic!("{} waited for the blocking pool", ws.display()));
                assert!(outputs.files.is_empty() && outputs.skipped.is_empty());
            }
            release.send(()).unwrap();
            busy.await.unwrap().unwrap();
            // A file left there is read as before.
            let outputs = collect_outputs(full.path(), limits).await;
            assert_eq!(outputs.files.len(), 1);
        });
    }
}
