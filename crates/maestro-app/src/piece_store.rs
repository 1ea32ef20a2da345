//! Pieces kept in the store, so that every node sharing it runs the same ones: validated and
//! written as new versions, read back by name, listed beside the pieces directories' own, and
//! found by runs (a job records the version it started with).
//!
//! Precedence: a piece file given by path is that file; a name is looked up in the store first
//! and in the pieces directories (`paths.pieces_dirs`) after it, so a piece written to the store
//! (through the API or the `CreatePiece` / `UpdatePiece` tools) overrides a piece file of the
//! same name on every node. Deleting the stored piece makes the file's piece visible again; a
//! piece that only a directory holds cannot be deleted through the store
//! ([`PieceWriteError::ReadOnly`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use maestro_config::Config;
use maestro_piece::{Diagnostic, LoadOptions, Piece, load_str};
use maestro_store::{Store, StoreError, StoredPieceVersion};
use time::OffsetDateTime;

use crate::pieces::{AUTO, Available, Found, PieceError, available_pieces, find_piece};
use crate::toolbox::load_options;

/// One error in a piece's text, as `maestro validate --json` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PieceDiagnostic {
    /// The field path, e.g. `movements[1].rules[0].next`; empty for the document itself.
    pub path: String,
    /// The 1-based line; `None` when the error has no position.
    pub line: Option<u32>,
    /// The 1-based column; `None` when the error has no position.
    pub column: Option<u32>,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl PieceDiagnostic {
    /// The diagnostic of the one validator, without its file and span.
    pub fn from_diagnostic(d: &Diagnostic) -> PieceDiagnostic {
        let position = |n: usize| (n > 0).then(|| u32::try_from(n).unwrap_or(u32::MAX));
        PieceDiagnostic {
            path: d.path.clone(),
            line: position(d.line),
            column: position(d.column),
            message: d.message.clone(),
        }
    }

    /// The object `maestro validate --json` prints for it: `path`, `line`, `column` (0 without
    /// a position) and `message`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "path": self.path,
            "line": self.line.unwrap_or(0),
            "column": self.column.unwrap_or(0),
            "message": self.message,
        })
    }
}

/// A piece version written to the store: what a caller records in the audit log (who wrote
/// which version of which piece, and when).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPiece {
    /// The piece's name.
    pub name: String,
    /// The version written (a deletion is a version too).
    pub version: i64,
    /// When it was written.
    pub created_at: OffsetDateTime,
    /// Who wrote it.
    pub created_by: String,
}

impl From<StoredPieceVersion> for StoredPiece {
    fn from(v: StoredPieceVersion) -> StoredPiece {
        StoredPiece {
            name: v.name,
            version: v.version,
            created_at: v.created_at,
            created_by: v.created_by,
        }
    }
}

/// Why a piece was not written.
#[derive(Debug, thiserror::Error)]
pub enum PieceWriteError {
    /// The piece's text is not a valid piece (or its `name` differs from the name it is stored
    /// under); nothing was written.
    #[error(
        "the piece is invalid ({} error{}); nothing was written",
        .0.len(), if .0.len() == 1 { "" } else { "s" }
    )]
    Invalid(Vec<PieceDiagnostic>),
    /// The name is not a piece name.
    #[error(
        "`{0}` is not a piece name: use lowercase letters, digits, `.`, `_` and `-`, starting \
         with a letter or digit (and not `auto`, which asks the classifier to choose)"
    )]
    BadName(String),
    /// The piece is a file in a pieces directory, not in the store: the store cannot delete
    /// it. Delete or change the file, or write a version to the store, which overrides it.
    #[error(
        "piece `{name}` is the file {path} in a pieces directory, not a piece in the store; \
         delete the file to remove it"
    )]
    ReadOnly {
        /// The piece's name.
        name: String,
        /// Its file, relative to its pieces directory's parent (never a host path).
        path: String,
    },
    /// The store could not be read or written.
    #[error("the pieces in the store cannot be read or written")]
    Store(#[from] StoreError),
}

