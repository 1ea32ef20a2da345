//! Every real piece in the shared fixtures loads, in the dialect it is written in.

use std::path::PathBuf;

use maestro_piece::{Dialect, LoadOptions, discover, load_file, render_diagnostics};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
}

fn load_all(dir: &str, dialect: Dialect) -> usize {
    let files = discover(&fixtures().join(dir));
    for file in &files {
        match load_file(file, &LoadOptions::default()) {
            Ok(loaded) => {
                assert_eq!(loaded.piece.dialect, dialect, "{}", file.display());
                assert!(!loaded.piece.movements.is_empty());
            }
            Err(failed) => {
                let source = std::fs::read_to_string(file).unwrap();
                panic!("{}", render_diagnostics(&source, &failed.errors));
            }
        }
    }
    files.len()
}

#[test]
fn every_takt_builtin_loads() {
    assert_eq!(load_all("takt-v0.30/builtins/en/pieces", Dialect::Takt), 33);
}

#[test]
fn every_graph_example_loads() {
    assert_eq!(load_all("workflow-graph", Dialect::Graph), 2);
}
