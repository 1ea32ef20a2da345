//! The full tool set, built from the loaded configuration: the built-in tools of `maestro-tools`
//! (`tools:`), the web tools of `maestro-tools-web` (`web:`), the SSH tools of
//! `maestro-tools-ssh` (`ssh:`), the document tools of `maestro-tools-documents` (limits from
//! `tools:`), `BrowseWeb` of `maestro-tools-browser` (`web:`, `web.browser:`) and the tools of the
//! MCP servers (`maestro-tools-mcp`, `mcp:`).
//! This is the one place tools are assembled: `maestro run`, `maestro tools` and the workers all
//! build their registry here, so a tool called by hand behaves as it does in a run, and the
//! catalogue pieces are validated against ([`tool_catalog`]) names the same tools.
//!
//! MCP servers are child processes or remote sessions, so only the servers a caller needs are
//! started ([`McpSelection`]), and [`Toolbox::shutdown`] stops them again.

use std::sync::Arc;

use maestro_config::Config;
use maestro_piece::{LoadOptions, Movement, Piece, ToolCatalog};
use maestro_tools::Registry;
use maestro_tools_mcp::{McpConfig, McpError, McpHub};
use maestro_tools_ssh::SshRegistryError;

/// Why the tool set could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ToolboxError {
    /// `ssh.connections` does not make a registry.
    #[error("ssh.connections")]
    Ssh(#[source] SshRegistryError),
}

/// Which configured MCP servers to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpSelection {
    /// Every configured server (`maestro tools list`).
    All,
    /// The servers named in `required`, and those whose tools `allowed_tools` patterns can
    /// offer: `mcp__*` (every server), `mcp__<server>__*`, or an exact `mcp__<server>__<tool>`.
    Only {
        /// The piece's `required_mcp` servers.
        required: Vec<String>,
        /// The `allowed_tools` patterns of every movement of the piece.
        allowed_tools: Vec<String>,
    },
}

impl McpSelection {
    /// The servers a run of `piece` can use: its `required_mcp`, and every server a movement
    /// (or a parallel sub-movement) allows tools of.
    pub fn for_piece(piece: &Piece) -> McpSelection {
        fn collect(movements: &[Movement], into: &mut Vec<String>) {
            for movement in movements {
                into.extend(movement.allowed_tools.iter().cloned());
                collect(&movement.parallel, into);
            }
        }
        let mut allowed_tools = Vec::new();
        collect(&piece.movements, &mut allowed_tools);
        McpSelection::Only {
            required: piece.required_mcp.clone(),
            allowed_tools,
        }
    }

    /// No MCP server.
    pub fn none() -> McpSelection {
        McpSelection::Only {
            required: Vec::new(),
            allowed_tools: Vec::new(),
        }
    }

    /// Only the server that `tool` (a tool name) belongs to, if it is an MCP tool.
    pub fn for_tool(tool: &str) -> McpSelection {
        McpSelection::Only {
            required: Vec::new(),
            allowed_tools: vec![tool.to_string()],
        }
    }

    /// Whether the server `slug` is selected.
    pub fn wants(&self, slug: &str) -> bool {
        match self {
            McpSelection::All => true,
            McpSelection::Only {
                required,
                allowed_tools,
            } => {
                let tool_prefix = format!("mcp__{slug}__");
                required.iter().any(|r| r == slug)
                    || allowed_tools
                        .iter()
                        .any(|pattern| match pattern.strip_suffix('*') {
                            // `mcp__*`, `mcp__git*` and `mcp__git__*` all reach `mcp__git__…`.
                            Some(prefix) if prefix.starts_with("mcp__") => {
                                tool_prefix.starts_with(prefix) || prefix.starts_with(&tool_prefix)
                            }
                            _ => pattern.starts_with(&tool_prefix),
                        })
            }
        }
    }
}

