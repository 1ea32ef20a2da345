//! The tools agents use: the [`TypedTool`] trait every built-in tool implements (and the [`Tool`]
//! trait the registry holds), the [`Registry`] that offers a movement only what it
//! allows, and every tool implementation (files, shell in a bwrap sandbox, web, SQLite,
//! checklist, pieces, docs, skills, SSH, MCP).
//!
//! This crate knows nothing of runs.

mod builtins;
pub mod catalog;
pub mod checklist;
mod config;
mod core;
pub mod data;
pub mod docs;
pub mod input;
pub mod mcp;
pub mod pieces;
mod registry;
pub mod regular_file;
pub mod sandbox;
pub mod skills;
pub mod ssh;
mod tool;
pub mod web;
mod workspace;

pub use config::{BashSandboxMode, DEFAULT_ALLOWED_COMMANDS, ToolsConfig};
pub use mcp::{McpConfig, McpError, McpHub, McpServer};
pub use registry::{EDIT_TOOLS, META_TOOLS, Registry, is_offered};
pub use ssh::{SshAuth, SshConnection, SshRegistry, SshRegistryError};
pub use tool::{
    BoxFuture, CancellationToken, ChecklistItem, RunScratch, Tool, ToolContext, ToolOutput,
    TypedTool,
};
pub use web::{SearchProvider, WebConfig};
pub use workspace::{
    ResolvedPath, SANDBOX_WORKSPACE, WORKSPACE_DIRS, Workspace, WorkspaceError, prepare_workspace,
};
