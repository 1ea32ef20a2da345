//! `maestro config show`: the configuration in effect, every secret shown as `***`: the files
//! and the environment, with the store's configuration overlay laid over them when a store is
//! reachable (docs/configuration.md, "Changing the configuration at runtime").

use std::io::Write as _;

use anyhow::anyhow;
use maestro_app::{config_json, effective_config};

use crate::common::block_on;
use crate::flags::StoreArgs;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Print the configuration in effect (YAML; JSON with --json), secrets as `***`: the files
    /// and the environment, with the store's overlay when a store is reachable.
    Show {
        /// Print JSON instead of YAML.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
}

pub(crate) fn run(command: Command) -> anyhow::Result<u8> {
    let Command::Show { json, store } = command;
    block_on(async move {
        let base = store.configuration()?;
        let explicit = store.store.db.is_some();
        let opened = maestro_app::open_store_existing(
            store.store.db.as_deref(),
            &base,
            maestro_app::PoolSize::Single,
        )
        .await;
        let effective = match opened {
            Ok(opened) => effective_config(&opened, &base)
                .await
                .map_err(|e| anyhow!(maestro_app::error_chain(&e))),
            Err(e) => Err(anyhow!(maestro_app::error_chain(&e))),
        };
        let (config, source) = match effective {
            Ok((config, tag)) => {
                let source = match tag.version() {
                    Some(0) | None => "the configuration files (the store holds no overlay)".into(),
                    Some(version) => format!(
                        "the configuration files with the store's overlay version {version} \
                         (ETag {tag})"
                    ),
                };
                (config, source)
            }
            // A store named with --db must be read; without it, the files alone serve, as they
            // do for every command that runs without a store.
            Err(e) if explicit => return Err(e),
            Err(e) => (base, format!("the configuration files alone ({e})")),
        };
        eprintln!("# {source}");
        let mut out = std::io::stdout().lock();
        if json {
            writeln!(out, "{:#}", config_json(&config))?;
        } else {
            write!(out, "{}", config.redacted_yaml())?;
        }
        Ok(0)
    })
}