/// The tool names pieces may use under `config`, and which of them it sets up: what `maestro
/// validate`, `maestro run` and `CreatePiece` check `allowed_tools` against.
pub fn tool_catalog(config: &Config) -> ToolCatalog {
    let mut catalog =
        maestro_tools::catalog::tool_catalog(&config.tools, config.subtasks.max_depth > 0);
    maestro_tools_web::add_to_catalog(&mut catalog, &config.web);
    maestro_tools_ssh::add_to_catalog(&mut catalog, config.ssh.connections.len());
    maestro_tools::catalog::available(&mut catalog, crate::knowledge_tools::KNOWLEDGE_TOOLS);
    maestro_tools_documents::add_to_catalog(&mut catalog);
    maestro_tools_browser::add_to_catalog(&mut catalog);
    catalog
}

/// The document tools under `config`: their reader child is this process's own executable
/// (`maestro __document-reader`), their limits those of `tools:`.
fn document_tools(config: &Config) -> Vec<Arc<dyn maestro_tools::Tool>> {
    maestro_tools_documents::tools(maestro_tools_documents::DocumentsConfig::from_tools(
        &config.tools,
        maestro_tools_documents::ReaderCommand::current_exe(),
    ))
}

/// The options pieces load with under `config`: the facet directories of the project (the
/// current directory), the user and `paths.facets_dirs`, and `allowed_tools` checked against
/// [`tool_catalog`].
pub fn load_options(config: &Config) -> LoadOptions {
    LoadOptions {
        tools: Some(tool_catalog(config)),
        ..LoadOptions::standard(
            std::env::current_dir().ok(),
            config.paths.facets_dirs.clone(),
        )
    }
}

/// A server a piece requires (`required_mcp`) that cannot serve it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequiredMcp {
    #[error(
        "MCP server `{server}` is required but not configured (configured servers: {configured})\n  \
         fix: configure `mcp.servers.{server}` in .maestro/config.yaml, with `command` (a stdio \
         server) or `url` (a streamable HTTP server)"
    )]
    /// No server of that name is configured.
    NotConfigured {
        /// The server the piece requires.
        server: String,
        /// The servers that are configured, comma-separated (`none` when there are none).
        configured: String,
    },
    #[error(
        "MCP server `{server}` is required but was not started\n  fix: check \
         `mcp.servers.{server}` in .maestro/config.yaml"
    )]
    /// The server is configured but was not started for this run.
    NotStarted {
        /// The server the piece requires.
        server: String,
    },
    #[error(
        "MCP server `{server}` is required but not available: {reason}\n  fix: check \
         `mcp.servers.{server}` in .maestro/config.yaml (command, args, env or url) and that the \
         server starts on its own"
    )]
    /// The server was started but does not serve.
    Unavailable {
        /// The server the piece requires.
        server: String,
        /// Why it does not serve (its start or its handshake failed).
        reason: String,
    },
}

/// The registry with every configured tool, and the MCP servers behind some of them.
pub struct Toolbox {
    /// Every tool of the configuration, ready for the engine.
    pub registry: Registry,
    hub: McpHub,
    /// Every server in the configuration, started or not (for error messages).
    configured: Vec<String>,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("registry", &self.registry)
            .field("hub", &self.hub)
            .finish()
    }
}

