//! The job workspace: its layout and the one place where a path the model sends becomes a path
//! on disk. Every file tool goes through [`Workspace::resolve`], so `..`, absolute paths and
//! symlinks that lead outside are refused in one place.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The directories every job workspace has (see the architecture's "Workspace layout").
pub const WORKSPACE_DIRS: [&str; 5] = ["input", "output", "logs", "subtasks", "skills"];

/// Where the workspace appears inside the Bash sandbox; paths under it are accepted by the file
/// tools too, so a path copied from a Bash listing works in `Read`.
pub use maestro_sandbox::SANDBOX_WORKSPACE;

/// Creates the workspace root and its standard subdirectories (existing ones are kept).
pub fn prepare_workspace(root: &Path) -> io::Result<()> {
    for dir in WORKSPACE_DIRS {
        std::fs::create_dir_all(root.join(dir))?;
    }
    Ok(())
}

/// A path inside the workspace, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// Absolute path on disk; its existing part has no symlink leading outside.
    pub abs: PathBuf,
    /// The same path relative to the workspace root (empty for the root itself).
    pub rel: PathBuf,
}

impl ResolvedPath {
    /// The path as the model should see it in messages.
    pub fn display(&self) -> String {
        if self.rel.as_os_str().is_empty() {
            ".".to_string()
        } else {
            self.rel.display().to_string()
        }
    }
}

/// Why a workspace cannot be opened or a path in it cannot be used. The messages are written
/// for the model: each says what to send instead.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The workspace directory cannot be resolved (missing, or not searchable).
    #[error("workspace `{}` is not usable: {source}", root.display())]
    Unusable {
        /// The workspace as given.
        root: PathBuf,
        /// Why it could not be resolved.
        #[source]
        source: std::io::Error,
    },
    /// The workspace exists but is not a directory.
    #[error("workspace `{}` is not a directory", root.display())]
    NotADirectory {
        /// The workspace, resolved.
        root: PathBuf,
    },
    /// The requested path is empty or only whitespace.
    #[error(
        "the path is empty; give a path relative to the workspace root, e.g. `output/notes.md`"
    )]
    EmptyPath,
    /// The requested path contains a NUL byte, which no file name can hold.
    #[error("the path contains a NUL byte")]
    NulByte,
    /// The requested path lies outside the workspace (absolute elsewhere, or `..` past the root).
    #[error(
        "`{requested}` is outside the workspace; tools only reach files inside it. Use a path \
         relative to the workspace root, e.g. `input/data.csv` or `output/report.md`"
    )]
    Outside {
        /// The path as the model sent it.
        requested: String,
    },
    /// The requested path is, or passes through, a symlink whose target does not exist: writing
    /// through it would create a file wherever it points.
    #[error(
        "`{requested}` is (or passes through) a symlink whose target does not exist; refusing \
         to follow it"
    )]
    DanglingSymlink {
        /// The path as the model sent it.
        requested: String,
    },
    /// The requested path resolves, through a symlink, to somewhere outside the workspace.
    #[error("`{requested}` leads outside the workspace (through a symlink); refusing to follow it")]
    SymlinkOutside {
        /// The path as the model sent it.
        requested: String,
    },
    /// A write names the workspace root itself rather than a file in it.
    #[error("cannot write to the workspace root itself; name a file")]
    WorkspaceRoot,
    /// A write outside the directories the movement may write.
    #[error(
        "`{requested}` is not in a writable directory; this movement may write only under {}",
        writable_dirs.iter().map(|d| format!("`{d}/`")).collect::<Vec<_>>().join(", ")
    )]
    NotWritable {
        /// The path as the model sent it.
        requested: String,
        /// The workspace-relative directories the movement may write.
        writable_dirs: Vec<String>,
    },
}

