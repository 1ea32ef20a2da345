//! The landlock ruleset of the fallback sandbox (where bubblewrap cannot run): what a command
//! may reach on the host's own filesystem, enforced by the kernel whatever path spelling, glob,
//! variable or symlink the command uses.
//!
//! Reachable: the system directories (`/usr` and the `/bin`, `/lib*` links) to read and execute,
//! the same few `/etc` files bubblewrap binds, `/proc` to read (landlock itself keeps another
//! domain's `/proc/<pid>/environ` and friends out, as it does `ptrace`), `/dev/null` and the
//! other harmless devices, the workspace to read, and — only for a movement that may edit — the
//! writable workspace directories and the call's private scratch directory (`TMPDIR`). Nothing
//! else: not the home directory, not `/tmp`, not the rest of the host. Where the kernel knows
//! landlock scopes (ABI 6), the command can neither signal processes outside its domain nor
//! reach abstract unix sockets outside it.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

use super::SandboxError;

/// The newest ABI whose rights we ask for; older kernels get what they know (best effort),
/// except the filesystem rights of ABI 1, which are required.
const ABI_WANTED: ABI = ABI::V6;

/// What one command may reach.
#[derive(Debug, Default)]
pub(crate) struct Reach {
    /// Read, list and execute.
    pub read: Vec<PathBuf>,
    /// Read and write files only (devices such as `/dev/null`).
    pub device_rw: Vec<PathBuf>,
    /// Everything: create, write, remove, execute.
    pub write: Vec<PathBuf>,
}

/// The system paths every command may read: `/usr`, the root links into it, the `/etc` entries
/// bubblewrap binds, and `/proc`.
pub(crate) fn system_reach(etc_entries: &[&str], root_links: &[&str]) -> Reach {
    let mut read: Vec<PathBuf> = vec![PathBuf::from("/usr"), PathBuf::from("/proc")];
    read.extend(root_links.iter().map(|n| Path::new("/").join(n)));
    read.extend(etc_entries.iter().map(|e| Path::new("/etc").join(e)));
    let device_rw = ["null", "zero", "full", "random", "urandom", "tty"]
        .iter()
        .map(|d| Path::new("/dev").join(d))
        .collect();
    Reach {
        read,
        device_rw,
        write: Vec::new(),
    }
}

/// Builds the ruleset for `reach` and returns its file descriptor, ready for
/// `landlock_restrict_self` in the child. Paths that do not exist are skipped.
pub(crate) fn ruleset_fd(reach: &Reach) -> Result<OwnedFd, SandboxError> {
    let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .map_err(err)?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_WANTED))
        .map_err(err)?
        .scope(Scope::from_all(ABI_WANTED))
        .map_err(err)?
        .create()
        .map_err(err)?;
    let rules = [
        (&reach.read, AccessFs::from_read(ABI_WANTED)),
        (&reach.device_rw, AccessFs::from_file(ABI_WANTED)),
        (&reach.write, AccessFs::from_all(ABI_WANTED)),
    ];
    for (paths, access) in rules {
        for path in paths {
            // A rule on a file may carry only file rights.
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            let access = if meta.is_dir() {
                access
            } else {
                access & AccessFs::from_file(ABI_WANTED)
            };
            let fd = match PathFd::new(path) {
                Ok(fd) => fd,
                Err(_) => continue,
            };
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(err)?;
        }
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| {
        SandboxError::Landlock("the kernel does not enforce landlock rulesets".to_string())
    })
}
