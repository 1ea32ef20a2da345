//! `ListPieces`, `GetPiece`, `CreatePiece`, `UpdatePiece`: pieces as the model sees them. New and
//! changed pieces go through the same loader and validator as piece files, and are written only
//! when valid; otherwise the diagnostics go back to the model. They are written where runs look
//! for pieces: through the [`PieceWriter`] whoever assembles the tools gives (the job store, so
//! that every node sees them), else into the configured pieces directory.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use maestro_piece::{Diagnostic, LoadOptions, discover, load_file, load_str};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::config::ToolsConfig;
use crate::core::blocking;
use crate::input::capped;
use crate::regular_file::{self, Access, Create, FileKind, OpenError};
use crate::{ToolContext, ToolOutput, TypedTool};

/// The input of a `ListPieces` call: none.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListPiecesInput {}

/// The input of a `GetPiece` call.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetPieceInput {
    /// The piece's name (as listed by ListPieces).
    pub name: String,
}

/// The input of a `CreatePiece` or `UpdatePiece` call: the piece's name and its YAML.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PieceSourceInput {
    /// The piece's name: lowercase letters, digits and `-`; it must equal the YAML's `name`.
    pub name: String,
    /// The complete piece YAML.
    pub content: String,
}

/// `ListPieces`.
#[derive(Debug)]
pub struct ListPieces {
    /// The directories it lists (`pieces_dir`, then `extra_pieces_dirs`) and the output cap.
    pub config: Arc<ToolsConfig>,
    /// Where runs also find pieces (the store), listed first, when set.
    pub writer: Option<Arc<dyn PieceWriter>>,
}

/// `GetPiece`.
#[derive(Debug)]
pub struct GetPiece {
    /// The directories it looks in (`pieces_dir`, then `extra_pieces_dirs`) and the output cap.
    pub config: Arc<ToolsConfig>,
    /// Where runs also find pieces (the store), looked in first, when set.
    pub writer: Option<Arc<dyn PieceWriter>>,
}

/// A future a [`PieceWriter`] returns.
pub type PieceFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// Where `CreatePiece` and `UpdatePiece` write a valid piece instead of the pieces directory:
/// the place runs look pieces up (the job store), given by whoever assembles the tools. This
/// crate knows no store; the errors are messages for the model.
pub trait PieceWriter: Send + Sync + std::fmt::Debug {
    /// Whether a piece named `name` exists where runs look for pieces.
    fn exists<'a>(&'a self, name: &'a str) -> PieceFuture<'a, bool>;
    /// Writes `yaml` as the piece `name` (validated again there); returns where it went, for
    /// the model, e.g. `version 3 in the store`.
    fn save<'a>(&'a self, name: &'a str, yaml: &'a str) -> PieceFuture<'a, String>;
    /// The text of the piece `name` where the writer keeps it; `None` when it keeps none of
    /// that name (the pieces directories are looked in then).
    fn source<'a>(&'a self, name: &'a str) -> PieceFuture<'a, Option<String>>;
    /// The pieces the writer keeps, by name: each with its version and description. They take
    /// the place of piece files of the same name.
    fn stored(&self) -> PieceFuture<'_, Vec<StoredPieceLine>>;
}

/// One piece a [`PieceWriter`] keeps, as `ListPieces` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPieceLine {
    /// The piece's name.
    pub name: String,
    /// Its version where the writer keeps it.
    pub version: i64,
    /// Its description.
    pub description: String,
}

