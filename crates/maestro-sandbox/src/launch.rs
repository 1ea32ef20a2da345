//! Turning one command line into a confined process: the argv, environment and working
//! directory for its confinement, its cgroups and resource limits, the user it runs as, and the
//! kernel rules (seccomp programs for bubblewrap, or the landlock ruleset and seccomp programs
//! the child installs itself).

use std::ffi::OsString;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::SandboxConfig;
use super::cgroup::CommandCgroups;
use super::child::{ChildSetup, Limit, View};
use super::process::Job;
use super::seccomp::{self, Network};
use super::{Command, Confinement, RunAs, SandboxError, bwrap, landlock_fs, setid};

const MIB: u64 = 1 << 20;

/// A prepared call: the job to run, and what must live until it has ended.
pub(crate) struct Launch<'a> {
    pub job: Job<'a>,
    pub keep: Keep,
}

/// Resources held for the duration of one call: the seccomp program descriptors bubblewrap
/// reads, the private scratch directory of the landlock fallback and the empty directory the
/// workspace was shown at (removed on drop).
#[derive(Default)]
pub(crate) struct Keep {
    _seccomp: Vec<OwnedFd>,
    scratch: Option<PathBuf>,
    pub view: Option<PathBuf>,
}

impl Drop for Keep {
    fn drop(&mut self) {
        if let Some(dir) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(dir) = self.view.take() {
            // Only ever a mount point in the child's namespace: here it is empty.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

static SCRATCH_SEQ: AtomicU64 = AtomicU64::new(0);

/// Prepares `command` (a shell command line) to run in `root` (canonical) under `confinement`,
/// with `writable` (absolute directories inside `root`) writable.
pub(crate) fn prepare<'a>(
    config: &SandboxConfig,
    confinement: Confinement,
    command: Command<'a>,
) -> Result<Launch<'a>, SandboxError> {
    let Command {
        root,
        writable,
        line: command,
        run_as,
        timeout,
        cancel,
        python_env,
    } = command;
    let memory = config.memory_mb.saturating_mul(MIB);
    let cgroups = CommandCgroups::create(config.max_processes, Some(memory));
    let drop_to = match (running_as_root(), run_as) {
        (false, _) => None,
        (true, RunAs::SandboxUser) => Some((config.uid, config.gid)),
        (true, RunAs::RootOwner) => Some(setid::owner(root)?),
    };
    let mut limits = vec![
        Limit::FileSize(config.file_mb.saturating_mul(MIB)),
        Limit::CpuSeconds(config.cpu_secs.max(1)),
        Limit::NoCore,
    ];
    if !cgroups.limits_memory() {
        limits.push(Limit::AddressSpace(memory));
    }
    if drop_to.is_some() && !cgroups.limits_pids() {
        limits.push(Limit::Processes(u64::from(config.max_processes)));
    }
    let mut keep = Keep::default();
    let mut view = None;
    if let Some((uid, gid)) = drop_to {
        // The owner of a named directory already has its files; only the sandbox user is
        // handed the writable directories.
        let handed = match run_as {
            RunAs::SandboxUser => writable,
            RunAs::RootOwner => &[],
        };
        if !setid::grant(root, handed, uid, gid)? {
            // A directory above the workspace is closed to the user the command runs as (a
            // `mktemp -d` parent, a home directory): the command sees the workspace at a
            // directory it can reach instead, bound there in the child's own mount namespace.
            let target = view_dir()?;
            keep.view = Some(target.clone());
            view = Some((root.to_path_buf(), target));
        }
    }
    // Where the command finds the workspace and its writable directories (landlock's rules
    // name the directories themselves, wherever they are shown).
    let (shown_root, shown_writable): (&Path, Vec<PathBuf>) = match &view {
        None => (root, writable.to_vec()),
        Some((root, target)) => (
            target,
            writable
                .iter()
                .map(|w| target.join(w.strip_prefix(root).unwrap_or(w)))
                .collect(),
        ),
    };
    let shell: Vec<OsString> = vec!["/bin/sh".into(), "-c".into(), command.into()];
    let mut setup = ChildSetup {
        cgroup_procs: cgroups.procs_files(),
        limits,
        drop_to,
        view: match &view {
            Some((source, target)) => Some(View {
                source: c_path(source)?,
                target: c_path(target)?,
                chdir: confinement != Confinement::Bwrap,
            }),
            None => None,
        },
        ..ChildSetup::default()
    };
    let (argv, env, cwd) = match confinement {
        Confinement::Bwrap => {
            let filters = seccomp::filters(Network::Namespaced)?;
            let fds = [
                memfd_with(&seccomp::to_bytes(&filters.deny))?,
                memfd_with(&seccomp::to_bytes(&filters.enosys))?,
            ];
            setup.inherit = fds.iter().map(AsRawFd::as_raw_fd).collect();
            let refs: Vec<&Path> = shown_writable.iter().map(PathBuf::as_path).collect();
            let argv = bwrap::argv(
                shown_root,
                &refs,
                &shell,
                bwrap::Extras {
                    tmp_size: Some(config.tmp_mb.saturating_mul(MIB)),
                    seccomp_fds: &setup.inherit,
                    python_env,
                },
            );
            keep._seccomp = fds.into();
            // The launcher's own environment and working directory are visible to the command
            // (as PID 1's), so they carry nothing but PATH and `/`.
            let env = vec![("PATH".to_string(), bwrap::SANDBOX_PATH.to_string())];
            (argv, env, PathBuf::from("/"))
        }
        Confinement::Landlock | Confinement::Unconfined => {
            let scratch = scratch_dir(drop_to)?;
            keep.scratch = Some(scratch.clone());
            if confinement == Confinement::Landlock {
                let mut reach = landlock_fs::system_reach(bwrap::ETC_ENTRIES, bwrap::ROOT_LINKS);
                reach.read.push(root.to_path_buf());
                reach.read.extend(python_env.map(Path::to_path_buf));
                reach.write.extend(writable.iter().cloned());
                reach.write.push(scratch.clone());
                setup.landlock = Some(landlock_fs::ruleset_fd(&reach)?);
                setup.seccomp = Some(seccomp::filters(Network::UnixOnly)?);
            }
            let env = bwrap::sandbox_env(
                &shown_root.to_string_lossy(),
                &scratch.to_string_lossy(),
                python_env,
            );
            // With a view the child changes into it after mounting it (a working directory
            // set before would be the empty directory underneath).
            let cwd = if view.is_some() {
                PathBuf::from("/")
            } else {
                root.to_path_buf()
            };
            (shell, env, cwd)
        }
    };
    Ok(Launch {
        job: Job {
            argv,
            cwd,
            env,
            timeout,
            output_cap: config.output_cap_bytes,
            cancel,
            cgroups,
            setup,
        },
        keep,
    })
}

#[allow(unsafe_code)]
fn running_as_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A private, empty directory for the command's temporary files (`TMPDIR`), owned by the user
/// it runs as.
fn scratch_dir(owner: Option<(u32, u32)>) -> Result<PathBuf, SandboxError> {
    let dir = std::env::temp_dir().join(format!(
        "maestro-bash-tmp-{}-{}",
        std::process::id(),
        SCRATCH_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).map_err(SandboxError::io(format!(
        "cannot create the scratch directory {}",
        dir.display()
    )))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(SandboxError::io("cannot restrict the scratch directory"))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::lchown(&dir, Some(uid), Some(gid)).map_err(SandboxError::io(
            "cannot hand the scratch directory to the sandbox user",
        ))?;
    }
    Ok(dir)
}

/// An empty directory every user can traverse, for the child to show the workspace at.
fn view_dir() -> Result<PathBuf, SandboxError> {
    let dir = std::env::temp_dir().join(format!(
        "maestro-bash-ws-{}-{}",
        std::process::id(),
        SCRATCH_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir(&dir);
    std::fs::create_dir(&dir).map_err(SandboxError::io(format!(
        "cannot create {} to show the workspace at",
        dir.display()
    )))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).map_err(
        SandboxError::io(format!("cannot open {} to others", dir.display())),
    )?;
    Ok(dir)
}

fn c_path(path: &Path) -> Result<std::ffi::CString, SandboxError> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| SandboxError::Io {
        what: format!("{} contains a NUL byte", path.display()),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })
}

/// An anonymous in-memory file holding `bytes`, positioned at its start.
#[allow(unsafe_code)]
fn memfd_with(bytes: &[u8]) -> Result<OwnedFd, SandboxError> {
    // SAFETY: memfd_create takes a static NUL-terminated name and flags; the returned
    // descriptor is new and owned by nobody else, so OwnedFd may take it.
    let fd = unsafe { libc::memfd_create(c"maestro-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(SandboxError::Io {
            what: "cannot create a file for the seccomp filter".to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: see above.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(bytes)
        .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
        .map_err(SandboxError::io("cannot write the seccomp filter"))?;
    Ok(file.into())
}
