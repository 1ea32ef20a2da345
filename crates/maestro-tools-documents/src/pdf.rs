//! `ReadPdf`, `PdfToImages` and `SplitPdf`: poppler-utils (`pdfinfo`, `pdftotext`, `pdftoppm`)
//! and `qpdf` run in the Bash sandbox (bubblewrap or landlock, its memory, CPU and process
//! limits, killed with everything they started past the time limit), never in the worker.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use maestro_sandbox::{Command, Ending, RunAs};
use maestro_tools::workspace_file::existing_file;
use maestro_tools::{ToolContext, ToolOutput, TypedTool, Workspace, WorkspaceKind};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use crate::DocumentsConfig;
use crate::error::DocError;
use crate::protocol::ReadFailure;

/// Pages `PdfToImages` renders in one call.
const MAX_IMAGES: u32 = 20;

/// One PDF file in the workspace, checked to be a PDF, with its page count.
struct Pdf {
    /// The path as the sandboxed program sees it (relative to the workspace, `./`-prefixed).
    arg: String,
    /// The path relative to the workspace.
    rel: PathBuf,
    pages: u32,
}

/// A program's output, or why it failed.
async fn program(
    config: &DocumentsConfig,
    ctx: &ToolContext,
    line: &str,
    writable: &[PathBuf],
) -> Result<String, DocError> {
    let mut sandbox = config.sandbox;
    sandbox.output_cap_bytes = sandbox.output_cap_bytes.max(config.max_output_chars * 8);
    sandbox.cpu_secs = sandbox.cpu_secs.min(config.cpu_secs.max(1));
    let confinement = maestro_sandbox::confinement(&sandbox)
        .await
        .map_err(DocError::Sandbox)?;
    let root = std::fs::canonicalize(&ctx.workspace).map_err(DocError::Io)?;
    let finished = maestro_sandbox::run(
        &sandbox,
        confinement,
        Command {
            root: &root,
            writable,
            line,
            // As Bash: in a folder the user named, files written keep their owner.
            run_as: match (ctx.workspace_kind, ctx.edit) {
                (WorkspaceKind::Named, true) => RunAs::RootOwner,
                _ => RunAs::SandboxUser,
            },
            timeout: config.timeout,
            cancel: &ctx.cancel,
            python_env: None,
        },
    )
    .await
    .map_err(DocError::Run)?;
    match finished.ending {
        Ending::Exited(0) => Ok(finished.output),
        Ending::Exited(_) | Ending::Signalled(_) | Ending::OutputFlood => {
            Err(DocError::Program(finished.output))
        }
        Ending::TimedOut => Err(DocError::TimedOut(config.timeout)),
        Ending::Cancelled => Err(DocError::Cancelled),
        Ending::MemoryLimit => Err(DocError::MemoryLimit(sandbox.memory_mb)),
    }
}

/// `text` as one shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Resolves `file_path` in the workspace, checks it is a PDF and reads its page count.
async fn open(
    config: &DocumentsConfig,
    ctx: &ToolContext,
    file_path: &str,
    tool: &str,
) -> Result<Pdf, DocError> {
    let resolved = Workspace::open(&ctx.workspace)
        .map_err(|e| DocError::File(e.into()))?
        .resolve(file_path)
        .map_err(|e| DocError::File(e.into()))?;
    let mut file = existing_file(&ctx.workspace, file_path, tool).await?;
    let size = file.metadata().await.map_err(DocError::Io)?.len();
    if size > config.max_file_bytes {
        return Err(DocError::FileTooLarge {
            size,
            limit: config.max_file_bytes,
        });
    }
    let mut head = [0u8; 1024];
    let n = file.read(&mut head).await.map_err(DocError::Io)?;
    let head = &head[..n];
    if !head.windows(5).any(|w| w == b"%PDF-") {
        let what = if head.starts_with(b"PK\x03\x04") {
            "it is a zip package (an Office document?); use ReadDocx, ReadExcel or ReadPPTX"
        } else if head.is_empty() {
            "it is empty"
        } else {
            "it does not start with %PDF-"
        };
        return Err(DocError::Read(ReadFailure::WrongType(format!(
            "not a PDF: {what}"
        ))));
    }
    let arg = format!("./{}", resolved.rel.display());
    let info = program(config, ctx, &format!("pdfinfo {} 2>&1", quote(&arg)), &[])
        .await
        .map_err(classify)?;
    let pages = info
        .lines()
        .find_map(|l| l.strip_prefix("Pages:"))
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| {
            DocError::Read(ReadFailure::Corrupt(format!(
                "pdfinfo found no page count ({}); the file is damaged",
                info.trim()
            )))
        })?;
    Ok(Pdf {
        arg,
        rel: resolved.rel,
        pages,
    })
}

