//! ReadPdf, PdfToImages and SplitPdf on PDFs made by reportlab (and encrypted by qpdf), with
//! poppler-utils and qpdf run in the real Bash sandbox.

use crate::support;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::{call, call_with, config, ctx, workspace};

#[tokio::test]
#[cfg_attr(
    any(no_document_writers, no_pdf_programs),
    ignore = "needs reportlab, poppler-utils and qpdf (scripts/prerequisites.sh)"
)]
async fn read_pdf_gives_each_page_its_number_and_names_scanned_pages() {
    let ws = workspace(&["pdf"]);
    let out = call(ws.path(), "ReadPdf", json!({"file_path": "report.pdf"})).await;
    assert!(out.ok, "{}", out.output);
    let mut expected = String::from("Pages: 4\n");
    for n in 1..=3 {
        expected.push_str(&format!(
            "\n## Page {n}\n\nChapter {n}\nThis is the body text of page {n}.\nA second line follows the first.\n"
        ));
    }
    expected.push_str("\n## Page 4\n\n[no text layer: this page is an image (a scan?); PdfToImages renders it to read]\n");
    assert_eq!(out.output, expected);
}

#[tokio::test]
#[cfg_attr(
    any(no_document_writers, no_pdf_programs),
    ignore = "needs reportlab, poppler-utils and qpdf (scripts/prerequisites.sh)"
)]
async fn read_pdf_reads_two_columns_in_order_and_keeps_table_rows() {
    let ws = workspace(&["columns"]);
    let out = call(ws.path(), "ReadPdf", json!({"file_path": "columns.pdf"})).await;
    assert!(out.ok, "{}", out.output);
    assert_eq!(
        out.output,
        "Pages: 1\n\n## Page 1\n\nLeft column heading\nLeft sentence 1.\nLeft sentence 2.\nLeft sentence 3.\n\
Right column starts\nRegion Sales\nNorth 120\nSouth 95\nRight sentence 1.\nRight sentence 2.\n"
    );
}

#[tokio::test]
#[cfg_attr(
    any(no_document_writers, no_pdf_programs),
    ignore = "needs reportlab, poppler-utils and qpdf (scripts/prerequisites.sh)"
)]
async fn read_pdf_reads_the_pages_asked_and_says_which_pages_read_on() {
    let ws = workspace(&["pdf"]);
    let out = call(
        ws.path(),
        "ReadPdf",
        json!({"file_path": "report.pdf", "pages": "3,2"}),
    )
    .await;
    assert!(out.ok, "{}", out.output);
    assert!(
        out.output.contains("## Page 2\n\nChapter 2\n"),
        "{}",
        out.output
    );
    assert!(
        out.output.contains("## Page 3\n\nChapter 3\n"),
        "{}",
        out.output
    );
    assert!(!out.output.contains("Chapter 1"), "{}", out.output);

    let mut cfg = config();
    cfg.max_output_chars = 150;
    let cut = call_with(
        cfg,
        &ctx(ws.path()),
        "ReadPdf",
        json!({"file_path": "report.pdf"}),
    )
    .await;
    assert!(cut.ok, "{}", cut.output);
    assert!(cut.output.contains("## Page 1\n"), "{}", cut.output);
    assert!(!cut.output.contains("## Page 3\n"), "{}", cut.output);
    assert!(
        cut.output.ends_with(
            "[cut: pages 3-4 are not shown; call ReadPdf again with pages: \"3-4\" to read on]\n"
        ) || cut.output.ends_with(
            "[cut: pages 2-4 are not shown; call ReadPdf again with pages: \"2-4\" to read on]\n"
        ),
        "{}",
        cut.output
    );

    let bad = call(
        ws.path(),
        "ReadPdf",
        json!({"file_path": "report.pdf", "pages": "2-9"}),
    )
    .await;
    assert!(!bad.ok);
    assert_eq!(
        bad.output,
        "ReadPdf report.pdf: pages \"2-9\": \"2-9\" is outside 1-4; write pages as 3, 1-5 or 2,4-6 (the document has 4 page(s))"
    );
}

