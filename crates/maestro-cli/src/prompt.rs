//! `maestro prompt`: print the system prompt and first user message the engine would send for
//! a movement, so a piece author sees exactly what the model gets; for a movement that makes no
//! model call itself (a `workflow_call` step, a parallel parent, a system step), say so and
//! list the steps it runs.

use std::io::Write as _;

use crate::flags::{ConfigFlag, PiecesFlag, settings};
use crate::term::printable;
use std::path::PathBuf;

use maestro_app::{MovementView, PieceError, Runs};
use maestro_piece::{Dialect, render_diagnostics};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The piece file, or a piece name as `maestro run` takes it (a piece of the pieces
    /// directories or of TAKT's workflow directories, a stored piece, a TAKT v0.60 builtin
    /// workflow: `maestro pieces` lists them).
    #[arg(value_name = "PIECE")]
    pub piece: String,
    /// The movement to show: a movement, a parallel sub-movement, or a step of a workflow a
    /// `workflow_call` step calls, as CALLER/STEP (`develop/plan`).
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
    let view = maestro_app::movement_view(&piece, &args.movement, &args.task)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match view {
        MovementView::Prompt(prompt) => write!(
            out,
            "===== system =====\n{}\n===== user =====\n{}",
            printable(&prompt.system),
            printable(&prompt.user)
        )?,
        MovementView::NoModelCall { movement, runs } => {
            write!(
                out,
                "{}",
                printable(&no_model_call(&args, &movement, &runs))
            )?;
        }
    }
    Ok(0)
}

/// What `maestro prompt` says of a movement that makes no model call itself: what it does
/// instead, and the steps it runs with the command that shows each one's prompt.
fn no_model_call(args: &Args, movement: &str, runs: &Runs) -> String {
    let (what, steps) = match runs {
        Runs::Workflow {
            name,
            initial,
            steps,
        } => (
            format!(
                "it calls the workflow `{name}`, which runs in its place, starting at \
                 `{initial}`."
            ),
            steps.as_slice(),
        ),
        Runs::Parallel { steps } => (
            "its sub-steps run at the same time, and its rules read their results.".to_string(),
            steps.as_slice(),
        ),
        Runs::System => (
            "the engine reads its inputs and runs its effects, and its rules route on the \
             results."
                .to_string(),
            &[][..],
        ),
    };
    let mut text = format!("`{movement}` makes no model call itself: {what}\n");
    if !steps.is_empty() {
        text.push_str("\nThe steps it runs, each with the command that shows its prompt:\n");
        for step in steps {
            text.push_str(&format!(
                "  {step}\n    maestro prompt {} --movement {} --task {}\n",
                shell_word(&args.piece),
                shell_word(step),
                shell_word(&args.task)
            ));
        }
    }
    text
}

/// `word` as a shell reads it back: as it is when it holds nothing the shell treats
/// specially, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
