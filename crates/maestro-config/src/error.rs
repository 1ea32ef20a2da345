//! What can go wrong while loading the configuration, phrased for the person who edits it: the
//! file, line and column, the field, what is wrong and how to fix it.

use std::fmt;
use std::path::PathBuf;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A configuration file was found but could not be read (permissions, a directory in its
    /// place, not UTF-8).
    #[error("cannot read the configuration file {}: {source}", path.display())]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
    /// A value is missing, misspelt, of the wrong type or out of range.
    #[error("{0}")]
    Invalid(Box<Problem>),
    /// A run needs a model name and none was given anywhere.
    #[error("no model: set llm.model, MAESTRO_MODEL or --model")]
    NoModel,
}

impl ConfigError {
    /// The problem behind an [`ConfigError::Invalid`], for callers that show it their own way.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ConfigError::Invalid(problem) => Some(problem),
            ConfigError::Read { .. } | ConfigError::NoModel => None,
        }
    }
}

/// One invalid value: where it came from, which field, what is wrong, what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where the value was written: a file position, an environment variable, or the merged
    /// files.
    pub origin: Origin,
    /// The dotted path of the field, e.g. `llm.retry.max_attempts` (`(top level)` for the
    /// document itself).
    pub field: String,
    /// What is wrong with the value.
    pub message: String,
    /// What would make it valid.
    pub fix: String,
}

/// Where an invalid value was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A configuration file; line and column are 1-based and known for nearly every problem.
    File {
        /// The configuration file.
        path: PathBuf,
        /// The 1-based line of the value, when known.
        line: Option<u64>,
        /// The 1-based column of the value, when known.
        column: Option<u64>,
    },
    /// An environment variable (`MAESTRO_LLM_BASE_URL`, or the one `llm.api_key_env` names).
    Env {
        /// The variable's name.
        var: String,
    },
    /// The configuration overlay kept in the job store (written through the API), laid over the
    /// files.
    Overlay,
    /// The files taken together (each was valid alone), or the built-in defaults when the list
    /// is empty.
    Merged {
        /// The files, in the order they were merged; empty for the built-in defaults.
        paths: Vec<PathBuf>,
    },
}

impl Problem {
    pub(crate) fn into_error(self) -> ConfigError {
        ConfigError::Invalid(Box::new(self))
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File {
                path,
                line: Some(line),
                column: Some(column),
            } => {
                write!(f, "{}:{line}:{column}", path.display())
            }
            Origin::File {
                path,
                line: Some(line),
                column: None,
            } => {
                write!(f, "{}:{line}", path.display())
            }
            Origin::File { path, .. } => write!(f, "{}", path.display()),
            Origin::Env { var } => write!(f, "environment variable {var}"),
            Origin::Overlay => f.write_str("the configuration overlay in the store"),
            Origin::Merged { paths } if paths.is_empty() => {
                f.write_str("the default configuration")
            }
            Origin::Merged { paths } => {
                let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                write!(f, "the configuration merged from {}", names.join(" and "))
            }
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: `{}`: {}\n  fix: {}",
            self.origin, self.field, self.message, self.fix
        )
    }
}