/// Where a piece comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PieceOrigin {
    /// The store, at this version.
    Store {
        /// The version read.
        version: i64,
    },
    /// A file in a pieces directory.
    Dir {
        /// The file for display: relative to the project root when it lies below it, else the
        /// directory's name and the file's (never an absolute host path).
        path: String,
    },
}

/// A piece's text and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PieceSource {
    /// The piece's name.
    pub name: String,
    /// Its YAML.
    pub yaml: String,
    /// Where it comes from.
    pub origin: PieceOrigin,
}

/// One piece of [`list_pieces`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PieceListing {
    /// The piece's name.
    pub name: String,
    /// Its `description` (empty for a stored piece that no longer loads under the current
    /// configuration).
    pub description: String,
    /// Where it comes from.
    pub origin: PieceOrigin,
    /// Its version in the store; `None` for a piece file.
    pub version: Option<i64>,
}

/// Whether `name` is a piece name: `[a-z0-9][a-z0-9._-]*`, not `auto`. A name is never a path.
pub fn valid_piece_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        && name != AUTO
}

/// The file a stored piece is read as: in the first pieces directory, so that its relative
/// facet paths mean what they would in a piece file there.
fn store_origin(dirs: &[PathBuf], root: &Path, name: &str) -> PathBuf {
    dirs.first()
        .map_or_else(|| root.to_path_buf(), PathBuf::clone)
        .join(format!("{name}.yaml"))
}

/// How stored pieces load: as piece files do, but their facets must lie inside the pieces
/// directory or a facet root (the text came from outside, as a tool's does).
fn stored_options(opts: &LoadOptions) -> LoadOptions {
    LoadOptions {
        confine_facets: true,
        ..opts.clone()
    }
}

/// The path a stored piece is recorded under in a run's `run_started` (it names no file).
pub(crate) fn stored_path(name: &str, version: i64) -> PathBuf {
    PathBuf::from(format!("store:{name}@{version}"))
}

/// Loads a stored piece's text.
fn load_stored(
    stored: &StoredPieceVersion,
    dirs: &[PathBuf],
    root: &Path,
    opts: &LoadOptions,
) -> Result<Option<Piece>, PieceError> {
    let Some(yaml) = &stored.yaml else {
        return Ok(None);
    };
    let origin = store_origin(dirs, root, &stored.name);
    load_str(yaml, &origin, &stored_options(opts))
        .map(|loaded| Some(loaded.piece))
        .map_err(|failed| PieceError::Invalid {
            path: stored_path(&stored.name, stored.version),
            source_text: yaml.clone(),
            diagnostics: Box::new(failed),
        })
}

/// Checks `yaml` as the piece `name` with the one validator under `config`: every error, with
/// its field path, line and column; empty when the piece is valid. The YAML's `name` must be
/// `name`.
pub fn validate_piece_text(config: &Config, name: &str, yaml: &str) -> Vec<PieceDiagnostic> {
    check_piece_text(config, name, yaml)
        .err()
        .unwrap_or_default()
}

/// [`validate_piece_text`], answering the loaded piece when it is valid (as a run of it would
/// load it once it is written as `name`; an empty `name` takes the piece's own).
pub fn check_piece_text(
    config: &Config,
    name: &str,
    yaml: &str,
) -> Result<Piece, Vec<PieceDiagnostic>> {
    let opts = stored_options(&load_options(config));
    let origin = store_origin(&config.paths.pieces_dirs, &config.root, name);
    match load_str(yaml, &origin, &opts) {
        Ok(loaded) if loaded.piece.name == name || name.is_empty() => Ok(loaded.piece),
        Ok(loaded) => Err(vec![PieceDiagnostic {
            path: "name".into(),
            line: None,
            column: None,
            message: format!(
                "the piece's `name` is `{}` but it is written as `{name}`; make them equal",
                loaded.piece.name
            ),
        }]),
        Err(failed) => Err(failed
            .errors
            .iter()
            .map(PieceDiagnostic::from_diagnostic)
            .collect()),
    }
}

