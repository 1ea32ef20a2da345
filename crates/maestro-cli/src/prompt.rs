//! `maestro prompt`: print the system prompt and first user message the engine would send for
//! a movement, so a piece author sees exactly what the model gets.

use std::io::Write as _;

use crate::flags::{ConfigFlag, PiecesFlag, settings};
use crate::term::printable;
use std::path::PathBuf;

use maestro_app::PieceError;
use maestro_piece::{Dialect, render_diagnostics};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The piece file, or a piece name as `maestro run` takes it (a piece of the pieces
    /// directories or of TAKT's workflow directories, a stored piece, a TAKT v0.60 builtin
    /// workflow: `maestro pieces` lists them).
    #[arg(value_name = "PIECE")]
    pub piece: String,
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
    #[command(flatten)]
    pub pieces: PiecesFlag,
    #[command(flatten)]
    pub config: ConfigFlag,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    crate::common::block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<u8> {
    let config = settings(&args.config, &[&args.pieces])?;
    let opts = maestro_piece::LoadOptions {
        tools: Some(maestro_app::tool_catalog(&config)),
        ..crate::common::load_options(args.dialect, &args.facets_dirs)
    };
    // A file, or a name found as `maestro run` finds it.
    let piece = match crate::common::find_piece(&args.piece, &config, &opts).await {
        Ok(found) => found.piece,
        Err(PieceError::Invalid {
            source_text,
            diagnostics,
            ..
        }) => {
            eprint!(
                "{}",
                printable(&render_diagnostics(&source_text, &diagnostics.errors))
            );
            return Ok(1);
        }
        Err(e) => return Err(crate::common::explain_piece_error(e)),
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
