//! Workspace-confined paths for the tools that move files in and out (DownloadFile, SshUpload,
//! SshDownload), on top of [`Workspace::resolve`]: nothing read or written may escape the job
//! workspace, through `..` or through a symlink.

use std::path::{Path, PathBuf};

use crate::Workspace;
use crate::core::off_runtime;
use crate::regular_file::{self, Access, Create, FileKind, OpenError};

/// Resolves `rel` (relative to the workspace, or absolute inside it) to an existing regular
/// file inside the workspace and opens it (without blocking on a FIFO or following a link).
pub(crate) async fn existing_file(
    workspace: &Path,
    rel: &str,
    tool: &str,
) -> Result<tokio::fs::File, String> {
    let resolved = Workspace::open(workspace)?.resolve(rel)?;
    match off_runtime(move || regular_file::open_read(&resolved.abs)).await {
        Ok(file) => Ok(tokio::fs::File::from_std(file)),
        Err(OpenError::NotFound) => Err(format!(
            "{rel} is not an existing regular file in the workspace"
        )),
        Err(e) => Err(e.explain(rel, tool, Access::Read)),
    }
}

/// Creates (or empties) the regular file `path`, already resolved by [`writable_file`], for
/// writing; a FIFO or link planted there is refused instead of blocking or followed.
pub(crate) async fn create_file(
    workspace: &Path,
    path: &Path,
    tool: &str,
) -> Result<tokio::fs::File, String> {
    let owned = path.to_path_buf();
    off_runtime(move || regular_file::open_write(&owned, Create::OrTruncate))
        .await
        .map(tokio::fs::File::from_std)
        .map_err(|e| e.explain(&display(workspace, path), tool, Access::Write))
}

/// Resolves `rel` to a file path inside the workspace that may be written: parent directories
/// are created (inside the workspace only) and an existing symlink or directory at the target
/// is refused.
pub(crate) fn writable_file(workspace: &Path, rel: &str) -> Result<PathBuf, String> {
    let ws = Workspace::open(workspace)?;
    let resolved = ws.resolve(rel)?;
    if resolved.rel.as_os_str().is_empty() {
        return Err(format!("{rel:?} names the workspace itself, not a file"));
    }
    if let Some(parent) = resolved.abs.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create the folder for {rel}: {e}"))?;
    }
    // Resolve again now that the folders exist, so a symlink raced in is still caught.
    let resolved = ws.resolve(rel)?;
    if let Ok(meta) = std::fs::symlink_metadata(&resolved.abs) {
        if meta.file_type().is_symlink() {
            return Err(format!("{rel} is a symlink; refusing to write through it"));
        }
        if meta.is_dir() {
            return Err(format!("{rel} is a directory"));
        }
        if !meta.is_file() {
            return Err(OpenError::NotRegular {
                kind: FileKind::of(meta.file_type()),
            }
            .explain(rel, "this tool", Access::Write));
        }
    }
    Ok(resolved.abs)
}

/// The path relative to the workspace root as a person would write it (`input/a.txt`).
pub(crate) fn display(workspace: &Path, path: &Path) -> String {
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A safe single file name: letters, digits, `.`, `_` and `-` only, no leading dot.
pub(crate) fn sanitize_file_name(name: &str) -> String {
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
                .contains("outside the workspace")
        );
        assert!(
            existing_file(ws, "/etc/passwd", "SshUpload")
                .await
                .unwrap_err()
                .contains("outside the workspace")
        );
        std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
        assert!(
            existing_file(ws, "etc/passwd", "SshUpload")
                .await
                .unwrap_err()
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
            existing_file(ws, "p", "SshUpload").await.unwrap_err(),
            "`p` is a FIFO (named pipe), not a regular file; SshUpload only reads regular files"
        );
        assert!(writable_file(ws, "p").unwrap_err().contains("FIFO"));
        assert!(writable_file(ws, "etc/x").unwrap_err().contains("symlink"));
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
