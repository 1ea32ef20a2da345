//! Tools by hand (`maestro tools list`, `maestro tools call`): the registry a run gets, built by
//! [`Toolbox`] from the configuration (MCP and SSH included), and the entry point the engine uses
//! (`Registry::execute_allowed`), so that a tool behaves the same called by hand as in a run.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use maestro_config::Config;
use maestro_piece::{Availability, ToolCatalog};
use maestro_protocol::{RunScratch, ToolSpec};
use maestro_tools::{CancellationToken, EDIT_TOOLS, Registry, ToolContext, ToolOutput};

use crate::toolbox::{McpSelection, Toolbox, ToolboxError, tool_catalog};

/// Every tool of a configuration, and the MCP servers whose tools are missing from it.
#[derive(Debug, Clone)]
pub struct ToolListing {
    /// Each tool's name, description and input schema.
    pub specs: Vec<ToolSpec>,
    /// Configured MCP servers that did not serve, with why.
    pub unavailable: Vec<(String, String)>,
}

/// Lists every tool `config` sets up, starting every configured MCP server (and stopping it).
pub async fn list_tools(config: &Config) -> Result<ToolListing, ToolboxError> {
    let toolbox = Toolbox::build(config, &McpSelection::All).await?;
    let unavailable = toolbox
        .mcp_status()
        .into_iter()
        .filter_map(|(server, status)| status.err().map(|reason| (server, reason.to_string())))
        .collect();
    let mut specs = toolbox.registry.list();
    // Built per run for the job's owner, over the store: listed here without one.
    specs.extend(crate::knowledge_tools::knowledge_tool_specs());
    // The engine's own tools that every run has (they call the run's model, so they are
    // offered in runs only, not called by hand).
    specs.push(maestro_engine::review_spec());
    toolbox.shutdown().await;
    Ok(ToolListing { specs, unavailable })
}

/// One tool call made by hand.
#[derive(Debug, Clone)]
pub struct ToolCallRequest {
    /// The tool's name, e.g. `Read` or `Bash`.
    pub tool: String,
    /// Its input as JSON text.
    pub input: String,
    /// The job workspace (created with the standard layout when it does not exist).
    pub workspace: PathBuf,
    /// Act as a movement with `edit: true`.
    pub edit: bool,
    /// The Bash allowlist of the call; `None` for the configured default.
    pub allowed_commands: Option<Vec<String>>,
    /// The SSH connection ids the call may use (`*` for any); `None` for none.
    pub allowed_ssh_connections: Option<Vec<String>>,
    /// The run's tool state (the checklist) before the call.
    pub scratch: RunScratch,
}

/// What a call by hand gave.
#[derive(Debug, Clone)]
pub struct ToolCallResult {
    /// The tool's answer, as the model would have read it.
    pub output: ToolOutput,
    /// The run's tool state after the call.
    pub scratch: RunScratch,
}

/// Why a call by hand could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ToolCallError {
    /// The workspace does not exist and cannot be laid out.
    #[error("cannot create the workspace `{}`", path.display())]
    Workspace {
        /// The workspace as given.
        path: PathBuf,
        /// Why it cannot be made.
        #[source]
        source: std::io::Error,
    },
    /// The tools of the configuration cannot be set up.
    #[error("the tools cannot be set up")]
    Tools(#[source] ToolboxError),
}

/// Calls one tool as a movement that allows only it would: only the MCP server the tool
/// belongs to is started, and the permissions under test are the edit flag and the allowlists.
pub async fn call_tool(
    config: &Config,
    request: ToolCallRequest,
) -> Result<ToolCallResult, ToolCallError> {
    if !request.workspace.exists() {
        maestro_tools::prepare_workspace(&request.workspace).map_err(|source| {
            ToolCallError::Workspace {
                path: request.workspace.clone(),
                source,
            }
        })?;
    }
    let scratch = Arc::new(Mutex::new(request.scratch));
    let ctx = ToolContext {
        workspace: request.workspace.clone(),
        workspace_kind: maestro_tools::WorkspaceKind::Job,
        edit: request.edit,
        allowed_commands: request.allowed_commands,
        allowed_ssh_connections: request.allowed_ssh_connections,
        cancel: CancellationToken::new(),
        scratch: Arc::clone(&scratch),
    };
    let tool = &request.tool;
    let allowed = vec![tool.clone()];
    let toolbox = Toolbox::build(config, &McpSelection::for_tool(tool))
        .await
        .map_err(ToolCallError::Tools)?;
    let server = config
        .mcp
        .servers
        .keys()
        .find(|slug| tool.starts_with(&format!("mcp__{slug}__")));
    let output = match server.map(|s| toolbox.ensure_required(std::slice::from_ref(s))) {
        Some(Err(missing)) => ToolOutput::error(missing.to_string()),
        _ if maestro_tools::catalog::RUN_TOOLS.contains(&tool.as_str()) => {
            ToolOutput::error(format!(
                "`{tool}` calls the run's model, so it runs only inside a run: name it in a \
                 movement's `allowed_tools` and run the piece"
            ))
        }
        _ if toolbox.registry.get(tool).is_none() => {
            ToolOutput::error(unknown_tool(tool, &toolbox.registry, config, request.edit))
        }
        _ if !request.edit && EDIT_TOOLS.contains(&tool.as_str()) => ToolOutput::error(format!(
            "`{tool}` changes files, so it is called only as a movement with `edit: true` would \
             call it: add --edit"
        )),
        _ => {
            toolbox
                .registry
                .execute_allowed(&ctx, &allowed, tool, &request.input)
                .await
        }
    };
    toolbox.shutdown().await;
    let scratch = scratch.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(ToolCallResult { output, scratch })
}

/// The error for a tool name that is not registered: a close name if there is one, then every
/// tool that can really be called here (registered, set up by the configuration, and allowed
/// by `edit`), and the MCP servers whose tools were not started for this call.
fn unknown_tool(name: &str, registry: &Registry, config: &Config, edit: bool) -> String {
    let set_up = tool_catalog(config);
    let registered: Vec<String> = registry.list().into_iter().map(|spec| spec.name).collect();
    let callable: Vec<String> = registered
        .iter()
        .filter(|tool| !matches!(set_up.get(tool), Some(Availability::Unavailable(_))))
        .cloned()
        .collect();
    let (now, with_edit): (Vec<String>, Vec<String>) = callable
        .into_iter()
        .partition(|tool| edit || !EDIT_TOOLS.contains(&tool.as_str()));
    let mut names = ToolCatalog::default();
    for tool in now.iter().chain(&with_edit) {
        names.add(tool.clone(), Availability::Available);
    }
    let mut message = format!("unknown tool `{name}`; ");
    if let Some(close) = names.suggestion(name) {
        message.push_str(&format!("did you mean `{close}`? "));
    }
    message.push_str(&format!(
        "the tools you can call here are: {}",
        now.join(", ")
    ));
    if !with_edit.is_empty() {
        message.push_str(&format!("; with --edit also {}", with_edit.join(", ")));
    }
    let servers: Vec<&str> = config
        .mcp
        .servers
        .keys()
        .filter(|slug| {
            let prefix = format!("mcp__{slug}__");
            !registered.iter().any(|tool| tool.starts_with(&prefix))
        })
        .map(String::as_str)
        .collect();
    if !servers.is_empty() {
        message.push_str(&format!(
            "; and the tools of the MCP servers {} (`maestro tools list` names them)",
            servers.join(", ")
        ));
    }
    message
}
