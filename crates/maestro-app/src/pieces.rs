//! Finding the piece a task runs through: a file, a name in the pieces directories, or the
//! classifier's choice among them.

use std::path::{Path, PathBuf};

use maestro_engine::{Classified, ClassifyError, PieceSummary, classify_within};
use maestro_llm::Provider;
use maestro_piece::{Failed, LoadOptions, Piece, discover, load_file, load_str};

/// The piece name that asks the classifier to choose.
pub const AUTO: &str = "auto";

/// Why no piece could be had.
#[derive(Debug, thiserror::Error)]
pub enum PieceError {
    /// The file exists but is not a valid piece. `diagnostics` holds every error; render them
    /// with [`maestro_piece::render_diagnostics`] over `source`.
    #[error("{} is not a valid piece", path.display())]
    Invalid {
        /// The piece file.
        path: PathBuf,
        /// The file's text (empty when it could not be read).
        source_text: String,
        /// Every error the validator found, with its position.
        diagnostics: Box<Failed>,
    },
    /// Neither a file nor a piece name found in the pieces directories.
    #[error(
        "no piece file or piece named `{given}` (searched {}, and TAKT v0.60's builtin workflows); known pieces: {}",
        searched.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        if known.is_empty() { "none".to_string() } else { known.join(", ") }
    )]
    NotFound {
        /// The piece as given: a path or a name.
        given: String,
        /// The pieces directories searched.
        searched: Vec<PathBuf>,
        /// The names of the pieces that loaded there.
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
    /// The pieces kept in the store could not be read (the store is down or unusable).
    #[error("cannot read the pieces kept in the store")]
    Store(#[source] maestro_store::StoreError),
}

/// A piece file in a pieces directory that does not load; lookups skip it.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// How many errors the file has.
    pub errors: usize,
}

/// The pieces of some directories: those that load, and the files skipped.
#[derive(Debug, Clone, Default)]
pub struct Available {
    /// The pieces that load, each with its file.
    pub pieces: Vec<(PathBuf, Piece)>,
    /// The files that do not load.
    pub skipped: Vec<Skipped>,
    /// The pieces among them that come from the store, with their versions.
    pub versions: std::collections::BTreeMap<String, i64>,
}

/// A piece that was found, with the broken files passed over on the way.
#[derive(Debug, Clone)]
pub struct Found {
    /// The piece.
    pub piece: Piece,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// The broken files passed over while looking for it.
    pub skipped: Vec<Skipped>,
    /// Its version in the store; `None` for a piece file.
    pub version: Option<i64>,
}

