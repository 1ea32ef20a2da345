//! The `maestro` binary: validate and inspect pieces, run tasks, try tools.

mod logs;
mod pieces;
mod progress;
mod prompt;
mod run;
mod toolbox;
mod tools;
mod validate;

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
    Run(run::Args),
    /// List tools or call one by hand, through the same code path the engine uses.
    #[command(subcommand)]
    Tools(tools::Command),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    logs::install();
    let result = match cli.command {
        Command::Validate(args) => validate::run(args),
        Command::Prompt(args) => prompt::run(args),
        Command::Pieces(args) => pieces::run(args),
        Command::Run(args) => run::run(args),
        Command::Tools(cmd) => tools::run(cmd),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
