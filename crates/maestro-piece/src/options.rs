//! [`LoadOptions`]: what the caller decides about a load (dialect, facet roots, known tools).
//! A leaf: the loaders and the facet resolver read it, it reads none of them.

use std::path::PathBuf;

use crate::catalog::ToolCatalog;
use crate::ir::Dialect;

/// How to load a piece.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// Forces a dialect (`--dialect`); `None` detects it.
    pub dialect: Option<Dialect>,
    /// Extra facet roots (`--facets-dir`), searched last, each as `<dir>/<kind>/<name>.md`.
    pub facet_dirs: Vec<PathBuf>,
    /// The project root; its `.maestro/facets/` is searched.
    pub project_dir: Option<PathBuf>,
    /// The user's maestro directory (normally `~/.maestro`); its `facets/` is searched.
    pub user_dir: Option<PathBuf>,
    /// The user's TAKT directory (`$TAKT_CONFIG_DIR`, else `~/.takt`); its `facets/` is
    /// searched after Maestro's own, as is the project's `.takt/facets/`, so a TAKT project's
    /// pieces find their facets unchanged.
    pub takt_user_dir: Option<PathBuf>,
    /// The tools `allowed_tools` may name; `None` checks no names. See [`ToolCatalog`].
    pub tools: Option<ToolCatalog>,
    /// `max_movements` for dialects that have none of their own (graph).
    pub default_max_movements: u32,
    /// Facet files must lie inside the piece's directory or a facet root. Set for pieces that
    /// come from a model or an API (CreatePiece, UpdatePiece), whose `../../etc/…` must not
    /// pull host files into a prompt.
    pub confine_facets: bool,
}

impl LoadOptions {
    /// The options every command uses for pieces on disk: the project's `.maestro/facets/`
    /// and `.takt/facets/` (from `project_dir`), the user's `~/.maestro/facets/` and
    /// `~/.takt/facets/` (from `$HOME`, or `$TAKT_CONFIG_DIR` for TAKT's), and `facet_dirs`.
    pub fn standard(project_dir: Option<PathBuf>, facet_dirs: Vec<PathBuf>) -> Self {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        LoadOptions {
            facet_dirs,
            project_dir,
            user_dir: home.as_ref().map(|home| home.join(".maestro")),
            takt_user_dir: std::env::var_os("TAKT_CONFIG_DIR")
                .filter(|dir| !dir.is_empty())
                .map(PathBuf::from)
                .or_else(|| home.map(|home| home.join(".takt"))),
            ..LoadOptions::default()
        }
    }
}

impl LoadOptions {
    /// Where TAKT keeps workflows (v0.36 and later), searched by name after the pieces
    /// directories: the project's `.takt/workflows/`, then the user's `~/.takt/workflows/`
    /// (`$TAKT_CONFIG_DIR/workflows/`).
    /// A directory that is both (the project is the home directory) is listed once.
    pub fn takt_workflow_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let candidates = self
            .project_dir
            .iter()
            .map(|p| p.join(".takt").join("workflows"))
            .chain(self.takt_user_dir.iter().map(|u| u.join("workflows")));
        for dir in candidates {
            let same = |d: &PathBuf| match (d.canonicalize(), dir.canonicalize()) {
                (Ok(a), Ok(b)) => a == b,
                _ => *d == dir,
            };
            if !dirs.iter().any(same) {
                dirs.push(dir);
            }
        }
        dirs
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            dialect: None,
            facet_dirs: Vec::new(),
            project_dir: None,
            user_dir: None,
            takt_user_dir: None,
            tools: None,
            default_max_movements: 50,
            confine_facets: false,
        }
    }
}
