//! `ReadDocx`, `ReadExcel` and `ReadPPTX`: the file is resolved in the workspace, read here,
//! and parsed by the reader child.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use crate::error::DocError;
use crate::protocol::{Kind, Request};
use crate::{DocumentsConfig, reader};
use maestro_tools::workspace_file::existing_file;
use maestro_tools::{ToolContext, ToolOutput, TypedTool};

/// Reads the workspace file `rel` whole, refusing one larger than the limit.
pub(crate) async fn file_bytes(
    ctx: &ToolContext,
    rel: &str,
    tool: &str,
    limit: u64,
) -> Result<Vec<u8>, DocError> {
    let file = existing_file(&ctx.workspace, rel, tool).await?;
    let size = file.metadata().await.map_err(DocError::Io)?.len();
    if size > limit {
        return Err(DocError::FileTooLarge { size, limit });
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(DocError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(DocError::FileTooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

async fn parse(
    config: &DocumentsConfig,
    ctx: &ToolContext,
    tool: &str,
    rel: &str,
    kind: Kind,
    sheet: Option<String>,
    range: Option<String>,
) -> Result<String, DocError> {
    let bytes = file_bytes(ctx, rel, tool, config.max_file_bytes).await?;
    let request = Request {
        kind,
        shown: rel.to_string(),
        sheet,
        range,
        memory_mb: config.memory_mb,
        cpu_secs: config.cpu_secs,
        max_expanded_bytes: config.max_expanded_bytes,
        max_chars: config.max_output_chars,
        image: None,
    };
    reader::run(&config.reader, &request, bytes, config.timeout, &ctx.cancel).await
}

/// `text` from byte `offset` (moved back to a character boundary), cut at `max` bytes (at a
/// line end when one is near), with a closing line saying what was left out and how to read on.
pub(crate) fn window(text: &str, offset: usize, max: usize, tool: &str) -> String {
    let total = text.len();
    if offset >= total && total > 0 {
        return format!(
            "[offset {offset} is past the end: the document has {total} bytes of Markdown]"
        );
    }
    let mut start = offset.min(total);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let head = if start > 0 {
        format!("[from byte {start} of {total}]\n")
    } else {
        String::new()
    };
    let rest = &text[start..];
    if rest.len() <= max {
        return format!("{head}{rest}");
    }
    let mut end = max;
    while !rest.is_char_boundary(end) {
        end -= 1;
    }
    if let Some(nl) = rest[..end].rfind('\n')
        && nl > end / 2
    {
        end = nl + 1;
    }
    let next = start + end;
    format!(
        "{head}{}\n[cut: bytes {next} to {total} of the document's Markdown are not shown; call {tool} again with offset: {next} to read on]\n",
        &rest[..end]
    )
}

/// `ReadDocx`.
pub(crate) struct ReadDocx(pub(crate) Arc<DocumentsConfig>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadDocxInput {
    /// path of the .docx file in the workspace
    file_path: String,
    /// byte of the Markdown to start at, to read on after a cut answer (default 0)
    offset: Option<usize>,
}

impl TypedTool for ReadDocx {
    type Input = ReadDocxInput;
    const NAME: &'static str = "ReadDocx";
    const DESCRIPTION: &'static str = "Read a Word .docx file as Markdown: headings, paragraphs, lists, tables, footnotes and comments.";

    async fn run(&self, ctx: &ToolContext, input: ReadDocxInput) -> ToolOutput {
        match parse(
            &self.0,
            ctx,
            Self::NAME,
            &input.file_path,
            Kind::Docx,
            None,
            None,
        )
        .await
        {
            Ok(text) => ToolOutput::ok(window(
                &text,
                input.offset.unwrap_or(0),
                self.0.max_output_chars,
                Self::NAME,
            )),
            Err(e) => ToolOutput::error(format!("ReadDocx {}: {e}", input.file_path)),
        }
    }
}

/// `ReadPPTX`.
pub(crate) struct ReadPptx(pub(crate) Arc<DocumentsConfig>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadPptxInput {
    /// path of the .pptx file in the workspace
    file_path: String,
    /// byte of the Markdown to start at, to read on after a cut answer (default 0)
    offset: Option<usize>,
}

impl TypedTool for ReadPptx {
    type Input = ReadPptxInput;
    const NAME: &'static str = "ReadPPTX";
    const DESCRIPTION: &'static str = "Read a PowerPoint .pptx file as Markdown: each slide's title, text, tables and speaker notes.";

    async fn run(&self, ctx: &ToolContext, input: ReadPptxInput) -> ToolOutput {
        match parse(
            &self.0,
            ctx,
            Self::NAME,
            &input.file_path,
            Kind::Pptx,
            None,
            None,
        )
        .await
        {
            Ok(text) => ToolOutput::ok(window(
                &text,
                input.offset.unwrap_or(0),
                self.0.max_output_chars,
                Self::NAME,
            )),
            Err(e) => ToolOutput::error(format!("ReadPPTX {}: {e}", input.file_path)),
        }
    }
}

/// `ReadExcel`.
pub(crate) struct ReadExcel(pub(crate) Arc<DocumentsConfig>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadExcelInput {
    /// path of the .xlsx, .xlsm, .xlsb, .xls, .ods or .csv file in the workspace
    file_path: String,
    /// the sheet to read (default: every sheet)
    sheet: Option<String>,
    /// the cells to read, as A1:D20 (default: all used cells)
    range: Option<String>,
}

impl TypedTool for ReadExcel {
    type Input = ReadExcelInput;
    const NAME: &'static str = "ReadExcel";
    const DESCRIPTION: &'static str = "Read a spreadsheet (xlsx, xls, ods or csv) as Markdown tables: every sheet's name and size, formulas' computed values and dates as dates.";

    async fn run(&self, ctx: &ToolContext, input: ReadExcelInput) -> ToolOutput {
        let kind = if input.file_path.to_ascii_lowercase().ends_with(".csv") {
            Kind::Csv
        } else {
            Kind::Spreadsheet
        };
        match parse(
            &self.0,
            ctx,
            Self::NAME,
            &input.file_path,
            kind,
            input.sheet,
            input.range,
        )
        .await
        {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::error(format!("ReadExcel {}: {e}", input.file_path)),
        }
    }
}