/// Validates `yaml` and writes it as the next version of the piece `name`. The returned
/// [`StoredPiece`] is what the caller records in the audit log.
pub async fn put_piece(
    store: &Store,
    config: &Config,
    name: &str,
    yaml: &str,
    by: &str,
) -> Result<StoredPiece, PieceWriteError> {
    if !valid_piece_name(name) {
        return Err(PieceWriteError::BadName(name.to_string()));
    }
    let problems = validate_piece_text(config, name, yaml);
    if !problems.is_empty() {
        return Err(PieceWriteError::Invalid(problems));
    }
    Ok(store.put_piece(name, Some(yaml), by).await?.into())
}

/// Deletes the stored piece `name` (a deletion is written as its next version, so jobs that
/// started with an older version still read it). `Ok(None)` when no piece of that name exists
/// anywhere; [`PieceWriteError::ReadOnly`] when only a pieces directory holds it.
pub async fn delete_piece(
    store: &Store,
    config: &Config,
    name: &str,
    by: &str,
) -> Result<Option<StoredPiece>, PieceWriteError> {
    if !valid_piece_name(name) {
        return Err(PieceWriteError::BadName(name.to_string()));
    }
    if let Some(deleted) = store.delete_piece(name, by).await? {
        return Ok(Some(deleted.into()));
    }
    match dir_piece(config, name) {
        Some(found) => Err(PieceWriteError::ReadOnly {
            name: name.to_string(),
            path: display_path(config, &found.path),
        }),
        None => Ok(None),
    }
}

/// A piece of the pieces directories by name (not a file path).
pub(crate) fn dir_piece_found(config: &Config, name: &str) -> Option<Found> {
    dir_piece(config, name)
}

/// The store's live version of the piece `name`, loaded under `config`; `Ok(None)` when the
/// store has none (or only a deletion).
pub(crate) async fn load_stored_piece(
    store: &Store,
    config: &Config,
    name: &str,
) -> Result<Option<Piece>, PieceError> {
    let Some(stored) = store.piece_latest(name).await.map_err(PieceError::Store)? else {
        return Ok(None);
    };
    load_stored(
        &stored,
        &config.paths.pieces_dirs,
        &config.root,
        &load_options(config),
    )
}

fn dir_piece(config: &Config, name: &str) -> Option<Found> {
    if !valid_piece_name(name) {
        return None;
    }
    find_piece(name, &config.paths.pieces_dirs, &load_options(config)).ok()
}

/// `file` for an API client: relative to the project root when below it, else its
/// directory's name and its own.
fn display_path(config: &Config, file: &Path) -> String {
    if let Ok(relative) = file.strip_prefix(&config.root) {
        return relative.display().to_string();
    }
    let name = file.file_name().map(Path::new).unwrap_or(Path::new(""));
    match file
        .parent()
        .and_then(Path::file_name)
        .map(|dir| Path::new(dir).join(name))
    {
        Some(shown) => shown.display().to_string(),
        None => name.display().to_string(),
    }
}

/// The piece `name` as a run would find it: the store's live version first, else a piece file
/// in the pieces directories. `Ok(None)` when neither has it.
pub async fn get_piece(
    store: &Store,
    config: &Config,
    name: &str,
) -> Result<Option<PieceSource>, StoreError> {
    if !valid_piece_name(name) {
        return Ok(None);
    }
    if let Some(stored) = store.piece_latest(name).await?
        && let Some(yaml) = stored.yaml
    {
        return Ok(Some(PieceSource {
            name: name.to_string(),
            yaml,
            origin: PieceOrigin::Store {
                version: stored.version,
            },
        }));
    }
    Ok(dir_piece(config, name).and_then(|found| {
        let yaml = std::fs::read_to_string(&found.path).ok()?;
        Some(PieceSource {
            name: name.to_string(),
            yaml,
            origin: PieceOrigin::Dir {
                path: display_path(config, &found.path),
            },
        })
    }))
}

