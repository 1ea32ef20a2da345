//! TAKT v0.60 workflows: every builtin loads without an error or a warning (but for the
//! effects Maestro refuses, named), from the fixtures and from a project that has nothing but
//! the workflow file (the builtin layer is inside Maestro).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use maestro_piece::{Dialect, LoadOptions, discover, load_file, render_diagnostics};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
}

fn workflows_dir() -> PathBuf {
    fixtures().join("takt-v0.60/builtins/en/workflows")
}

/// The warnings every builtin may have: the refused effects, each naming its effect.
fn allowed_warning(message: &str) -> bool {
    ["comment_pr", "merge_pr", "close_pr"]
        .iter()
        .any(|e| message.starts_with(&format!("the effect `{e}` needs a Git host")))
}

fn check_all(
    load: impl Fn(&Path) -> Result<maestro_piece::Loaded, maestro_piece::Failed>,
) -> usize {
    let files: Vec<PathBuf> = discover(&workflows_dir())
        .into_iter()
        .filter(|f| f.parent() == Some(workflows_dir().as_path()))
        .collect();
    let mut report = String::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        match load(file) {
            Ok(loaded) => {
                assert_eq!(loaded.piece.dialect, Dialect::Takt);
                assert!(!loaded.piece.movements.is_empty());
                let bad: Vec<_> = loaded
                    .warnings
                    .iter()
                    .filter(|w| !allowed_warning(&w.message))
                    .cloned()
                    .collect();
                if !bad.is_empty() {
                    report.push_str(&render_diagnostics(&source, &bad));
                }
            }
            Err(failed) => {
                report.push_str(&render_diagnostics(&source, &failed.errors));
                report.push_str(&render_diagnostics(&source, &failed.warnings));
            }
        }
    }
    assert!(report.is_empty(), "{report}");
    files.len()
}

#[test]
fn every_v060_builtin_workflow_validates_without_errors_or_warnings() {
    let n = check_all(|file| load_file(file, &LoadOptions::default()));
    assert_eq!(n, 64);
}