impl Toolbox {
    /// Builds the registry from `config`, starting the MCP servers `mcp` selects (concurrently;
    /// a server that does not come up is recorded, see [`Toolbox::ensure_required`]).
    ///
    /// SSH connections are usable by runs of any owner: the CLI runs as one local user.
    pub async fn build(config: &Config, mcp: &McpSelection) -> Result<Toolbox, ToolboxError> {
        // CreatePiece/UpdatePiece check tool names against what this configuration sets up.
        let tools = maestro_tools::ToolsConfig {
            tool_catalog: Some(tool_catalog(config)),
            ..config.tools.clone()
        };
        let mut registry = Registry::builtin(tools);
        for tool in maestro_tools_web::tools(config.web.clone()) {
            registry.register(tool);
        }
        if registry.config().skills_install_dir.is_some() {
            // Over the workspace-only InstallSkill: archives may also come from a URL, fetched
            // through the web tools' guard.
            let tools = Arc::clone(registry.config());
            registry.register(maestro_tools_web::install_skill_tool(&config.web, tools));
        }
        let connections = config.ssh.registry().map_err(ToolboxError::Ssh)?;
        for tool in maestro_tools_ssh::tools(Arc::new(connections), None) {
            registry.register(tool);
        }
        for tool in document_tools(config) {
            registry.register(tool);
        }
        // A run replaces this one with its own (`run.rs`): the browser and its page belong to
        // one run. This one serves `maestro tools` and is closed with the toolbox.
        registry.register(maestro_tools_browser::browse_web(&config.web));
        let selected = McpConfig {
            servers: config
                .mcp
                .servers
                .iter()
                .filter(|(slug, _)| mcp.wants(slug))
                .map(|(slug, server)| (slug.clone(), server.clone()))
                .collect(),
            ..config.mcp.clone()
        };
        let hub = McpHub::start(&selected).await;
        for tool in hub.tools() {
            registry.register(tool);
        }
        Ok(Toolbox {
            registry,
            hub,
            configured: config.mcp.servers.keys().cloned().collect(),
        })
    }

    /// Makes `CreatePiece` and `UpdatePiece` write through `writer` (the store runs look pieces
    /// up in) instead of into `tools.pieces_dir`.
    pub(crate) fn write_pieces_to(&mut self, writer: Arc<dyn maestro_tools::pieces::PieceWriter>) {
        let config = Arc::clone(self.registry.config());
        for tool in maestro_tools::pieces::piece_writing_tools(&config, &writer) {
            self.registry.register(tool);
        }
    }

    /// Checks that every server in `required` is configured, was selected, started and is still
    /// connected. The error names the server, says why, and says what to change.
    pub fn ensure_required(&self, required: &[String]) -> Result<(), RequiredMcp> {
        if let Some(server) = required.iter().find(|r| !self.configured.contains(r)) {
            return Err(RequiredMcp::NotConfigured {
                server: server.clone(),
                configured: if self.configured.is_empty() {
                    "none".to_string()
                } else {
                    self.configured.join(", ")
                },
            });
        }
        self.hub.ensure_required(required).map_err(|e| match e {
            McpError::NotConfigured { server, .. } => RequiredMcp::NotStarted { server },
            McpError::Unavailable { server, reason } => RequiredMcp::Unavailable { server, reason },
        })
    }

    /// Each started server with its tool count, or the reason it is down.
    pub fn mcp_status(
        &self,
    ) -> std::collections::BTreeMap<String, Result<usize, maestro_tools_mcp::ServerDown>> {
        self.hub.status()
    }

