//! Hostile input: YAML errors become diagnostics with positions, never panics or hangs; and a
//! property test feeds arbitrary bytes and mutated real pieces to the loader.

use crate::support;

use std::path::{Path, PathBuf};

use maestro_piece::{LoadOptions, Severity, load_str};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use support::{errors, f};

#[test]
fn syntax_errors_have_a_position() {
    let errs = errors("name: x\nmovements: [a, b\n");
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].2.starts_with("YAML syntax error: "),
        "{}",
        errs[0].2
    );
    assert!(errs[0].1 >= 2, "{errs:?}");
}

#[test]
fn tabs_are_errors() {
    let errs = errors("name: x\nmovements:\n\t- name: a\n");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].1, 3);
    assert!(
        errs[0].2.ends_with("indent with spaces, not tabs"),
        "{}",
        errs[0].2
    );
}

/// A tab inside a multi-line value or a block scalar is reported where the tab is, not on the
/// line where the value starts.
#[test]
fn tab_errors_name_the_line_and_column_of_the_tab() {
    let at = |src: &str| {
        let failed = load_str(src, Path::new("piece.yaml"), &LoadOptions::default())
            .expect_err("a tab in the indentation is an error");
        assert_eq!(failed.errors.len(), 1, "{failed}");
        let d = &failed.errors[0];
        assert!(
            d.message.ends_with("indent with spaces, not tabs"),
            "{}",
            d.message
        );
        (d.line, d.column)
    };
    // a tab starting the line after a scalar
    assert_eq!(
        at("name: x\nmovements:\n  - name: a\n\tpersona: p\n"),
        (4, 1)
    );
    // a tab after spaces
    assert_eq!(
        at("name: x\nmovements:\n  - name: a\n    persona: p\n  \tedit: true\n"),
        (5, 3)
    );
    // a blank line between the value and the tab
    assert_eq!(
        at("name: x\nmovements:\n  - name: a\n    persona: p\n\n\t  edit: true\n"),
        (6, 1)
    );
    // at the top level
    assert_eq!(at("name: x\n\tdescription: d\n"), (2, 1));
    // a tab that starts a line with content: the tab, not the content after it, and not a
    // later line with a tab
    assert_eq!(
        at("name: x\nmovements:\n\t- name: a\n\t  persona: p\n"),
        (3, 1)
    );
    // the first line of a block scalar
    assert_eq!(
        at("name: x\nmovements:\n  - name: a\n    instruction: |\n\tdo it\n"),
        (5, 1)
    );
}

#[test]
fn duplicate_keys_name_the_path_and_both_lines() {
    let src = "name: x\ndescription: d\nmax_movements: 2\ninitial_movement: a\nmovements:\n  - name: a\n    edit: false\n    edit: true\n    persona: p q\n    instruction: i j\n    allowed_tools: []\n    rules: []\n";
    assert_eq!(
        errors(src),
        vec![f(
            "movements[0].edit",
            8,
            "duplicate key `edit`; it is already set on line 7"
        )]
    );
}

#[test]
fn alias_bombs_and_deep_nesting_are_errors() {
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let errs = errors(&bomb);
    assert!(errs[0].2.contains("more than 100000 nodes"), "{errs:?}");
    let deep = format!("name: {}{}", "[".repeat(300), "]".repeat(300));
    assert_eq!(errors(&deep)[0].2, "nesting deeper than 128 levels");
}

#[test]
fn empty_and_non_mapping_documents_are_errors() {
    assert_eq!(
        errors(""),
        vec![f(
            "",
            1,
            "the file is empty; a piece needs at least `name` and `movements` (or `roles` and `graph`)"
        )]
    );
    assert_eq!(
        errors("- a\n- b\n"),
        vec![f(
            "",
            1,
            "a piece is a mapping with `name`, `movements`, … at the top level; found a list"
        )]
    );
}

fn fixture_sources() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures");
    let mut files = maestro_piece::discover(&root.join("takt-v0.30/builtins/en/pieces"));
    files.extend(maestro_piece::discover(&root.join("workflow-graph")));
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// Loading never panics, and every error it reports has a position and a message.
fn check_no_panic(source: &str) {
    let origin = Path::new("/nonexistent/pieces/fuzz.yaml");
    if let Err(failed) = load_str(source, origin, &LoadOptions::default()) {
        assert!(!failed.errors.is_empty());
        for e in &failed.errors {
            assert_eq!(e.severity, Severity::Error);
            assert!(e.line >= 1 && e.column >= 1, "{e:?}");
            assert!(e.span.0 <= e.span.1 && e.span.1 <= source.len(), "{e:?}");
            assert!(!e.message.is_empty());
        }
        let _ = maestro_piece::render_diagnostics(source, &failed.errors);
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete { at: usize, len: usize },
    Insert { at: usize, text: String },
    DuplicateLine { line: usize },
    SwapLines { a: usize, b: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (
            any::<usize>(),
            prop::sample::select(vec![
                ":",
                "- ",
                "\t",
                "&a ",
                "*a",
                "[",
                "]",
                "{",
                "}",
                "\"",
                "'",
                "|\n",
                "\n  ",
                "#",
                "next: x\n",
                "ai(\"",
                "all(",
                "{{{",
                "$START",
                "\u{feff}",
                "名",
                "---\n",
                "? ",
                "!!str ",
            ])
        )
            .prop_map(|(at, text)| Mutation::Insert {
                at,
                text: text.to_owned()
            }),
        any::<usize>().prop_map(|line| Mutation::DuplicateLine { line }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines { a, b }),
    ]
}

fn apply(source: &str, m: &Mutation) -> String {
    let boundary = |mut i: usize| {
        i %= source.len() + 1;
        while !source.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match m {
        Mutation::Delete { at, len } => {
            let start = boundary(*at);
            let end = boundary(start + len).max(start);
            format!("{}{}", &source[..start], &source[end..])
        }
        Mutation::Insert { at, text } => {
            let at = boundary(*at);
            format!("{}{text}{}", &source[..at], &source[at..])
        }
        Mutation::DuplicateLine { line } => {
            let mut lines: Vec<&str> = source.lines().collect();
            if !lines.is_empty() {
                let i = line % lines.len();
                lines.insert(i, lines[i]);
            }
            lines.join("\n")
        }
        Mutation::SwapLines { a, b } => {
            let mut lines: Vec<&str> = source.lines().collect();
            if !lines.is_empty() {
                let n = lines.len();
                lines.swap(a % n, b % n);
            }
            lines.join("\n")
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        check_no_panic(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn mutated_fixtures_never_panic(
        index in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let sources = fixture_sources();
        let mut source = index.get(&sources).clone();
        for m in &mutations {
            source = apply(&source, m);
        }
        check_no_panic(&source);
    }
}
