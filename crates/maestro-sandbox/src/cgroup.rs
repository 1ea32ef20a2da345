//! The control groups one command runs in: a `pids` limit (the fork-bomb brake) and a `memory`
//! limit (with swap counted, so the limit is real). cgroup v2 where the root delegates the
//! controllers, else the v1 hierarchies, each group made under this process's own group so the
//! command stays inside whatever limits the host gave Maestro. Where the host lets us make
//! neither, the command still gets `RLIMIT_AS` and the PID namespace and time limit.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The groups made for one command; removed when dropped.
#[derive(Debug, Default)]
pub(crate) struct CommandCgroups {
    dirs: Vec<PathBuf>,
    memory_dir: Option<PathBuf>,
    pids_limited: bool,
}

impl CommandCgroups {
    /// Makes the groups for one command: at most `max_pids` processes and `memory_bytes` of
    /// memory (`None`: no memory group). Whatever the host refuses is simply not made.
    pub(crate) fn create(max_pids: u32, memory_bytes: Option<u64>) -> CommandCgroups {
        let mut groups = CommandCgroups::default();
        let name = format!(
            "maestro-bash-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let unified = Path::new("/sys/fs/cgroup");
        if unified.join("cgroup.controllers").exists() {
            let delegated =
                std::fs::read_to_string(unified.join("cgroup.subtree_control")).unwrap_or_default();
            let has = |c: &str| delegated.split_whitespace().any(|d| d == c);
            if !has("pids") && !has("memory") {
                return groups;
            }
            let dir = unified.join(&name);
            if std::fs::create_dir(&dir).is_err() {
                return groups;
            }
            groups.dirs.push(dir.clone());
            if has("pids") && std::fs::write(dir.join("pids.max"), max_pids.to_string()).is_ok() {
                groups.pids_limited = true;
            }
            if let Some(bytes) = memory_bytes
                && has("memory")
                && std::fs::write(dir.join("memory.max"), bytes.to_string()).is_ok()
            {
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                groups.memory_dir = Some(dir);
            }
            return groups;
        }
        if let Some(dir) = v1_group("pids", &name)
            && std::fs::write(dir.join("pids.max"), max_pids.to_string()).is_ok()
        {
            groups.pids_limited = true;
            groups.dirs.push(dir);
        }
        if let Some(bytes) = memory_bytes
            && let Some(dir) = v1_group("memory", &name)
        {
            groups.dirs.push(dir.clone());
            if std::fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string()).is_ok() {
                // Count swap too where the kernel accounts it; otherwise the limit leaks to swap.
                let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), bytes.to_string());
                groups.memory_dir = Some(dir);
            }
        }
        groups
    }

    /// Whether memory is limited by a group (else the caller sets `RLIMIT_AS`).
    pub(crate) fn limits_memory(&self) -> bool {
        self.memory_dir.is_some()
    }

    /// Whether the number of processes is limited by a group.
    pub(crate) fn limits_pids(&self) -> bool {
        self.pids_limited
    }

    /// The `cgroup.procs` files the child writes itself into before it drops privileges.
    pub(crate) fn procs_files(&self) -> Vec<CString> {
        self.dirs
            .iter()
            .filter_map(|d| {
                CString::new(d.join("cgroup.procs").into_os_string().into_encoded_bytes()).ok()
            })
            .collect()
    }

    /// Whether the kernel killed a process of this command for going over the memory limit.
    pub(crate) fn oom_killed(&self) -> bool {
        let Some(dir) = &self.memory_dir else {
            return false;
        };
        ["memory.events", "memory.oom_control"].iter().any(|f| {
            std::fs::read_to_string(dir.join(f)).is_ok_and(|s| {
                s.lines().any(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|n| n.trim().parse::<u64>().ok())
                        .is_some_and(|n| n > 0)
                })
            })
        }) || std::fs::read_to_string(dir.join("memory.failcnt"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    }

    /// Removes the groups once their processes are gone (they have just been killed; the kernel
    /// needs a moment to take them out).
    pub(crate) async fn remove(mut self) {
        for _ in 0..50 {
            if self.try_remove() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::warn!(dirs = ?self.dirs, "could not remove a Bash cgroup");
    }

    fn try_remove(&mut self) -> bool {
        self.dirs.retain(|dir| {
            if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                return false;
            }
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            true
        });
        self.dirs.is_empty()
    }
}

impl Drop for CommandCgroups {
    /// A call abandoned by the registry (cancelled or timed out) still removes its groups, in
    /// the background if the kernel is slow to empty them.
    fn drop(&mut self) {
        if self.try_remove() {
            return;
        }
        let mut rest = CommandCgroups {
            dirs: std::mem::take(&mut self.dirs),
            memory_dir: None,
            pids_limited: false,
        };
        std::thread::spawn(move || {
            for _ in 0..100 {
                if rest.try_remove() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            rest.dirs.clear();
        });
    }
}

/// A new group `name` in the v1 hierarchy of `controller`, under this process's own group.
fn v1_group(controller: &str, name: &str) -> Option<PathBuf> {
    let mount = Path::new("/sys/fs/cgroup").join(controller);
    if !mount.join("cgroup.procs").exists() {
        return None;
    }
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()?
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == controller)
                .then(|| path.trim_start_matches('/').to_string())
        })
        .unwrap_or_default();
    let parent = mount.join(own);
    let parent = if parent.join("cgroup.procs").exists() {
        parent
    } else {
        mount
    };
    let dir = parent.join(name);
    std::fs::create_dir(&dir).ok()?;
    Some(dir)
}
