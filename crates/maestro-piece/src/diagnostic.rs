//! Diagnostics: errors and warnings that point at a file, a line and column, and a field path.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

/// One finding about a piece file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: PathBuf,
    /// Field path, e.g. `movements[1].rules[0].next`; empty for the document itself.
    pub path: String,
    /// 1-based line; 0 when the finding has no position (e.g. an unreadable file).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// Byte range in the source, for snippets.
    pub span: (usize, usize),
    /// What is wrong and what would be valid.
    pub message: String,
}
