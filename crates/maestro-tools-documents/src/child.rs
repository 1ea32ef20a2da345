//! The reader child: the process a document tool starts to parse one untrusted file, so a
//! parser bug, a zip bomb or a pathological file costs that process and never the worker. It
//! limits its own address space and CPU time before it reads a byte, takes the file on stdin
//! (it opens nothing), and answers one JSON [`Response`] on stdout.

use std::io::{Read, Write};
use std::process::ExitCode;

use rustix::process::{Resource, Rlimit, setrlimit};

use crate::protocol::{Kind, ReadFailure, Request, Response};

/// The argument that makes the `maestro` binary run [`reader_main`] (`maestro __document-reader
/// REQUEST`); hidden from its help.
pub const READER_ARG: &str = "__document-reader";

/// Runs the reader child: `args` is what follows [`READER_ARG`] (one JSON request). Exit status
/// 0 with a JSON answer on stdout, whether the file was read or refused; 2 when the request
/// itself is unusable (a caller's bug, explained on stderr).
pub fn reader_main(args: &[String]) -> ExitCode {
    let request: Request = match args.first().map(|a| serde_json::from_str(a)) {
        Some(Ok(request)) => request,
        Some(Err(e)) => {
            eprintln!("{READER_ARG}: the request is not valid JSON ({e})");
            return ExitCode::from(2);
        }
        None => {
            eprintln!(
                "{READER_ARG}: expected one JSON request argument; this command is run by the document tools, not by hand"
            );
            return ExitCode::from(2);
        }
    };
    if let Err(e) = limit_self(&request) {
        eprintln!("{READER_ARG}: cannot set the resource limits ({e})");
        return ExitCode::from(2);
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut bytes) {
        eprintln!("{READER_ARG}: cannot read the file from stdin ({e})");
        return ExitCode::from(2);
    }
    let answer = match (&request.kind, &request.image) {
        (Kind::Image, Some(job)) => match crate::image::run(&bytes, job, request.memory_mb) {
            Ok(image) => Response::Image(Box::new(image)),
            Err(failure) => Response::Failed(failure),
        },
        _ => match read(&bytes, &request) {
            Ok(markdown) => Response::Markdown(tidy(&markdown)),
            Err(failure) => Response::Failed(failure),
        },
    };
    drop(bytes);
    let mut out = std::io::stdout().lock();
    match serde_json::to_writer(&mut out, &answer).map(|()| out.flush()) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        _ => ExitCode::from(2),
    }
}

/// The reader for `request.kind` on `bytes`.
pub(crate) fn read(bytes: &[u8], request: &Request) -> Result<String, ReadFailure> {
    if bytes.is_empty() {
        return Err(ReadFailure::Corrupt("the file is empty".into()));
    }
    match request.kind {
        Kind::Docx => crate::docx::read(bytes, request.max_expanded_bytes),
        Kind::Pptx => crate::pptx::read(bytes, request.max_expanded_bytes),
        Kind::Spreadsheet => crate::sheet::read(bytes, request),
        Kind::Csv => crate::sheet::read_csv(bytes, request),
        Kind::Image => Err(ReadFailure::WrongType(
            "an image request without its job; this is a bug in Maestro".into(),
        )),
    }
}

/// `markdown` with runs of blank lines made one.
fn tidy(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut blank = 0;
    for line in markdown.trim_start_matches('\n').lines() {
        if line.trim().is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let end = out.trim_end().len();
    out.truncate(end);
    out.push('\n');
    out
}

/// Address space and CPU time for this process, no core file, no file writes: set before the
/// untrusted bytes are read, inherited by nothing (the child starts no process).
///
/// The address-space limit is `memory_mb` more than the process maps when it sets it. What is
/// mapped already counts against the limit: the binary, and the allocator's first arena, which
/// mimalloc reserves before `main` (1 GiB of address space, backed only as it is used). A limit
/// of `memory_mb` in all left the reader no room to map anything new, so whether a reader
/// failed came down to whether one of its allocations happened to need a new mapping (a
/// `.docx` failed about one read in ten).
fn limit_self(request: &Request) -> std::io::Result<()> {
    let memory = mapped_bytes().saturating_add(request.memory_mb.saturating_mul(1024 * 1024));
    setrlimit(
        Resource::As,
        Rlimit {
            current: Some(memory),
            maximum: Some(memory),
        },
    )?;
    let cpu = request.cpu_secs.max(1);
    setrlimit(
        Resource::Cpu,
        Rlimit {
            current: Some(cpu),
            maximum: Some(cpu + 1),
        },
    )?;
    setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    )?;
    setrlimit(
        Resource::Fsize,
        Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    )?;
    Ok(())
}

/// The bytes of address space this process maps now (`/proc/self/statm`'s first field); 0 where
/// that cannot be read, which makes the limit `memory_mb` in all.
fn mapped_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |pages| {
            pages.saturating_mul(rustix::param::page_size() as u64)
        })
}
