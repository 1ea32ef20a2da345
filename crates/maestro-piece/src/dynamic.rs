//! The parts of a TAKT workflow step that a selector decides at run time: which pool items of a
//! dynamic parallel step run (`parallel: {fixed, pool, selection}`), and which facet candidates
//! of a facet pool are added to a step's prompt (`dynamic_facets`). The loader resolves every
//! facet to text, so the engine never reads a pool file.

use serde::{Deserialize, Serialize};

use crate::ir::Facet;

/// What a selector decides for a movement.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Dynamic {
    /// A dynamic parallel parent: which of its pool sub-movements run each round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participants: Option<Participants>,
    /// A step with `dynamic_facets`: which candidates' facets are added to its prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facets: Option<DynamicFacets>,
}

/// `parallel: {fixed, pool, selection}`. The parent's `parallel` holds the fixed
/// sub-movements first, then the pool's, in file order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Participants {
    /// How many of the parent's sub-movements, from the start, are `fixed` (they always run).
    pub fixed: usize,
    /// Each pool sub-movement's `description`, in the order of the pool: what the selector
    /// picks by.
    pub descriptions: Vec<String>,
    /// `selection.mode`.
    pub mode: SelectionMode,
    /// `selection.reports`: report names the selector is pointed at, besides the pool's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reports: Vec<String>,
    /// `selection.selector`: the author's guidance for choosing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<SelectorGuidance>,
}

/// How a new round of a dynamic parallel step treats the pool items earlier rounds selected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionMode {
    /// The new selection replaces the previous one (TAKT's default).
    #[default]
    Replace,
    /// Items selected in earlier rounds keep running, the new selection is added.
    Cumulative,
}

/// `dynamic_facets: {pool, max_selected, selector}` with the pool resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DynamicFacets {
    /// The pool's name in the workflow's `facet_pools` (after `$param` substitution).
    pub pool: String,
    /// The most candidates the selector may pick; `None`: any number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_selected: Option<u32>,
    /// The pool's candidates, in definition order.
    pub candidates: Vec<FacetCandidate>,
    /// `dynamic_facets.selector`: the author's guidance for choosing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<SelectorGuidance>,
}

/// One candidate of a facet pool: a facet, or a small bundle of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FacetCandidate {
    /// Unique within the pool; what the selector answers with.
    pub id: String,
    /// What the selector reads to decide.
    pub description: String,
    /// Policies the candidate adds, in declaration order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<Facet>,
    /// Knowledge the candidate adds, in declaration order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knowledge: Vec<Facet>,
}

/// A selector's `persona` (optional) and `instruction`, resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectorGuidance {
    /// Who the selector is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<Facet>,
    /// How to choose.
    pub instruction: Facet,
}
