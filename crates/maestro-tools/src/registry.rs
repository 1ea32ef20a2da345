//! The registry: every tool by name, what a movement is offered, and the one entry point that
//! turns a model's raw tool call into a [`ToolOutput`] (parse, check, time-limit, cancel).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use maestro_protocol::ToolSpec;
use serde_json::Value;

use crate::config::ToolsConfig;
use crate::{Tool, ToolContext, ToolOutput};

/// Tools offered whenever they are registered, whatever `allowed_tools` says: they only read
/// documentation and skills and let the model learn how to use the tools it has.
pub const META_TOOLS: &[&str] = &["ReadToolDoc", "ListSkills", "ReadSkill"];

/// Tools that run with the workspace to themselves (see `workspace::lock`).
const EXCLUSIVE_TOOLS: &[&str] = &["Bash"];

/// Tools that change files; offered only to movements with `edit: true` (the loader's list, so
/// that a piece is warned of what its movement will not get).
pub use maestro_piece::EDIT_TOOLS;

/// All tools known to this process. Cheap to clone (tools are shared).
///
/// Each tool's spec is built once, when the tool is registered: a spec's schema is generated
/// from the tool's input type, and the registry is asked for specs on every model request.
#[derive(Clone)]
pub struct Registry {
    /// Shared by clones (every run of a worker holds one): registering copies it first.
    tools: Arc<Vec<Registered>>,
    config: Arc<ToolsConfig>,
}

/// A tool with the spec it had when it was registered. The spec is shared, so that copying
/// the list (a run registering its own tools) copies pointers, not schemas.
#[derive(Clone)]
struct Registered {
    spec: Arc<ToolSpec>,
    tool: Arc<dyn Tool>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("tools", &self.names())
            .finish()
    }
}

impl Registry {
    /// An empty registry (useful for tests and for embedding only some tools).
    pub fn empty(config: ToolsConfig) -> Registry {
        Registry {
            tools: Arc::new(Vec::new()),
            config: Arc::new(config),
        }
    }

    /// Every built-in tool of this crate, configured by `config`.
    pub fn builtin(config: ToolsConfig) -> Registry {
        let mut registry = Registry::empty(config);
        for tool in crate::builtins::builtin_tools(&registry.config) {
            registry.register(tool);
        }
        registry
    }

    /// The tool configuration this registry was made with; its built-in tools share it.
    pub fn config(&self) -> &Arc<ToolsConfig> {
        &self.config
    }

