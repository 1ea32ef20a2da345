//! `maestro knowledge ingest|search|list|rm` through the binary on a real SQLite store:
//! ingesting twice is a no-op, a query with quotes and colons is answered, each owner sees
//! their own collections and the shared ones, and a deleted document is gone.

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support;

use support::jobs::{Project, stderr};

async fn ok(project: &Project, args: &[&str]) -> String {
    let out = project.maestro(args).await;
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn knowledge_commands_ingest_search_list_and_delete() {
    let project = Project::new();
    std::fs::write(
        project.path().join("guide.md"),
        "# Guide\n\n## Install\n\nRun apt-get install quokka-server first.\n\n## Use\n\nStart it with quokka serve.\n",
    )
    .unwrap();
    std::fs::write(
        project.path().join("team.txt"),
        "Ana keeps the quokka runbook.\n",
    )
    .unwrap();

    let first = lines(&ok(&project, &["knowledge", "ingest", "guide.md", "--json"]).await);
    assert_eq!(first[0]["created"], true);
    assert_eq!(first[0]["document"]["title"], "Guide");
    assert_eq!(first[0]["document"]["chunk_count"], 2);
    let id = first[0]["document"]["id"].as_str().unwrap().to_string();
    let again = ok(&project, &["knowledge", "ingest", "guide.md"]).await;
    assert_eq!(again, format!("{id}  unchanged\n"));
    ok(
        &project,
        &[
            "knowledge",
            "ingest",
            "team.txt",
            "--shared",
            "--collection",
            "team",
        ],
    )
    .await;

    let hits = lines(
        &ok(
            &project,
            &[
                "knowledge",
                "search",
                "\"install\": quokka-server?",
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(hits[0]["document_id"], id.as_str());
    assert_eq!(hits[0]["location"], "Guide > Install");
    assert!(hits[0]["score"].as_f64().unwrap() > 0.0);
    let text = ok(&project, &["knowledge", "search", "install", "-k", "1"]).await;
    assert!(
        text.contains("Guide § Guide > Install  (guide.md, "),
        "{text}"
    );

    let mine = lines(&ok(&project, &["knowledge", "list", "--json"]).await);
    assert_eq!(mine.len(), 2);
    let bob = lines(
        &ok(
            &project,
            &["knowledge", "list", "--json", "--owner", "bob@example.com"],
        )
        .await,
    );
    assert_eq!(bob.len(), 1);
    assert_eq!(bob[0]["shared"], true);
    assert_eq!(bob[0]["collection"], "team");

    let unsupported = project
        .maestro(&["knowledge", "ingest", "missing.pdf"])
        .await;
    assert_eq!(unsupported.status.code(), Some(2));
    assert!(
        stderr(&unsupported).contains("missing.pdf"),
        "{}",
        stderr(&unsupported)
    );

    let deleted = ok(&project, &["knowledge", "rm", &id]).await;
    assert_eq!(deleted, format!("deleted {id}  Guide\n"));
    let gone = project.maestro(&["knowledge", "rm", &id]).await;
    assert_eq!(gone.status.code(), Some(2));
    assert!(
        stderr(&gone).contains(&format!("no document {id}")),
        "{}",
        stderr(&gone)
    );
    assert_eq!(
        lines(&ok(&project, &["knowledge", "list", "--json"]).await).len(),
        1
    );
}

/// Writes the documents `make_documents.py` (the document tools' test writers) makes for
/// `what` into `dir`.
fn make_documents(dir: &std::path::Path, what: &[&str]) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../maestro-tools-documents/tests/fixtures/make_documents.py");
    let status = std::process::Command::new("python3")
        .arg(&script)
        .arg(dir)
        .args(what)
        .status()
        .unwrap();
    assert!(status.success(), "{} failed", script.display());
}

#[tokio::test]
#[cfg_attr(
    any(no_document_writers, no_pdf_programs),
    ignore = "needs the Python document writers, poppler-utils and qpdf (scripts/prerequisites.sh)"
)]
async fn pdfs_and_office_documents_are_ingested_by_page_and_heading() {
    let project = Project::new();
    make_documents(project.path(), &["pdf", "docx", "xlsx", "pptx", "locked"]);

    // A PDF: a chunk per page, each found with its page.
    let pdf = lines(&ok(&project, &["knowledge", "ingest", "report.pdf", "--json"]).await);
    assert_eq!(pdf[0]["created"], true, "{pdf:?}");
    assert_eq!(pdf[0]["document"]["chunk_count"], 3, "{pdf:?}");
    let hits = lines(
        &ok(
            &project,
            &[
                "knowledge",
                "search",
                "body text of page 2",
                "-k",
                "1",
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(hits[0]["location"], "Page 2", "{hits:?}");
    assert!(
        hits[0]["text"].as_str().unwrap().contains("Chapter 2"),
        "{hits:?}"
    );
    // The same bytes again: nothing is done.
    let again = lines(&ok(&project, &["knowledge", "ingest", "report.pdf", "--json"]).await);
    assert_eq!(again[0]["created"], false);
    assert_eq!(again[0]["document"]["id"], pdf[0]["document"]["id"]);

    // Word, Excel and PowerPoint keep their headings, sheets and slides as locations.
    let docx = lines(&ok(&project, &["knowledge", "ingest", "report.docx", "--json"]).await);
    assert_eq!(docx[0]["document"]["title"], "Quarterly Report", "{docx:?}");
    let hits = lines(
        &ok(
            &project,
            &[
                "knowledge",
                "search",
                "northern figure region sales",
                "--json",
            ],
        )
        .await,
    );
    let docx_id = docx[0]["document"]["id"].as_str().unwrap();
    let hit = hits
        .iter()
        .find(|h| h["document_id"] == docx_id)
        .unwrap_or_else(|| panic!("no hit in the docx: {hits:?}"));
    assert!(
        hit["text"].as_str().unwrap().contains("| North | 120 |"),
        "{hit}"
    );
    ok(&project, &["knowledge", "ingest", "book.xlsx"]).await;
    let hits = lines(
        &ok(
            &project,
            &[
                "knowledge",
                "search",
                "Prepared by finance",
                "-k",
                "1",
                "--json",
            ],
        )
        .await,
    );
    assert!(
        hits[0]["location"].as_str().unwrap().contains("Notes"),
        "{hits:?}"
    );

    // An encrypted workbook is refused with the reason, and nothing is stored.
    let out = project
        .maestro(&["knowledge", "ingest", "locked.xlsx"])
        .await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("locked.xlsx cannot be read"), "{err}");
    assert!(err.contains("encrypted"), "{err}");
    let listed = lines(&ok(&project, &["knowledge", "list", "--json"]).await);
    assert_eq!(listed.len(), 3, "{listed:?}");
}