/// Every piece a run can name: the store's live pieces and the pieces directories' (a name in
/// both is listed once, from the store), by name.
pub async fn list_pieces(store: &Store, config: &Config) -> Result<Vec<PieceListing>, StoreError> {
    let opts = load_options(config);
    let dirs = &config.paths.pieces_dirs;
    let mut listed: BTreeMap<String, PieceListing> = BTreeMap::new();
    for (path, piece) in available_pieces(dirs, &opts).pieces {
        listed
            .entry(piece.name.clone())
            .or_insert_with(|| PieceListing {
                name: piece.name.clone(),
                description: piece.description.clone(),
                origin: PieceOrigin::Dir {
                    path: display_path(config, &path),
                },
                version: None,
            });
    }
    for stored in store.pieces_latest().await? {
        let description = load_stored(&stored, dirs, &config.root, &opts)
            .ok()
            .flatten()
            .map(|piece| piece.description)
            .unwrap_or_default();
        listed.insert(
            stored.name.clone(),
            PieceListing {
                name: stored.name,
                description,
                origin: PieceOrigin::Store {
                    version: stored.version,
                },
                version: Some(stored.version),
            },
        );
    }
    Ok(listed.into_values().collect())
}

/// The piece `given` names for a run: a piece file path, else the store's live piece of that
/// name, else a piece of the pieces directories. A stored piece's [`Found::version`] is set.
pub async fn find_piece_in(
    store: &Store,
    given: &str,
    dirs: &[PathBuf],
    opts: &LoadOptions,
) -> Result<Found, PieceError> {
    match stored_live_piece(store, given, dirs, opts).await? {
        Some(found) => Ok(found),
        None => find_piece(given, dirs, opts),
    }
}

/// The store's live piece `given` names, when `given` is a piece name (not a file path) and
/// the store holds a live version of it: one query, no pieces directory read.
pub(crate) async fn stored_live_piece(
    store: &Store,
    given: &str,
    dirs: &[PathBuf],
    opts: &LoadOptions,
) -> Result<Option<Found>, PieceError> {
    if Path::new(given).is_file() || !valid_piece_name(given) {
        return Ok(None);
    }
    let Some(stored) = store.piece_latest(given).await.map_err(PieceError::Store)? else {
        return Ok(None);
    };
    Ok(
        load_stored(&stored, dirs, &root_of(dirs), opts)?.map(|piece| Found {
            piece,
            path: stored_path(given, stored.version),
            skipped: Vec::new(),
            version: Some(stored.version),
        }),
    )
}

/// Version `version` of the stored piece `name` (a resumed job's), deleted since or not.
pub(crate) async fn stored_piece_at(
    store: &Store,
    name: &str,
    version: i64,
    dirs: &[PathBuf],
    opts: &LoadOptions,
) -> Result<Option<Arc<Piece>>, PieceError> {
    let Some(stored) = store
        .piece_at(name, version)
        .await
        .map_err(PieceError::Store)?
    else {
        return Ok(None);
    };
    Ok(load_stored(&stored, dirs, &root_of(dirs), opts)?.map(Arc::new))
}

/// Every piece the classifier may choose among: the pieces directories' and the store's live
/// pieces (a stored piece replaces a file's of the same name; [`Available::versions`] names
/// the stored ones). A stored piece that does not load is passed over.
pub async fn available_pieces_in(
    store: &Store,
    dirs: &[PathBuf],
    opts: &LoadOptions,
) -> Result<Available, PieceError> {
    let mut available = available_pieces(dirs, opts);
    for stored in store.pieces_latest().await.map_err(PieceError::Store)? {
        let Ok(Some(piece)) = load_stored(&stored, dirs, &root_of(dirs), opts) else {
            continue;
        };
        available.pieces.retain(|(_, p)| p.name != stored.name);
        available
            .versions
            .insert(stored.name.clone(), stored.version);
        available
            .pieces
            .push((stored_path(&stored.name, stored.version), piece));
    }
    Ok(available)
}

/// The directory relative facet paths of a stored piece start from when no pieces directory is
/// configured.
fn root_of(dirs: &[PathBuf]) -> PathBuf {
    dirs.first()
        .cloned()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default()
}

/// Whether the jobs of `owner` (a user's email) may change stored pieces: an admin's may.
pub(crate) async fn may_write_pieces(store: &Store, owner: &str) -> Result<bool, StoreError> {
    let user = store.user_by_email(owner).await?;
    Ok(user.is_some_and(|u| u.role == crate::access::Role::Admin.as_str()))
}

