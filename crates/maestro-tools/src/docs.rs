//! `ReadToolDoc`: the long documentation of a tool (`docs/tools/<Tool>.md`, embedded at build
//! time), so one-sentence descriptions can ride every call and details are fetched on demand.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::config::ToolsConfig;
use crate::core::off_runtime;
use crate::input::capped;
use crate::regular_file::{self, Access, OpenError};
use crate::{ToolContext, ToolOutput, TypedTool};

include!(concat!(env!("OUT_DIR"), "/tool_docs.rs"));

/// The embedded documentation of `tool`, if there is one.
pub fn tool_doc(tool: &str) -> Option<&'static str> {
    TOOL_DOCS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(tool))
        .map(|(_, doc)| *doc)
}

/// Names of every tool with embedded documentation.
pub fn documented_tools() -> Vec<&'static str> {
    TOOL_DOCS.iter().map(|(name, _)| *name).collect()
}

/// The input of a `ReadToolDoc` call.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadToolDocInput {
    /// The tool's name, e.g. `Bash`.
    pub tool: String,
}

/// `ReadToolDoc`.
#[derive(Debug)]
pub struct ReadToolDocTool {
    /// `docs_dir`, whose `<Tool>.md` files are read before the embedded docs, and the output cap.
    pub config: Arc<ToolsConfig>,
}

impl TypedTool for ReadToolDocTool {
    type Input = ReadToolDocInput;
    const NAME: &'static str = "ReadToolDoc";
    const DESCRIPTION: &'static str =
        "Read the detailed documentation of a tool (usage, limits, examples).";

    async fn run(&self, _ctx: &ToolContext, input: ReadToolDocInput) -> ToolOutput {
        if let Some(dir) = &self.config.docs_dir {
            let name = input.tool.trim();
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                let file = dir.join(format!("{name}.md"));
                // Only a regular file in the docs directory itself: never through a link.
                match off_runtime(move || regular_file::read_to_string(&file)).await {
                    Ok(doc) => return capped(doc, self.config.output_cap_bytes),
                    Err(OpenError::NotFound) => {}
                    Err(e) => {
                        return ToolOutput::error(e.explain(
                            &format!("{name}.md"),
                            "ReadToolDoc",
                            Access::Read,
                        ));
                    }
                }
            }
        }
        match tool_doc(input.tool.trim()) {
            Some(doc) => capped(doc.to_string(), self.config.output_cap_bytes),
            None => ToolOutput::error(format!(
                "no documentation for `{}`; documented tools: {}",
                input.tool,
                documented_tools().join(", ")
            )),
        }
    }
}
