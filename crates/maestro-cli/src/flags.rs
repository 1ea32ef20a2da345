//! The flags several commands share, each declared once here and applied to the configuration
//! in one place ([`settings`]): `--config`, `--db`, `--pieces-dir`, `--runs-dir`,
//! `--llm-base-url` and `--model`. A command flattens the groups it takes.

use std::path::PathBuf;

use maestro_app::{PoolSize, Store};
use maestro_config::{Config, LoadFrom};

/// `--config FILE`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ConfigFlag {
    /// Use this configuration file instead of `~/.maestro/config.yaml` and
    /// `.maestro/config.yaml`.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// `--db URL`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct StoreFlag {
    /// The job store: `sqlite://PATH` or `postgres://…` (also `MAESTRO_DB`, `store.url`;
    /// default `sqlite://.maestro/maestro.db` in the project).
    #[arg(long)]
    pub db: Option<String>,
}

/// `--pieces-dir DIR…`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct PiecesFlag {
    /// Directories searched for pieces by name and by the classifier (default:
    /// `paths.pieces_dirs`, `.maestro/pieces` and `pieces`).
    #[arg(long)]
    pub pieces_dir: Vec<PathBuf>,
}

/// `--runs-dir DIR`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct RunsFlag {
    /// Where run records go (default: `paths.runs_dir`, `.maestro/runs`).
    #[arg(long)]
    pub runs_dir: Option<PathBuf>,
}

/// `--llm-base-url URL` and `--model NAME`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ModelFlags {
    /// The OpenAI-compatible API root, e.g. http://127.0.0.1:8088/v1 (also
    /// `MAESTRO_LLM_BASE_URL`, `llm.base_url`).
    #[arg(long)]
    pub llm_base_url: Option<String>,
    /// The model name to request. Without it: the piece's `model`, then `MAESTRO_MODEL`, then
    /// `llm.model`, then the endpoint's only model.
    #[arg(long)]
    pub model: Option<String>,
}

/// A flag group that changes the configuration.
pub(crate) trait Override {
    /// Puts the flags given over the configuration's values.
    fn apply(&self, config: &mut Config);
}

impl Override for PiecesFlag {
    fn apply(&self, config: &mut Config) {
        if !self.pieces_dir.is_empty() {
            config.paths.pieces_dirs = self.pieces_dir.clone();
        }
    }
}

impl Override for RunsFlag {
    fn apply(&self, config: &mut Config) {
        if let Some(dir) = &self.runs_dir {
            config.paths.runs_dir = dir.clone();
        }
    }
}

impl Override for ModelFlags {
    fn apply(&self, config: &mut Config) {
        if let Some(url) = &self.llm_base_url {
            config.llm.base_url = url.clone();
        }
        if let Some(model) = &self.model {
            config.llm.model = Some(model.clone());
        }
    }
}

/// The configuration files and the environment, with the command's flags on top.
pub(crate) fn settings(config: &ConfigFlag, flags: &[&dyn Override]) -> anyhow::Result<Config> {
    let (mut loaded, _files) = Config::load(LoadFrom::current(config.config.clone())?)
        .map_err(|e| anyhow::anyhow!(maestro_app::error_chain(&e)))?;
    for flag in flags {
        flag.apply(&mut loaded);
    }
    Ok(loaded)
}

impl StoreFlag {
    /// Opens (and migrates) the store this flag, `MAESTRO_DB`, `store.url` or the default
    /// names; its errors name the store's URL.
    pub(crate) async fn open(&self, config: &Config, size: PoolSize) -> anyhow::Result<Store> {
        Ok(maestro_app::open_store(self.db.as_deref(), config, size).await?)
    }
}

/// `--db` and `--config`: where the store and the configuration come from.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StoreArgs {
    #[command(flatten)]
    pub store: StoreFlag,
    #[command(flatten)]
    pub config: ConfigFlag,
}

impl StoreArgs {
    /// The configuration, with no flag on top.
    pub(crate) fn configuration(&self) -> anyhow::Result<Config> {
        settings(&self.config, &[])
    }

    /// The store, with a pool shared by the command's queries.
    pub(crate) async fn open(&self, config: &Config) -> anyhow::Result<Store> {
        self.store.open(config, PoolSize::Shared).await
    }

    /// For commands that only read: the store must exist, and may be read-only.
    pub(crate) async fn open_existing(&self, config: &Config) -> anyhow::Result<Store> {
        Ok(
            maestro_app::open_store_existing(self.store.db.as_deref(), config, PoolSize::Shared)
                .await?,
        )
    }
}
