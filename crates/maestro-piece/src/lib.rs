//! Maestro pieces: the typed piece model (IR), the three dialect loaders (maestro, takt, graph)
//! that compile into it, the one validator, facet resolution and prompt assembly.
//!
//! This crate knows nothing of LLMs, tools or storage.

mod diagnostic;
mod ir;
pub mod prompt;

pub use diagnostic::{Diagnostic, Severity};
pub use ir::*;
