//! The MCP hub: connects to every configured server, lists their tools, and answers whether the
//! servers a piece requires are up.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::config::{InvalidSlug, McpConfig, McpServer, check_slug};
use super::connection::{Connection, StderrTail};
use super::tool::McpTool;
use maestro_tools::Tool;

/// Environment variables a stdio server inherits; everything else is dropped.
const PASSED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "VIRTUAL_ENV",
    "NODE_PATH",
];
const STDERR_LINES: usize = 20;
/// Longest wait for one server to exit in [`McpHub::shutdown`] (rmcp's own steps take ~6 s).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// Why a required server cannot be used. Each message names the server and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// A piece requires a server that is not under `mcp.servers`.
    #[error(
        "required MCP server `{server}` is not configured (configured: {}); add it under mcp.servers",
        if configured.is_empty() { "none".to_string() } else { configured.join(", ") }
    )]
    NotConfigured {
        /// The required server's slug.
        server: String,
        /// The slugs that are configured.
        configured: Vec<String>,
    },
    /// A required server is configured but did not start, or its connection closed since.
    #[error("required MCP server `{server}` is not available: {reason}")]
    Unavailable {
        /// The required server's slug.
        server: String,
        /// Why it is down, with the end of its stderr when it wrote any.
        reason: String,
    },
}

/// Why a configured MCP server is not available.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ServerDown {
    /// Its name cannot be part of a tool name, so it was not started.
    #[error(transparent)]
    InvalidSlug(#[from] InvalidSlug),
    /// It did not start; `reason` is the source's message followed by the end of the server's
    /// stderr, when it wrote any.
    #[error("{reason}")]
    DidNotStart {
        /// The message: the source's, then the end of the server's stderr.
        reason: String,
        /// Why it did not start.
        #[source]
        source: Arc<StartError>,
    },
}

/// Why starting a server, or listing its tools, failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A stdio server's program could not be spawned (not found, not executable, bad `cwd`).
    #[error("failed to start `{command}`: {source}")]
    Spawn {
        /// The configured `command`.
        command: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A stdio server started but did not complete the MCP initialisation.
    #[error("the MCP handshake failed: {0}")]
    Handshake(#[source] rmcp::service::ClientInitializeError),
    /// A configured header name is not a valid HTTP header name; holds it.
    #[error("header name {0:?} is invalid")]
    HeaderName(String),
    /// A configured header's value is not a valid HTTP header value; holds the header's name
    /// (never the value, a secret).
    #[error("the value of header {0} is not a valid header value")]
    HeaderValue(String),
    /// An HTTP server could not be reached, or did not complete the MCP initialisation.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The configured `url`.
        url: String,
        /// The connection or handshake error.
        #[source]
        source: rmcp::service::ClientInitializeError,
    },
    /// The server connected, but `tools/list` failed (an error answer, or the connection broke).
    #[error("listing its tools failed: {0}")]
    ListTools(#[source] rmcp::ServiceError),
    /// Starting, the handshake and listing the tools took longer than
    /// `mcp.startup_timeout_secs` (holds it).
    #[error("it did not start and list its tools within {0}s")]
    Timeout(u64),
}

enum ServerState {
    Up(Arc<Connection>),
    Down(ServerDown),
}

/// Every configured MCP server, connected (or with the reason it is not).
pub struct McpHub {
    servers: BTreeMap<String, ServerState>,
    call_timeout: Duration,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub")
            .field("servers", &self.status())
            .finish()
    }
}

impl McpHub {
    /// Connects to all servers concurrently. Never fails as a whole: a server that does not come
    /// up is recorded with its reason, which [`McpHub::ensure_required`] reports.
    pub async fn start(config: &McpConfig) -> McpHub {
        let timeout = Duration::from_secs(config.startup_timeout_secs.max(1));
        let starts = config.servers.iter().map(|(slug, server)| async move {
            let state = match check_slug(slug) {
                Err(e) => ServerState::Down(e.into()),
                Ok(()) => match connect(slug, server, timeout).await {
                    Ok(conn) => ServerState::Up(Arc::new(conn)),
                    Err(reason) => {
                        tracing::warn!(server = %slug, %reason, "MCP server did not start");
                        ServerState::Down(reason)
                    }
                },
            };
            (slug.clone(), state)
        });
        let servers = futures::future::join_all(starts)
            .await
            .into_iter()
            .collect();
        McpHub {
            servers,
            call_timeout: Duration::from_secs(config.call_timeout_secs.max(1)),
        }
    }

    /// Checks that every server in `required` (a piece's `required_mcp`) is configured, started
    /// and still connected.
    pub fn ensure_required(&self, required: &[String]) -> Result<(), McpError> {
        for server in required {
            match self.servers.get(server) {
                None => {
                    return Err(McpError::NotConfigured {
                        server: server.clone(),
                        configured: self.servers.keys().cloned().collect(),
                    });
                }
                Some(ServerState::Down(reason)) => {
                    return Err(McpError::Unavailable {
                        server: server.clone(),
                        reason: reason.to_string(),
                    });
                }
                Some(ServerState::Up(conn)) if conn.client.peer().is_transport_closed() => {
                    let reason = conn
                        .stderr
                        .with_reason("its connection closed after it started".to_string());
                    return Err(McpError::Unavailable {
                        server: server.clone(),
                        reason,
                    });
                }
                Some(ServerState::Up(_)) => {}
            }
        }
        Ok(())
    }

