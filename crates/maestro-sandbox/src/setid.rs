//! Ownership around a sandboxed command: when Maestro runs as root, commands run as the sandbox
//! user, which must reach the workspace and own its writable directories; and after every call,
//! any set-user-ID or set-group-ID bit a command managed to leave on a file in the workspace is
//! cleared and reported (the last line of defence behind `nosuid` mounts and seccomp).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::SandboxError;

/// How many entries one walk looks at before it stops (a command that made millions of files
/// does not stall the next call).
const WALK_LIMIT: usize = 200_000;

/// The user and group owning `root`, to run commands as in a directory someone named; refused
/// when that is root.
pub(crate) fn owner(root: &Path) -> Result<(u32, u32), SandboxError> {
    let meta = std::fs::metadata(root).map_err(SandboxError::io(format!(
        "cannot inspect the workspace {}",
        root.display()
    )))?;
    if meta.uid() == 0 {
        return Err(SandboxError::RootOwned(root.to_path_buf()));
    }
    Ok((meta.uid(), meta.gid()))
}

/// Makes the workspace readable by `uid` and its writable directories owned by it. Never opens up
/// the directories above the workspace: returns whether `uid` can traverse them, and where it
/// cannot, the command is shown the workspace elsewhere (see `launch.rs`).
pub(crate) fn grant(
    root: &Path,
    writable: &[PathBuf],
    uid: u32,
    gid: u32,
) -> Result<bool, SandboxError> {
    let canonical = std::fs::canonicalize(root).map_err(SandboxError::io(format!(
        "cannot resolve the workspace {}",
        root.display()
    )))?;
    let mut reachable = true;
    for ancestor in canonical.ancestors().skip(1) {
        let meta = std::fs::metadata(ancestor).map_err(SandboxError::io(format!(
            "cannot inspect {}",
            ancestor.display()
        )))?;
        let searchable = meta.mode() & 0o001 != 0
            || (meta.uid() == uid && meta.mode() & 0o100 != 0)
            || (meta.gid() == gid && meta.mode() & 0o010 != 0);
        reachable &= searchable;
    }
    let meta = std::fs::metadata(&canonical).map_err(SandboxError::io(format!(
        "cannot inspect {}",
        canonical.display()
    )))?;
    if meta.uid() != uid && meta.mode() & 0o005 != 0o005 {
        std::fs::set_permissions(
            &canonical,
            std::fs::Permissions::from_mode(meta.mode() | 0o005),
        )
        .map_err(SandboxError::io(
            "cannot open the workspace to the sandbox user",
        ))?;
    }
    for dir in writable {
        let mut seen = 0;
        walk(dir, &mut seen, &mut |path, meta| {
            if meta.uid() != uid || meta.gid() != gid {
                std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(SandboxError::io(
                    format!("cannot hand {} to the sandbox user", path.display()),
                ))?;
            }
            Ok(())
        })?;
    }
    Ok(reachable)
}

/// Clears every set-id bit on regular files under `dirs`; returns the files it changed.
pub fn clear(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut cleared = Vec::new();
    for dir in dirs {
        let mut seen = 0;
        let _ = walk(dir, &mut seen, &mut |path, meta| {
            if meta.file_type().is_file() && meta.mode() & 0o6000 != 0 {
                let mode = meta.mode() & 0o1777;
                if std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).is_ok() {
                    cleared.push(path.to_path_buf());
                }
            }
            Ok(())
        });
    }
    cleared
}

/// Visits `dir` and everything below it without following symbolic links.
fn walk(
    dir: &Path,
    seen: &mut usize,
    visit: &mut dyn FnMut(&Path, &std::fs::Metadata) -> Result<(), SandboxError>,
) -> Result<(), SandboxError> {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(());
    };
    *seen += 1;
    if *seen > WALK_LIMIT {
        return Ok(());
    }
    visit(dir, &meta)?;
    if !meta.file_type().is_dir() {
        return Ok(());
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        walk(&entry.path(), seen, visit)?;
    }
    Ok(())
}
