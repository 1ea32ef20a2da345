//! Maestro's configuration file: found, merged, checked and typed, so that `maestro run` and
//! `maestro serve` read one [`Config`].
//!
//! Sources, later ones winning field by field:
//! 1. the built-in defaults;
//! 2. the user file `~/.maestro/config.yaml`;
//! 3. the project file `.maestro/config.yaml`, found by walking up from the current directory
//!    (a file given with `--config` replaces both files);
//! 4. the environment: `MAESTRO_LLM_BASE_URL`, `MAESTRO_MODEL`, `MAESTRO_API_KEY`;
//! 5. command-line flags, which the caller applies to the returned [`Config`].
//!
//! Every mistake in a file is reported with the file, line, column and field, and what would be
//! valid. Secrets are [`Secret`](maestro_protocol::Secret)s: `Debug` and
//! [`Config::redacted_yaml`] show them as `***`.
//!
//! ```no_run
//! use maestro_config::{Config, LoadFrom};
//!
//! let (config, _files) = Config::load(LoadFrom::current(None)?)?;
//! let engine = config.engine_config()?; // fails when no model is configured
//! let client = config.llm.to_openai_config();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The fields and their defaults are documented in `docs/configuration.md`.

mod auth;
mod budget;
mod config;
mod display;
mod engine;
mod error;
mod knowledge;
mod llm;
mod load;
mod overlay;
mod parse;

pub use auth::{AuthConfig, OidcConfig};
pub use budget::{BudgetSettings, PieceSettings};
pub use config::{
    Config, FilesConfig, PathsConfig, SshConfig, StoreConfig, SubtasksConfig, WorkerProfile,
};
pub use display::REDACTED;
pub use engine::EngineSettings;
pub use error::{ConfigError, Origin, Problem};
pub use knowledge::KnowledgeConfig;
pub use llm::{
    DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_BASE_URL, LlmConfig, ModelOverrides, ModelPrice,
    RetrySettings,
};
pub use load::{CONFIG_DIR, CONFIG_FILE, ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, LoadFrom};
pub use maestro_gateway::{GatewayConfig, RouteTarget, UpstreamConfig, UpstreamKind};
pub use maestro_llm::ProviderKind;
