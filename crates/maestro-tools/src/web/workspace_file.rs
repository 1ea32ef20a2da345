//! Workspace-confined paths for the tools that move files in and out (DownloadFile, SshUpload,
//! SshDownload), on top of [`Workspace::resolve`]: nothing read or written may escape the job
//! workspace, through `..` or through a symlink.

use std::path::{Path, PathBuf};

use crate::Workspace;

/// Resolves `rel` (relative to the workspace, or absolute inside it) to an existing regular
/// file inside the workspace.
pub(crate) fn existing_file(workspace: &Path, rel: &str) -> Result<PathBuf, String> {
    let resolved = Workspace::open(workspace)?.resolve(rel)?;
    if !resolved.abs.is_file() {
        return Err(format!(
            "{rel} is not an existing regular file in the workspace"
        ));
    }
    Ok(resolved.abs)
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

    #[test]
    fn paths_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("a.txt"), "x").unwrap();
        assert_eq!(
            existing_file(ws, "./a.txt").unwrap(),
            ws.canonicalize().unwrap().join("a.txt")
        );
        assert!(
            existing_file(ws, "../a.txt")
                .unwrap_err()
                .contains("outside the workspace")
        );
        assert!(
            existing_file(ws, "/etc/passwd")
                .unwrap_err()
                .contains("outside the workspace")
        );
        std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
        assert!(
            existing_file(ws, "etc/passwd")
                .unwrap_err()
                .contains("symlink")
        );
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
