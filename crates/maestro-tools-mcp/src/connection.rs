//! A connected MCP server: what both the hub (which connects) and each server tool (which calls
//! it) hold.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use maestro_protocol::Secret;
use rmcp::service::{RoleClient, RunningService};

/// A connected server.
pub(crate) struct Connection {
    pub(crate) slug: String,
    pub(crate) client: RunningService<RoleClient, ()>,
    pub(crate) tools: Vec<rmcp::model::Tool>,
    pub(crate) stderr: StderrTail,
}

/// The last lines a stdio server wrote to stderr, for error messages, with the server's
/// configured secrets (its `env` values) blanked out.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(
    pub(crate) Arc<Mutex<VecDeque<String>>>,
    pub(crate) Arc<Vec<Secret>>,
);

impl StderrTail {
    pub(crate) fn text(&self) -> String {
        self.0
            .lock()
            .map(|lines| lines.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }

    pub(crate) fn with_reason(&self, reason: String) -> String {
        match self.text() {
            tail if tail.trim().is_empty() => reason,
            tail => format!("{reason}; its stderr ends with:\n{tail}"),
        }
    }
}
