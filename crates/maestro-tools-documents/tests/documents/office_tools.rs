//! ReadDocx, ReadExcel and ReadPPTX on documents made by real writers (python-docx, openpyxl,
//! python-pptx), parsed by the real reader child; corrupt, truncated, encrypted and zip-bomb
//! inputs each get a clear error, and the process calling the tools carries on.

use crate::support;

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::{call, call_with, config, ctx, workspace};

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn read_docx_keeps_headings_lists_tables_and_comments() {
    let ws = workspace(&["docx"]);
    let out = call(ws.path(), "ReadDocx", json!({"file_path": "report.docx"})).await;
    assert!(out.ok, "{}", out.output);
    let text = out.output;
    let expected = "# Quarterly Report\n\n## Summary\n\nRevenue grew in every region. [comment 0]\n\n\
- First bullet point\n- Second bullet point\n1. Step one\n\n### Figures\n\n\
| Region | Sales |\n| --- | --- |\n| North | 120 |\n| South \\| East | 95 |\n\n\
Closing remarks.\n\n## Comments\n\n- [comment 0] Alice: Check the northern figure\n";
    assert_eq!(text, expected);
}

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn read_docx_cuts_long_output_and_reads_on_from_the_offset() {
    let ws = workspace(&["docx"]);
    let mut cfg = config();
    cfg.max_output_chars = 60;
    let first = call_with(
        cfg.clone(),
        &ctx(ws.path()),
        "ReadDocx",
        json!({"file_path": "report.docx"}),
    )
    .await;
    assert!(first.ok, "{}", first.output);
    assert!(
        first.output.starts_with("# Quarterly Report\n"),
        "{}",
        first.output
    );
    let marker = first.output.lines().last().unwrap();
    assert!(marker.starts_with("[cut: bytes "), "{marker}");
    let offset: usize = marker
        .split("offset: ")
        .nth(1)
        .unwrap()
        .trim_end_matches(" to read on]")
        .parse()
        .unwrap();
    let next = call_with(
        cfg,
        &ctx(ws.path()),
        "ReadDocx",
        json!({"file_path": "report.docx", "offset": offset}),
    )
    .await;
    assert!(next.ok, "{}", next.output);
    assert!(
        next.output.starts_with(&format!("[from byte {offset} of ")),
        "{}",
        next.output
    );
    let shown = first
        .output
        .lines()
        .filter(|l| !l.starts_with("[cut"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !next.output.contains("# Quarterly Report"),
        "the second part repeats the first: {shown}"
    );
}

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn read_excel_names_every_sheet_and_shows_dates_formulas_and_ranges() {
    let ws = workspace(&["xlsx"]);
    let out = call(
        ws.path(),
        "ReadExcel",
        json!({"file_path": "book.xlsx", "sheet": "Sales"}),
    )
    .await;
    assert!(out.ok, "{}", out.output);
    let expected = "Sheets:\n\
- \"Sales\": 3 rows x 5 columns, cells A1:E3\n\
- \"Notes\": 1 rows x 1 columns, cells A1:A1\n\
- \"Big\": 3000 rows x 2 columns, cells A1:B3000\n\n\
## Sheet: Sales\n\n\
|  | A | B | C | D | E |\n\
| --- | --- | --- | --- | --- | --- |\n\
| 1 | Region | Q1 | Q2 | Total | Closed |\n\
| 2 | North | 10 | 20 | =B2+C2 (no saved value) | 2024-03-31 |\n\
| 3 | South | 5 | 7.5 | =B3+C3 (no saved value) | 2024-06-30 |\n\n\
2 formula cell(s) have no saved value (the program that wrote the file did not compute them); their formulas are shown instead\n";
    assert_eq!(out.output, expected);

    let ranged = call(
        ws.path(),
        "ReadExcel",
        json!({"file_path": "book.xlsx", "sheet": "Sales", "range": "B2:C3"}),
    )
    .await;
    assert!(ranged.ok, "{}", ranged.output);
    assert!(
        ranged
            .output
            .contains("|  | B | C |\n| --- | --- | --- |\n| 2 | 10 | 20 |\n| 3 | 5 | 7.5 |\n"),
        "{}",
        ranged.output
    );

    let missing = call(
        ws.path(),
        "ReadExcel",
        json!({"file_path": "book.xlsx", "sheet": "Costs"}),
    )
    .await;
    assert!(!missing.ok);
    assert_eq!(
        missing.output,
        "ReadExcel book.xlsx: the workbook has no sheet named \"Costs\"; its sheets are \"Sales\", \"Notes\", \"Big\""
    );
}

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn read_excel_cuts_a_long_sheet_and_says_which_range_reads_on() {
    let ws = workspace(&["xlsx"]);
    let out = call(
        ws.path(),
        "ReadExcel",
        json!({"file_path": "book.xlsx", "sheet": "Big"}),
    )
    .await;
    assert!(out.ok, "{}", out.output);
    let marker = out
        .output
        .lines()
        .find(|l| l.starts_with("[cut: rows "))
        .expect(&out.output);
    // The range to read on starts at the first row not shown and ends at the sheet's last cell.
    let first_missing: u32 = marker["[cut: rows ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        marker.ends_with(&format!("range: \"A{first_missing}:B3000\" to read on]")),
        "{marker}"
    );
    assert!(out.output.contains(&format!(
        "| {} | {} |",
        first_missing - 1,
        first_missing - 1
    )));
    assert!(
        !out.output
            .contains(&format!("| {first_missing} | {first_missing} |"))
    );

    let next = call(ws.path(), "ReadExcel", json!({"file_path": "book.xlsx", "sheet": "Big", "range": format!("A{first_missing}:B3000")})).await;
    assert!(
        next.output.contains(&format!(
            "| {first_missing} | {first_missing} | row number {first_missing} with"
        )),
        "{}",
        next.output
    );
}

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn read_excel_reads_csv_as_a_table() {
    let ws = workspace(&["xlsx"]);
    let out = call(ws.path(), "ReadExcel", json!({"file_path": "plain.csv"})).await;
    assert!(out.ok, "{}", out.output);
    assert_eq!(
        out.output,
        "Sheets:\n- \"plain.csv\": 3 rows x 2 columns\n\n## Sheet: plain.csv\n\n\
| name | amount |\n| --- | --- |\n| widget | 3 |\n| comma, inside | 4 |\n"
    );
}

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn read_pptx_gives_each_slide_its_title_bullets_tables_and_notes() {
    let ws = workspace(&["pptx"]);
    let out = call(ws.path(), "ReadPPTX", json!({"file_path": "deck.pptx"})).await;
    assert!(out.ok, "{}", out.output);
    assert_eq!(
        out.output,
        "Slides: 3\n\n## Slide 1: Launch Plan\n\nInternal review\n\nSpeaker notes:\n\nMention the budget first.\n\n\
## Slide 2: Milestones\n\n- Design done\n  - Beta in May\n\n\
## Slide 3: Budget\n\n| Item | Cost |\n| --- | --- |\n| Servers | 4000 |\n"
    );
}

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn zip_bombs_are_refused_as_too_large_and_the_caller_carries_on() {
    let ws = workspace(&["docx", "bomb"]);
    for (tool, file) in [("ReadDocx", "bomb.docx"), ("ReadExcel", "bomb.xlsx")] {
        let out = call(ws.path(), tool, json!({"file_path": file})).await;
        assert!(!out.ok);
        assert!(
            out.output.starts_with(&format!("{tool} {file}: the file is too large: its parts would expand to 1073741832 bytes, more than the 268435456 bytes allowed")),
            "{}",
            out.output
        );
    }
    // With the size cap out of the way the child's memory limit stops the same bomb.
    let mut cfg = config();
    cfg.max_expanded_bytes = 8 << 30;
    cfg.memory_mb = 256;
    let out = call_with(
        cfg,
        &ctx(ws.path()),
        "ReadDocx",
        json!({"file_path": "bomb.docx"}),
    )
    .await;
    assert!(!out.ok);
    assert!(
        out.output.contains("too large") || out.output.contains("MiB of memory"),
        "{}",
        out.output
    );
    // The calling process is unharmed and reads the next document.
    let next = call(ws.path(), "ReadDocx", json!({"file_path": "report.docx"})).await;
    assert!(next.ok, "{}", next.output);
}

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn corrupt_truncated_encrypted_and_wrong_type_files_are_named_as_such() {
    let ws = workspace(&["docx", "xlsx", "pptx", "locked"]);
    let report = std::fs::read(ws.path().join("report.docx")).unwrap();
    std::fs::write(ws.path().join("half.docx"), &report[..report.len() / 2]).unwrap();
    std::fs::write(
        ws.path().join("noise.docx"),
        b"this is plain text, not a document",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("noise.xlsx"),
        b"this is plain text, not a workbook",
    )
    .unwrap();
    let cases = [
        (
            "ReadDocx",
            "half.docx",
            "ReadDocx half.docx: the file is corrupt: it is not a readable zip package, as a .docx file must be",
        ),
        (
            "ReadDocx",
            "noise.docx",
            "ReadDocx noise.docx: the file is corrupt: it is not a readable zip package",
        ),
        (
            "ReadDocx",
            "locked.docx",
            "ReadDocx locked.docx: the file is encrypted: it is a .docx file protected with a password",
        ),
        (
            "ReadExcel",
            "locked.xlsx",
            "ReadExcel locked.xlsx: the file is encrypted: the workbook is protected with a password",
        ),
        (
            "ReadDocx",
            "book.xlsx",
            "ReadDocx book.xlsx: the file is of the wrong type: not a Word document: it is an Excel workbook; use ReadExcel",
        ),
        (
            "ReadPPTX",
            "report.docx",
            "ReadPPTX report.docx: the file is of the wrong type: not a PowerPoint presentation: it is a Word document; use ReadDocx",
        ),
        (
            "ReadExcel",
            "deck.pptx",
            "ReadExcel deck.pptx: the file is of the wrong type: it is a PowerPoint presentation, not a spreadsheet; use ReadPPTX",
        ),
        (
            "ReadExcel",
            "noise.xlsx",
            "ReadExcel noise.xlsx: the file is of the wrong type: it is neither an Excel workbook",
        ),
    ];
    for (tool, file, expected) in cases {
        let out = call(ws.path(), tool, json!({"file_path": file})).await;
        assert!(!out.ok, "{tool} {file}: {}", out.output);
        assert!(
            out.output.starts_with(expected),
            "{tool} {file}:\n{}\nexpected:\n{expected}",
            out.output
        );
    }
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.docx"), b"PK").unwrap();
    let rel = format!(
        "../{}/secret.docx",
        outside.path().file_name().unwrap().to_str().unwrap()
    );
    for tool in [
        "ReadDocx",
        "ReadExcel",
        "ReadPPTX",
        "ReadPdf",
        "PdfToImages",
    ] {
        let out = call(ws.path(), tool, json!({"file_path": rel})).await;
        assert!(!out.ok);
        assert!(
            out.output.contains("outside the workspace") || out.output.contains("escapes"),
            "{tool}: {}",
            out.output
        );
    }
}

