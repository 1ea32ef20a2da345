//! Why a document tool could not answer.

use std::path::PathBuf;
use std::time::Duration;

use crate::protocol::ReadFailure;

/// Why a document tool could not answer; the tool puts the file's name in front.
#[derive(Debug, thiserror::Error)]
pub enum DocError {
    /// The path does not name a readable file inside the workspace.
    #[error(transparent)]
    File(#[from] maestro_tools::workspace_file::FileError),
    /// The file could not be read from disk.
    #[error("cannot read the file: {0}")]
    Io(#[source] std::io::Error),
    /// The file is larger than the tools read.
    #[error(
        "the file is {size} bytes, more than the {limit} bytes the document tools read; split it first (SplitPdf for a PDF) or export the part you need"
    )]
    FileTooLarge {
        /// The file's size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The reader found the file unreadable (corrupt, encrypted, wrong type, too large).
    #[error("{0}")]
    Read(ReadFailure),
    /// The request could not be written for the child.
    #[error("cannot encode the reader's request: {0}")]
    Request(#[source] serde_json::Error),
    /// The reader child could not be started.
    #[error("cannot start the document reader {}: {source}; the maestro binary must stay where it was started from", program.display())]
    StartReader {
        /// The program that was to run.
        program: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the child failed.
    #[error("cannot wait for the document reader: {0}")]
    Wait(#[source] std::io::Error),
    /// The child answered something that is not an answer.
    #[error("the document reader gave no usable answer ({0}); this is a bug in Maestro")]
    BadAnswer(String),
    /// The parse ran past the time limit and was killed.
    #[error("reading it took longer than {}s and was stopped; the file is too complex or malformed. Read fewer pages, or convert it with Bash", .0.as_secs())]
    TimedOut(Duration),
    /// The parse used up its CPU time and was killed.
    #[error(
        "reading it used more than {0} CPU seconds and was stopped; the file is too complex or malformed"
    )]
    CpuLimit(u64),
    /// The parse ran out of memory under its limit.
    #[error(
        "reading it needed more than {0} MiB of memory and was stopped (a zip bomb, or a document too large to read here)"
    )]
    MemoryLimit(u64),
    /// The child died another way.
    #[error("the document reader stopped unexpectedly ({0}); the file may be malformed")]
    Crashed(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// A program of poppler-utils or qpdf could not run in the sandbox.
    #[error("{0}")]
    Program(String),
    /// The sandbox the PDF programs run in cannot be had here.
    #[error("the PDF programs run in the Bash sandbox, which is unavailable: {0}")]
    Sandbox(#[source] maestro_sandbox::ConfinementError),
    /// The sandbox could not run the program.
    #[error("cannot run the PDF program in the sandbox: {0}")]
    Run(#[source] maestro_sandbox::RunError),
    /// A request field is not usable (pages, ranges, dpi).
    #[error("{0}")]
    Input(String),
}
