//! Load and validate pieces: all 33 takt builtins (facets read from disk, as in a real load),
//! one takt piece alone, and the graph examples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use maestro_piece::{LoadOptions, discover, load_str};

fn main() {
    divan::main();
}

fn sources(rel: &str) -> Vec<(PathBuf, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures")
        .join(rel);
    discover(&dir)
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

/// All 33 takt builtins, loaded and validated one after another.
#[divan::bench]
fn takt_builtins_all(bencher: divan::Bencher) {
    let pieces = sources("takt-v0.30/builtins/en/pieces");
    assert_eq!(pieces.len(), 33);
    let opts = LoadOptions::default();
    bencher.bench(|| {
        for (path, text) in &pieces {
            divan::black_box(load_str(text, path, &opts).unwrap());
        }
    });
}

/// One typical takt piece (`default.yaml`: 7 movements, a parallel step, loop monitors).
#[divan::bench]
fn takt_default_one(bencher: divan::Bencher) {
    let pieces = sources("takt-v0.30/builtins/en/pieces");
    let (path, text) = pieces
        .iter()
        .find(|(p, _)| p.ends_with("default.yaml"))
        .unwrap();
    let opts = LoadOptions::default();
    bencher.bench(|| divan::black_box(load_str(text, path, &opts).unwrap()));
}

/// The graph examples (JSON Schema compilation included).
#[divan::bench]
fn graph_examples_all(bencher: divan::Bencher) {
    let pieces = sources("workflow-graph");
    let opts = LoadOptions::default();
    bencher.bench(|| {
        for (path, text) in &pieces {
            divan::black_box(load_str(text, path, &opts).unwrap());
        }
    });
}

/// The YAML tree alone for `default.yaml` (no validation, no facets).
#[divan::bench]
fn takt_default_yaml_only(bencher: divan::Bencher) {
    let pieces = sources("takt-v0.30/builtins/en/pieces");
    let (_, text) = pieces
        .iter()
        .find(|(p, _)| p.ends_with("default.yaml"))
        .unwrap();
    bencher.bench(|| divan::black_box(maestro_piece::detect_dialect(text)));
}

/// saphyr-parser's raw event stream for `default.yaml`: the floor under our tree.
#[divan::bench]
fn takt_default_raw_events(bencher: divan::Bencher) {
    let pieces = sources("takt-v0.30/builtins/en/pieces");
    let (_, text) = pieces
        .iter()
        .find(|(p, _)| p.ends_with("default.yaml"))
        .unwrap();
    bencher.bench(|| {
        let mut n = 0usize;
        for ev in saphyr_parser::Parser::new_from_str(text) {
            n += usize::from(ev.is_ok());
        }
        divan::black_box(n)
    });
}

/// A valid piece carrying a 40,000-key mapping (`x-table:`): the YAML tree, the duplicate-key
/// check and the validator must stay linear in the mapping's size.
#[divan::bench]
fn forty_thousand_keys(bencher: divan::Bencher) {
    let source = huge_piece("x-table:\n", "  ", 40_000);
    let opts = LoadOptions::default();
    let origin = PathBuf::from("piece.yaml");
    bencher.bench(|| divan::black_box(load_str(&source, &origin, &opts).unwrap()));
}

/// 60,000 unknown top-level keys: loading and rendering the (capped) report.
#[divan::bench]
fn sixty_thousand_unknown_keys(bencher: divan::Bencher) {
    let source = huge_piece("", "", 60_000);
    let opts = LoadOptions::default();
    let origin = PathBuf::from("piece.yaml");
    bencher.bench(|| {
        let failed = load_str(&source, &origin, &opts).unwrap_err();
        divan::black_box(maestro_piece::render_diagnostics(&source, &failed.errors))
    });
}

fn huge_piece(head: &str, indent: &str, keys: usize) -> String {
    let mut source = String::from(
        "name: big\ndescription: one movement\nmax_movements: 3\ninitial_movement: work\n\
         movements:\n  - name: work\n    edit: false\n    persona: You work.\n    \
         instruction: \"{task}\"\n    allowed_tools: [Read]\n    rules:\n      - condition: done\n        \
         next: work\n    default_next: ABORT\n",
    );
    source.push_str(head);
    for i in 0..keys {
        source.push_str(&format!("{indent}k{i}: v\n"));
    }
    source
}
