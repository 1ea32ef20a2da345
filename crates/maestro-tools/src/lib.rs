//! The tools agents use: the [`TypedTool`] trait every built-in tool implements (and the [`Tool`]
//! trait the registry holds), the [`Registry`] that offers a movement only what it allows, the
//! workspace every tool is confined to, and the tools that need nothing beyond it (files, `Bash`
//! over [`maestro_sandbox`], SQLite, checklist, pieces, docs, skills).
//!
//! Tools of one capability with dependencies of their own live in crates of their own
//! (`maestro-tools-web`, `maestro-tools-ssh`, `maestro-tools-mcp`) that depend on this one for
//! the trait; `maestro-app`'s toolbox assembles them all.
//!
//! This crate knows nothing of runs.

pub mod attach;
pub mod bash;
mod builtins;
pub mod catalog;
pub mod checklist;
mod config;
mod core;
pub mod data;
pub mod docs;
pub mod input;
pub mod pieces;
mod registry;
pub mod regular_file;
pub mod review;
pub mod skills;
pub mod skills_install;
mod tool;
mod workspace;
pub mod workspace_file;

pub use config::{
    BashSandboxMode, DEFAULT_ALLOWED_COMMANDS, SandboxConfig, SandboxMode, ToolsConfig,
};
pub use core::{blocking, off_runtime, open_workspace};
pub use registry::{EDIT_TOOLS, META_TOOLS, Registry, is_offered};
pub use tool::{
    BoxFuture, CancellationToken, ChecklistItem, RunScratch, Tool, ToolContext, ToolOutput,
    TypedTool, WorkspaceKind,
};
pub use workspace::{
    ResolvedPath, SANDBOX_WORKSPACE, WORKSPACE_DIRS, Workspace, WorkspaceError, prepare_workspace,
};
