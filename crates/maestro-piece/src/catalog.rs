//! The tool names a piece may put in `allowed_tools`, as the caller knows them.
//!
//! This crate knows no tools, so whoever loads a piece (the CLI, `CreatePiece`, a run) passes a
//! [`ToolCatalog`] in [`crate::LoadOptions::tools`]: every name that is a tool, and whether it
//! can be used here. The loaders then report, at the name's position:
//! - a name that is no tool at all: an error, with the closest known name as a suggestion;
//! - a tool that exists but is not set up here (SSH without connections, WebSearch without a
//!   provider, a tool not implemented yet): a warning saying why, the movement runs without it.
//!
//! `mcp__…` names and patterns are left to the MCP servers, which are only known at run time.

use std::collections::BTreeMap;

/// Whether a known tool can be offered where the piece is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Registered and configured: offered when a movement allows it.
    Available,
    /// A real tool name that cannot be offered here; the text says why and what to set up,
    /// e.g. "no SSH connections are configured; add them under `ssh.connections`".
    Unavailable(String),
}

/// Tools that change files; offered only to movements with `edit: true` (`SplitPdf` writes new
/// PDFs for the user, `AnnotateImage` an annotated copy, `MergeReviewedResults` a report,
/// `InstallSkill` a skill every later run reads). The loader warns when a movement with
/// `edit: false` allows one; the tool registry leaves them out of such a movement's tools.
pub const EDIT_TOOLS: &[&str] = &[
    "Write",
    "Edit",
    "SplitPdf",
    "AnnotateImage",
    "MergeReviewedResults",
    "InstallSkill",
];

/// Every tool name the loader accepts in `allowed_tools`, with its [`Availability`].
///
/// ```
/// use maestro_piece::{Availability, ToolCatalog};
/// let mut catalog = ToolCatalog::default();
/// catalog.add("Read", Availability::Available);
/// catalog.add("WebSearch", Availability::Unavailable("no search provider is configured".into()));
/// assert_eq!(catalog.suggestion("Raed"), Some("Read"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCatalog {
    tools: BTreeMap<String, Availability>,
}

impl ToolCatalog {
    /// Adds (or replaces) a tool name.
    pub fn add(&mut self, name: impl Into<String>, availability: Availability) {
        self.tools.insert(name.into(), availability);
    }

    /// The availability of `name`, if it is a tool.
    pub fn get(&self, name: &str) -> Option<&Availability> {
        self.tools.get(name)
    }

    /// The known names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The known name closest to `name`: the same name in another case, or one a few typing
    /// mistakes away (at most a third of its length, at least 1 and at most 3 edits).
    pub fn suggestion(&self, name: &str) -> Option<&str> {
        closest(name, self.names())
    }
}

/// Of `known`, the name closest to `name`: the same name in another case, or one a few typing
/// mistakes away (at most a third of its length, at least 1 and at most 3 edits).
pub(crate) fn closest<'k>(name: &str, known: impl IntoIterator<Item = &'k str>) -> Option<&'k str> {
    let wanted = name.to_ascii_lowercase();
    let budget = (wanted.chars().count() / 3).clamp(1, 3);
    known
        .into_iter()
        .map(|known| (edit_distance(&wanted, &known.to_ascii_lowercase()), known))
        .filter(|(distance, _)| *distance <= budget)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known)
}

/// Edit distance over characters where swapping two neighbours counts as one edit (optimal
/// string alignment), so `Raed` is one mistake away from `Read`.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d: Vec<usize> = vec![0; (a.len() + 1) * width];
    for (i, cell) in d.iter_mut().step_by(width).enumerate() {
        *cell = i;
    }
    for (j, cell) in d.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_close_names_only() {
        let mut catalog = ToolCatalog::default();
        for name in ["Read", "Grep", "Glob", "WebFetch", "SshExec"] {
            catalog.add(name, Availability::Available);
        }
        assert_eq!(catalog.suggestion("read"), Some("Read"));
        assert_eq!(catalog.suggestion("Raed"), Some("Read"));
        assert_eq!(catalog.suggestion("WebFecth"), Some("WebFetch"));
        assert_eq!(catalog.suggestion("SSHExec"), Some("SshExec"));
        assert_eq!(catalog.suggestion("Deploy"), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("raed", "read"), 1);
    }
}