/// A piece the classifier chose.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// The piece.
    pub piece: Piece,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// The classifier's answer: the piece's name and why it fits the task.
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
    for path in searched_dirs(dirs, opts)
        .iter()
        .filter(|d| d.exists())
        .flat_map(|d| discover(d))
    {
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

/// `dirs`, then TAKT's workflow directories (`.takt/workflows/`, `~/.takt/workflows/`) that
/// exist and are not already among them.
fn searched_dirs(dirs: &[PathBuf], opts: &LoadOptions) -> Vec<PathBuf> {
    let mut all = dirs.to_vec();
    for dir in opts.takt_workflow_dirs() {
        if dir.is_dir() && !all.contains(&dir) {
            all.push(dir);
        }
    }
    all
}

/// A piece as a job keeps it: a name as given, and a piece file as an absolute path, so that a
/// worker, a resume or a replay started in another directory finds the same file.
pub(crate) fn piece_as_kept(given: String) -> String {
    let path = Path::new(&given);
    if path.is_relative()
        && path.is_file()
        && let Ok(absolute) = std::path::absolute(path)
    {
        return absolute.display().to_string();
    }
    given
}

/// The piece `given` names: a file path, or the `name` (or file stem) of a piece in `dirs`
/// or in TAKT's workflow directories, else one of TAKT v0.60's builtin workflows Maestro
/// ships (those TAKT lists: not the internal ones, which are only called).
pub fn find_piece(given: &str, dirs: &[PathBuf], opts: &LoadOptions) -> Result<Found, PieceError> {
    let path = Path::new(given);
    if path.is_file() {
        return load_piece(path, opts).map(|piece| Found {
            piece,
            path: path.to_path_buf(),
            skipped: Vec::new(),
            version: None,
        });
    }
    let Available {
        pieces, skipped, ..
    } = available_pieces(dirs, opts);
    if let Some((path, piece)) = pieces
        .iter()
        .find(|(p, piece)| piece.name == given || p.file_stem().is_some_and(|s| s == given))
    {
        return Ok(Found {
            piece: piece.clone(),
            path: path.clone(),
            skipped,
            version: None,
        });
    }
    // A file of that name that does not load is the piece meant: its errors are the answer,
    // not "no piece named …" (nor a builtin of the same name in its place).
    if let Some(broken) = skipped
        .iter()
        .find(|s| s.path.file_stem().is_some_and(|stem| stem == given))
    {
        let path = broken.path.clone();
        return load_piece(&path, opts).map(|piece| Found {
            piece,
            path,
            skipped: Vec::new(),
            version: None,
        });
    }
    // Last, TAKT v0.60's builtin workflows shipped inside Maestro, as TAKT finds its own.
    if let Some(builtin) = maestro_piece::builtin_workflows()
        .into_iter()
        .find(|w| w.name == given)
    {
        return match load_str(builtin.text, &builtin.path, opts) {
            Ok(loaded) => Ok(Found {
                piece: loaded.piece,
                path: builtin.path,
                skipped,
                version: None,
            }),
            Err(failed) => Err(PieceError::Invalid {
                path: builtin.path,
                source_text: builtin.text.to_owned(),
                diagnostics: Box::new(failed),
            }),
        };
    }
    Err(PieceError::NotFound {
        given: given.to_string(),
        searched: searched_dirs(dirs, opts),
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
    classify_piece_within(provider, model, task, available, None).await
}

/// [`classify_piece`] with its call reserved from the job's budget (`guard`) first.
pub(crate) async fn classify_piece_within(
    provider: &dyn Provider,
    model: &str,
    task: &str,
    available: Available,
    guard: Option<&dyn maestro_engine::SpendGuard>,
) -> Result<Chosen, PieceError> {
    let pieces = available.pieces;
    let summaries: Vec<PieceSummary> = pieces.iter().map(|(_, p)| PieceSummary::from(p)).collect();
    let choice = classify_within(provider, model, task, &summaries, guard).await?;
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

/// How long a worker keeps a piece it found by name before it looks again.
const PIECE_CACHE_FOR: std::time::Duration = std::time::Duration::from_secs(2);

/// Pieces found by name, kept for the runs a worker starts one after another: finding a piece
/// by name loads every piece in the pieces directories. An entry is used again while its file
/// is unchanged (same modification time and length) and for at most two seconds, so an edit
/// of the piece file reaches the next job claimed, and a new piece file or an edited facet
/// file within two seconds. Failures are never kept: a piece that is fixed is found at once.
#[derive(Debug, Default)]
pub(crate) struct PieceCache {
    found: std::sync::Mutex<std::collections::HashMap<String, Kept>>,
}

/// A piece the cache found, shared by the runs that use it.
#[derive(Debug, Clone)]
pub(crate) struct CachedPiece {
    pub piece: std::sync::Arc<Piece>,
    /// The file it was loaded from.
    pub path: PathBuf,
}

#[derive(Debug)]
struct Kept {
    found: CachedPiece,
    at: std::time::Instant,
    stamp: Option<(std::time::SystemTime, u64)>,
}

/// The modification time and length of `path`, to tell an edited file.
fn stamp(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

impl PieceCache {
    /// [`find_piece`], through the cache. `dirs` and `opts` must be the same on every call
    /// (they come from the worker's configuration).
    pub(crate) fn find(
        &self,
        given: &str,
        dirs: &[PathBuf],
        opts: &LoadOptions,
    ) -> Result<CachedPiece, PieceError> {
        if let Ok(found) = self.found.lock()
            && let Some(kept) = found.get(given)
            && kept.at.elapsed() < PIECE_CACHE_FOR
            && kept.stamp.is_some()
            && stamp(&kept.found.path) == kept.stamp
        {
            return Ok(kept.found.clone());
        }
        let Found { piece, path, .. } = find_piece(given, dirs, opts)?;
        let found = CachedPiece {
            piece: std::sync::Arc::new(piece),
            path,
        };
        if let Ok(mut cache) = self.found.lock() {
            cache.insert(
                given.to_string(),
                Kept {
                    stamp: stamp(&found.path),
                    found: found.clone(),
                    at: std::time::Instant::now(),
                },
            );
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const PIECE: &str = "\
name: one
description: DESCRIPTION
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: false
    persona: ./persona.md
    instruction: \"{task}\"
    rules:
      - condition: done
        next: COMPLETE
";

    fn persona(found: &CachedPiece) -> String {
        found.piece.movements[0]
            .persona
            .as_ref()
            .map(|facet| facet.text.trim().to_string())
            .unwrap_or_default()
    }

    /// A TAKT workflow in the project's `.takt/workflows/` or the user's `~/.takt/workflows/`
    /// is found by name, after the pieces directories.
    #[test]
    fn takt_workflow_directories_are_searched_by_name() {
        let project = tempfile::tempdir().unwrap();
        let user = tempfile::tempdir().unwrap();
        let workflow = |name: &str| {
            format!(
                "name: {name}\nmax_steps: 3\nsteps:\n  - name: work\n    persona: coder\n    instruction: Do it.\n    rules:\n      - condition: done\n        next: COMPLETE\n"
            )
        };
        let in_project = project.path().join(".takt/workflows");
        let in_user = user.path().join("workflows");
        std::fs::create_dir_all(&in_project).unwrap();
        std::fs::create_dir_all(&in_user).unwrap();
        std::fs::write(in_project.join("ship.yaml"), workflow("ship")).unwrap();
        std::fs::write(in_user.join("mine.yaml"), workflow("mine")).unwrap();
        let opts = LoadOptions {
            project_dir: Some(project.path().to_owned()),
            takt_user_dir: Some(user.path().to_owned()),
            ..LoadOptions::default()
        };
        let pieces_dir = project.path().join("pieces");
        let found = find_piece("ship", std::slice::from_ref(&pieces_dir), &opts).unwrap();
        assert_eq!(found.path, in_project.join("ship.yaml"));
        assert_eq!(found.piece.dialect, maestro_piece::Dialect::Takt);
        let found = find_piece("mine", std::slice::from_ref(&pieces_dir), &opts).unwrap();
        assert_eq!(found.path, in_user.join("mine.yaml"));
        match find_piece("other", std::slice::from_ref(&pieces_dir), &opts) {
            Err(PieceError::NotFound { searched, .. }) => {
                assert_eq!(searched, vec![pieces_dir, in_project, in_user]);
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
    }

    /// TAKT's builtin workflows run by name, after every directory; an internal one (only
    /// called) does not, and a project workflow of the same name wins.
    #[test]
    fn a_builtin_workflow_is_found_by_name_last() {
        let project = tempfile::tempdir().unwrap();
        let opts = LoadOptions {
            project_dir: Some(project.path().to_owned()),
            takt_user_dir: Some(project.path().join("no-user")),
            ..LoadOptions::default()
        };
        let dirs = [project.path().join("pieces")];
        let found = find_piece("default-mini", &dirs, &opts).unwrap();
        assert_eq!(
            found.path,
            std::path::PathBuf::from("builtin:takt-v0.60/en/workflows/default-mini.yaml")
        );
        assert_eq!(found.piece.name, "default-mini");
        match find_piece("development-core", &dirs, &opts) {
            Err(PieceError::NotFound { .. }) => {}
            other => panic!("an internal workflow ran by name: {other:?}"),
        }
        let mine = project.path().join(".takt/workflows");
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::write(
            mine.join("default-mini.yaml"),
            "name: default-mini\nmax_steps: 3\ninitial_step: work\nsteps:\n  - name: work\n    persona: coder\n    instruction: Do it.\n    rules:\n      - condition: done\n        next: COMPLETE\n",
        )
        .unwrap();
        let found = find_piece("default-mini", &dirs, &opts).unwrap();
        assert_eq!(found.path, mine.join("default-mini.yaml"));
    }

    #[test]
    fn a_piece_is_kept_until_its_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("one.yaml");
        std::fs::write(&file, PIECE.replace("DESCRIPTION", "first")).unwrap();
        std::fs::write(dir.path().join("persona.md"), "You work.").unwrap();
        let dirs = vec![dir.path().to_path_buf()];
        let opts = LoadOptions::default();
        let cache = PieceCache::default();

        let found = cache.find("one", &dirs, &opts).unwrap();
        assert_eq!(
            (found.piece.description.as_str(), persona(&found).as_str()),
            ("first", "You work.")
        );
        // Kept: a facet file edited just now is read at the next look, not at once.
        std::fs::write(dir.path().join("persona.md"), "You rest.").unwrap();
        let kept = cache.find("one", &dirs, &opts).unwrap();
        assert_eq!(persona(&kept), "You work.");
        // The piece file edited: found anew, with the facet as it is now.
        std::fs::write(&file, PIECE.replace("DESCRIPTION", "second one")).unwrap();
        let edited = cache.find("one", &dirs, &opts).unwrap();
        assert_eq!(
            (edited.piece.description.as_str(), persona(&edited).as_str()),
            ("second one", "You rest.")
        );
    }

    #[test]
    fn a_failure_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = vec![dir.path().to_path_buf()];
        let opts = LoadOptions::default();
        let cache = PieceCache::default();
        assert!(matches!(
            cache.find("one", &dirs, &opts),
            Err(PieceError::NotFound { .. })
        ));
        std::fs::write(
            dir.path().join("one.yaml"),
            PIECE.replace("DESCRIPTION", "new"),
        )
        .unwrap();
        std::fs::write(dir.path().join("persona.md"), "You work.").unwrap();
        assert_eq!(
            cache.find("one", &dirs, &opts).unwrap().piece.description,
            "new"
        );
    }
}
