//! The Python environment sandboxed commands see as `python3`: a virtual environment built from
//! a requirements file by `maestro sandbox setup`, before any run and never during one, and
//! mounted read-only into the sandbox with its `bin/` first on `PATH`.
//!
//! Layout under the configured directory (`safety.python_env`):
//! - `envs/<key>/`: one environment per requirements text and interpreter (`<key>` is the first
//!   16 hex digits of their SHA-256); its `maestro-env.json` is written last, so an environment
//!   without it is a build that did not finish and is never used;
//! - `current`: a symbolic link to the environment in use, replaced by one `rename`, so a
//!   command sees the old environment or the new one, never half of one;
//! - `setup.lock`: held while a setup runs, so two setups at once take turns.
//!
//! A kill at any point leaves `current` on a finished environment (or absent): the next setup
//! removes what was left half-built and builds it again.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::bwrap::SANDBOX_PATH;

/// The requirements `maestro sandbox setup` installs when `safety.python_requirements` names no
/// file: the packages agents that work with documents and data reach for.
pub const DEFAULT_REQUIREMENTS: &str = include_str!("../python/requirements.txt");

/// The file in an environment that says it is finished, and what it holds.
const MARKER: &str = "maestro-env.json";

/// Where the environments of one configuration live (`safety.python_env`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonEnv {
    dir: PathBuf,
}

/// What a finished environment records about itself (`maestro-env.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvInfo {
    /// SHA-256 (hex) of the requirements text it was built from.
    pub requirements_sha256: String,
    /// Where the requirements came from: a file's path, or `built-in`.
    pub requirements_source: String,
    /// The interpreter the environment runs on (one the sandbox mounts).
    pub interpreter: PathBuf,
    /// `python3 --version` of that interpreter.
    pub python_version: String,
    /// What pip installed, as `name==version` lines (`pip freeze`).
    pub packages: Vec<String>,
    /// When the build finished (RFC 3339, UTC).
    pub built_at: String,
}

/// A finished environment in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyEnv {
    /// Its directory, canonical: mounted at the same path inside the sandbox.
    pub path: PathBuf,
    /// What it records about itself.
    pub info: EnvInfo,
}

/// What one [`PythonEnv::setup`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupOutcome {
    /// An environment from the same requirements and interpreter was already in use.
    UpToDate(ReadyEnv),
    /// A new environment was built and is now in use.
    Built(ReadyEnv),
}