/// `ListPieces` and `GetPiece`: the pieces of `writer` first, then the directories'.
async fn list_with(config: &Arc<ToolsConfig>, writer: &dyn PieceWriter) -> ToolOutput {
    let stored = match writer.stored().await {
        Ok(stored) => stored,
        Err(e) => return ToolOutput::error(format!("cannot list the pieces: {e}")),
    };
    let mut out = String::new();
    for piece in &stored {
        out.push_str(&format!(
            "{} (stored, version {}): {}\n",
            piece.name,
            piece.version,
            piece.description.trim()
        ));
    }
    if !dirs(config).is_empty() {
        let config = Arc::clone(config);
        let files = blocking(move || list(&config)).await;
        if files.ok {
            for line in files.output.lines() {
                let name = line.split(' ').next().unwrap_or("");
                if line != "no pieces found" && !stored.iter().any(|p| p.name == name) {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
    }
    if out.is_empty() {
        out.push_str("no pieces found\n");
    }
    capped(out, config.output_cap_bytes)
}

/// `CreatePiece`.
#[derive(Debug)]
pub struct CreatePiece {
    /// `pieces_dir`, where the new piece is written (without it or a `writer` nothing can be
    /// created), the other piece directories, for names already taken, and `tool_catalog`.
    pub config: Arc<ToolsConfig>,
    /// Where the piece is written instead of `pieces_dir`, when set.
    pub writer: Option<Arc<dyn PieceWriter>>,
}

/// `UpdatePiece`.
#[derive(Debug)]
pub struct UpdatePiece {
    /// `pieces_dir`, the one directory whose pieces can be replaced, the other piece
    /// directories, and `tool_catalog`.
    pub config: Arc<ToolsConfig>,
    /// Where the piece is written instead of `pieces_dir`, when set: any piece runs can find
    /// may then be changed (the new version overrides a piece file of the same name).
    pub writer: Option<Arc<dyn PieceWriter>>,
}

/// `ListPieces`, `GetPiece`, `CreatePiece` and `UpdatePiece` reading and writing through
/// `writer` (before the pieces directories).
pub fn piece_writing_tools(
    config: &Arc<ToolsConfig>,
    writer: &Arc<dyn PieceWriter>,
) -> Vec<Arc<dyn crate::Tool>> {
    vec![
        Arc::new(ListPieces {
            config: Arc::clone(config),
            writer: Some(Arc::clone(writer)),
        }),
        Arc::new(GetPiece {
            config: Arc::clone(config),
            writer: Some(Arc::clone(writer)),
        }),
        Arc::new(CreatePiece {
            config: Arc::clone(config),
            writer: Some(Arc::clone(writer)),
        }),
        Arc::new(UpdatePiece {
            config: Arc::clone(config),
            writer: Some(Arc::clone(writer)),
        }),
    ]
}

impl TypedTool for ListPieces {
    type Input = ListPiecesInput;
    const NAME: &'static str = "ListPieces";
    const DESCRIPTION: &'static str = "List the available pieces with their descriptions.";

    async fn run(&self, _ctx: &ToolContext, _input: ListPiecesInput) -> ToolOutput {
        if let Some(writer) = &self.writer {
            return list_with(&self.config, &**writer).await;
        }
        let config = Arc::clone(&self.config);
        blocking(move || list(&config)).await
    }
}

impl TypedTool for GetPiece {
    type Input = GetPieceInput;
    const NAME: &'static str = "GetPiece";
    const DESCRIPTION: &'static str = "Show a piece's YAML source by name.";

    async fn run(&self, _ctx: &ToolContext, input: GetPieceInput) -> ToolOutput {
        if let Some(writer) = &self.writer {
            match writer.source(&input.name).await {
                Ok(Some(yaml)) => return capped(yaml, self.config.output_cap_bytes),
                Ok(None) => {}
                Err(e) => return ToolOutput::error(format!("cannot read piece: {e}")),
            }
        }
        let config = Arc::clone(&self.config);
        blocking(move || get(&config, &input.name)).await
    }
}

impl TypedTool for CreatePiece {
    type Input = PieceSourceInput;
    const NAME: &'static str = "CreatePiece";
    const DESCRIPTION: &'static str = "Create a new piece from YAML; it is validated first and any errors are returned with line and column.";

    async fn run(&self, _ctx: &ToolContext, input: PieceSourceInput) -> ToolOutput {
        if let Some(writer) = &self.writer {
            return save_through(&self.config, &**writer, &input, Saving::Create).await;
        }
        let config = Arc::clone(&self.config);
        blocking(move || save(&config, &input, Saving::Create)).await
    }
}

impl TypedTool for UpdatePiece {
    type Input = PieceSourceInput;
    const NAME: &'static str = "UpdatePiece";
    const DESCRIPTION: &'static str = "Replace an existing piece's YAML; it is validated first and any errors are returned with line and column.";

    async fn run(&self, _ctx: &ToolContext, input: PieceSourceInput) -> ToolOutput {
        if let Some(writer) = &self.writer {
            return save_through(&self.config, &**writer, &input, Saving::Update).await;
        }
        let config = Arc::clone(&self.config);
        blocking(move || save(&config, &input, Saving::Update)).await
    }
}

/// Whether [`save`] creates a new piece or replaces an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Saving {
    Create,
    Update,
}

fn dirs(config: &ToolsConfig) -> Vec<&Path> {
    config
        .pieces_dir
        .iter()
        .chain(config.extra_pieces_dirs.iter())
        .map(PathBuf::as_path)
        .collect()
}

const NO_DIR: &str = "no pieces directory is configured, so there are no pieces to work with";

/// Every piece file with its name (the YAML's, or the file stem when it does not load).
fn catalogue(
    config: &ToolsConfig,
) -> Vec<(
    String,
    PathBuf,
    Result<maestro_piece::Loaded, maestro_piece::Failed>,
)> {
    let mut out = Vec::new();
    for dir in dirs(config) {
        for file in discover(dir) {
            let loaded = match confined(dir, &file) {
                Ok(()) => load_file(&file, &LoadOptions::default()),
                Err(e) => Err(refused(&file, &e)),
            };
            let name = match &loaded {
                Ok(l) => l.piece.name.clone(),
                Err(_) => file
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            };
            out.push((name, file, loaded));
        }
    }
    out
}

fn list(config: &ToolsConfig) -> ToolOutput {
    if dirs(config).is_empty() {
        return ToolOutput::error(NO_DIR);
    }
    let mut out = String::new();
    for (name, _file, loaded) in catalogue(config) {
        match loaded {
            Ok(l) => out.push_str(&format!(
                "{name} ({}, {} movements): {}\n",
                l.piece.dialect.as_str(),
                l.piece.movements.len(),
                l.piece.description.trim()
            )),
            Err(f) => out.push_str(&format!(
                "{name} (invalid: {} error(s); GetPiece shows the source)\n",
                f.errors.len()
            )),
        }
    }
    if out.is_empty() {
        out.push_str("no pieces found\n");
    }
    capped(out, config.output_cap_bytes)
}

fn get(config: &ToolsConfig, name: &str) -> ToolOutput {
    if dirs(config).is_empty() {
        return ToolOutput::error(NO_DIR);
    }
    let catalogue = catalogue(config);
    match catalogue.iter().find(|(n, _, _)| n == name) {
        Some((_, file, _)) => {
            let read = dirs(config)
                .into_iter()
                .find(|dir| file.starts_with(dir))
                .map_or(Ok(()), |dir| confined(dir, file))
                .and_then(|()| regular_file::read_to_string(file));
            match read {
                Ok(source) => capped(source, config.output_cap_bytes),
                Err(e) => ToolOutput::error(format!(
                    "cannot read piece `{name}`: {}",
                    e.explain(&shown(file), "GetPiece", Access::Read)
                )),
            }
        }
        None => ToolOutput::error(format!(
            "no piece named `{name}`; available: {}",
            catalogue
                .iter()
                .map(|(n, _, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The name check both ways of saving make.
fn bad_name(name: &str) -> Option<ToolOutput> {
    (name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
    .then(|| {
        ToolOutput::error(format!(
            "invalid piece name `{name}`: use lowercase letters, digits and `-`"
        ))
    })
}

/// How a piece the model wrote is validated: facets confined, tool names checked against
/// `tool_catalog`.
fn validation_options(config: &ToolsConfig) -> LoadOptions {
    LoadOptions {
        confine_facets: true,
        tools: Some(
            config
                .tool_catalog
                .clone()
                .unwrap_or_else(crate::catalog::names_only),
        ),
        ..LoadOptions::default()
    }
}

/// Validates the piece; on success, its movement count and its warnings rendered.
fn validated(
    input: &PieceSourceInput,
    target: &Path,
    opts: &LoadOptions,
    tool: &str,
) -> Result<(usize, String), ToolOutput> {
    let name = input.name.as_str();
    let origin = PathBuf::from(format!("{name}.yaml"));
    let loaded = load_str(&input.content, target, opts).map_err(|failed| {
        ToolOutput::error(format!(
            "the piece is invalid; nothing was saved. Fix these and call {tool} again:\n{}",
            render(&failed.errors, &origin)
        ))
    })?;
    if loaded.piece.name != name {
        return Err(ToolOutput::error(format!(
            "the YAML's `name` is `{}` but the tool was called with name `{name}`; make them equal",
            loaded.piece.name
        )));
    }
    let warnings = if loaded.warnings.is_empty() {
        String::new()
    } else {
        format!("warnings:\n{}", render(&loaded.warnings, &origin))
    };
    Ok((loaded.piece.movements.len(), warnings))
}

/// [`save`] through a [`PieceWriter`]: the piece is validated here (the model gets the
/// diagnostics), then written where runs find it.
async fn save_through(
    config: &ToolsConfig,
    writer: &dyn PieceWriter,
    input: &PieceSourceInput,
    saving: Saving,
) -> ToolOutput {
    let creating = saving == Saving::Create;
    let tool = if creating {
        "CreatePiece"
    } else {
        "UpdatePiece"
    };
    let name = input.name.as_str();
    if let Some(refused) = bad_name(name) {
        return refused;
    }
    let exists = match writer.exists(name).await {
        Ok(exists) => exists,
        Err(e) => return ToolOutput::error(format!("nothing was saved: {e}")),
    };
    match (creating, exists) {
        (true, true) => {
            return ToolOutput::error(format!(
                "a piece named `{name}` already exists; use UpdatePiece to change it"
            ));
        }
        (false, false) => {
            return ToolOutput::error(format!(
                "no piece named `{name}`; use CreatePiece to create it"
            ));
        }
        _ => {}
    }
    let target = config
        .pieces_dir
        .as_deref()
        .unwrap_or(Path::new(""))
        .join(format!("{name}.yaml"));
    let (movements, warnings) = match validated(input, &target, &validation_options(config), tool) {
        Ok(checked) => checked,
        Err(refused) => return refused,
    };
    match writer.save(name, &input.content).await {
        Ok(place) => ToolOutput::ok(format!(
            "{} piece `{name}` ({movements} movements, {place})\n{warnings}",
            if creating { "created" } else { "updated" },
        )),
        Err(e) => ToolOutput::error(format!("nothing was saved: {e}")),
    }
}

fn save(config: &ToolsConfig, input: &PieceSourceInput, saving: Saving) -> ToolOutput {
    let creating = saving == Saving::Create;
    let Some(dir) = &config.pieces_dir else {
        return ToolOutput::error(
            "no writable pieces directory is configured; pieces cannot be created or changed here",
        );
    };
    let name = input.name.as_str();
    if let Some(refused) = bad_name(name) {
        return refused;
    }
    let existing = catalogue(config)
        .into_iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, f, _)| f);
    let target = match (creating, existing) {
        (true, Some(_)) => {
            return ToolOutput::error(format!(
                "a piece named `{name}` already exists; use UpdatePiece to change it"
            ));
        }
        (true, None) => dir.join(format!("{name}.yaml")),
        (false, None) => {
            return ToolOutput::error(format!(
                "no piece named `{name}`; use CreatePiece to create it"
            ));
        }
        (false, Some(file)) if file.starts_with(dir) => file,
        (false, Some(file)) => {
            return ToolOutput::error(format!(
                "piece `{name}` is built in ({}) and cannot be changed",
                file.display()
            ));
        }
    };
    let origin = PathBuf::from(format!("{name}.yaml"));
    let opts = LoadOptions {
        confine_facets: true,
        tools: Some(
            config
                .tool_catalog
                .clone()
                .unwrap_or_else(crate::catalog::names_only),
        ),
        ..LoadOptions::default()
    };
    let loaded = match load_str(&input.content, &target, &opts) {
        Ok(l) => l,
        Err(failed) => {
            return ToolOutput::error(format!(
                "the piece is invalid; nothing was saved. Fix these and call {} again:\n{}",
                if creating {
                    "CreatePiece"
                } else {
                    "UpdatePiece"
                },
                render(&failed.errors, &origin)
            ));
        }
    };
    if loaded.piece.name != name {
        return ToolOutput::error(format!(
            "the YAML's `name` is `{}` but the tool was called with name `{name}`; make them equal",
            loaded.piece.name
        ));
    }
    let (tool, create) = if creating {
        ("CreatePiece", Create::New)
    } else {
        ("UpdatePiece", Create::OrTruncate)
    };
    let written = std::fs::create_dir_all(dir)
        .map_err(OpenError::Io)
        .and_then(|()| confined(dir, &target))
        .and_then(|()| regular_file::write(&target, input.content.as_bytes(), create));
    if let Err(e) = written {
        return ToolOutput::error(format!(
            "nothing was saved: {}",
            e.explain(&shown(&target), tool, Access::Write)
        ));
    }
    let mut out = format!(
        "{} piece `{name}` ({} movements)\n",
        if creating { "created" } else { "updated" },
        loaded.piece.movements.len()
    );
    if !loaded.warnings.is_empty() {
        out.push_str("warnings:\n");
        out.push_str(&render(&loaded.warnings, &origin));
    }
    ToolOutput::ok(out)
}

/// Pieces are read and written only as regular files whose directory, resolved, lies inside
/// the pieces directory: a symlink there must not carry a read or write elsewhere.
fn confined(dir: &Path, file: &Path) -> Result<(), OpenError> {
    regular_file::ensure_inside(dir, file)?;
    match std::fs::symlink_metadata(file).map(|m| FileKind::of(m.file_type())) {
        Ok(FileKind::Regular) | Err(_) => Ok(()),
        Ok(kind) => Err(OpenError::NotRegular { kind }),
    }
}

/// A piece file that was not loaded because [`confined`] refused it, as a load failure.
fn refused(file: &Path, e: &OpenError) -> maestro_piece::Failed {
    maestro_piece::Failed {
        dialect: None,
        errors: vec![Diagnostic {
            severity: maestro_piece::Severity::Error,
            file: file.to_path_buf(),
            path: String::new(),
            line: 0,
            column: 0,
            span: (0, 0),
            message: e.explain(&shown(file), "ListPieces", Access::Read),
        }],
        warnings: Vec::new(),
    }
}

/// A piece file as messages show it: its name only (host paths stay out of the prompt).
fn shown(file: &Path) -> String {
    file.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `name.yaml:LINE:COL: path: message` lines (file name only; host paths stay out of the prompt).
fn render(diagnostics: &[Diagnostic], origin: &Path) -> String {
    diagnostics
        .iter()
        .map(|d| {
            let path = if d.path.is_empty() {
                String::new()
            } else {
                format!("{}: ", d.path)
            };
            format!(
                "{}:{}:{}: {path}{}\n",
                origin.display(),
                d.line,
                d.column,
                without_host_paths(&d.message)
            )
        })
        .collect()
}

/// Shortens every absolute path in a message to its last three components (`…/facets/
/// personas/x.md`): enough for the model to act on, without the host's directory layout.
fn without_host_paths(message: &str) -> String {
    message
        .split_inclusive([' ', ','])
        .map(|word| {
            let trimmed = word.trim_end_matches([' ', ',']);
            if !trimmed.starts_with('/') {
                return word.to_string();
            }
            let parts: Vec<&str> = trimmed.split('/').filter(|p| !p.is_empty()).collect();
            let tail = parts[parts.len().saturating_sub(3)..].join("/");
            format!("…/{tail}{}", &word[trimmed.len()..])
        })
        .collect()
}

#[cfg(test)]
mod host_path_tests {
    use super::without_host_paths;

    #[test]
    fn absolute_paths_lose_their_host_prefix() {
        assert_eq!(
            without_host_paths(
                "persona `x` names no facet file; looked in: /tmp/a/b/facets/personas/x.md, /root/.maestro/facets/personas/x.md"
            ),
            "persona `x` names no facet file; looked in: …/facets/personas/x.md, …/facets/personas/x.md"
        );
        assert_eq!(
            without_host_paths("unknown movement `a/b`"),
            "unknown movement `a/b`"
        );
    }
}
