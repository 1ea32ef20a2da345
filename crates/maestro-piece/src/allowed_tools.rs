//! Checking a movement's `allowed_tools` against the caller's [`crate::ToolCatalog`]: an
//! unknown name is an error with a suggestion, a known tool that is not set up here a warning
//! (see [`crate::catalog`]). The maestro and takt loaders call it.

use crate::catalog::Availability;
use crate::check::Str;
use crate::cx::Cx;

/// Tools of Claude Code that TAKT pieces list in `allowed_tools` and Maestro has no equivalent
/// for. In a takt piece they are reported as not offered (a warning), not as typos.
const CLAUDE_CODE_TOOLS: &[&str] = &[
    "Task",
    "TodoWrite",
    "TodoRead",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "LS",
    "Skill",
    "SlashCommand",
    "AskUserQuestion",
    "BashOutput",
    "KillShell",
    "ExitPlanMode",
];

/// Which dialect's names are being checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Names {
    Maestro,
    /// takt pieces may also name Claude Code's tools.
    Takt,
}

/// Checks each entry of an `allowed_tools` list against [`crate::LoadOptions::tools`] (nothing
/// is checked without a catalog).
pub(crate) fn check_tools(cx: &mut Cx<'_>, tools: &[Str<'_>], names: Names) {
    let Some(catalog) = &cx.opts.tools else {
        return;
    };
    for tool in tools {
        let name = tool.text;
        if name.starts_with("mcp__") {
            continue;
        }
        match catalog.get(name) {
            Some(Availability::Available) => {}
            // Pieces list the same tools in every movement: each is reported once per file.
            Some(Availability::Unavailable(why)) => {
                cx.sink
                    .warn_once(&format!("tool {name}"), &tool.path, tool.span, || {
                        format!("`{name}` is not available here, so it is not offered: {why}")
                    });
            }
            None if names == Names::Takt && CLAUDE_CODE_TOOLS.contains(&name) => {
                cx.sink
                    .warn_once(&format!("tool {name}"), &tool.path, tool.span, || {
                        format!(
                            "`{name}` is a Claude Code tool with no Maestro equivalent, so it is not offered; `maestro tools list` shows the tools there are"
                        )
                    });
            }
            None => {
                let hint = match catalog.suggestion(name) {
                    Some(known) => format!("did you mean `{known}`?"),
                    None => "use a tool name from `maestro tools list` (e.g. Read, Glob, Grep, Bash) or `mcp__<server>__<tool>` for an MCP server's tool".to_owned(),
                };
                cx.sink.error(
                    &tool.path,
                    tool.span,
                    format!("unknown tool `{name}`; {hint}"),
                );
            }
        }
    }
}
