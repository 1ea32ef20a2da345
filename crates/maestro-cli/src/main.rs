//! The `maestro` binary: validate and inspect pieces, run tasks, queue jobs and run workers,
//! try tools.

// `print!`, `println!`, `eprint!` and `eprintln!` for every module below (declared before them,
// so they shadow the standard ones there): a reader that went away (`maestro run … | head`)
// ends the output, not the process. The standard macros panic on a closed pipe; a run whose
// progress nobody reads any more goes on to its end and records it. Other write errors still
// end the process as the standard macros do.
macro_rules! print {
    ($($arg:tt)*) => { $crate::term::write_out(format_args!($($arg)*)) };
}
macro_rules! println {
    () => { $crate::term::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::term::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}
macro_rules! eprint {
    ($($arg:tt)*) => { $crate::term::write_err(format_args!($($arg)*)) };
}
macro_rules! eprintln {
    () => { $crate::term::write_err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::term::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

mod common;
mod config;
mod flags;
mod gateway;
mod gateway_keys;
mod jobs;
mod knowledge;
mod logs;
mod pieces;
mod progress;
mod prompt;
mod replay;
mod run;
mod sandbox;
mod schedules;
mod serve;
mod term;
mod tools;
mod users;
mod validate;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Maestro: run LLM agents through YAML pieces, with sandboxed tools.
#[derive(Debug, Parser)]
#[command(name = "maestro", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check piece files (or directories of them) and report every error with its position.
    Validate(validate::Args),
    /// Print the system prompt and first user message the engine would send for a movement.
    Prompt(prompt::Args),
    /// List the pieces found in a directory.
    Pieces(pieces::Args),
    /// Run a task through a piece against an LLM endpoint.
    #[command(override_usage = "maestro run [PIECE] --task TEXT [OPTIONS]\n       \
                                maestro run [PIECE] --task-file FILE [OPTIONS]\n       \
                                maestro run --resume ID [OPTIONS]")]
    Run(Box<run::Args>),
    /// Drive a finished run again from its record, with no model call and no tool run; exits 0
    /// when it reaches the same movements, transitions and status.
    Replay(replay::Args),
    /// List tools or call one by hand, through the same code path the engine uses.
    #[command(subcommand)]
    Tools(tools::Command),
    /// Queue a task as a job in the store; a `maestro worker` runs it. Prints the job id.
    Submit(Box<jobs::SubmitArgs>),
    /// Claim jobs from the store and run them until SIGTERM.
    Worker(Box<worker::Args>),
    /// List the live workers, their profiles and the jobs each runs.
    Workers(jobs::WorkersArgs),
    /// Inspect, follow, wait for and cancel jobs.
    #[command(subcommand)]
    Jobs(jobs::JobsCommand),
    /// Add, list, pause, resume and remove schedules; every worker fires them.
    #[command(subcommand)]
    Schedules(schedules::Command),
    /// Serve the HTTP API, run a worker and tick the scheduler, until SIGTERM.
    Serve(Box<serve::Args>),
    /// Add, list and change the people who may use the server.
    #[command(subcommand)]
    Users(users::UsersCommand),
    /// Create, list and revoke API tokens.
    #[command(subcommand)]
    Tokens(users::TokensCommand),
    /// Show the configuration in effect (`maestro config show`).
    #[command(subcommand)]
    Config(config::Command),
    /// Run the LLM gateway alone (an OpenAI-compatible proxy at /v1), or read its usage.
    Gateway(Box<gateway::Args>),
    /// Ingest, search, list and delete documents of the knowledge base.
    #[command(subcommand)]
    Knowledge(knowledge::Command),
    /// Build and inspect the Python environment sandboxed commands run (`maestro sandbox setup`).
    #[command(subcommand)]
    Sandbox(sandbox::Command),
}

/// Whether `command` only reads and prints (`maestro jobs list --json | head` is common): such a
/// command stops quietly when its reader goes away, as `ls` does, instead of failing on the
/// closed pipe. Commands that serve, run or talk to child processes over pipes keep Rust's
/// default (a write to a closed pipe is an error they handle).
fn prints_a_listing(command: &Command) -> bool {
    match command {
        Command::Validate(_)
        | Command::Prompt(_)
        | Command::Pieces(_)
        | Command::Jobs(_)
        | Command::Workers(_)
        | Command::Schedules(_)
        | Command::Users(_)
        | Command::Tokens(_)
        | Command::Config(_) => true,
        Command::Gateway(args) => args.only_reads(),
        _ => false,
    }
}

/// Restores the default action of SIGPIPE (ending the process), which Rust's runtime sets to
/// "ignore" so that every write to a closed pipe is an error.
#[allow(unsafe_code)]
fn stop_quietly_on_a_closed_pipe() {
    // SAFETY: `signal` with SIG_DFL only changes this process's disposition of SIGPIPE; it is
    // called before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// mimalloc: a worker's runs allocate and free many small objects across a few threads, where
/// glibc's allocator spent a quarter of the CPU of 1,000 concurrent runs (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its option enum, `mimalloc.h`; the Rust bindings do not
/// name it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the system after 10 ms (mimalloc 2's default; mimalloc 3 waits a
/// second). A worker's runs free in bursts, as a round of model answers comes in together, and
/// with a second's delay the memory each burst freed was still resident when the next one
/// allocated: the 1,000-run bench's peak was 5–8 MB higher, for no time the bench can see
/// (docs/benchmarks.md, "1,000 concurrent runs"). The jobs bench sets the same. An operator's
/// `MIMALLOC_PURGE_DELAY` (which mimalloc has read by now) is left as it is.
#[allow(unsafe_code)]
fn give_back_freed_memory_soon() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets one of mimalloc's options, which it reads atomically; any thread may do so at
    // any time, and 15 is `mi_option_purge_delay` in the mimalloc this crate builds (the test
    // below).
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10) }
}

