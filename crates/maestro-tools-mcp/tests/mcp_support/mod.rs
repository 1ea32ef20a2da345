//! Real MCP servers for the hub tests: the reference filesystem server from npm (stdio) and a
//! server built on the official Python SDK (stdio and streamable HTTP).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test binary uses part of it

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use maestro_tools::{Tool, ToolContext};
use maestro_tools_mcp::McpServer;
use tokio_util::sync::CancellationToken;

/// The reference filesystem server, installed with
/// `npm install --prefix /opt/maestro-test @modelcontextprotocol/server-filesystem@2026.8.31`.
pub(crate) fn filesystem_server(root: &std::path::Path) -> McpServer {
    let bin = std::env::var_os("MAESTRO_TEST_MCP_FS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from("/opt/maestro-test/node_modules/.bin/mcp-server-filesystem")
        });
    assert!(
        bin.exists(),
        "{} is missing: npm install --prefix /opt/maestro-test @modelcontextprotocol/server-filesystem@2026.8.31",
        bin.display()
    );
    McpServer::Stdio {
        command: bin.display().to_string(),
        args: vec![root.display().to_string()],
        env: BTreeMap::new(),
        cwd: None,
    }
}

pub(crate) fn python_script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_support/server.py").to_string()
}

/// The Python SDK server over stdio (needs `pip install mcp==2.3.0`).
pub(crate) fn python_stdio_server() -> McpServer {
    McpServer::Stdio {
        command: "python3".into(),
        args: vec![python_script(), "stdio".into()],
        env: BTreeMap::new(),
        cwd: None,
    }
}

/// The Python SDK server listening for streamable HTTP on a loopback port.
pub(crate) struct HttpServer {
    pub url: String,
    child: Child,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HttpServer {
    pub(crate) fn start() -> HttpServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args([python_script(), "http".into(), port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = HttpServer {
            url: format!("http://127.0.0.1:{port}/mcp"),
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the Python MCP server did not listen (pip install mcp==2.3.0)"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }
}

pub(crate) fn ctx() -> ToolContext {
    ToolContext {
        workspace: std::env::temp_dir(),
        workspace_kind: maestro_tools::WorkspaceKind::Job,
        edit: false,
        allowed_commands: None,
        allowed_ssh_connections: None,
        cancel: CancellationToken::new(),
        scratch: Default::default(),
    }
}

pub(crate) fn names(tools: &[std::sync::Arc<dyn Tool>]) -> Vec<String> {
    tools.iter().map(|t| t.spec().name).collect()
}

pub(crate) fn find(tools: &[std::sync::Arc<dyn Tool>], name: &str) -> std::sync::Arc<dyn Tool> {
    tools
        .iter()
        .find(|t| t.spec().name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no tool {name} in {:?}", names(tools)))
}
