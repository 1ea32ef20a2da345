//! Whole documents as Markdown for the knowledge base: the same readers as the tools (the reader
//! child for Office files and CSV, poppler in the sandbox for PDFs), under the same limits, with
//! no per-answer cut. PDF pages become `## Page N` sections, so a chunk's location is its page.

use std::fmt::Write as _;
use std::path::Path;

use maestro_tools::{ToolContext, WorkspaceKind};
use tokio_util::sync::CancellationToken;

use crate::error::DocError;
use crate::protocol::{Kind, Request};
use crate::{DocumentsConfig, pdf, reader};

/// The file extensions (lower case, no dot) [`markdown_for_index`] reads.
pub const INDEXABLE: &[&str] = &[
    "pdf", "docx", "pptx", "xlsx", "xlsm", "xlsb", "xls", "ods", "csv",
];

/// Bytes of Markdown one document may give the index.
const MAX_INDEX_MARKDOWN: usize = 32 * 1024 * 1024;

/// `bytes`, a file named `name`, as Markdown: `None` when its extension is not one of
/// [`INDEXABLE`]. The file is parsed outside this process, under the tools' limits.
pub async fn markdown_for_index(
    config: &DocumentsConfig,
    name: &str,
    bytes: Vec<u8>,
    cancel: &CancellationToken,
) -> Result<Option<String>, DocError> {
    let ext = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let kind = match ext.as_str() {
        "pdf" => return pdf_markdown(config, bytes, cancel).await.map(Some),
        "docx" => Kind::Docx,
        "pptx" => Kind::Pptx,
        "csv" => Kind::Csv,
        "xlsx" | "xlsm" | "xlsb" | "xls" | "ods" => Kind::Spreadsheet,
        _ => return Ok(None),
    };
    if bytes.len() as u64 > config.max_file_bytes {
        return Err(DocError::FileTooLarge {
            size: bytes.len() as u64,
            limit: config.max_file_bytes,
        });
    }
    let request = Request {
        kind,
        shown: name.to_string(),
        sheet: None,
        range: None,
        memory_mb: config.memory_mb,
        cpu_secs: config.cpu_secs,
        max_expanded_bytes: config.max_expanded_bytes,
        max_chars: MAX_INDEX_MARKDOWN,
        image: None,
    };
    reader::run(&config.reader, &request, bytes, config.timeout, cancel)
        .await
        .map(Some)
}

/// A PDF's pages as `## Page N` sections: the bytes are written to a private directory that
/// poppler reads inside the sandbox, as `ReadPdf` reads a workspace file.
async fn pdf_markdown(
    config: &DocumentsConfig,
    bytes: Vec<u8>,
    cancel: &CancellationToken,
) -> Result<String, DocError> {
    let dir = tempfile::Builder::new()
        .prefix("maestro-index-")
        .tempdir()
        .map_err(DocError::Io)?;
    tokio::fs::write(dir.path().join("document.pdf"), &bytes)
        .await
        .map_err(DocError::Io)?;
    // The sandbox user reads it when Maestro runs as root.
    use std::os::unix::fs::PermissionsExt as _;
    let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755));
    let ctx = ToolContext {
        workspace: dir.path().to_path_buf(),
        workspace_kind: WorkspaceKind::Job,
        edit: false,
        allowed_commands: None,
        allowed_ssh_connections: None,
        cancel: cancel.clone(),
        scratch: Default::default(),
    };
    let pages = pdf::page_texts(config, &ctx, "document.pdf").await?;
    let mut out = String::new();
    for (n, page) in pages.iter().enumerate() {
        let _ = write!(out, "## Page {}\n\n{}\n\n", n + 1, page.trim_matches('\n'));
    }
    Ok(out)
}