#[tokio::test]
#[cfg_attr(
    any(no_document_writers, no_pdf_programs),
    ignore = "needs reportlab, poppler-utils and qpdf (scripts/prerequisites.sh)"
)]
async fn encrypted_truncated_corrupt_and_wrong_type_pdfs_are_named_as_such() {
    let ws = workspace(&["pdf", "docx"]);
    let dir = ws.path();
    let status = std::process::Command::new("qpdf")
        .args(["--encrypt", "user-secret", "owner-secret", "256", "--"])
        .arg(dir.join("report.pdf"))
        .arg(dir.join("locked.pdf"))
        .status()
        .unwrap();
    assert!(status.success());
    let report = std::fs::read(dir.join("report.pdf")).unwrap();
    std::fs::write(dir.join("half.pdf"), &report[..report.len() / 3]).unwrap();
    std::fs::write(
        dir.join("noise.pdf"),
        b"%PDF-1.4\nnot really a pdf at all\n",
    )
    .unwrap();
    std::fs::copy(dir.join("report.docx"), dir.join("renamed.pdf")).unwrap();
    let cases = [
        (
            "locked.pdf",
            "ReadPdf locked.pdf: the file is encrypted: the PDF is protected with a password",
        ),
        ("half.pdf", "ReadPdf half.pdf: the file is corrupt: "),
        ("noise.pdf", "ReadPdf noise.pdf: the file is corrupt: "),
        (
            "renamed.pdf",
            "ReadPdf renamed.pdf: the file is of the wrong type: not a PDF: it is a zip package (an Office document?); use ReadDocx, ReadExcel or ReadPPTX",
        ),
    ];
    for (file, expected) in cases {
        let out = call(dir, "ReadPdf", json!({"file_path": file})).await;
        assert!(!out.ok, "{file}: {}", out.output);
        assert!(
            out.output.starts_with(expected),
            "{file}:\n{}\nexpected:\n{expected}",
            out.output
        );
        if expected.contains("corrupt") {
            assert!(
                out.output.ends_with("; the PDF is damaged or truncated"),
                "{}",
                out.output
            );
        }
    }
}

#[tokio::test]
#[cfg_attr(
    any(no_document_writers, no_pdf_programs),
    ignore = "needs reportlab, poppler-utils and qpdf (scripts/prerequisites.sh)"
)]
async fn pdf_to_images_renders_pngs_under_input() {
    let ws = workspace(&["pdf"]);
    let out = call(
        ws.path(),
        "PdfToImages",
        json!({"file_path": "report.pdf", "pages": "2,4", "dpi": 50}),
    )
    .await;
    assert!(out.ok, "{}", out.output);
    assert_eq!(
        out.output,
        "Rendered at 50 dpi:\ninput/report-pages/page-2.png\ninput/report-pages/page-4.png\n"
    );
    for page in ["page-2.png", "page-4.png"] {
        let png = std::fs::read(ws.path().join("input/report-pages").join(page)).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{page} is not a PNG");
    }
    assert!(!ws.path().join("input/report-pages/page-1.png").exists());
    let bad = call(
        ws.path(),
        "PdfToImages",
        json!({"file_path": "report.pdf", "dpi": 2000}),
    )
    .await;
    assert!(!bad.ok);
    assert!(
        bad.output.contains("dpi 2000 is outside 36-300"),
        "{}",
        bad.output
    );
}

#[tokio::test]
#[cfg_attr(
    any(no_document_writers, no_pdf_programs),
    ignore = "needs reportlab, poppler-utils and qpdf (scripts/prerequisites.sh)"
)]
async fn split_pdf_writes_each_range_as_a_pdf_only_with_edit_and_in_a_writable_folder() {
    let ws = workspace(&["pdf"]);
    let input = json!({"file_path": "report.pdf", "ranges": ["1-2", "4"]});
    let refused = call(ws.path(), "SplitPdf", input.clone()).await;
    assert!(!refused.ok);
    assert_eq!(
        refused.output,
        "`SplitPdf` is not available in this movement (it cannot edit files); the tools you can call are: ReadDocx, ReadExcel, ReadPPTX, ReadPdf, PdfToImages, ReadImage"
    );
    assert!(!ws.path().join("output").exists());

    let mut edit = ctx(ws.path());
    edit.edit = true;
    let out = call_with(config(), &edit, "SplitPdf", input).await;
    assert!(out.ok, "{}", out.output);
    assert_eq!(
        out.output,
        "Wrote 2 PDF(s) from report.pdf:\noutput/report-p1-2.pdf: pages 1-2 (2 page(s))\noutput/report-p4.pdf: pages 4-4 (1 page(s))\n"
    );
    let first = call(
        ws.path(),
        "ReadPdf",
        json!({"file_path": "output/report-p1-2.pdf"}),
    )
    .await;
    assert!(
        first
            .output
            .starts_with("Pages: 2\n\n## Page 1\n\nChapter 1\n"),
        "{}",
        first.output
    );
    assert!(
        first.output.contains("## Page 2\n\nChapter 2\n"),
        "{}",
        first.output
    );
    let last = call(
        ws.path(),
        "ReadPdf",
        json!({"file_path": "output/report-p4.pdf"}),
    )
    .await;
    assert!(
        last.output
            .starts_with("Pages: 1\n\n## Page 1\n\n[no text layer"),
        "{}",
        last.output
    );

    let elsewhere = call_with(
        config(),
        &edit,
        "SplitPdf",
        json!({"file_path": "report.pdf", "ranges": ["1"], "output_dir": "input"}),
    )
    .await;
    assert!(!elsewhere.ok);
    assert!(elsewhere.output.contains("output"), "{}", elsewhere.output);
    assert!(!ws.path().join("input/report-p1.pdf").exists());
}
