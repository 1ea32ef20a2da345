//! The document tools: `ReadPdf`, `ReadDocx`, `ReadExcel`, `ReadPPTX`, `PdfToImages` and
//! `SplitPdf`. Every file they read is untrusted and is parsed outside the worker's address
//! space under a time and memory limit: Office files and spreadsheets by the reader child (the
//! `maestro` binary re-executed as `maestro __document-reader`, see [`reader_main`]), PDFs by
//! poppler-utils and qpdf run in the Bash sandbox. A zip bomb or a parser bug costs that child,
//! never the worker. See `docs/tools/ReadDocx.md` and its neighbours.

mod child;
mod docx;
mod error;
mod image;
mod image_tools;
mod index;
mod markdown;
mod office;
mod package;
mod pdf;
mod pptx;
pub(crate) mod protocol;
mod reader;
mod sheet;
mod xml;

use std::sync::Arc;
use std::time::Duration;

pub use child::{READER_ARG, reader_main};
pub use error::DocError;
pub use index::{INDEXABLE, markdown_for_index};
use maestro_tools::catalog::{ToolCatalog, available};
use maestro_tools::{SandboxConfig, Tool, ToolsConfig};
pub use protocol::ReadFailure;
pub use reader::ReaderCommand;

/// What the document tools run and their limits.
#[derive(Debug, Clone)]
pub struct DocumentsConfig {
    /// How to start the reader child.
    pub reader: ReaderCommand,
    /// The Bash sandbox's confinement and limits, under which the PDF programs run.
    pub sandbox: SandboxConfig,
    /// Address space of the reader child, in MiB.
    pub memory_mb: u64,
    /// CPU seconds of one parse.
    pub cpu_secs: u64,
    /// Wall-clock time of one parse (the child, or one PDF program, is killed past it).
    pub timeout: Duration,
    /// Largest file the tools read, in bytes.
    pub max_file_bytes: u64,
    /// Bytes an Office package's parts may expand to in all (the zip-bomb cap).
    pub max_expanded_bytes: u64,
    /// Bytes of Markdown one call hands back to the model.
    pub max_output_chars: usize,
    /// Workspace-relative directories `SplitPdf` may write (with `edit`), as `tools.writable_dirs`.
    pub writable_dirs: Vec<String>,
    /// The longest side of an image ReadImage shows the model (`tools.image_max_side`).
    pub image_max_side: u32,
}

impl DocumentsConfig {
    /// The limits taken from `tools:` (the Bash sandbox's memory and CPU limits and writable
    /// directories, and the call timeout), with `reader` as the child.
    pub fn from_tools(tools: &ToolsConfig, reader: ReaderCommand) -> DocumentsConfig {
        DocumentsConfig {
            reader,
            sandbox: tools.sandbox(),
            memory_mb: tools.bash_memory_mb,
            cpu_secs: tools.bash_cpu_secs.min(60),
            timeout: tools.call_timeout.min(Duration::from_secs(60)),
            max_file_bytes: 100 * 1024 * 1024,
            max_expanded_bytes: 256 * 1024 * 1024,
            // Below the registry's own cap, so the tools cut first and say how to read on.
            max_output_chars: tools.output_cap_bytes.saturating_sub(512).max(2_000),
            writable_dirs: tools.writable_dirs.clone(),
            image_max_side: tools.image_max_side,
        }
    }
}

/// The six document tools.
pub fn tools(config: DocumentsConfig) -> Vec<Arc<dyn Tool>> {
    let config = Arc::new(config);
    vec![
        Arc::new(office::ReadDocx(Arc::clone(&config))),
        Arc::new(office::ReadExcel(Arc::clone(&config))),
        Arc::new(office::ReadPptx(Arc::clone(&config))),
        Arc::new(pdf::ReadPdf(Arc::clone(&config))),
        Arc::new(pdf::PdfToImages(Arc::clone(&config))),
        Arc::new(pdf::SplitPdf(Arc::clone(&config))),
        Arc::new(image_tools::ReadImage(Arc::clone(&config))),
        Arc::new(image_tools::AnnotateImage(config)),
    ]
}

/// The document tools' names.
pub const TOOLS: &[&str] = &[
    "ReadPdf",
    "ReadDocx",
    "ReadExcel",
    "ReadPPTX",
    "PdfToImages",
    "SplitPdf",
    "ReadImage",
    "AnnotateImage",
];

/// Adds the document tools to the piece validator's `catalog` (they need no configuration).
pub fn add_to_catalog(catalog: &mut ToolCatalog) {
    available(catalog, TOOLS);
}
