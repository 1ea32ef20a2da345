//! `maestro validate` on files that are not clean text, and on a piece far larger than any real
//! one: an invalid file (exit 1) with the place of the problem, never a usage error (exit 2).

use crate::support;

use support::{args, maestro};

const PIECE: &str = "name: slow\ndescription: one movement\nmax_movements: 3\ninitial_movement: work\n\
movements:\n  - name: work\n    edit: false\n    persona: You work.\n    instruction: \"{task}\"\n    \
allowed_tools: [Read]\n    rules:\n      - condition: done\n        next: work\n    default_next: ABORT\n";

#[tokio::test]
async fn invalid_utf8_is_an_invalid_file_with_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = PIECE.as_bytes().to_vec();
    let at = PIECE.find("work.").unwrap();
    bytes.insert(at, 0xFF); // `    persona: You ` is 17 characters: the bad byte is column 18
    std::fs::write(dir.path().join("bad.yaml"), &bytes).unwrap();
    let out = maestro(dir.path(), args(&["validate", "bad.yaml"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("invalid  bad.yaml"), "{stdout}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains(
            "error: the file is not valid UTF-8: byte 0xFF at line 8, column 18 cannot be read; \
             save the file as UTF-8\n  --> bad.yaml:8:18"
        ),
        "{all}"
    );
    let json = maestro(dir.path(), args(&["validate", "--json", "bad.yaml"])).await;
    assert_eq!(json.status.code(), Some(1));
    let line: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(line["valid"], false);
    assert_eq!(line["errors"][0]["line"], 8);
    assert_eq!(line["errors"][0]["column"], 18);
}

#[tokio::test]
async fn a_piece_with_60000_unknown_keys_gets_a_short_report() {
    let dir = tempfile::tempdir().unwrap();
    let keys: String = (0..60_000).map(|i| format!("k{i}: v\n")).collect();
    std::fs::write(dir.path().join("big.yaml"), format!("{PIECE}{keys}")).unwrap();
    let out = maestro(dir.path(), args(&["validate", "big.yaml"])).await;
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        all.contains("error: and 59,990 more unknown fields in a maestro piece, from `k10` on"),
        "{all}"
    );
    assert!(all.len() < 5_000, "{} bytes of report", all.len());
}
