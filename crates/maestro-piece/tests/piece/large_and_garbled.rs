//! Pieces far larger than any real one, and files that are not clean text: each loads in linear
//! time with a readable, bounded report, and garbled bytes are reported where they are.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use maestro_piece::{Failed, LoadOptions, load_bytes, load_str, render_diagnostics};
use pretty_assertions::assert_eq;
use support::{errors, f, valid};

const PIECE: &str = "name: slow\ndescription: one movement\nmax_movements: 3\ninitial_movement: work\n\
movements:\n  - name: work\n    edit: false\n    persona: You work.\n    instruction: \"{task}\"\n    \
allowed_tools: [Read]\n    rules:\n      - condition: done\n        next: work\n    default_next: ABORT\n";

fn keys(count: usize, indent: &str) -> String {
    (0..count).map(|i| format!("{indent}k{i}: v\n")).collect()
}

fn failed(source: &str) -> Failed {
    load_str(source, Path::new("piece.yaml"), &LoadOptions::default()).unwrap_err()
}

/// Generous on purpose (the real figure, about 0.1 s in release, is in docs/benchmarks.md):
/// the old quadratic validator took minutes here.
const LINEAR_ENOUGH: Duration = Duration::from_secs(10);

#[test]
fn a_piece_with_a_40000_key_mapping_is_valid_and_loads_fast() {
    let source = format!("{PIECE}x-table:\n{}", keys(40_000, "  "));
    let started = Instant::now();
    let loaded = valid(&source);
    assert!(started.elapsed() < LINEAR_ENOUGH, "{:?}", started.elapsed());
    assert_eq!(loaded.piece.movements.len(), 1);
}

#[test]
fn sixty_thousand_unknown_keys_give_ten_errors_and_a_count() {
    let source = format!("{PIECE}{}", keys(60_000, ""));
    let started = Instant::now();
    let found = errors(&source);
    assert!(started.elapsed() < LINEAR_ENOUGH, "{:?}", started.elapsed());
    assert_eq!(found.len(), 11, "{found:?}");
    assert_eq!(found[0].0, "k0");
    assert!(
        found[0]
            .2
            .starts_with("unknown field `k0` in a maestro piece; known: name, "),
        "{}",
        found[0].2
    );
    assert_eq!(
        found[10],
        f(
            "k10",
            25,
            "and 59,990 more unknown fields in a maestro piece, from `k10` on"
        )
    );
}

#[test]
fn forty_thousand_duplicate_keys_are_counted_not_listed() {
    let source = format!(
        "{PIECE}x-table:\n{}{}",
        keys(20_000, "  "),
        keys(20_000, "  ")
    );
    let started = Instant::now();
    let found = errors(&source);
    assert!(started.elapsed() < LINEAR_ENOUGH, "{:?}", started.elapsed());
    assert_eq!(found.len(), 101, "{}", found.len());
    assert_eq!(
        found[0],
        f(
            "x-table.k0",
            20_016,
            "duplicate key `k0`; it is already set on line 16"
        )
    );
    assert_eq!(
        found[100],
        f("", 20_116, "and 19,900 more YAML problems like these")
    );
}

#[test]
fn the_report_of_many_unknown_keys_snapshot() {
    let source = format!("{PIECE}{}", keys(14, ""));
    let failed = failed(&source);
    insta::assert_snapshot!(render_diagnostics(&source, &failed.errors));
}

#[test]
fn invalid_utf8_is_an_invalid_file_at_the_first_bad_byte() {
    let mut bytes = PIECE.replace("You work.", "You wörk.").into_bytes();
    let at = PIECE.find("work.").unwrap() + 3; // after "wö" (ö is two bytes)
    bytes.splice(at..at, [0xFF, 0xFE]);
    let failed = load_bytes(&bytes, Path::new("piece.yaml"), &LoadOptions::default()).unwrap_err();
    assert_eq!(failed.errors.len(), 1);
    let d = &failed.errors[0];
    // Columns count characters: `    persona: You wö` is 19 of them.
    assert_eq!((d.line, d.column), (8, 20), "{d:?}");
    assert_eq!(d.span, (at, at + 1));
    let shown = String::from_utf8_lossy(&bytes);
    insta::assert_snapshot!(render_diagnostics(&shown, &failed.errors));
}

#[test]
fn a_nul_byte_is_reported_as_such() {
    let source = PIECE.replace("You work.", "You\0work.");
    let failed = failed(&source);
    assert_eq!(failed.errors.len(), 1);
    assert_eq!(
        failed.errors[0].message,
        "the file contains a NUL byte (U+0000) here; a piece is text: remove it"
    );
    // The snippet carries the NUL itself; shown as ␀ to keep the snapshot text.
    insta::assert_snapshot!(render_diagnostics(&source, &failed.errors).replace('\0', "␀"));
}

#[test]
fn an_alias_used_as_a_key_is_named() {
    let source = PIECE.replace("persona: You work.", "persona: &p You work.\n    *p : x");
    let failed = failed(&source);
    insta::assert_snapshot!(render_diagnostics(&source, &failed.errors));
}
