//! The integration tests of `maestro-piece`, as one test binary: each module is one former
//! test file. One binary links the dependencies once instead of once per file.
// Test code and its support modules unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod facets;
mod fixtures;
mod graph_rules;
mod large_and_garbled;
mod maestro_rules;
mod prompt;
mod robustness;
mod takt_rules;
mod tool_names;
mod workflow_dynamic;
mod workflow_rules;
mod workflows;
