//! Finding the piece a task runs through: a file, a name in the pieces directories, or the
//! classifier's choice among them.

use std::path::{Path, PathBuf};

use maestro_engine::{Classified, ClassifyError, PieceSummary, classify};
use maestro_llm::Provider;
use maestro_piece::{Failed, LoadOptions, Piece, discover, load_file};

/// The piece name that asks the classifier to choose.
pub const AUTO: &str = "auto";

/// Why no piece could be had.
#[derive(Debug, thiserror::Error)]
pub enum PieceError {
    /// The file exists but is not a valid piece. `diagnostics` holds every error; render them
    /// with [`maestro_piece::render_diagnostics`] over `source`.
    #[error("{} is not a valid piece", path.display())]
    Invalid {
        path: PathBuf,
        /// The file's text (empty when it could not be read).
        source_text: String,
        diagnostics: Box<Failed>,
    },
    /// Neither a file nor a piece name found in the pieces directories.
    #[error(
        "no piece file or piece named `{given}` (searched {}); known pieces: {}",
        searched.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        if known.is_empty() { "none".to_string() } else { known.join(", ") }
    )]
    NotFound {
        given: String,
        searched: Vec<PathBuf>,
        known: Vec<String>,
        /// The broken files passed over while searching.
        skipped: Vec<Skipped>,
    },
    /// The classifier could not choose.
    #[error(transparent)]
    Classify(#[from] ClassifyError),
    /// The classifier named a piece that is not among those that loaded.
    #[error("the classifier chose `{0}`, which did not load")]
    ChosenMissing(String),
}

/// A piece file in a pieces directory that does not load; lookups skip it.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub path: PathBuf,
    /// How many errors the file has.
    pub errors: usize,
}

/// The pieces of some directories: those that load, and the files skipped.
#[derive(Debug, Clone, Default)]
pub struct Available {
    pub pieces: Vec<(PathBuf, Piece)>,
    pub skipped: Vec<Skipped>,
}

/// A piece that was found, with the broken files passed over on the way.
#[derive(Debug, Clone)]
pub struct Found {
    pub piece: Piece,
    /// The file it was loaded from.
    pub path: PathBuf,
    pub skipped: Vec<Skipped>,
}

/// A piece the classifier chose.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub piece: Piece,
    /// The file it was loaded from.
    pub path: PathBuf,
    pub choice: Classified,
}

/// Loads one piece file.
pub fn load_piece(path: &Path, opts: &LoadOptions) -> Result<Piece, PieceError> {
    load_file(path, opts)
        .map(|loaded| loaded.piece)
        .map_err(|failed| PieceError::Invalid {
            path: path.to_path_buf(),
            source_text: std::fs::read_to_string(path).unwrap_or_default(),
            diagnostics: Box::new(failed),
        })
}

/// Every piece that loads from `dirs` (missing directories are passed over).
pub fn available_pieces(dirs: &[PathBuf], opts: &LoadOptions) -> Available {
    let mut available = Available::default();
    for path in dirs.iter().filter(|d| d.exists()).flat_map(|d| discover(d)) {
        match load_file(&path, opts) {
            Ok(loaded) => available.pieces.push((path, loaded.piece)),
            Err(failed) => available.skipped.push(Skipped {
                path,
                errors: failed.errors.len(),
            }),
        }
    }
    available
}

/// The piece `given` names: a file path, or the `name` (or file stem) of a piece in `dirs`.
pub fn find_piece(given: &str, dirs: &[PathBuf], opts: &LoadOptions) -> Result<Found, PieceError> {
    let path = Path::new(given);
    if path.is_file() {
        return load_piece(path, opts).map(|piece| Found {
            piece,
            path: path.to_path_buf(),
            skipped: Vec::new(),
        });
    }
    let Available { pieces, skipped } = available_pieces(dirs, opts);
    if let Some((path, piece)) = pieces
        .iter()
        .find(|(p, piece)| piece.name == given || p.file_stem().is_some_and(|s| s == given))
    {
        return Ok(Found {
            piece: piece.clone(),
            path: path.clone(),
            skipped,
        });
    }
    Err(PieceError::NotFound {
        given: given.to_string(),
        searched: dirs.to_vec(),
        known: pieces.into_iter().map(|(_, p)| p.name).collect(),
        skipped,
    })
}

/// Asks the classifier which of the `available` pieces ([`available_pieces`]) fits `task`.
pub async fn classify_piece(
    provider: &dyn Provider,
    model: &str,
    task: &str,
    available: Available,
) -> Result<Chosen, PieceError> {
    let pieces = available.pieces;
    let summaries: Vec<PieceSummary> = pieces.iter().map(|(_, p)| PieceSummary::from(p)).collect();
    let choice = classify(provider, model, task, &summaries).await?;
    let (path, piece) = pieces
        .into_iter()
        .find(|(_, p)| p.name == choice.piece)
        .ok_or_else(|| PieceError::ChosenMissing(choice.piece.clone()))?;
    Ok(Chosen {
        piece,
        path,
        choice,
    })
}