/// Tools hand these messages to the model as text.
/// A canonicalised workspace root.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Opens an existing workspace directory.
    pub fn open(root: &Path) -> Result<Workspace, WorkspaceError> {
        let root = std::fs::canonicalize(root).map_err(|source| WorkspaceError::Unusable {
            root: root.to_path_buf(),
            source,
        })?;
        if !root.is_dir() {
            return Err(WorkspaceError::NotADirectory { root });
        }
        Ok(Workspace { root })
    }

    /// The workspace's root directory, canonical (symlinks resolved).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path the model sent. Relative paths are taken from the workspace root;
    /// absolute paths are accepted only when they lie inside it (or under `/workspace`, the
    /// sandbox's name for it). The existing part of the path is resolved through symlinks and
    /// must stay inside; a dangling symlink is refused because writing through it would create
    /// a file wherever it points.
    pub fn resolve(&self, requested: &str) -> Result<ResolvedPath, WorkspaceError> {
        if requested.trim().is_empty() {
            return Err(WorkspaceError::EmptyPath);
        }
        if requested.contains('\0') {
            return Err(WorkspaceError::NulByte);
        }
        let req = Path::new(requested);
        let joined = if req.is_absolute() {
            match req.strip_prefix(SANDBOX_WORKSPACE) {
                Ok(rest) if !self.root.starts_with(SANDBOX_WORKSPACE) => self.root.join(rest),
                _ => req.to_path_buf(),
            }
        } else {
            self.root.join(req)
        };
        let outside = || WorkspaceError::Outside {
            requested: requested.to_string(),
        };
        let normal = normalize(&joined).ok_or_else(outside)?;
        if !normal.starts_with(&self.root) {
            return Err(outside());
        }
        // Deepest existing ancestor, resolved through symlinks.
        let mut existing = normal.clone();
        let mut rest: Vec<std::ffi::OsString> = Vec::new();
        let canonical = loop {
            match std::fs::canonicalize(&existing) {
                Ok(c) => break c,
                Err(_) => {
                    if std::fs::symlink_metadata(&existing).is_ok() {
                        return Err(WorkspaceError::DanglingSymlink {
                            requested: requested.to_string(),
                        });
                    }
                    match (
                        existing.file_name().map(|n| n.to_os_string()),
                        existing.parent(),
                    ) {
                        (Some(name), Some(parent)) => {
                            rest.push(name);
                            existing = parent.to_path_buf();
                        }
                        _ => return Err(outside()),
                    }
                }
            }
        };
        if !canonical.starts_with(&self.root) {
            return Err(WorkspaceError::SymlinkOutside {
                requested: requested.to_string(),
            });
        }
        let mut abs = canonical;
        for name in rest.into_iter().rev() {
            abs.push(name);
        }
        let rel = abs
            .strip_prefix(&self.root)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        Ok(ResolvedPath { abs, rel })
    }

    /// Like [`resolve`](Self::resolve), and the path must lie under one of `writable_dirs`
    /// (workspace-relative; `"."` means anywhere in the workspace).
    pub fn resolve_writable(
        &self,
        requested: &str,
        writable_dirs: &[String],
    ) -> Result<ResolvedPath, WorkspaceError> {
        let path = self.resolve(requested)?;
        if path.rel.as_os_str().is_empty() {
            return Err(WorkspaceError::WorkspaceRoot);
        }
        if is_writable(&path.rel, writable_dirs) {
            Ok(path)
        } else {
            Err(WorkspaceError::NotWritable {
                requested: requested.to_string(),
                writable_dirs: writable_dirs.to_vec(),
            })
        }
    }
}

/// True when the workspace-relative `rel` lies under one of `writable_dirs`.
pub(crate) fn is_writable(rel: &Path, writable_dirs: &[String]) -> bool {
    writable_dirs.iter().any(|d| {
        let d = d.trim_matches('/');
        d == "." || d.is_empty() || (rel.starts_with(d) && rel != Path::new(d))
    })
}

/// Serialises `Bash` against the other tools of the same workspace.
///
/// A command could otherwise swap a checked directory for a symlink between the moment a file
/// tool resolves a path and the moment it opens it. `Bash` takes the lock exclusively and
/// nothing it started outlives the call, so while a file tool holds the shared lock no process
/// can change the workspace under it.
pub(crate) async fn lock(root: &Path, exclusive: bool) -> WorkspaceGuard {
    static LOCKS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<PathBuf, Arc<tokio::sync::RwLock<()>>>>,
    > = std::sync::OnceLock::new();
    let key = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let lock = {
        let mut locks = match LOCKS.get_or_init(Default::default).lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Forget locks nobody holds, so the map does not grow with every job.
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        Arc::clone(locks.entry(key).or_default())
    };
    if exclusive {
        WorkspaceGuard::Exclusive(lock.write_owned().await)
    } else {
        WorkspaceGuard::Shared(lock.read_owned().await)
    }
}

/// Held for the duration of one tool call (see [`lock`]).
#[derive(Debug)]
pub(crate) enum WorkspaceGuard {
    Shared(#[allow(dead_code)] tokio::sync::OwnedRwLockReadGuard<()>),
    Exclusive(#[allow(dead_code)] tokio::sync::OwnedRwLockWriteGuard<()>),
}

/// Lexically removes `.` and `..`; `None` when `..` climbs above the filesystem root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(name) => out.push(name),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        prepare_workspace(dir.path()).unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn relative_paths_resolve_inside() {
        let (_d, ws) = ws();
        let p = ws.resolve("output/../input/./a.txt").unwrap();
        assert_eq!(p.rel, PathBuf::from("input/a.txt"));
        assert_eq!(p.abs, ws.root().join("input/a.txt"));
        assert_eq!(
            ws.resolve("/workspace/output/x").unwrap().rel,
            PathBuf::from("output/x")
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (_d, ws) = ws();
        for bad in ["../x", "output/../../x", "/etc/passwd", "/", ""] {
            assert!(ws.resolve(bad).is_err(), "{bad} should be refused");
        }
        let inside = ws.root().join("input/a").display().to_string();
        assert!(ws.resolve(&inside).is_ok());
    }

    #[test]
    fn symlinks_out_are_refused_and_in_are_followed() {
        let (_d, ws) = ws();
        std::os::unix::fs::symlink("/etc", ws.root().join("output/etc")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/file", ws.root().join("output/dangling")).unwrap();
        std::os::unix::fs::symlink("../input", ws.root().join("output/in")).unwrap();
        assert!(ws.resolve("output/etc/passwd").is_err());
        assert!(ws.resolve("output/etc").is_err());
        assert!(ws.resolve("output/dangling").is_err());
        assert_eq!(
            ws.resolve("output/in/x").unwrap().rel,
            PathBuf::from("input/x")
        );
    }

    #[test]
    fn writable_dirs_limit_writes() {
        let (_d, ws) = ws();
        let dirs = vec!["output".to_string()];
        assert!(ws.resolve_writable("output/a.md", &dirs).is_ok());
        assert!(ws.resolve_writable("input/a.md", &dirs).is_err());
        assert!(ws.resolve_writable("output", &dirs).is_err());
        assert!(
            ws.resolve_writable("input/a.md", &[".".to_string()])
                .is_ok()
        );
    }
}
