//! What the child process does between `fork` and `exec`: join its cgroups, take its resource
//! limits, keep the seccomp program descriptors bubblewrap reads, show the workspace where the
//! sandbox user can reach it, drop root for the sandbox user, and — in the landlock fallback —
//! confine itself with landlock and seccomp.
//!
//! Everything here runs in a forked copy of a multi-threaded process, so it uses only
//! async-signal-safe system calls on data prepared by the parent: no allocation, no locks.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::seccomp::Filters;

/// A resource limit, soft and hard alike.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Limit {
    /// Largest file the command may write, in bytes.
    FileSize(u64),
    /// CPU seconds.
    CpuSeconds(u64),
    /// Address space, in bytes (the memory limit where no memory cgroup could be made).
    AddressSpace(u64),
    /// Processes of the sandbox user (only when it is a user of its own, not Maestro's).
    Processes(u64),
    /// No core dumps.
    NoCore,
}

/// A workspace under directories the sandbox user cannot traverse, bound (recursively) onto an
/// empty directory it can reach, in a mount namespace of the child's own: the host sees no
/// mount, and nothing above the workspace is opened to anyone.
#[derive(Debug)]
pub(crate) struct View {
    /// The workspace.
    pub source: CString,
    /// The empty directory it is shown at.
    pub target: CString,
    /// Whether the command starts in `target` (the fallbacks; bubblewrap chooses its own).
    pub chdir: bool,
}

/// The child's setup, prepared by the parent.
#[derive(Debug, Default)]
pub(crate) struct ChildSetup {
    pub cgroup_procs: Vec<CString>,
    pub limits: Vec<Limit>,
    /// Descriptors the program must inherit (bubblewrap's `--add-seccomp-fd`).
    pub inherit: Vec<RawFd>,
    /// `(uid, gid)` to switch to when Maestro runs as root.
    pub drop_to: Option<(u32, u32)>,
    /// The workspace shown at a path the sandbox user can reach, while still root.
    pub view: Option<View>,
    /// Landlock ruleset to restrict the child to (the fallback sandbox).
    pub landlock: Option<OwnedFd>,
    /// Seccomp programs to install in the child itself (the fallback; bubblewrap installs them
    /// for its own child).
    pub seccomp: Option<&'static Filters>,
}

impl ChildSetup {
    /// Installs `self` as the command's pre-exec step.
    pub(crate) fn install(self, command: &mut tokio::process::Command) {
        #[allow(unsafe_code)]
        // SAFETY: the closure runs between fork and exec in the child. It only makes
        // async-signal-safe system calls (open, write, close, setrlimit, fcntl, setgroups,
        // setresgid, setresuid, prctl, syscall) on memory the parent prepared before forking
        // and that the child's copy still owns; it allocates nothing and takes no locks.
        unsafe {
            command.pre_exec(move || self.run_in_child());
        }
    }

    fn run_in_child(&self) -> std::io::Result<()> {
        for procs in &self.cgroup_procs {
            join_cgroup(procs)?;
        }
        for limit in &self.limits {
            set_limit(*limit)?;
        }
        for fd in &self.inherit {
            keep_open(*fd)?;
        }
        if let Some(view) = &self.view {
            show(view)?;
        }
        if let Some((uid, gid)) = self.drop_to {
            drop_privileges(uid, gid)?;
        }
        if let Some(ruleset) = &self.landlock {
            restrict_self(ruleset.as_raw_fd())?;
        }
        if let Some(filters) = self.seccomp {
            // Also sets no_new_privs (already set by restrict_self).
            seccompiler::apply_filter(&filters.deny).map_err(|_| last_error())?;
            seccompiler::apply_filter(&filters.enosys).map_err(|_| last_error())?;
        }
        Ok(())
    }
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

#[allow(unsafe_code)]
fn join_cgroup(procs: &CString) -> std::io::Result<()> {
    // SAFETY: `procs` is a valid NUL-terminated path; the buffer written is a static "0", which
    // the kernel reads as "the writing process".
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(last_error());
        }
        let n = libc::write(fd, c"0".as_ptr().cast(), 1);
        libc::close(fd);
        if n != 1 {
            return Err(last_error());
        }
    }
    Ok(())
}

#[allow(unsafe_code)]
fn set_limit(limit: Limit) -> std::io::Result<()> {
    let (resource, value) = match limit {
        Limit::FileSize(b) => (libc::RLIMIT_FSIZE, b),
        Limit::CpuSeconds(s) => (libc::RLIMIT_CPU, s),
        Limit::AddressSpace(b) => (libc::RLIMIT_AS, b),
        Limit::Processes(n) => (libc::RLIMIT_NPROC, n),
        Limit::NoCore => (libc::RLIMIT_CORE, 0),
    };
    let rlim = libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct on our stack.
    if unsafe { libc::setrlimit(resource, &rlim) } != 0 {
        return Err(last_error());
    }
    Ok(())
}

#[allow(unsafe_code)]
fn keep_open(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor number has no memory effects.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return Err(last_error());
    }
    Ok(())
}

#[allow(unsafe_code)]
fn show(view: &View) -> std::io::Result<()> {
    // SAFETY: unshare takes flags; mount and chdir read NUL-terminated strings the parent
    // prepared (or a static one) and null data pointers.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(last_error());
        }
        // Mounts made from here on stay in this namespace.
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(last_error());
        }
        if libc::mount(
            view.source.as_ptr(),
            view.target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ) != 0
        {
            return Err(last_error());
        }
        if view.chdir && libc::chdir(view.target.as_ptr()) != 0 {
            return Err(last_error());
        }
    }
    Ok(())
}

#[allow(unsafe_code)]
fn drop_privileges(uid: u32, gid: u32) -> std::io::Result<()> {
    // SAFETY: plain system calls without pointers (setgroups with an empty list).
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(gid, gid, gid) != 0
            || libc::setresuid(uid, uid, uid) != 0
        {
            return Err(last_error());
        }
    }
    Ok(())
}

#[allow(unsafe_code)]
fn restrict_self(ruleset: RawFd) -> std::io::Result<()> {
    // SAFETY: prctl and landlock_restrict_self take integers only.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(last_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) != 0 {
            return Err(last_error());
        }
    }
    Ok(())
}