    /// Adds a tool; a tool with the same name replaces the earlier one.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        let spec = Arc::new(tool.spec());
        let tools = Arc::make_mut(&mut self.tools);
        tools.retain(|t| t.spec.name != spec.name);
        tools.push(Registered { spec, tool });
    }

    /// Every registered tool's spec, in registration order.
    pub fn list(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec::clone(&t.spec))
            .collect()
    }

    fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.spec.name.as_str()).collect()
    }

    fn find(&self, name: &str) -> Option<&Registered> {
        self.tools.iter().find(|t| t.spec.name == name)
    }

    /// The registered tool named `name` (exactly, e.g. `Bash` or `mcp__docs__search`).
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.find(name).map(|t| &t.tool)
    }

    /// The spec of the tool `name`, as built when it was registered.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.find(name).map(|t| &*t.spec)
    }

    /// What a movement is offered: the tools named in `allowed_tools` (exact names, `mcp__*` for
    /// every MCP tool, `mcp__server__*` for one server's), minus `Write`/`Edit` unless `edit`,
    /// plus the [`META_TOOLS`].
    pub fn offered(&self, allowed_tools: &[String], edit: bool) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .filter(|t| is_offered(&t.spec.name, allowed_tools, edit))
            .map(|t| ToolSpec::clone(&t.spec))
            .collect()
    }

    /// Runs one tool call without an `allowed_tools` check (only the `edit` flag gates
    /// `Write`/`Edit`). The engine should prefer [`execute_allowed`](Self::execute_allowed).
    pub async fn execute(&self, ctx: &ToolContext, name: &str, arguments_json: &str) -> ToolOutput {
        self.run(ctx, name, arguments_json, None).await
    }

    /// Runs one tool call if the tool is offered under `allowed_tools` and `ctx.edit`.
    pub async fn execute_allowed(
        &self,
        ctx: &ToolContext,
        allowed_tools: &[String],
        name: &str,
        arguments_json: &str,
    ) -> ToolOutput {
        self.run(ctx, name, arguments_json, Some(allowed_tools))
            .await
    }

    async fn run(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments_json: &str,
        allowed: Option<&[String]>,
    ) -> ToolOutput {
        let offered_names = || {
            self.names()
                .into_iter()
                .filter(|n| match allowed {
                    Some(allowed) => is_offered(n, allowed, ctx.edit),
                    None => ctx.edit || !EDIT_TOOLS.contains(n),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(Registered { spec, tool }) = self.find(name) else {
            return ToolOutput::error(format!(
                "unknown tool `{name}`; the tools you can call are: {}",
                offered_names()
            ));
        };
        if EDIT_TOOLS.contains(&name) && !ctx.edit {
            return ToolOutput::error(format!(
                "`{name}` is not available in this movement (it cannot edit files); the tools you can call are: {}",
                offered_names()
            ));
        }
        if let Some(allowed) = allowed
            && !is_offered(name, allowed, ctx.edit)
        {
            return ToolOutput::error(format!(
                "`{name}` is not offered in this movement; the tools you can call are: {}",
                offered_names()
            ));
        }
        let input: Value = if arguments_json.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str(arguments_json) {
                Ok(v) => v,
                Err(e) => {
                    return ToolOutput::error(format!(
                        "the arguments for `{name}` are not valid JSON ({e}); send one JSON object with the fields: {}",
                        crate::input::expected_fields(&spec.input_schema)
                    ));
                }
            }
        };
        let limit = tool.time_limit().unwrap_or(self.config.call_timeout);
        let call = AssertUnwindSafe(async {
            let _guard =
                crate::workspace::lock(&ctx.workspace, EXCLUSIVE_TOOLS.contains(&name)).await;
            tool.call(ctx, input).await
        })
        .catch_unwind();
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => ToolOutput::error(format!("`{name}` was cancelled")),
            result = tokio::time::timeout(limit, call) => match result {
                Ok(Ok(output)) => output,
                Ok(Err(_panic)) => ToolOutput::error(format!("`{name}` failed internally; try a different approach")),
                Err(_) => ToolOutput::error(format!("`{name}` did not finish within {} s and was stopped", limit.as_secs())),
            },
        }
    }
}

/// Whether `name` is offered under `allowed_tools` and the edit flag.
pub fn is_offered(name: &str, allowed_tools: &[String], edit: bool) -> bool {
    if EDIT_TOOLS.contains(&name) && !edit {
        return false;
    }
    if META_TOOLS.contains(&name) {
        return true;
    }
    allowed_tools
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) if prefix.starts_with("mcp__") => name.starts_with(prefix),
            _ => pattern == name,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn offering_follows_allowed_tools_and_edit() {
        let allowed = names(&["Read", "Write", "mcp__git__*"]);
        assert!(is_offered("Read", &allowed, false));
        assert!(!is_offered("Write", &allowed, false));
        assert!(is_offered("Write", &allowed, true));
        assert!(!is_offered("Edit", &allowed, true));
        assert!(is_offered("mcp__git__log", &allowed, false));
        assert!(!is_offered("mcp__web__get", &allowed, false));
        assert!(is_offered("mcp__web__get", &names(&["mcp__*"]), false));
        assert!(!is_offered("Bash", &names(&["Bas*"]), false));
        assert!(is_offered("ReadToolDoc", &[], false));
    }
}