#[tokio::test]
async fn a_reader_that_hangs_is_killed_at_the_time_limit() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("slow.docx"), b"PK\x03\x04").unwrap();
    let pid_file = ws.path().join("reader.pid");
    let mut cfg = config();
    // A stand-in reader that records its pid and never answers.
    cfg.reader = maestro_tools_documents::ReaderCommand {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            format!("echo $$ > {}; exec sleep 600", pid_file.display()),
        ],
    };
    cfg.timeout = Duration::from_secs(1);
    let out = call_with(
        cfg,
        &ctx(ws.path()),
        "ReadDocx",
        json!({"file_path": "slow.docx"}),
    )
    .await;
    assert!(!out.ok);
    assert_eq!(
        out.output,
        "ReadDocx slow.docx: reading it took longer than 1s and was stopped; the file is too complex or malformed. Read fewer pages, or convert it with Bash"
    );
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();
    // Killed at once; the runtime reaps it shortly after.
    let mut gone = false;
    for _ in 0..100 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => {
                gone = true;
                break;
            }
            Ok(stat) if stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')) => {
                gone = true;
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert!(gone, "the reader {pid} is still running");
}

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn read_excel_reads_excel_97_and_opendocument_sheets_with_their_dates() {
    let ws = workspace(&["legacy"]);
    let xls = call(ws.path(), "ReadExcel", json!({"file_path": "old.xls"})).await;
    assert!(xls.ok, "{}", xls.output);
    let expected = "Sheets:\n\
- \"Ledger\": 3 rows x 3 columns, cells A1:C3\n\
- \"Empty\": 0 rows x 0 columns\n\n\
## Sheet: Ledger\n\n\
|  | A | B | C |\n\
| --- | --- | --- | --- |\n\
| 1 | Item | Amount | Paid |\n\
| 2 | Rent | 1200 | 2023-01-31 |\n\
| 3 | Power | 87.5 | 2023-02-28 |\n\n\
## Sheet: Empty\n\n\
(no cells in this range)\n";
    assert_eq!(xls.output, expected);

    let ods = call(ws.path(), "ReadExcel", json!({"file_path": "plan.ods"})).await;
    assert!(ods.ok, "{}", ods.output);
    let expected = "Sheets:\n\
- \"Plan\": 3 rows x 3 columns, cells A1:C3\n\n\
## Sheet: Plan\n\n\
|  | A | B | C |\n\
| --- | --- | --- | --- |\n\
| 1 | Task | Hours | Due |\n\
| 2 | Design | 12.5 | 2024-05-01 |\n\
| 3 | Build | 40 | 2024-06-15 |\n";
    assert_eq!(ods.output, expected);
}

#[tokio::test]
#[cfg_attr(
    no_document_writers,
    ignore = "needs the Python document writers (scripts/prerequisites.sh)"
)]
async fn read_docx_gives_footnotes_at_their_markers_and_at_the_end() {
    let ws = workspace(&["footnotes"]);
    let out = call(ws.path(), "ReadDocx", json!({"file_path": "notes.docx"})).await;
    assert!(out.ok, "{}", out.output);
    // pandoc numbers its footnotes from 9 inside the file; they read as Word shows them.
    assert_eq!(
        out.output,
        "## Sources\n\nThe claim needs a source.[^1] Another sentence follows.[^2]\n\n\
## Footnotes\n\n[^1]: Smith, 2020, page 4.\n[^2]: See the appendix.\n"
    );
}