/// The text of every page of the workspace PDF `file_path`, in order (an empty string for a page
/// without a text layer).
pub(crate) async fn page_texts(
    config: &DocumentsConfig,
    ctx: &ToolContext,
    file_path: &str,
) -> Result<Vec<String>, DocError> {
    let pdf = open(config, ctx, file_path, "IngestDocument").await?;
    let mut sandbox_config = config.clone();
    // The whole text at once: the output cap is the index's, not one answer's.
    sandbox_config.max_output_chars = sandbox_config.max_output_chars.max(4 * 1024 * 1024);
    let text = program(
        &sandbox_config,
        ctx,
        &format!("pdftotext -q -raw -enc UTF-8 {} - 2>&1", quote(&pdf.arg)),
        &[],
    )
    .await
    .map_err(classify)?;
    let mut pages: Vec<String> = text.split('\u{c}').map(str::to_string).collect();
    pages.resize(pdf.pages as usize, String::new());
    Ok(pages)
}

/// A failed poppler or qpdf program as a file error: a password, a damaged file.
fn classify(e: DocError) -> DocError {
    let DocError::Program(output) = e else {
        return e;
    };
    let first = output.lines().next().unwrap_or("").trim().to_string();
    let lower = output.to_ascii_lowercase();
    if lower.contains("incorrect password") || lower.contains("invalid password") {
        DocError::Read(ReadFailure::Encrypted(
            "the PDF is protected with a password; save a copy without it (qpdf --decrypt --password=... in Bash) and read that".into(),
        ))
    } else {
        DocError::Read(ReadFailure::Corrupt(format!(
            "{first}; the PDF is damaged or truncated"
        )))
    }
}

/// `pages` ("1-3,5", "7-") as sorted, merged 1-based inclusive ranges within `1..=count`.
fn page_ranges(pages: Option<&str>, count: u32) -> Result<Vec<(u32, u32)>, DocError> {
    let Some(spec) = pages.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(if count == 0 {
            Vec::new()
        } else {
            vec![(1, count)]
        });
    };
    let bad = |why: String| {
        DocError::Input(format!(
            "pages {spec:?}: {why}; write pages as 3, 1-5 or 2,4-6 (the document has {count} page(s))"
        ))
    };
    let mut ranges = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: u32 = a
            .parse()
            .map_err(|_| bad(format!("{part:?} is not a page or a range")))?;
        let b: u32 = if b.is_empty() {
            count
        } else {
            b.parse()
                .map_err(|_| bad(format!("{part:?} is not a page or a range")))?
        };
        if a == 0 || a > b || b > count {
            return Err(bad(format!("{part:?} is outside 1-{count}")));
        }
        ranges.push((a, b));
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::new();
    for (a, b) in ranges {
        match merged.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    Ok(merged)
}