    /// The tools of every connected server, named `mcp__<server>__<tool>`.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        for state in self.servers.values() {
            let ServerState::Up(conn) = state else {
                continue;
            };
            let mut seen = std::collections::BTreeSet::new();
            for tool in &conn.tools {
                let wrapped = McpTool::new(Arc::clone(conn), tool, self.call_timeout);
                if seen.insert(wrapped.name().to_string()) {
                    out.push(Arc::new(wrapped));
                } else {
                    tracing::warn!(server = %conn.slug, tool = %tool.name, "MCP tool name collides after sanitising; skipped");
                }
            }
        }
        out
    }

    /// Closes every connection and waits for it: a stdio server gets its stdin closed, then
    /// SIGTERM, then is killed (a few seconds apart). Drop the tools from [`McpHub::tools`]
    /// first; a connection a tool still holds is only told to close, without waiting.
    pub async fn shutdown(self) {
        let closes = self.servers.into_values().map(|state| async move {
            let ServerState::Up(conn) = state else {
                return;
            };
            match Arc::try_unwrap(conn) {
                Ok(mut conn) => {
                    let _ = conn.client.close_with_timeout(SHUTDOWN_WAIT).await;
                }
                Err(shared) => shared.client.cancellation_token().cancel(),
            }
        });
        futures::future::join_all(closes).await;
    }

    /// Each server with its tool count, or the reason it is down.
    pub fn status(&self) -> BTreeMap<String, Result<usize, ServerDown>> {
        self.servers
            .iter()
            .map(|(slug, state)| {
                let status = match state {
                    ServerState::Up(conn) => Ok(conn.tools.len()),
                    ServerState::Down(reason) => Err(reason.clone()),
                };
                (slug.clone(), status)
            })
            .collect()
    }
}

async fn connect(
    slug: &str,
    server: &McpServer,
    timeout: Duration,
) -> Result<Connection, ServerDown> {
    let secrets = match server {
        McpServer::Stdio { env, .. } => env.values().cloned().collect(),
        McpServer::Http { headers, .. } => headers.values().cloned().collect(),
    };
    let stderr = StderrTail(Arc::default(), Arc::new(secrets));
    let started = tokio::time::timeout(timeout, async {
        let client = match server {
            McpServer::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).env_clear();
                for name in PASSED_ENV {
                    if let Some(value) = std::env::var_os(name) {
                        cmd.env(name, value);
                    }
                }
                for (name, value) in env {
                    cmd.env(name, value.expose());
                }
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                let (transport, err_pipe) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|source| StartError::Spawn {
                        command: command.to_string(),
                        source,
                    })?;
                if let Some(pipe) = err_pipe {
                    collect_stderr(slug.to_string(), pipe, stderr.clone());
                }
                ().serve(transport).await.map_err(StartError::Handshake)?
            }
            McpServer::Http { url, headers } => {
                let mut map = std::collections::HashMap::new();
                for (name, value) in headers {
                    let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| StartError::HeaderName(name.clone()))?;
                    let value = reqwest::header::HeaderValue::from_str(value.expose())
                        .map_err(|_| StartError::HeaderValue(name.to_string()))?;
                    map.insert(name, value);
                }
                let config =
                    StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(map);
                let transport =
                    StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
                ().serve(transport)
                    .await
                    .map_err(|source| StartError::Connect {
                        url: url.to_string(),
                        source,
                    })?
            }
        };
        let tools = client
            .list_all_tools()
            .await
            .map_err(StartError::ListTools)?;
        Ok::<_, StartError>((client, tools))
    })
    .await;
    let result = match started {
        Err(_) => Err(StartError::Timeout(timeout.as_secs())),
        Ok(result) => result,
    };
    match result {
        Ok((client, tools)) => Ok(Connection {
            slug: slug.to_string(),
            client,
            tools,
            stderr,
        }),
        Err(source) => {
            // Give a crashing process a moment to finish writing its stderr.
            tokio::time::sleep(Duration::from_millis(200)).await;
            Err(ServerDown::DidNotStart {
                reason: stderr.with_reason(source.to_string()),
                source: Arc::new(source),
            })
        }
    }
}

fn collect_stderr(slug: String, pipe: tokio::process::ChildStderr, tail: StderrTail) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = tail.1.iter().fold(line, |l, secret| secret.redact(&l));
            tracing::debug!(server = %slug, "{line}");
            if let Ok(mut buf) = tail.0.lock() {
                if buf.len() == STDERR_LINES {
                    buf.pop_front();
                }
                buf.push_back(line);
            }
        }
    });
}