/// Why the environment could not be built or read.
#[derive(Debug, thiserror::Error)]
pub enum PythonEnvError {
    /// No interpreter the sandbox can see.
    #[error(
        "no python3 the sandbox can run was found in {SANDBOX_PATH}; install Debian's python3 \
         and python3-venv (`apt-get install python3 python3-venv`)"
    )]
    NoInterpreter,
    /// A step of the build failed; `step` names it and `output` is what the program printed.
    #[error("{step} failed ({status}): {output}\n{fix}")]
    Step {
        /// The step, e.g. `python3 -m venv`.
        step: String,
        /// How the program ended.
        status: String,
        /// The end of what it printed.
        output: String,
        /// What to do about it.
        fix: &'static str,
    },
    /// A file or directory of the environment could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PythonEnvError + '_ {
    move |source| PythonEnvError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl PythonEnv {
    /// The environments under `dir` (`safety.python_env`).
    pub fn new(dir: impl Into<PathBuf>) -> PythonEnv {
        PythonEnv { dir: dir.into() }
    }

    /// The configured directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The environment in use, when a setup has finished one; `None` means sandboxed commands
    /// get the system's `python3`.
    pub fn ready(&self) -> Option<ReadyEnv> {
        let path = std::fs::canonicalize(self.dir.join("current")).ok()?;
        let text = std::fs::read_to_string(path.join(MARKER)).ok()?;
        let info: EnvInfo = serde_json::from_str(&text).ok()?;
        path.join("bin/python3")
            .exists()
            .then_some(ReadyEnv { path, info })
    }

    /// Builds an environment from `requirements` (whose origin `source` names) with pip from
    /// the package index, unless one from the same text and interpreter is in use already (or
    /// `force`). `progress` hears each step. Runs outside any sandbox: it is the operator's
    /// command, made before runs, and the only time packages are downloaded.
    pub fn setup(
        &self,
        requirements: &str,
        source: &str,
        force: bool,
        progress: &mut dyn FnMut(&str),
    ) -> Result<SetupOutcome, PythonEnvError> {
        let interpreter = interpreter().ok_or(PythonEnvError::NoInterpreter)?;
        let python_version = run_step(
            "python3 --version",
            Command::new(&interpreter).arg("--version"),
            "check that the interpreter runs",
        )?
        .trim()
        .to_string();
        std::fs::create_dir_all(self.dir.join("envs")).map_err(io(&self.dir))?;
        let _lock = Lock::take(&self.dir.join("setup.lock"))?;

        let requirements_sha256 = sha256_hex(requirements.as_bytes());
        let key = &sha256_hex(
            format!(
                "{requirements_sha256}\n{}\n{python_version}",
                interpreter.display()
            )
            .as_bytes(),
        )[..16];
        if !force
            && let Some(ready) = self.ready()
            && ready.info.requirements_sha256 == requirements_sha256
            && ready.info.interpreter == interpreter
            && ready.info.python_version == python_version
        {
            return Ok(SetupOutcome::UpToDate(ready));
        }

        let env = self.dir.join("envs").join(key);
        if env.exists() {
            // Half-built by a setup that was killed, or rebuilt on `force`.
            std::fs::remove_dir_all(&env).map_err(io(&env))?;
        }
        progress(&format!(
            "creating a virtual environment with {} ({python_version}) in {}",
            interpreter.display(),
            env.display()
        ));
        run_step(
            "python3 -m venv",
            Command::new(&interpreter).arg("-m").arg("venv").arg(&env),
            "install Debian's python3-venv (`apt-get install python3-venv`)",
        )?;
        let req_file = env.join("requirements.txt");
        std::fs::write(&req_file, requirements).map_err(io(&req_file))?;
        progress("installing the requirements with pip (this downloads from the package index)");
        let python = env.join("bin/python3");
        run_step(
            "pip install",
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                    "--quiet",
                    "-r",
                ])
                .arg(&req_file),
            "check the requirements file's package names and versions, and that the package \
             index is reachable from this machine",
        )?;
        let frozen = run_step(
            "pip freeze",
            Command::new(&python).args(["-m", "pip", "freeze", "--disable-pip-version-check"]),
            "the environment is damaged; run `maestro sandbox setup --force`",
        )?;
        let info = EnvInfo {
            requirements_sha256,
            requirements_source: source.to_string(),
            interpreter,
            python_version,
            packages: frozen
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect(),
            built_at: now_rfc3339(),
        };
        let marker = env.join(MARKER);
        let tmp = env.join(".maestro-env.json.tmp");
        let text = serde_json::to_string_pretty(&info).unwrap_or_default();
        write_synced(&tmp, text.as_bytes())?;
        std::fs::rename(&tmp, &marker).map_err(io(&marker))?;

        let link_tmp = self.dir.join(".current.tmp");
        let _ = std::fs::remove_file(&link_tmp);
        std::os::unix::fs::symlink(Path::new("envs").join(key), &link_tmp)
            .map_err(io(&link_tmp))?;
        let current = self.dir.join("current");
        std::fs::rename(&link_tmp, &current).map_err(io(&current))?;
        if let Ok(dir) = std::fs::File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        // Older environments: a command already running keeps its mount of them.
        if let Ok(entries) = std::fs::read_dir(self.dir.join("envs")) {
            for entry in entries.flatten() {
                if entry.file_name() != std::ffi::OsStr::new(key) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let path = std::fs::canonicalize(&env).map_err(io(&env))?;
        Ok(SetupOutcome::Built(ReadyEnv { path, info }))
    }
}

/// The first `python3` on the sandbox's `PATH` (the one a sandboxed command would run).
fn interpreter() -> Option<PathBuf> {
    SANDBOX_PATH
        .split(':')
        .map(|dir| Path::new(dir).join("python3"))
        .find(|p| p.is_file())
}

/// Runs one step and gives its standard output, or an error with the end of what it printed.
fn run_step(
    step: &str,
    command: &mut Command,
    fix: &'static str,
) -> Result<String, PythonEnvError> {
    let output = command
        .stdin(Stdio::null())
        .env_remove("PYTHONPATH")
        .env_remove("VIRTUAL_ENV")
        .env_remove("PIP_TARGET")
        .env_remove("PIP_PREFIX")
        .env_remove("PIP_USER")
        .output()
        .map_err(|e| PythonEnvError::Step {
            step: step.to_string(),
            status: "could not start".to_string(),
            output: e.to_string(),
            fix,
        })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let mut printed = String::from_utf8_lossy(&output.stderr).into_owned();
    printed.push_str(&String::from_utf8_lossy(&output.stdout));
    let tail: String = {
        let chars: Vec<char> = printed.trim().chars().collect();
        chars[chars.len().saturating_sub(2000)..].iter().collect()
    };
    Err(PythonEnvError::Step {
        step: step.to_string(),
        status: output.status.to_string(),
        output: tail,
        fix,
    })
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), PythonEnvError> {
    let mut file = std::fs::File::create(path).map_err(io(path))?;
    file.write_all(bytes).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// An exclusive `flock` on the setup's lock file, released when dropped (or when the process
/// dies).
struct Lock {
    _file: std::fs::File,
}

impl Lock {
    #[allow(unsafe_code)]
    fn take(path: &Path) -> Result<Lock, PythonEnvError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(io(path))?;
        // SAFETY: the descriptor is open for the call's duration; flock has no memory effects.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(io(path)(std::io::Error::last_os_error()));
        }
        Ok(Lock { _file: file })
    }
}
