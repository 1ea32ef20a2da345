//! The tools agents use: the [`Tool`] trait, the [`Registry`] that offers a movement only what it
//! allows, and every tool implementation (files, shell in a bwrap sandbox, web, SQLite,
//! checklist, pieces, docs, skills, SSH, MCP).
//!
//! This crate knows nothing of runs.

mod tool;

pub use tool::*;
