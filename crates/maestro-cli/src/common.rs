//! Helpers every command uses: the runtime of one command, who acts, how an id is printed, and
//! how a piece error is shown. No command module holds a helper another imports.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use maestro_app::{Found, PieceError, PoolSize, Skipped, StoreError};
use maestro_config::Config;
use maestro_piece::{Dialect, LoadOptions, render_diagnostics};

/// Runs one command on a current-thread runtime: a command waits on the model or the store
/// almost all the time, and each worker thread would add its own stack and malloc arena to the
/// footprint (docs/benchmarks.md). Once the command is done, the stores it dropped close (so
/// SQLite removes its -wal and -shm files), and a tool thread still stuck in a system call does
/// not hold the process.
pub(crate) fn block_on<F: std::future::Future<Output = anyhow::Result<u8>>>(
    f: F,
) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let out = runtime.block_on(async {
        let out = f.await;
        maestro_app::Store::wait_dropped_closed().await;
        out
    });
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    out
}

/// Who is acting, for the audit log.
pub(crate) fn actor() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "cli".to_string())
}

/// Prints a new id, bare or as `{"id": …}`.
pub(crate) fn print_id(id: &impl std::fmt::Display, json: bool) {
    if json {
        println!("{}", serde_json::json!({"id": id.to_string()}));
    } else {
        println!("{id}");
    }
}

/// The load options every piece command uses: the flags, plus the project's (current
/// directory) and the user's (`~/.maestro`) facet directories.
pub(crate) fn load_options(dialect: Option<Dialect>, facets_dirs: &[PathBuf]) -> LoadOptions {
    LoadOptions {
        dialect,
        ..LoadOptions::standard(std::env::current_dir().ok(), facets_dirs.to_vec())
    }
}

/// The tools `allowed_tools` may name, and which this configuration sets up (`config`, else
/// `~/.maestro/config.yaml` and `.maestro/config.yaml`): `validate`, `prompt` and `pieces`
/// judge a piece by the same catalogue. A configuration that does not load is an error (exit
/// 2), as in every other command.
pub(crate) fn tool_catalog(config: Option<PathBuf>) -> anyhow::Result<maestro_piece::ToolCatalog> {
    let (config, _files) = maestro_config::Config::load(maestro_config::LoadFrom::current(config)?)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(maestro_app::tool_catalog(&config))
}

/// The piece `given` names, found as `maestro run` finds it ([`maestro_app::find_piece_in`]):
/// a piece file; else the store's live piece of that name, when the store exists (nothing is
/// created); else a piece of the pieces directories (`paths.pieces_dirs`, `--pieces-dir`) or of
/// TAKT's workflow directories; else one of TAKT v0.60's builtin workflows.
pub(crate) async fn find_piece(
    given: &str,
    config: &Config,
    opts: &LoadOptions,
) -> Result<Found, PieceError> {
    let dirs = &config.paths.pieces_dirs;
    if !Path::new(given).is_file() && maestro_app::valid_piece_name(given) {
        match maestro_app::open_store_existing(None, config, PoolSize::Single).await {
            Ok(store) => return maestro_app::find_piece_in(&store, given, dirs, opts).await,
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(PieceError::Store(e)),
        }
    }
    maestro_app::find_piece(given, dirs, opts)
}

/// Prints the notes about piece files that were passed over because they do not load.
pub(crate) fn note_skipped(skipped: &[Skipped]) {
    for skip in skipped {
        let path = skip.path.display().to_string();
        eprintln!(
            "note: skipping {}: it does not load ({} error{}; `maestro validate {}` shows them)",
            crate::term::printable(&path),
            skip.errors,
            if skip.errors == 1 { "" } else { "s" },
            crate::term::printable(&path),
        );
    }
}

/// Prints what a piece error carries besides its message (diagnostics, skipped files).
pub(crate) fn explain_piece_error(e: PieceError) -> anyhow::Error {
    match &e {
        PieceError::Invalid {
            source_text,
            diagnostics,
            ..
        } => eprint!("{}", render_diagnostics(source_text, &diagnostics.errors)),
        PieceError::NotFound { skipped, .. } => note_skipped(skipped),
        PieceError::Classify(_) | PieceError::ChosenMissing(_) | PieceError::Store(_) => {}
    }
    e.into()
}
