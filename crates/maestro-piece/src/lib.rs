//! Maestro pieces: the typed piece model (IR), the three dialect loaders (maestro, takt, graph)
//! that compile into it, the one validator, facet resolution and prompt assembly.
//!
//! ```no_run
//! use maestro_piece::{LoadOptions, load_file, render_diagnostics};
//! let path = std::path::Path::new("pieces/default.yaml");
//! match load_file(path, &LoadOptions::default()) {
//!     Ok(loaded) => println!("{} movements", loaded.piece.movements.len()),
//!     Err(failed) => {
//!         let source = std::fs::read_to_string(path).unwrap_or_default();
//!         eprint!("{}", render_diagnostics(&source, &failed.errors));
//!     }
//! }
//! ```
//!
//! This crate knows nothing of LLMs, tools or storage.

mod allowed_tools;
mod catalog;
mod check;
mod cx;
mod detect;
mod diagnostic;
mod dynamic;
mod facets;
mod graph;
mod ir;
mod load;
mod maestro;
mod names;
mod options;
pub mod prompt;
mod prompt_context;
mod takt;
mod takt_builtins;
mod template;
pub mod when;
mod workflow;
mod yaml;

pub use catalog::{Availability, EDIT_TOOLS, ToolCatalog};
pub use detect::{Detection, detect_dialect};
pub use diagnostic::{Diagnostic, Severity, render_diagnostics};
pub use dynamic::{
    Dynamic, DynamicFacets, FacetCandidate, Participants, SelectionMode, SelectorGuidance,
};
pub use ir::{
    CommandGate, CompletionRetry, Condition, Dialect, Facet, LoopMonitor, Movement, OutputContract,
    Piece, PieceBudget, Rule, SessionMode, StepKind, StructuredOutput, Target, WorkflowCall,
};
pub use load::{Failed, Loaded, discover, load_bytes, load_file, load_str};
pub use options::LoadOptions;
pub use takt_builtins::{BuiltinWorkflow, builtin_workflows};
pub use template::{MissingField, render_edge_prompt};
