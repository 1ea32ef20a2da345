//! Helpers for the document tool tests: the documents made by real writers, and the tools
//! run with the reader child built beside the tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test binary uses part of it

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use maestro_tools::{Tool, ToolContext, ToolOutput, ToolsConfig};
use maestro_tools_documents::{DocumentsConfig, ReaderCommand};
use tokio_util::sync::CancellationToken;

/// A workspace with the documents `make_documents.py` writes for `what` (`docx`, `xlsx`,
/// `pptx`, `pdf`, `bomb`, `locked`).
pub(crate) fn workspace(what: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/make_documents.py");
    let status = std::process::Command::new("python3")
        .arg(&script)
        .arg(dir.path())
        .args(what)
        .status()
        .unwrap();
    assert!(status.success(), "{} failed", script.display());
    dir
}

/// The document tools' configuration for tests: the reader child is this crate's
/// `maestro-document-reader`, the entry the shipped binary runs as `maestro __document-reader`.
pub(crate) fn config() -> DocumentsConfig {
    DocumentsConfig::from_tools(
        &ToolsConfig::default(),
        ReaderCommand {
            program: PathBuf::from(env!("CARGO_BIN_EXE_maestro-document-reader")),
            args: Vec::new(),
        },
    )
}

pub(crate) fn ctx(workspace: &Path) -> ToolContext {
    ToolContext {
        workspace: workspace.to_path_buf(),
        workspace_kind: maestro_tools::WorkspaceKind::Job,
        edit: false,
        allowed_commands: None,
        allowed_ssh_connections: None,
        cancel: CancellationToken::new(),
        scratch: Default::default(),
    }
}

/// Calls the document tool `name` with `config` through a registry, as the engine does.
pub(crate) async fn call_with(
    config: DocumentsConfig,
    ctx: &ToolContext,
    name: &str,
    input: serde_json::Value,
) -> ToolOutput {
    let mut registry = maestro_tools::Registry::empty(ToolsConfig::default());
    for tool in maestro_tools_documents::tools(config) {
        registry.register(tool);
    }
    registry.execute(ctx, name, &input.to_string()).await
}

pub(crate) async fn call(workspace: &Path, name: &str, input: serde_json::Value) -> ToolOutput {
    call_with(config(), &ctx(workspace), name, input).await
}

/// The one tool named `name`.
pub(crate) fn tool(name: &str) -> Arc<dyn Tool> {
    maestro_tools_documents::tools(config())
        .into_iter()
        .find(|t| t.spec().name == name)
        .unwrap()
}

pub(crate) const LONG: Duration = Duration::from_secs(60);
