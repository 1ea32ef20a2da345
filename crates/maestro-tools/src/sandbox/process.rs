//! Running one sandboxed command: its own process group, a pids cgroup where the host allows
//! one, a scrubbed environment, stdout and stderr captured together under a byte cap, and a time
//! limit (or cancellation) that kills the whole group.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Output past `cap * RUNAWAY_FACTOR` bytes stops the command: nobody reads that much, and a
/// runaway writer (`yes`) would otherwise burn CPU until the time limit.
const RUNAWAY_FACTOR: usize = 16;
/// How long to wait for the pipes to close after the main process exits (background children
/// may hold them open; they are killed after this).
const PIPE_GRACE: Duration = Duration::from_millis(500);
/// Largest file a command may write, in bytes (`ulimit -f`), so a loop cannot fill the disk.
const MAX_FILE_BYTES: u64 = 1 << 30;

/// What to run.
#[derive(Debug)]
pub struct Job<'a> {
    /// Program and arguments; run through a small `/bin/sh` prologue that joins the pids cgroup
    /// and sets the file-size limit, then `exec`s it.
    pub argv: Vec<OsString>,
    pub cwd: &'a Path,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub output_cap: usize,
    pub max_processes: u32,
    pub cancel: &'a CancellationToken,
}

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    Cancelled,
    /// Stopped because it wrote far more than the output cap.
    OutputFlood,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub ending: Ending,
    /// stdout and stderr interleaved in arrival order, cut at the cap.
    pub output: String,
    /// Total bytes the command wrote (including what was cut).
    pub total_bytes: usize,
    pub truncated: bool,
}

/// Runs `job` to its end (exit, time limit, cancellation or output flood); nothing it started
/// survives the return.
pub async fn run(job: Job<'_>) -> std::io::Result<Finished> {
    let cgroup = PidsCgroup::create(job.max_processes);
    let procs_file = cgroup
        .as_ref()
        .map(|c| c.dir.join("cgroup.procs").into_os_string())
        .unwrap_or_default();
    let prologue = format!(
        "ulimit -f {} 2>/dev/null; if [ -n \"$0\" ]; then echo $$ > \"$0\" || exit 125; fi; exec \"$@\"",
        MAX_FILE_BYTES / 512
    );
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(prologue)
        .arg(procs_file)
        .args(&job.argv)
        .current_dir(job.cwd)
        .env_clear()
        .envs(job.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let group = GroupGuard { pgid: child.id() };
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let mut out = Capture::new(job.output_cap);
    let mut buf_out = vec![0u8; 16 * 1024];
    let mut buf_err = vec![0u8; 16 * 1024];
    let deadline = tokio::time::Instant::now() + job.timeout;
    let mut status = None;
    let mut grace_deadline = None;
    let ending = loop {
        if stdout.is_none() && stderr.is_none() && status.is_some() {
            break None;
        }
        if out.total > job.output_cap.saturating_mul(RUNAWAY_FACTOR) {
            break Some(Ending::OutputFlood);
        }
        let grace = async {
            match grace_deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            n = read_some(&mut stdout, &mut buf_out) => match n {
                Some(n) => out.push(&buf_out[..n]),
                None => stdout = None,
            },
            n = read_some(&mut stderr, &mut buf_err) => match n {
                Some(n) => out.push(&buf_err[..n]),
                None => stderr = None,
            },
            s = child.wait(), if status.is_none() => {
                status = Some(s?);
                grace_deadline = Some(tokio::time::Instant::now() + PIPE_GRACE);
            }
            _ = grace => break None,
            _ = tokio::time::sleep_until(deadline) => break Some(Ending::TimedOut),
            _ = job.cancel.cancelled() => break Some(Ending::Cancelled),
        }
    };
    drop(group);
    let _ = child.kill().await;
    if let Some(cgroup) = cgroup {
        cgroup.remove().await;
    }
    let ending = match (ending, status) {
        (Some(e), _) => e,
        (None, Some(s)) => {
            use std::os::unix::process::ExitStatusExt;
            match (s.code(), s.signal()) {
                (Some(code), _) => Ending::Exited(code),
                (None, Some(sig)) => Ending::Signalled(sig),
                (None, None) => Ending::Exited(-1),
            }
        }
        (None, None) => Ending::Exited(-1),
    };
    let (output, truncated) = out.finish();
    Ok(Finished {
        ending,
        output,
        total_bytes: out.total,
        truncated,
    })
}

async fn read_some<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut Option<R>,
    buf: &mut [u8],
) -> Option<usize> {
    match reader {
        Some(r) => match r.read(buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(n),
        },
        None => std::future::pending().await,
    }
}

/// Output kept up to a cap, with the total counted.
struct Capture {
    kept: Vec<u8>,
    cap: usize,
    total: usize,
}

impl Capture {
    fn new(cap: usize) -> Capture {
        Capture {
            kept: Vec::new(),
            cap,
            total: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn finish(&self) -> (String, bool) {
        let text = String::from_utf8_lossy(&self.kept).into_owned();
        (text, self.total > self.kept.len())
    }
}

/// Kills the process group on drop, so a command's background children die with it (in the
/// fallback; under bubblewrap the PID namespace takes them down when its init dies).
struct GroupGuard {
    pgid: Option<u32>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.and_then(|p| i32::try_from(p).ok()) {
            kill_group(pgid);
        }
    }
}

#[allow(unsafe_code)]
fn kill_group(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; it has no memory effects.
    // The group was created for this command alone (process_group(0)), so no other process is
    // in it.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// A pids cgroup limiting how many processes one command may hold: the fork-bomb brake. Made
/// where the host lets us (cgroup v1 `pids` hierarchy, or cgroup v2 with the pids controller
/// enabled at the root); without one, the time limit and the PID namespace still end a fork
/// bomb, just later.
struct PidsCgroup {
    dir: PathBuf,
}

static CGROUP_SEQ: AtomicU64 = AtomicU64::new(0);

impl PidsCgroup {
    fn create(max: u32) -> Option<PidsCgroup> {
        let base = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|b| {
                b.join("pids.max").exists()
                    || std::fs::read_to_string(b.join("cgroup.subtree_control"))
                        .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"))
                    || (b.ends_with("pids") && b.join("cgroup.procs").exists())
            })?;
        let name = format!(
            "maestro-bash-{}-{}",
            std::process::id(),
            CGROUP_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = base.join(name);
        std::fs::create_dir(&dir).ok()?;
        let cgroup = PidsCgroup { dir };
        if std::fs::write(cgroup.dir.join("pids.max"), max.to_string()).is_err() {
            let _ = std::fs::remove_dir(&cgroup.dir);
            return None;
        }
        Some(cgroup)
    }

    async fn remove(self) {
        // The processes are killed; the kernel needs a moment to take them out of the group.
        for _ in 0..50 {
            if self.try_remove() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::warn!(dir = %self.dir.display(), "could not remove a Bash pids cgroup");
    }

    fn try_remove(&self) -> bool {
        if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
            return true;
        }
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        false
    }
}

impl Drop for PidsCgroup {
    /// When a call is abandoned (cancelled or timed out by the registry) its processes have just
    /// been killed; the group is removed as soon as the kernel has taken them out (briefly
    /// waited for here, then in the background).
    fn drop(&mut self) {
        for _ in 0..50 {
            if self.try_remove() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let dir = std::mem::take(&mut self.dir);
        std::thread::spawn(move || {
            let group = PidsCgroup { dir };
            for _ in 0..100 {
                if group.try_remove() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            std::mem::forget(group);
        });
    }
}