fn show_ranges(ranges: &[(u32, u32)]) -> String {
    ranges
        .iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `ReadPdf`.
pub(crate) struct ReadPdf(pub(crate) Arc<DocumentsConfig>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadPdfInput {
    /// path of the PDF file in the workspace
    file_path: String,
    /// pages to read, as 3, 1-5, 2,4-6 or 7- (default: all)
    pages: Option<String>,
}

impl ReadPdf {
    async fn read(&self, ctx: &ToolContext, input: &ReadPdfInput) -> Result<String, DocError> {
        let config = &self.0;
        let pdf = open(config, ctx, &input.file_path, "ReadPdf").await?;
        let ranges = page_ranges(input.pages.as_deref(), pdf.pages)?;
        let mut out = format!("Pages: {}\n", pdf.pages);
        let mut cut: Vec<(u32, u32)> = Vec::new();
        for &(first, last) in &ranges {
            if !cut.is_empty() {
                cut.push((first, last));
                continue;
            }
            let text = program(
                config,
                ctx,
                &format!(
                    "pdftotext -q -raw -enc UTF-8 -f {first} -l {last} {} - 2>&1",
                    quote(&pdf.arg)
                ),
                &[],
            )
            .await
            .map_err(classify)?;
            let mut pages = text.split('\u{c}');
            for n in first..=last {
                let page = pages.next().unwrap_or("").trim_end();
                let mut section = format!("\n## Page {n}\n\n");
                if page.trim().is_empty() {
                    section.push_str("[no text layer: this page is an image (a scan?); PdfToImages renders it to read]\n");
                } else {
                    section.push_str(page.trim_matches('\n'));
                    section.push('\n');
                }
                if out.len() + section.len() > config.max_output_chars && n > ranges[0].0 {
                    cut.push((n, last));
                    break;
                }
                out.push_str(&section);
            }
        }
        if out.len() > config.max_output_chars {
            let mut end = config.max_output_chars;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
            out.push_str(
                "\n[cut: this page is longer than one answer holds; the rest of it is not shown]\n",
            );
        }
        if !cut.is_empty() {
            let rest = show_ranges(&cut);
            let _ = writeln!(
                out,
                "\n[cut: pages {rest} are not shown; call ReadPdf again with pages: \"{rest}\" to read on]"
            );
        }
        Ok(out)
    }
}

impl TypedTool for ReadPdf {
    type Input = ReadPdfInput;
    const NAME: &'static str = "ReadPdf";
    const DESCRIPTION: &'static str =
        "Read the text of a PDF page by page, in reading order, as Markdown with page markers.";

    async fn run(&self, ctx: &ToolContext, input: ReadPdfInput) -> ToolOutput {
        match self.read(ctx, &input).await {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::error(format!("ReadPdf {}: {e}", input.file_path)),
        }
    }
}

/// `PdfToImages`.
pub(crate) struct PdfToImages(pub(crate) Arc<DocumentsConfig>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PdfToImagesInput {
    /// path of the PDF file in the workspace
    file_path: String,
    /// pages to render, as 3, 1-5 or 2,4-6 (default: the first 20)
    pages: Option<String>,
    /// resolution in dots per inch, 36 to 300 (default 100)
    dpi: Option<u32>,
}

impl PdfToImages {
    async fn render(
        &self,
        ctx: &ToolContext,
        input: &PdfToImagesInput,
    ) -> Result<String, DocError> {
        let config = &self.0;
        let dpi = input.dpi.unwrap_or(100);
        if !(36..=300).contains(&dpi) {
            return Err(DocError::Input(format!(
                "dpi {dpi} is outside 36-300; 100 reads well, 150 for small print"
            )));
        }
        let pdf = open(config, ctx, &input.file_path, "PdfToImages").await?;
        let mut ranges = page_ranges(input.pages.as_deref(), pdf.pages)?;
        let wanted: u32 = ranges.iter().map(|(a, b)| b - a + 1).sum();
        let mut note = String::new();
        if input.pages.is_none() && wanted > MAX_IMAGES {
            ranges = vec![(1, MAX_IMAGES)];
            let _ = write!(
                note,
                "\n[only pages 1-{MAX_IMAGES} of {} rendered; call PdfToImages again with pages: \"{}-{}\" for more]",
                pdf.pages,
                MAX_IMAGES + 1,
                pdf.pages.min(2 * MAX_IMAGES)
            );
        } else if wanted > MAX_IMAGES {
            return Err(DocError::Input(format!(
                "{wanted} pages asked for; render at most {MAX_IMAGES} per call"
            )));
        }
        let stem = pdf
            .rel
            .file_stem()
            .and_then(|s| s.to_str())
            .map(maestro_tools::workspace_file::sanitize_file_name)
            .unwrap_or_else(|| "document".into());
        let dir_rel = format!("input/{stem}-pages");
        let ws = Workspace::open(&ctx.workspace).map_err(|e| DocError::File(e.into()))?;
        let dir = ws.resolve(&dir_rel).map_err(|e| DocError::File(e.into()))?;
        std::fs::create_dir_all(&dir.abs).map_err(DocError::Io)?;
        let dir = ws.resolve(&dir_rel).map_err(|e| DocError::File(e.into()))?;
        if !dir.abs.is_dir() {
            return Err(DocError::Input(format!("{dir_rel} is not a folder")));
        }
        let mut made = Vec::new();
        for (first, last) in &ranges {
            program(
                config,
                ctx,
                &format!(
                    "pdftoppm -q -png -r {dpi} -f {first} -l {last} {} {}/page 2>&1",
                    quote(&pdf.arg),
                    quote(&format!("./{dir_rel}"))
                ),
                std::slice::from_ref(&dir.abs),
            )
            .await
            .map_err(classify)?;
            for n in *first..=*last {
                made.push(n);
            }
        }
        // pdftoppm pads page numbers to the width of the document's page count.
        let width = pdf.pages.to_string().len();
        let mut out = String::new();
        for n in made {
            let name = format!("page-{n:0width$}.png");
            if dir.abs.join(&name).is_file() {
                let _ = writeln!(out, "{dir_rel}/{name}");
            }
        }
        Ok(format!("Rendered at {dpi} dpi:\n{out}{note}"))
    }
}

impl TypedTool for PdfToImages {
    type Input = PdfToImagesInput;
    const NAME: &'static str = "PdfToImages";
    const DESCRIPTION: &'static str =
        "Render PDF pages to PNG images under input/ and return their paths.";

    async fn run(&self, ctx: &ToolContext, input: PdfToImagesInput) -> ToolOutput {
        match self.render(ctx, &input).await {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::error(format!("PdfToImages {}: {e}", input.file_path)),
        }
    }
}

/// `SplitPdf`.
pub(crate) struct SplitPdf(pub(crate) Arc<DocumentsConfig>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SplitPdfInput {
    /// path of the PDF file in the workspace
    file_path: String,
    /// page ranges, one new PDF each, as ["1-3", "4", "5-"]
    ranges: Vec<String>,
    /// folder for the new PDFs, inside a writable folder (default: the first writable folder, e.g. output)
    output_dir: Option<String>,
}

impl SplitPdf {
    async fn split(&self, ctx: &ToolContext, input: &SplitPdfInput) -> Result<String, DocError> {
        let config = &self.0;
        if !ctx.edit {
            return Err(DocError::Input(
                "SplitPdf writes new files, which this movement may not: it needs `edit: true`"
                    .into(),
            ));
        }
        if input.ranges.is_empty() {
            return Err(DocError::Input(
                "ranges is empty; give one or more page ranges, as [\"1-3\", \"4-\"]".into(),
            ));
        }
        let writable = ctx.writable_dirs(&config.writable_dirs).into_owned();
        let dir_rel = match &input.output_dir {
            Some(d) => d.trim_end_matches('/').to_string(),
            None => writable.first().cloned().ok_or_else(|| {
                DocError::Input("no folder is writable (tools.writable_dirs is empty)".into())
            })?,
        };
        let ws = Workspace::open(&ctx.workspace).map_err(|e| DocError::File(e.into()))?;
        // The folder must be writable: a file inside it must be.
        ws.resolve_writable(&format!("{dir_rel}/x.pdf"), &writable)
            .map_err(|e| DocError::File(e.into()))?;
        let pdf = open(config, ctx, &input.file_path, "SplitPdf").await?;
        let stem = pdf
            .rel
            .file_stem()
            .and_then(|s| s.to_str())
            .map(maestro_tools::workspace_file::sanitize_file_name)
            .unwrap_or_else(|| "document".into());
        let mut parts = Vec::new();
        for range in &input.ranges {
            let r = page_ranges(Some(range), pdf.pages)?;
            let [(a, b)] = r.as_slice() else {
                return Err(DocError::Input(format!(
                    "{range:?} is more than one range; give each as its own entry"
                )));
            };
            parts.push((*a, *b));
        }
        let dir = ws.resolve(&dir_rel).map_err(|e| DocError::File(e.into()))?;
        std::fs::create_dir_all(&dir.abs).map_err(DocError::Io)?;
        let dir = ws.resolve(&dir_rel).map_err(|e| DocError::File(e.into()))?;
        let mut out = String::new();
        for (a, b) in parts {
            let name = if a == b {
                format!("{stem}-p{a}.pdf")
            } else {
                format!("{stem}-p{a}-{b}.pdf")
            };
            let target = format!("./{}/{name}", dir.rel.display());
            let line = format!(
                "qpdf --empty --pages {} {a}-{b} -- {} 2>&1; s=$?; [ $s -eq 3 ] && s=0; exit $s",
                quote(&pdf.arg),
                quote(&target)
            );
            program(config, ctx, &line, std::slice::from_ref(&dir.abs))
                .await
                .map_err(classify)?;
            let _ = writeln!(
                out,
                "{}/{name}: pages {a}-{b} ({} page(s))",
                dir.rel.display(),
                b - a + 1
            );
        }
        Ok(format!(
            "Wrote {} PDF(s) from {}:\n{out}",
            input.ranges.len(),
            pdf.rel.display()
        ))
    }
}

impl TypedTool for SplitPdf {
    type Input = SplitPdfInput;
    const NAME: &'static str = "SplitPdf";
    const DESCRIPTION: &'static str =
        "Write page ranges of a PDF as new PDF files in a writable folder.";

    async fn run(&self, ctx: &ToolContext, input: SplitPdfInput) -> ToolOutput {
        match self.split(ctx, &input).await {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::error(format!("SplitPdf {}: {e}", input.file_path)),
        }
    }
}