/// The pieces as a job of a user who is not an admin sees them: read as they are, never
/// written (`CreatePiece` and `UpdatePiece` answer why).
#[derive(Debug)]
pub(crate) struct ReadOnlyPieces {
    pub inner: Arc<dyn maestro_tools::pieces::PieceWriter>,
    /// The job's owner, named in the refusal.
    pub owner: String,
}

impl maestro_tools::pieces::PieceWriter for ReadOnlyPieces {
    fn exists<'a>(&'a self, name: &'a str) -> maestro_tools::pieces::PieceFuture<'a, bool> {
        self.inner.exists(name)
    }

    fn save<'a>(
        &'a self,
        _name: &'a str,
        _yaml: &'a str,
    ) -> maestro_tools::pieces::PieceFuture<'a, String> {
        Box::pin(async move {
            Err(format!(
                "only an admin's jobs change the stored pieces, and this job's owner {} is not \
                 an admin; put the piece in the answer (or an output file) for an admin to add",
                self.owner
            ))
        })
    }

    fn source<'a>(
        &'a self,
        name: &'a str,
    ) -> maestro_tools::pieces::PieceFuture<'a, Option<String>> {
        self.inner.source(name)
    }

    fn stored(
        &self,
    ) -> maestro_tools::pieces::PieceFuture<'_, Vec<maestro_tools::pieces::StoredPieceLine>> {
        self.inner.stored()
    }
}

/// The [`maestro_tools::pieces::PieceWriter`] runs give `CreatePiece` and `UpdatePiece`: a
/// piece the model writes goes to the store through [`put_piece`], where every later lookup
/// (on any node) finds it.
#[derive(Debug, Clone)]
pub(crate) struct StorePieceWriter {
    pub store: Store,
    pub config: Arc<Config>,
}

impl maestro_tools::pieces::PieceWriter for StorePieceWriter {
    fn exists<'a>(&'a self, name: &'a str) -> maestro_tools::pieces::PieceFuture<'a, bool> {
        Box::pin(async move {
            let opts = load_options(&self.config);
            match find_piece_in(&self.store, name, &self.config.paths.pieces_dirs, &opts).await {
                Ok(_) => Ok(true),
                Err(PieceError::NotFound { .. }) => Ok(false),
                // A piece file of that name that does not load still takes the name.
                Err(PieceError::Invalid { .. }) => Ok(true),
                Err(e) => Err(crate::error_chain(&e)),
            }
        })
    }

    fn save<'a>(
        &'a self,
        name: &'a str,
        yaml: &'a str,
    ) -> maestro_tools::pieces::PieceFuture<'a, String> {
        Box::pin(async move {
            match put_piece(&self.store, &self.config, name, yaml, "agent").await {
                Ok(stored) => Ok(format!("version {} in the store", stored.version)),
                Err(PieceWriteError::Invalid(problems)) => Err(format!(
                    "the piece is invalid: {}",
                    problems
                        .iter()
                        .map(|p| format!("{}: {}", p.path, p.message))
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
                Err(e) => Err(crate::error_chain(&e)),
            }
        })
    }

    fn source<'a>(
        &'a self,
        name: &'a str,
    ) -> maestro_tools::pieces::PieceFuture<'a, Option<String>> {
        Box::pin(async move {
            if !valid_piece_name(name) {
                return Ok(None);
            }
            match self.store.piece_latest(name).await {
                Ok(latest) => Ok(latest.and_then(|stored| stored.yaml)),
                Err(e) => Err(crate::error_chain(&e)),
            }
        })
    }

    fn stored(
        &self,
    ) -> maestro_tools::pieces::PieceFuture<'_, Vec<maestro_tools::pieces::StoredPieceLine>> {
        Box::pin(async move {
            let stored = self
                .store
                .pieces_latest()
                .await
                .map_err(|e| crate::error_chain(&e))?;
            let opts = load_options(&self.config);
            let dirs = &self.config.paths.pieces_dirs;
            Ok(stored
                .into_iter()
                .map(|piece| maestro_tools::pieces::StoredPieceLine {
                    description: load_stored(&piece, dirs, &self.config.root, &opts)
                        .ok()
                        .flatten()
                        .map(|p| p.description)
                        .unwrap_or_default(),
                    name: piece.name,
                    version: piece.version,
                })
                .collect())
        })
    }
}
