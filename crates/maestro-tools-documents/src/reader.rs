//! Starting the reader child for one file and turning how it ended into an answer: the file's
//! bytes go to its stdin, its JSON answer comes back on stdout, and past the time limit (or on
//! cancellation, or when the call is dropped) it is killed, so nothing keeps parsing.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::error::DocError;
use crate::protocol::{Request, Response};

/// How to start the reader child: a program and the arguments before the request. For the
/// shipped binary that is `maestro __document-reader` ([`ReaderCommand::current_exe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderCommand {
    /// The program.
    pub program: PathBuf,
    /// Arguments before the JSON request.
    pub args: Vec<String>,
}

impl ReaderCommand {
    /// This process's own executable with [`crate::READER_ARG`]: right when this process is the
    /// `maestro` binary (which dispatches that argument to [`crate::reader_main`]).
    pub fn current_exe() -> ReaderCommand {
        ReaderCommand {
            program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("maestro")),
            args: vec![crate::READER_ARG.to_string()],
        }
    }
}

/// Runs the child on `bytes` and returns its Markdown.
pub(crate) async fn run(
    command: &ReaderCommand,
    request: &Request,
    bytes: Vec<u8>,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<String, DocError> {
    match exchange(command, request, bytes, timeout, cancel).await? {
        Response::Markdown(text) => Ok(text),
        Response::Image(_) => Err(DocError::BadAnswer(
            "an image where Markdown was asked for".into(),
        )),
        Response::Failed(failure) => Err(DocError::Read(failure)),
    }
}

/// Runs the child on `bytes` and returns its answer, whatever it is.
pub(crate) async fn exchange(
    command: &ReaderCommand,
    request: &Request,
    bytes: Vec<u8>,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Response, DocError> {
    let json = serde_json::to_string(request).map_err(DocError::Request)?;
    let mut child = tokio::process::Command::new(&command.program)
        .args(&command.args)
        .arg(json)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| DocError::StartReader {
            program: command.program.clone(),
            source,
        })?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    // The answer is Markdown cut at `max_chars` characters (up to 4 bytes each) in JSON.
    let out_cap = (request.max_chars as u64).saturating_mul(8) + 64 * 1024;
    let exchange = async {
        let feed = async {
            if let Some(mut pipe) = stdin.take() {
                // A child that stops reading (it failed early) closes the pipe: not our error.
                let _ = pipe.write_all(&bytes).await;
                let _ = pipe.shutdown().await;
            }
        };
        let collect_out = async {
            let mut buf = Vec::new();
            if let Some(pipe) = stdout.take() {
                let _ = pipe.take(out_cap).read_to_end(&mut buf).await;
            }
            buf
        };
        let collect_err = async {
            let mut buf = Vec::new();
            if let Some(pipe) = stderr.take() {
                let _ = pipe.take(16 * 1024).read_to_end(&mut buf).await;
            }
            buf
        };
        let ((), out, err) = tokio::join!(feed, collect_out, collect_err);
        let status = child.wait().await;
        (status, out, err)
    };
    let (status, out, err) = tokio::select! {
        done = tokio::time::timeout(timeout, exchange) => match done {
            Ok(done) => done,
            Err(_) => return Err(DocError::TimedOut(timeout)),
        },
        () = cancel.cancelled() => return Err(DocError::Cancelled),
    };
    // Dropping `exchange` above dropped the child too (kill_on_drop): nothing is left running.
    let status = status.map_err(DocError::Wait)?;
    let stderr = String::from_utf8_lossy(&err).trim().to_string();
    if status.success() {
        return serde_json::from_slice::<Response>(&out)
            .map_err(|e| DocError::BadAnswer(e.to_string()));
    }
    use std::os::unix::process::ExitStatusExt as _;
    Err(match status.signal() {
        Some(24 | 9) => DocError::CpuLimit(request.cpu_secs),
        Some(6) if stderr.contains("memory allocation") => DocError::MemoryLimit(request.memory_mb),
        Some(signal) => DocError::Crashed(format!("killed by signal {signal}: {stderr}")),
        None if stderr.contains("memory allocation") => DocError::MemoryLimit(request.memory_mb),
        None => DocError::Crashed(format!(
            "exit status {}: {stderr}",
            status.code().unwrap_or(-1)
        )),
    })
}
