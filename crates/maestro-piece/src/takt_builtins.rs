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
}
