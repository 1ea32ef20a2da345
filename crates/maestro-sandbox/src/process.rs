//! Running one sandboxed command: its own process group, its cgroups where the host allows
//! them, the child setup (limits, privileges, kernel confinement), a scrubbed environment, stdout and stderr captured through one pipe (in the order written) under a byte cap, and a time
//! limit (or cancellation) that kills the whole group.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::cgroup::CommandCgroups;
use super::child::ChildSetup;

/// Output past `cap * RUNAWAY_FACTOR` bytes stops the command: nobody reads that much, and a
/// runaway writer (`yes`) would otherwise burn CPU until the time limit.
const RUNAWAY_FACTOR: usize = 16;
/// How long to wait for the pipes to close after the main process exits (background children
/// may hold them open; they are killed after this).
const PIPE_GRACE: Duration = Duration::from_millis(500);

/// What to run.
#[derive(Debug)]
pub(crate) struct Job<'a> {
    /// Program and arguments.
    pub argv: Vec<OsString>,
    pub cwd: PathBuf,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub output_cap: usize,
    pub cancel: &'a CancellationToken,
    /// The cgroups the child joins (made by the caller, which sizes the rlimits by them).
    pub cgroups: CommandCgroups,
    /// What the child does before `exec`.
    pub setup: ChildSetup,
}

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Exited by itself with this status (0 is success; -1 when the status was unavailable).
    Exited(i32),
    /// Killed by this signal number, sent by the command itself or a resource limit (`SIGXCPU`
    /// at the CPU limit), not by the time limit or cancellation.
    Signalled(i32),
    /// Killed, with everything it started, at its time limit.
    TimedOut,
    /// Killed, with everything it started, because its cancellation token fired.
    Cancelled,
    /// Stopped because it wrote far more than the output cap.
    OutputFlood,
    /// Killed by the kernel for going over the memory limit.
    MemoryLimit,
}

/// What a command that ran left behind: how it ended and what it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// How it ended.
    pub ending: Ending,
    /// stdout and stderr in the order the command wrote them, cut at the cap.
    pub output: String,
    /// Total bytes the command wrote (including what was cut).
    pub total_bytes: usize,
    /// Whether `output` was cut at the output cap (`total_bytes` is then larger).
    pub truncated: bool,
}

/// Runs `job` to its end (exit, time limit, cancellation or output flood); nothing it started
/// survives the return.
pub(crate) async fn run(job: Job<'_>) -> std::io::Result<Finished> {
    let mut command = Command::new(&job.argv[0]);
    command
        .args(&job.argv[1..])
        .current_dir(&job.cwd)
        .env_clear()
        .envs(job.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    // One pipe for both streams, as a terminal gives them: what the command wrote to stdout and
    // stderr reads back in the order it wrote it.
    let (reader, writer) = std::io::pipe()?;
    command.stdout(writer.try_clone()?).stderr(writer);
    job.setup.install(&mut command);
    let spawned = command.spawn();
    // The command keeps our copies of the write end; they must close for the pipe to end.
    drop(command);
    let mut child = spawned?;
    let group = GroupGuard { pgid: child.id() };
    let mut output = Some(tokio::net::unix::pipe::Receiver::from_owned_fd(
        std::os::fd::OwnedFd::from(reader),
    )?);
    let mut out = Capture::new(job.output_cap);
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = tokio::time::Instant::now() + job.timeout;
    let mut status = None;
    let mut grace_deadline = None;
    let ending = loop {
        if output.is_none() && status.is_some() {
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
            n = read_some(&mut output, &mut buf) => match n {
                Some(n) => out.push(&buf[..n]),
                None => output = None,
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
    let oom = job.cgroups.oom_killed();
    job.cgroups.remove().await;
    let ending = match (ending, status) {
        (Some(e), _) => e,
        (None, Some(_)) if oom => Ending::MemoryLimit,
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
