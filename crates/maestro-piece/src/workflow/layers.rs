//! TAKT's resource layers for a workflow: the workflow's own package (`<dir>/../<kind>/`), the
//! project's `.takt/<kind>/`, the user's `~/.takt/<kind>/` (`$TAKT_CONFIG_DIR`), then the
//! builtin set Maestro ships. Step fragments (`steps/`), facet pools (`facet-pools/`),
//! companions, workflow rules (`workflows/rules/`), capability presets (`provider-options/`),
//! schemas and called workflows are all found this way.

use std::path::{Path, PathBuf};

use crate::options::LoadOptions;

/// A resource found in one of the layers.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// The file's text.
    pub text: String,
    /// Where it came from (a `builtin:` path for the shipped set).
    pub path: PathBuf,
}

/// The layers searched for one workflow file.
#[derive(Debug, Clone)]
pub(crate) struct Layers {
    /// The directory of the workflow file.
    workflow_dir: PathBuf,
    /// The project's `.takt/`.
    project: Option<PathBuf>,
    /// The user's TAKT directory.
    user: Option<PathBuf>,
}

impl Layers {
    pub(crate) fn new(origin: &Path, opts: &LoadOptions) -> Self {
        Layers {
            workflow_dir: origin.parent().map(Path::to_path_buf).unwrap_or_default(),
            project: opts.project_dir.as_ref().map(|p| p.join(".takt")),
            user: opts.takt_user_dir.clone(),
        }
    }

    /// The directories searched for `kind` (`steps`, `facet-pools`, …), in order; the builtin
    /// layer comes after them.
    pub(crate) fn dirs(&self, kind: &str) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if kind == "workflows" {
            dirs.push(self.workflow_dir.clone());
        } else if kind == "workflows/rules" {
            dirs.push(self.workflow_dir.join("rules"));
        } else {
            dirs.push(self.workflow_dir.join("..").join(kind));
        }
        dirs.extend(self.project.iter().map(|p| p.join(kind)));
        dirs.extend(self.user.iter().map(|p| p.join(kind)));
        dirs
    }

    /// Finds `<name><ext>` for the first of `exts` in each layer in turn. `None` when the
    /// name is not a bare name (no `/`, `\`, `..`, leading `.` or `@`) or nothing matches.
    pub(crate) fn find(&self, kind: &str, name: &str, exts: &[&str]) -> Option<Found> {
        if !is_bare_name(name) {
            return None;
        }
        for dir in self.dirs(kind) {
            for ext in exts {
                let file = dir.join(format!("{name}{ext}"));
                if let Ok(text) = std::fs::read_to_string(&file) {
                    return Some(Found { text, path: file });
                }
            }
        }
        let builtin_dir = if kind == "schemas" { None } else { Some(kind) };
        for ext in exts {
            let rel = match builtin_dir {
                Some(dir) => format!("{dir}/{name}{ext}"),
                None => format!("{name}{ext}"),
            };
            let text = match builtin_dir {
                Some(_) => crate::takt_builtins::file(&rel),
                None => crate::takt_builtins::schema(&rel),
            };
            if let Some(text) = text {
                return Some(Found {
                    text: text.to_owned(),
                    path: crate::takt_builtins::origin(&rel),
                });
            }
        }
        None
    }

    /// Where [`Layers::find`] looked, for an error that found nothing.
    pub(crate) fn searched(&self, kind: &str) -> String {
        let mut places: Vec<String> = self
            .dirs(kind)
            .iter()
            .map(|d| format!("{}/", d.display()))
            .collect();
        places.push(format!("Maestro's builtin TAKT v0.60 `{kind}/`"));
        places.join(", ")
    }
}

/// A bare resource name: what TAKT resolves through its layers.
pub(crate) fn is_bare_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with(['.', '@'])
        && !name.contains(['/', '\\', '\0'])
        && !name.contains("..")
}
