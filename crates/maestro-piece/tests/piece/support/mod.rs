//! Shared helpers for the loader tests.
#![allow(dead_code)]

use std::path::Path;

use maestro_piece::{Diagnostic, LoadOptions, Loaded, load_str};

/// `(path, line, message)` of a diagnostic: what a user acts on.
pub(crate) type Finding = (String, usize, String);

pub(crate) fn finding(d: &Diagnostic) -> Finding {
    (d.path.clone(), d.line, d.message.clone())
}

pub(crate) fn f(path: &str, line: usize, message: &str) -> Finding {
    (path.to_owned(), line, message.to_owned())
}

/// Loads `source` and returns its errors (panics when it is valid).
pub(crate) fn errors(source: &str) -> Vec<Finding> {
    errors_with(source, &LoadOptions::default())
}

pub(crate) fn errors_with(source: &str, opts: &LoadOptions) -> Vec<Finding> {
    match load_str(source, Path::new("piece.yaml"), opts) {
        Ok(_) => panic!("expected errors, but the piece is valid:\n{source}"),
        Err(failed) => failed.errors.iter().map(finding).collect(),
    }
}

/// Loads `source`, which must be valid.
pub(crate) fn valid(source: &str) -> Loaded {
    valid_at(source, Path::new("piece.yaml"), &LoadOptions::default())
}

pub(crate) fn valid_at(source: &str, origin: &Path, opts: &LoadOptions) -> Loaded {
    match load_str(source, origin, opts) {
        Ok(loaded) => loaded,
        Err(failed) => panic!("expected a valid piece, got:\n{failed}"),
    }
}

pub(crate) fn warnings(loaded: &Loaded) -> Vec<Finding> {
    loaded.warnings.iter().map(finding).collect()
}

/// `source` with `from` replaced by `to` exactly once (the test's mutation).
pub(crate) fn edit(source: &str, from: &str, to: &str) -> String {
    assert_eq!(source.matches(from).count(), 1, "`{from}` must occur once");
    source.replacen(from, to, 1)
}
