//! `maestro prompt`: print the system prompt and first user message the engine would send for
//! a movement, so a piece author sees exactly what the model gets.

use std::io::Write as _;

use crate::term::printable;
use std::path::PathBuf;

use anyhow::Context as _;
use maestro_piece::{Dialect, load_str, render_diagnostics};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The piece file, or the name of a TAKT v0.60 builtin workflow.
    #[arg(value_name = "PIECE")]
    pub piece: PathBuf,
    /// The movement (or parallel sub-movement) to show.
    #[arg(long, value_name = "NAME")]
    pub movement: String,
    /// The task text, as a user would give it.
    #[arg(long, value_name = "TEXT")]
    pub task: String,
    /// Read the piece as this dialect (maestro, takt or graph) instead of detecting it.
    #[arg(long, value_name = "DIALECT")]
    pub dialect: Option<Dialect>,
    /// An extra facet root, searched as DIR/<kind>/<name>.md after the built-in places.
    #[arg(long = "facets-dir", value_name = "DIR")]
    pub facets_dirs: Vec<PathBuf>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    let opts = maestro_piece::LoadOptions {
        tools: Some(crate::common::tool_catalog(None)?),
        ..crate::common::load_options(args.dialect, &args.facets_dirs)
    };
    // Not a file: one of TAKT's builtin workflows by name, as `maestro run` finds them.
    let builtin = (!args.piece.is_file())
        .then(|| {
            maestro_piece::builtin_workflows()
                .into_iter()
                .find(|w| args.piece.as_os_str() == w.name)
        })
        .flatten();
    let (source, path) = match builtin {
        Some(w) => (w.text.to_owned(), w.path),
        None => (
            std::fs::read_to_string(&args.piece).with_context(|| {
                format!(
                    "cannot read {} (give a piece file, or the name of a TAKT builtin workflow: `maestro pieces` lists them)",
                    args.piece.display()
                )
            })?,
            args.piece.clone(),
        ),
    };
    let piece = match load_str(&source, &path, &opts) {
        Ok(loaded) => loaded.piece,
        Err(failed) => {
            eprint!(
                "{}",
                printable(&render_diagnostics(&source, &failed.errors))
            );
            return Ok(1);
        }
    };
    let prompt = maestro_app::movement_prompt(&piece, &args.movement, &args.task)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    write!(
        out,
        "===== system =====\n{}\n===== user =====\n{}",
        printable(&prompt.system),
        printable(&prompt.user)
    )?;
    Ok(0)
}