fn main() -> ExitCode {
    give_back_freed_memory_soon();
    // The document tools' reader child (hidden: not a command anyone types). It parses one
    // untrusted file under its own limits, before anything else starts.
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(maestro_app::DOCUMENT_READER_ARG)) {
        let rest: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
        return maestro_app::document_reader_main(&rest);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    logs::install();
    if prints_a_listing(&cli.command) {
        stop_quietly_on_a_closed_pipe();
    }
    let result = match cli.command {
        Command::Validate(args) => validate::run(args),
        Command::Prompt(args) => prompt::run(args),
        Command::Pieces(args) => pieces::run(args),
        Command::Run(args) => run::run(*args),
        Command::Replay(args) => replay::run(args),
        Command::Tools(cmd) => tools::run(cmd),
        Command::Submit(args) => jobs::submit(*args),
        Command::Worker(args) => worker::run(*args),
        Command::Workers(args) => jobs::workers(args),
        Command::Jobs(cmd) => jobs::jobs(cmd),
        Command::Schedules(cmd) => schedules::run(cmd),
        Command::Serve(args) => serve::run(*args),
        Command::Users(cmd) => users::users(cmd),
        Command::Tokens(cmd) => users::tokens(cmd),
        Command::Config(cmd) => config::run(cmd),
        Command::Gateway(args) => gateway::run(*args),
        Command::Knowledge(cmd) => knowledge::run(cmd),
        Command::Sandbox(cmd) => sandbox::run(cmd),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // An error may carry an endpoint's own words: no control character reaches the
            // terminal. Each cause is said once.
            eprintln!(
                "error: {}",
                term::printable(&maestro_app::error_chain(e.as_ref()))
            );
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod allocator_tests {
    use super::MI_OPTION_PURGE_DELAY;

    /// mimalloc 3 purges after 1,000 ms unless told otherwise, and no other option of its has
    /// that default: reading 1,000 at the constant's number in a process that set nothing shows
    /// that it names the purge delay (a mimalloc whose options moved fails here).
    #[test]
    #[allow(unsafe_code)]
    fn the_option_set_at_start_is_the_purge_delay() {
        assert!(
            std::env::var_os("MIMALLOC_PURGE_DELAY").is_none(),
            "unset MIMALLOC_PURGE_DELAY to run this test"
        );
        // SAFETY: reads one of mimalloc's options.
        let default = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(default, 1_000);
    }
}
