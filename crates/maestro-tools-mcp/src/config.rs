//! `mcp:` in the configuration: the MCP servers Maestro connects to, by slug.

use std::collections::BTreeMap;
use std::path::PathBuf;

use maestro_protocol::Secret;
use serde::{Deserialize, Deserializer};

/// All configured MCP servers. A server's slug names its tools (`mcp__<slug>__<tool>`) and is
/// what pieces list in `required_mcp`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// The servers by slug (`mcp.servers.<slug>`); none by default.
    pub servers: BTreeMap<String, McpServer>,
    /// Time a server gets to start, finish the MCP handshake and list its tools.
    pub startup_timeout_secs: u64,
    /// Time one tool call may take.
    pub call_timeout_secs: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            servers: BTreeMap::new(),
            startup_timeout_secs: 30,
            call_timeout_secs: 120,
        }
    }
}

/// How to reach one server. In the configuration a server with `command` is a stdio server and
/// one with `url` a streamable HTTP server. `env` and `headers` values are secrets: they are
/// never printed.
#[derive(Debug, Clone, PartialEq)]
pub enum McpServer {
    /// A child process speaking MCP on stdin/stdout. It gets a scrubbed environment (PATH, HOME,
    /// locale and a few runtime variables) plus `env`, so the process's own API keys do not leak
    /// to third-party servers.
    Stdio {
        /// The program to run (a path, or a name looked up in `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its scrubbed environment; the values are secrets.
        env: BTreeMap<String, Secret>,
        /// The directory it runs in; Maestro's own when unset.
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint, e.g. `http://127.0.0.1:8000/mcp`.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Headers sent with every request (e.g. `Authorization`); the values are secrets.
        headers: BTreeMap<String, Secret>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerFields {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

fn secrets(map: BTreeMap<String, String>) -> BTreeMap<String, Secret> {
    map.into_iter().map(|(k, v)| (k, Secret::new(v))).collect()
}

impl<'de> Deserialize<'de> for McpServer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let f = ServerFields::deserialize(deserializer)?;
        let err = serde::de::Error::custom;
        match (f.command, f.url) {
            (Some(command), None) => {
                if !f.headers.is_empty() {
                    return Err(err(
                        "`headers` applies to `url` servers, not `command` servers",
                    ));
                }
                Ok(McpServer::Stdio {
                    command,
                    args: f.args,
                    env: secrets(f.env),
                    cwd: f.cwd,
                })
            }
            (None, Some(url)) => {
                if !f.args.is_empty() || !f.env.is_empty() || f.cwd.is_some() {
                    return Err(err(
                        "`args`, `env` and `cwd` apply to `command` servers, not `url` servers",
                    ));
                }
                Ok(McpServer::Http {
                    url,
                    headers: secrets(f.headers),
                })
            }
            _ => Err(err(
                "an MCP server needs exactly one of `command` (a stdio server) or `url` (a streamable HTTP server)",
            )),
        }
    }
}

/// An MCP server name that cannot be part of a tool name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "MCP server name {slug:?} is invalid: use 1-64 characters from a-z, 0-9, `_` and `-`, without `__`"
)]
pub struct InvalidSlug {
    /// The server name as configured.
    pub slug: String,
}

/// Checks a server slug: `[a-z0-9_-]{1,64}` (as `required_mcp` allows), without `__`, which
/// separates the parts of a tool name.
pub fn check_slug(slug: &str) -> Result<(), InvalidSlug> {
    let valid_chars = slug
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if slug.is_empty() || slug.len() > 64 || !valid_chars || slug.contains("__") {
        return Err(InvalidSlug {
            slug: slug.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn parses_both_transports() {
        let json = r#"{"servers": {
            "fs": {"command": "mcp-server-filesystem", "args": ["/tmp"], "env": {"TOKEN": "abc-secret"}},
            "web": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer xyz-secret"}}
        }}"#;
        let config: McpConfig = serde_json::from_str(json).unwrap();
        assert_eq!(config.startup_timeout_secs, 30);
        assert_eq!(
            config.servers["fs"],
            McpServer::Stdio {
                command: "mcp-server-filesystem".into(),
                args: vec!["/tmp".into()],
                env: BTreeMap::from([("TOKEN".to_string(), Secret::new("abc-secret"))]),
                cwd: None
            }
        );
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("abc-secret") && !shown.contains("xyz-secret"),
            "{shown}"
        );
        let both = r#"{"command": "x", "url": "http://a"}"#;
        let e = serde_json::from_str::<McpServer>(both)
            .unwrap_err()
            .to_string();
        assert!(e.contains("exactly one of `command`"), "{e}");
    }

    #[test]
    fn slugs() {
        assert!(check_slug("fs").is_ok());
        assert!(check_slug("my-server_2").is_ok());
        assert!(check_slug("a__b").is_err());
        assert!(check_slug("Upper").is_err());
        assert!(check_slug("").is_err());
    }
}
