//! TAKT v0.60's builtin set, embedded at build time (`takt-builtins/v0.60/`, see `build.rs`):
//! the last layer TAKT workflows resolve facets, step fragments, facet pools, companions,
//! workflow rules, schemas and called workflows against, after the project's `.takt/` and the
//! user's `~/.takt/`. The files are TAKT's own, under the MIT license kept beside them.

use std::path::PathBuf;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/takt_builtins.rs"));
}

/// The language directory of the builtin set Maestro ships.
const LANG: &str = "en";

/// The prefix of the paths builtin facets report as their origin (`Facet::path`).
pub(crate) const ORIGIN: &str = "builtin:takt-v0.60";

/// The text of a builtin file below the language directory, e.g. `facets/personas/coder.md`.
pub(crate) fn file(rel: &str) -> Option<&'static str> {
    let wanted = format!("{LANG}/{rel}");
    embedded::FILES
        .binary_search_by(|(path, _)| (*path).cmp(wanted.as_str()))
        .ok()
        .map(|i| embedded::FILES[i].1)
}

/// A schema of the shared `schemas/` directory, e.g. `followup-task.json`.
pub(crate) fn schema(name: &str) -> Option<&'static str> {
    let wanted = format!("schemas/{name}");
    embedded::FILES
        .iter()
        .find(|(path, _)| *path == wanted)
        .map(|(_, text)| *text)
}

/// The path a builtin file reports as its origin.
pub(crate) fn origin(rel: &str) -> PathBuf {
    PathBuf::from(format!("{ORIGIN}/{LANG}/{rel}"))
}

/// A TAKT v0.60 builtin workflow shipped inside Maestro, which a user may run by name.
#[derive(Debug, Clone)]
pub struct BuiltinWorkflow {
    /// The workflow's name (its file name without `.yaml`), as `maestro run NAME` takes it.
    pub name: &'static str,
    /// Its `description`.
    pub description: String,
    /// How many top-level steps it has.
    pub steps: usize,
    /// The origin a loaded copy reports (`builtin:takt-v0.60/en/workflows/NAME.yaml`).
    pub path: PathBuf,
    /// The file's text, to load with [`crate::load_str`] and `path`.
    pub text: &'static str,
}

/// The builtin workflows a user may run by name, in name order: all of them but those TAKT
/// hides because they only serve as called workflows (`subworkflow.visibility: internal`).
pub fn builtin_workflows() -> Vec<BuiltinWorkflow> {
    let prefix = format!("{LANG}/workflows/");
    embedded::FILES
        .iter()
        .filter_map(|(path, text)| {
            let file = path.strip_prefix(prefix.as_str())?;
            let name = file.strip_suffix(".yaml")?;
            if name.contains('/') {
                return None;
            }
            let root = crate::yaml::parse(text).root?;
            let internal = root
                .get("subworkflow")
                .and_then(|s| s.get("visibility"))
                .and_then(crate::yaml::Node::as_str)
                == Some("internal");
            if internal {
                return None;
            }
            let description = root
                .get("description")
                .and_then(crate::yaml::Node::as_str)
                .unwrap_or_default()
                .to_owned();
            let steps = match root.get("steps").map(|s| &s.value) {
                Some(crate::yaml::Value::Seq(items)) => items.len(),
                _ => 0,
            };
            Some(BuiltinWorkflow {
                name,
                description,
                steps,
                path: origin(&format!("workflows/{file}")),
                text,
            })
        })
        .collect()
}

/// Every builtin file below `dir` (e.g. `workflows`), directly in it, as (file name, text).
#[cfg(test)]
pub(crate) fn files_in(dir: &str) -> impl Iterator<Item = (&'static str, &'static str)> {
    let prefix = format!("{LANG}/{dir}/");
    embedded::FILES.iter().filter_map(move |(path, text)| {
        let name = path.strip_prefix(prefix.as_str())?;
        (!name.contains('/')).then_some((name, *text))
    })
}

/// Every builtin facet file, as (path below the language directory, text).
#[cfg(test)]
pub(crate) fn facets() -> impl Iterator<Item = (&'static str, &'static str)> {
    let prefix = format!("{LANG}/facets/");
    embedded::FILES
        .iter()
        .filter(move |(path, _)| path.starts_with(prefix.as_str()))
        .map(|(path, text)| (&path[LANG.len() + 1..], *text))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_set_is_embedded_sorted_and_whole() {
        assert!(embedded::FILES.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(files_in("workflows").count(), 64);
        assert_eq!(facets().count(), 324);
        assert!(file("facets/personas/coder.md").is_some());
        assert!(schema("followup-task.json").is_some());
        assert!(
            embedded::FILES
                .iter()
                .any(|(p, t)| *p == "LICENSE" && t.contains("MIT License"))
        );
    }

    #[test]
    fn the_runnable_workflows_leave_out_the_internal_ones_and_load() {
        let runnable = builtin_workflows();
        let names: Vec<&str> = runnable.iter().map(|w| w.name).collect();
        assert!(names.contains(&"backend"), "{names:?}");
        assert!(names.contains(&"default-mini"), "{names:?}");
        // development-core is only called (`visibility: internal`).
        assert!(!names.contains(&"development-core"), "{names:?}");
        let internal = files_in("workflows")
            .filter(|(_, text)| text.contains("visibility: internal"))
            .count();
        assert!(internal > 0);
        assert_eq!(runnable.len() + internal, 64);
        let backend = runnable.iter().find(|w| w.name == "backend").unwrap();
        assert_eq!(backend.steps, 1);
        assert!(backend.description.starts_with("Backend workflow"));
        let loaded = crate::load_str(backend.text, &backend.path, &crate::LoadOptions::default())
            .unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(loaded.piece.name, "backend");
    }
}
