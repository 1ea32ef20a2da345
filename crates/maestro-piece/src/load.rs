//! Loading entry points: text or file in, a validated [`Piece`] (with warnings) or every error
//! found out. File loading and the HTTP API (`CreatePiece`, `PUT /api/pieces`) both call
//! [`load_str`], so there is one validator.

use std::path::{Path, PathBuf};

use crate::check::{Sink, Unknown, fields};
use crate::cx::Cx;
use crate::detect::detect;
use crate::diagnostic::Diagnostic;
use crate::facets::Resolver;
use crate::ir::{Dialect, Piece};
use crate::options::LoadOptions;
use crate::yaml::{Node, Span};

/// A valid piece and the warnings found on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The piece, ready to run.
    pub piece: Piece,
    /// Findings that did not stop it from loading, sorted by position.
    pub warnings: Vec<Diagnostic>,
}

/// An invalid piece: every error found, sorted by position.
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    /// The dialect the file was read as, when it got that far.
    pub dialect: Option<Dialect>,
    /// The errors that make the piece invalid, sorted by position.
    pub errors: Vec<Diagnostic>,
    /// The warnings found as well, sorted by position.
    pub warnings: Vec<Diagnostic>,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}:{}:{}: ", e.file.display(), e.line, e.column)?;
            if !e.path.is_empty() {
                write!(f, "{}: ", e.path)?;
            }
            write!(f, "{}", e.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Failed {}

/// Reads and loads a piece file.
pub fn load_file(path: &Path, opts: &LoadOptions) -> Result<Loaded, Failed> {
    match std::fs::read(path) {
        Ok(bytes) => load_bytes(&bytes, path, opts),
        Err(e) => {
            let mut sink = Sink::new(path);
            sink.error(
                "",
                Span::default(),
                format!("cannot read {}: {e}", path.display()),
            );
            let (errors, warnings) = sink.finish();
            Err(Failed {
                dialect: None,
                errors,
                warnings,
            })
        }
    }
}

/// Loads a piece from the bytes of a file. Bytes that are not UTF-8 make the file invalid, with
/// an error at the line and column of the first bad byte.
pub fn load_bytes(bytes: &[u8], origin: &Path, opts: &LoadOptions) -> Result<Loaded, Failed> {
    match std::str::from_utf8(bytes) {
        Ok(source) => load_str(source, origin, opts),
        Err(e) => {
            let mut sink = Sink::new(origin);
            let (span, message) = not_utf8(bytes, &e);
            sink.error("", span, message);
            let (errors, warnings) = sink.finish();
            Err(Failed {
                dialect: None,
                errors,
                warnings,
            })
        }
    }
}

/// Where the first byte that is not UTF-8 sits, and the error saying so.
fn not_utf8(bytes: &[u8], e: &std::str::Utf8Error) -> (Span, String) {
    let at = e.valid_up_to();
    // Everything before `at` is valid UTF-8.
    let before = std::str::from_utf8(&bytes[..at]).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    let bad = e.error_len().unwrap_or(bytes.len() - at).max(1);
    let shown: Vec<String> = bytes[at..]
        .iter()
        .take(bad)
        .map(|b| format!("0x{b:02X}"))
        .collect();
    let span = Span {
        start: at,
        end: at + bad,
        line,
        column,
    };
    let message = format!(
        "the file is not valid UTF-8: byte {} at line {line}, column {column} cannot be read; \
         save the file as UTF-8",
        shown.join(" ")
    );
    (span, message)
}

/// Loads a piece from text. `origin` names the file in diagnostics and anchors relative facet
/// paths; it need not exist.
pub fn load_str(source: &str, origin: &Path, opts: &LoadOptions) -> Result<Loaded, Failed> {
    let mut cx = Cx {
        sink: Sink::new(origin),
        facets: Resolver::new(origin, opts),
        opts,
        detected_because: None,
    };
    let parsed = crate::yaml::parse(source);
    for e in parsed.errors {
        cx.sink.error(&e.path, e.span, e.message);
    }
    let (dialect, piece) = match parsed.root {
        None => {
            if !cx.sink.has_errors() {
                cx.sink.error(
                    "",
                    Span {
                        line: 1,
                        column: 1,
                        ..Span::default()
                    },
                    "the file is empty; a piece needs at least `name` and `movements` (or `roles` and `graph`)",
                );
            }
            (None, None)
        }
        Some(root) => {
            let dialect = choose_dialect(&mut cx, &root);
            (dialect, dialect.and_then(|d| load_tree(&mut cx, &root, d)))
        }
    };
    let (errors, warnings) = cx.sink.finish();
    match piece {
        Some(mut piece) if errors.is_empty() => {
            piece.source = origin.to_owned();
            piece.hash = crate::workflow::tree_hash(source, &piece);
            Ok(Loaded { piece, warnings })
        }
        _ => Err(Failed {
            dialect,
            errors,
            warnings,
        }),
    }
}

fn choose_dialect(cx: &mut Cx<'_>, root: &Node) -> Option<Dialect> {
    if root.as_map().is_none() {
        cx.sink.error(
            "",
            root.span,
            format!(
                "a piece is a mapping with `name`, `movements`, … at the top level; found {}",
                root.kind_name()
            ),
        );
        return None;
    }
    if let Some(node) = root.get("dialect") {
        match node.as_str().map(str::parse::<Dialect>) {
            Some(Ok(_)) => {}
            Some(Err(message)) => cx.sink.error("dialect", node.span, message),
            None => cx.sink.error(
                "dialect",
                node.span,
                format!(
                    "expected one of maestro, takt, graph, found {}",
                    node.kind_name()
                ),
            ),
        }
    }
    if let Some(forced) = cx.opts.dialect {
        return Some(forced);
    }
    let detection = detect(root);
    if root.get("dialect").is_none() {
        cx.detected_because = Some(detection.reason.clone());
    }
    if detection.dialect == Dialect::Takt
        && root.get("dialect").is_none()
        && let Some((path, span)) = crate::detect::maestro_feature(root)
    {
        cx.sink.warn(
            &path,
            span,
            format!(
                "this file is read as takt because {}, but `{path}` is a maestro field; add `dialect: maestro` at the top if it is a maestro piece",
                detection.reason
            ),
        );
    }
    Some(detection.dialect)
}

fn load_tree(cx: &mut Cx<'_>, root: &Node, dialect: Dialect) -> Option<Piece> {
    match dialect {
        Dialect::Maestro => {
            let top = fields(
                &mut cx.sink,
                root,
                "",
                "a maestro piece",
                crate::maestro::TOP_KEYS,
                Unknown::Error,
            )?;
            crate::maestro::load(cx, &top)
        }
        Dialect::Takt => crate::workflow::load_takt(cx, root),
        Dialect::Graph => crate::graph::load(cx, root),
    }
}

/// Every `*.yaml` / `*.yml` file below `dir`, sorted. A file path is returned as is. Symlinked
/// directories are not followed (no cycles). Below a TAKT root ([`takt_root`]: a project's
/// `.takt/`, or a copy of TAKT's builtins), only its `workflows/` and `pieces/` hold pieces:
/// its step fragments, facet pools, companions, provider options and settings are not pieces.
pub fn discover(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    if dir.is_file() {
        found.push(dir.to_owned());
        return found;
    }
    let mut pending = vec![dir.to_owned()];
    while let Some(d) = pending.pop() {
        if takt_root(&d) {
            pending.extend(
                TAKT_PIECE_DIRS
                    .iter()
                    .map(|sub| d.join(sub))
                    .filter(|sub| sub.is_dir()),
            );
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(path);
            } else if is_yaml(&path) && (kind.is_file() || path.is_file()) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The directories of a TAKT root that hold workflows (v0.36 and later) and pieces (before).
const TAKT_PIECE_DIRS: [&str; 2] = ["workflows", "pieces"];

/// What else a TAKT root holds beside its workflows: facets, step fragments and the rest.
const TAKT_ROOT_DIRS: [&str; 11] = [
    "facets",
    "steps",
    "facet-pools",
    "companions",
    "provider-options",
    "personas",
    "policies",
    "instructions",
    "knowledge",
    "output-contracts",
    "report-formats",
];

/// Whether `dir` is laid out as TAKT keeps a project (`.takt/`) or its builtins: a `workflows/`
/// or `pieces/` directory beside facets, step fragments or the like, or any `.takt` directory
/// that has one of the two.
fn takt_root(dir: &Path) -> bool {
    let holds_pieces = TAKT_PIECE_DIRS.iter().any(|sub| dir.join(sub).is_dir());
    holds_pieces
        && (dir.file_name().is_some_and(|name| name == ".takt")
            || TAKT_ROOT_DIRS.iter().any(|sub| dir.join(sub).is_dir()))
}

fn is_yaml(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e == "yaml" || e == "yml")
}
