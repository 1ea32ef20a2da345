//! `maestro sandbox setup|status`: the Python environment sandboxed commands run, built from
//! `safety.python_requirements` before any run (runs never install packages).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use maestro_sandbox::{DEFAULT_PYTHON_REQUIREMENTS, PythonEnv, ReadyEnv, SetupOutcome};

use crate::flags::{ConfigFlag, settings};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Build the Python environment `Bash` commands get as `python3`, from
    /// `safety.python_requirements` (or the built-in list), with pip from the package index.
    /// Runs never install packages; this is the one time they are downloaded.
    Setup {
        /// A requirements file to use instead of `safety.python_requirements`.
        #[arg(long)]
        requirements: Option<PathBuf>,
        /// Build again even when the environment in use came from the same requirements.
        #[arg(long)]
        force: bool,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        config: ConfigFlag,
    },
    /// Say which `python3` sandboxed commands get, and what its environment holds.
    Status {
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        config: ConfigFlag,
    },
    /// Print the built-in requirements (a starting point for `safety.python_requirements`).
    Requirements,
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<u8> {
    match cmd {
        Command::Setup {
            requirements,
            force,
            json,
            config,
        } => setup(requirements, force, json, &config),
        Command::Status { json, config } => status(json, &config),
        Command::Requirements => {
            print!("{DEFAULT_PYTHON_REQUIREMENTS}");
            Ok(0)
        }
    }
}

fn env_of(config: &maestro_config::Config) -> PythonEnv {
    PythonEnv::new(
        config
            .safety
            .python_env
            .clone()
            .unwrap_or_else(|| config.root.join(".maestro/python")),
    )
}

fn setup(
    requirements: Option<PathBuf>,
    force: bool,
    json: bool,
    flag: &ConfigFlag,
) -> anyhow::Result<u8> {
    let config = settings(flag, &[])?;
    let file = requirements.or_else(|| config.safety.python_requirements.clone());
    let (text, source) = match &file {
        Some(path) => (
            std::fs::read_to_string(path).with_context(|| {
                format!(
                    "cannot read the requirements file {} (safety.python_requirements or \
                     --requirements); give the path of a pip requirements file",
                    path.display()
                )
            })?,
            path.display().to_string(),
        ),
        None => (
            DEFAULT_PYTHON_REQUIREMENTS.to_string(),
            "built-in".to_string(),
        ),
    };
    let env = env_of(&config);
    let mut progress = |line: &str| {
        if !json {
            eprintln!("{line}");
        }
    };
    let outcome = env.setup(&text, &source, force, &mut progress)?;
    let (built, ready) = match outcome {
        SetupOutcome::Built(ready) => (true, ready),
        SetupOutcome::UpToDate(ready) => (false, ready),
    };
    if json {
        let mut value = view(&ready);
        value["built"] = serde_json::Value::Bool(built);
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        let verb = if built {
            "built"
        } else {
            "already up to date:"
        };
        println!(
            "{verb} {} ({}, {} packages, from {})",
            ready.path.display(),
            ready.info.python_version,
            ready.info.packages.len(),
            ready.info.requirements_source
        );
    }
    Ok(0)
}

fn view(ready: &ReadyEnv) -> serde_json::Value {
    serde_json::json!({
        "path": ready.path,
        "python": ready.path.join("bin/python3"),
        "python_version": ready.info.python_version,
        "interpreter": ready.info.interpreter,
        "requirements_source": ready.info.requirements_source,
        "requirements_sha256": ready.info.requirements_sha256,
        "packages": ready.info.packages,
        "built_at": ready.info.built_at,
    })
}

fn status(json: bool, flag: &ConfigFlag) -> anyhow::Result<u8> {
    let config = settings(flag, &[])?;
    let env = env_of(&config);
    let ready = env.ready();
    let mut out = std::io::stdout().lock();
    match (&ready, json) {
        (Some(ready), true) => writeln!(out, "{}", serde_json::to_string_pretty(&view(ready))?)?,
        (None, true) => writeln!(
            out,
            "{}",
            serde_json::json!({"path": null, "python": "system", "dir": env.dir()})
        )?,
        (Some(ready), false) => {
            writeln!(
                out,
                "python3 in the sandbox: {}/bin/python3 ({}, built {} from {})",
                ready.path.display(),
                ready.info.python_version,
                ready.info.built_at,
                ready.info.requirements_source
            )?;
            for package in &ready.info.packages {
                writeln!(out, "  {package}")?;
            }
        }
        (None, false) => writeln!(
            out,
            "python3 in the sandbox: the system's (no environment in {}; run `maestro sandbox \
             setup` to build one from safety.python_requirements)",
            env.dir().display()
        )?,
    }
    Ok(0)
}
