//! The document tools through the shipped binary: `maestro tools call ReadExcel` parses the
//! file in `maestro __document-reader`, the same binary started again as the reader child.

use assert_cmd::Command;
use serde_json::{Value, json};

fn call(workspace: &std::path::Path, tool: &str, input: Value) -> (i32, Value) {
    let out = Command::cargo_bin("maestro")
        .unwrap()
        .args(["tools", "call", tool, "--input", &input.to_string()])
        .arg("--workspace")
        .arg(workspace)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    (
        out.status.code().unwrap(),
        serde_json::from_str(&stdout).unwrap(),
    )
}

#[test]
fn the_binary_reads_documents_in_its_reader_child() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("prices.csv"),
        "item,price\ntea,3\n\"milk, whole\",2\n",
    )
    .unwrap();
    std::fs::write(ws.path().join("notes.xlsx"), "just text, not a workbook").unwrap();
    let (code, out) = call(ws.path(), "ReadExcel", json!({"file_path": "prices.csv"}));
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out["output"],
        "Sheets:\n- \"prices.csv\": 3 rows x 2 columns\n\n## Sheet: prices.csv\n\n\
| item | price |\n| --- | --- |\n| tea | 3 |\n| milk, whole | 2 |\n"
    );
    let (code, out) = call(ws.path(), "ReadExcel", json!({"file_path": "notes.xlsx"}));
    assert_eq!(code, 1, "{out}");
    assert!(
        out["error"].as_str().unwrap().starts_with(
            "ReadExcel notes.xlsx: the file is of the wrong type: it is neither an Excel workbook"
        ),
        "{out}"
    );
}

#[test]
fn the_reader_child_is_not_a_command_for_people() {
    let out = Command::cargo_bin("maestro")
        .unwrap()
        .arg("__document-reader")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("run by the document tools, not by hand"),
        "{stderr}"
    );
    let help = Command::cargo_bin("maestro")
        .unwrap()
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        !String::from_utf8(help.stdout)
            .unwrap()
            .contains("document-reader")
    );
}
