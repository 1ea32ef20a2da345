//! Workspace-confined paths for the tools that move files in and out (DownloadFile, SshUpload,
//! SshDownload), on top of [`Workspace::resolve`]: nothing read or written may escape the job
//! workspace, through `..` or through a symlink.

use std::path::{Path, PathBuf};

use crate::core::off_runtime;
use crate::regular_file::{self, Access, Create, FileKind, OpenError};
use crate::{Workspace, WorkspaceError};

/// Why a file cannot be read from or written into the workspace.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The workspace cannot be opened, or the path does not resolve inside it.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// Nothing is at the path to read; holds the path as given.
    #[error("{0} is not an existing regular file in the workspace")]
    NotFound(String),
    /// A file is at the path but cannot be opened (not a regular file, unreadable, ...);
    /// `message` is the source explained for the tool that asked.
    #[error("{message}")]
    Refused {
        /// What the model reads: the path, what is wrong with it and what the tool accepts.
        message: String,
        /// Why the file could not be opened.
        #[source]
        source: OpenError,
    },
    /// The path to write names the workspace root; holds the path as given.
    #[error("{0:?} names the workspace itself, not a file")]
    WorkspaceItself(String),
    /// The directories leading to the file to write could not be created.
    #[error("cannot create the folder for {rel}: {source}")]
    CreateFolder {
        /// The file's path as given.
        rel: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A symlink is at the path to write; holds the path as given.
    #[error("{0} is a symlink; refusing to write through it")]
    Symlink(String),
    /// A directory is at the path to write; holds the path as given.
    #[error("{0} is a directory")]
    Directory(String),
}

impl FileError {
    fn refused(source: OpenError, shown: &str, tool: &str, access: Access) -> FileError {
        FileError::Refused {
            message: source.explain(shown, tool, access),
            source,
        }
    }
}

/// Resolves `rel` (relative to the workspace, or absolute inside it) to an existing regular
/// file inside the workspace and opens it (without blocking on a FIFO or following a link).
pub async fn existing_file(
    workspace: &Path,
    rel: &str,
    tool: &str,
) -> Result<tokio::fs::File, FileError> {
    let resolved = Workspace::open(workspace)?.resolve(rel)?;
    match off_runtime(move || regular_file::open_read(&resolved.abs)).await {
        Ok(file) => Ok(tokio::fs::File::from_std(file)),
        Err(OpenError::NotFound) => Err(FileError::NotFound(rel.to_string())),
        Err(e) => Err(FileError::refused(e, rel, tool, Access::Read)),
    }
}

/// Creates (or empties) the regular file `path`, already resolved by [`writable_file`], for
/// writing; a FIFO or link planted there is refused instead of blocking or followed.
pub async fn create_file(
    workspace: &Path,
    path: &Path,
    tool: &str,
) -> Result<tokio::fs::File, FileError> {
    let owned = path.to_path_buf();
    off_runtime(move || regular_file::open_write(&owned, Create::OrTruncate))
        .await
        .map(tokio::fs::File::from_std)
        .map_err(|e| FileError::refused(e, &display(workspace, path), tool, Access::Write))
}

/// Resolves `rel` to a file path inside the workspace that may be written: parent directories
/// are created (inside the workspace only) and an existing symlink or directory at the target
/// is refused.
pub fn writable_file(workspace: &Path, rel: &str) -> Result<PathBuf, FileError> {
    let ws = Workspace::open(workspace)?;
    let resolved = ws.resolve(rel)?;
    if resolved.rel.as_os_str().is_empty() {
        return Err(FileError::WorkspaceItself(rel.to_string()));
    }
    if let Some(parent) = resolved.abs.parent() {
        std::fs::create_dir_all(parent).map_err(|source| FileError::CreateFolder {
            rel: rel.to_string(),
            source,
        })?;
    }
    // Resolve again now that the folders exist, so a symlink raced in is still caught.
    let resolved = ws.resolve(rel)?;
    if let Ok(meta) = std::fs::symlink_metadata(&resolved.abs) {
        if meta.file_type().is_symlink() {
            return Err(FileError::Symlink(rel.to_string()));
        }
        if meta.is_dir() {
            return Err(FileError::Directory(rel.to_string()));
        }
        if !meta.is_file() {
            let kind = FileKind::of(meta.file_type());
            return Err(FileError::refused(
                OpenError::NotRegular { kind },
                rel,
                "this tool",
                Access::Write,
            ));
        }
    }
    Ok(resolved.abs)
}

/// The path relative to the workspace root as a person would write it (`input/a.txt`).
pub fn display(workspace: &Path, path: &Path) -> String {
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A safe single file name: letters, digits, `.`, `_` and `-` only, no leading dot.
pub fn sanitize_file_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let trimmed = cleaned.trim_start_matches(['.', '_']);
    let cut: String = trimmed.chars().take(120).collect();
    if cut.is_empty() || cut.chars().all(|c| c == '.') {
        "download".to_string()
    } else {
        cut
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[tokio::test]
    async fn paths_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("a.txt"), "x").unwrap();
        assert!(existing_file(ws, "./a.txt", "SshUpload").await.is_ok());
        assert!(
            existing_file(ws, "../a.txt", "SshUpload")
                .await
                .unwrap_err()
                .to_string()
                .contains("outside the workspace")
        );
        assert!(
            existing_file(ws, "/etc/passwd", "SshUpload")
                .await
                .unwrap_err()
                .to_string()
                .contains("outside the workspace")
        );
        std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
        assert!(
            existing_file(ws, "etc/passwd", "SshUpload")
                .await
                .unwrap_err()
                .to_string()
                .contains("symlink")
        );
        assert!(
            std::process::Command::new("mkfifo")
                .arg(ws.join("p"))
                .status()
                .unwrap()
                .success()
        );
        assert_eq!(
            existing_file(ws, "p", "SshUpload")
                .await
                .unwrap_err()
                .to_string(),
            "`p` is a FIFO (named pipe), not a regular file; SshUpload only reads regular files"
        );
        assert!(
            writable_file(ws, "p")
                .unwrap_err()
                .to_string()
                .contains("FIFO")
        );
        assert!(
            writable_file(ws, "etc/x")
                .unwrap_err()
                .to_string()
                .contains("symlink")
        );
        let w = writable_file(ws, "input/sub/b.bin").unwrap();
        assert!(w.parent().unwrap().is_dir());
        assert_eq!(display(ws, &w), "input/sub/b.bin");
    }

    #[test]
    fn file_names_are_sanitized() {
        assert_eq!(sanitize_file_name("report 2024.pdf"), "report_2024.pdf");
        assert_eq!(sanitize_file_name("../../etc/passwd"), "etc_passwd");
        assert_eq!(sanitize_file_name(".bashrc"), "bashrc");
        assert_eq!(sanitize_file_name(""), "download");
        assert_eq!(sanitize_file_name(".."), "download");
    }
}
