//! The MCP client: connects to the MCP servers declared in the configuration (stdio child
//! processes and streamable HTTP endpoints) with the official Rust SDK, offers their tools as
//! `mcp__<server>__<tool>`, and checks a piece's `required_mcp` servers before a run starts.

mod config;
mod connection;
mod hub;
mod tool;

pub use config::{InvalidSlug, McpConfig, McpServer, check_slug};
pub use hub::{McpError, McpHub, ServerDown, StartError};