    /// Stops the MCP servers: drops the registry's MCP tools, then closes every connection and
    /// waits for stdio servers to exit. Clones of the registry handed out earlier (e.g. to an
    /// engine) should be dropped first, or their servers are only told to close.
    pub async fn shutdown(self) {
        let Toolbox { registry, hub, .. } = self;
        drop(registry);
        hub.shutdown().await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use maestro_piece::Availability;
    use maestro_tools::catalog::{ENGINE_TOOLS, PLANNED_TOOLS, RUN_TOOLS};
    use maestro_tools_ssh::SshRegistry;
    use maestro_tools_web::{SearchProvider, WebConfig};

    use super::*;

    /// The catalog's names are exactly the tools the toolbox registers when everything is set
    /// up, plus the engine's and the planned ones: a new tool cannot be forgotten there.
    #[test]
    fn the_catalog_names_every_registered_tool() {
        let mut config = Config::default();
        config.tools.skills_dirs = vec!["skills".into()];
        config.tools.skills_install_dir = Some("installed-skills".into());
        config.tools.pieces_dir = Some("pieces".into());
        config.web.search = Some(SearchProvider {
            searxng_url: "http://127.0.0.1:1".into(),
        });
        config.subtasks.max_depth = 1;
        // Built as `Toolbox::build` does, without starting MCP servers (their tools are named
        // by pattern, not in the catalog) or needing a real SSH connection.
        let mut registry = Registry::builtin(config.tools.clone());
        for tool in maestro_tools_web::tools(WebConfig::default()) {
            registry.register(tool);
        }
        for tool in maestro_tools_ssh::tools(Arc::new(SshRegistry::new(Vec::new()).unwrap()), None)
        {
            registry.register(tool);
        }
        for tool in document_tools(&config) {
            registry.register(tool);
        }
        registry.register(maestro_tools_browser::browse_web(&config.web));
        let mut registered: Vec<String> = registry.list().into_iter().map(|s| s.name).collect();
        registered.sort();
        let mut catalog =
            maestro_tools::catalog::tool_catalog(&config.tools, config.subtasks.max_depth > 0);
        maestro_tools_web::add_to_catalog(&mut catalog, &config.web);
        maestro_tools_ssh::add_to_catalog(&mut catalog, 1);
        maestro_tools::catalog::available(&mut catalog, crate::knowledge_tools::KNOWLEDGE_TOOLS);
        // The knowledge tools need the store and are added per run, as the engine's are.
        maestro_tools_documents::add_to_catalog(&mut catalog);
        maestro_tools_browser::add_to_catalog(&mut catalog);
        let available: Vec<&str> = catalog
            .names()
            .filter(|n| catalog.get(n) == Some(&Availability::Available))
            .filter(|n| !ENGINE_TOOLS.contains(n) && !RUN_TOOLS.contains(n))
            .filter(|n| !crate::knowledge_tools::KNOWLEDGE_TOOLS.contains(n))
            .collect();
        assert_eq!(available, registered);
        let planned: Vec<&str> = catalog
            .names()
            .filter(|n| catalog.get(n) != Some(&Availability::Available))
            .collect();
        let mut expected = PLANNED_TOOLS.to_vec();
        expected.sort_unstable();
        assert_eq!(planned, expected);
    }

    #[test]
    fn unconfigured_tools_say_what_to_set() {
        let mut config = Config::default();
        config.subtasks.max_depth = 0;
        let catalog = tool_catalog(&config);
        let why = |name: &str| match catalog.get(name) {
            Some(Availability::Unavailable(why)) => why.clone(),
            other => panic!("{name}: {other:?}"),
        };
        assert!(why("WebSearch").contains("web.search.searxng_url"));
        assert!(why("SshExec").contains("ssh.connections"));
        assert!(why("CreatePiece").contains("tools.pieces_dir"));
        assert!(why("SpawnSubTask").contains("subtasks.max_depth"));
        assert!(why("InstallSkill").contains("tools.skills_install_dir"));
        assert_eq!(catalog.get("ReadImage"), Some(&Availability::Available));
        assert_eq!(catalog.get("BrowseWeb"), Some(&Availability::Available));
        assert_eq!(catalog.get("Read"), Some(&Availability::Available));
        assert_eq!(catalog.get("WebFetch"), Some(&Availability::Available));
    }

    fn only(required: &[&str], allowed: &[&str]) -> McpSelection {
        McpSelection::Only {
            required: required.iter().map(|s| s.to_string()).collect(),
            allowed_tools: allowed.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn selection_follows_required_and_allowed_tools() {
        assert!(McpSelection::All.wants("git"));
        assert!(only(&["git"], &[]).wants("git"));
        assert!(!only(&["git"], &[]).wants("web"));
        assert!(only(&[], &["mcp__*"]).wants("web"));
        assert!(only(&[], &["Read", "mcp__git__*"]).wants("git"));
        assert!(!only(&[], &["Read", "mcp__git__*"]).wants("gitlab"));
        assert!(only(&[], &["mcp__gi*"]).wants("gitlab"));
        assert!(only(&[], &["mcp__git__log"]).wants("git"));
        assert!(!only(&[], &["mcp__git__log"]).wants("gi"));
        assert!(!only(&[], &["Read", "Bash"]).wants("git"));
        assert!(McpSelection::for_tool("mcp__calc__add").wants("calc"));
        assert!(!McpSelection::for_tool("WebFetch").wants("calc"));
    }
}
