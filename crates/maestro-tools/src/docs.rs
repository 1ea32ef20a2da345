//! `ReadToolDoc`: the long documentation of a tool (`docs/tools/<Tool>.md`, embedded at build
//! time), so one-sentence descriptions can ride every call and details are fetched on demand.

use std::sync::Arc;

use maestro_protocol::ToolSpec;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::config::ToolsConfig;
use crate::core::off_runtime;
use crate::input::{capped, parse_input, spec_for};
use crate::regular_file::{self, Access, OpenError};
use crate::{BoxFuture, Tool, ToolContext, ToolOutput};

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

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadToolDocInput {
    /// The tool's name, e.g. `Bash`.
    pub tool: String,
}

/// `ReadToolDoc`.
pub struct ReadToolDocTool {
    pub config: Arc<ToolsConfig>,
}

impl Tool for ReadToolDocTool {
    fn spec(&self) -> ToolSpec {
        spec_for::<ReadToolDocInput>(
            "ReadToolDoc",
            "Read the detailed documentation of a tool (usage, limits, examples).",
        )
    }

    fn call<'a>(&'a self, _ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: ReadToolDocInput = match parse_input(&self.spec(), input) {
                Ok(i) => i,
                Err(e) => return e,
            };
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
        })
    }
}
