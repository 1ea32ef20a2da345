//! One remote MCP tool offered to the model as `mcp__<server>__<tool>`.

use std::sync::Arc;
use std::time::Duration;

use maestro_protocol::ToolSpec;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};

use super::connection::Connection;
use maestro_tools::{BoxFuture, Tool, ToolContext, ToolOutput};

/// Characters of tool output handed back to the model.
const OUTPUT_CAP: usize = 60_000;

pub(crate) struct McpTool {
    conn: Arc<Connection>,
    /// The tool's name on its server.
    remote: String,
    spec: ToolSpec,
    timeout: Duration,
}

impl McpTool {
    pub(crate) fn new(conn: Arc<Connection>, tool: &rmcp::model::Tool, timeout: Duration) -> Self {
        let name = format!("mcp__{}__{}", conn.slug, sanitize(&tool.name));
        let description = tool
            .description
            .as_deref()
            .map(first_sentence)
            .unwrap_or_else(|| format!("Tool {} of MCP server {}.", tool.name, conn.slug));
        let spec = ToolSpec {
            name,
            description,
            input_schema: serde_json::Value::Object((*tool.input_schema).clone()).into(),
        };
        McpTool {
            remote: tool.name.to_string(),
            conn,
            spec,
            timeout,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }
}

/// Keeps tool names to what model APIs accept: `[A-Za-z0-9_-]`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Tool descriptions ride every model call, so only the first sentence is kept.
fn first_sentence(text: &str) -> String {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|&(i, c)| c == '\n' || (c == '.' && text[i + 1..].starts_with(char::is_whitespace)))
        .map_or(text.len(), |(i, c)| if c == '.' { i + 1 } else { i });
    text[..end].trim().to_string()
}

fn render(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!(
                "[image {} ({} base64 characters) omitted]",
                i.mime_type,
                i.data.len()
            ),
            ContentBlock::Audio(a) => format!(
                "[audio {} ({} base64 characters) omitted]",
                a.mime_type,
                a.data.len()
            ),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("[resource {uri}]\n{text}")
                }
                ResourceContents::BlobResourceContents { uri, .. } => {
                    format!("[binary resource {uri} omitted]")
                }
                _ => "[resource of an unknown kind omitted]".to_string(),
            },
            ContentBlock::ResourceLink(link) => {
                format!("[resource link {} ({})]", link.uri, link.name)
            }
            _ => "[content of an unknown kind omitted]".to_string(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    parts.join("\n")
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let arguments = match input {
                serde_json::Value::Object(map) => map,
                serde_json::Value::Null => serde_json::Map::new(),
                other => {
                    return ToolOutput::error(format!(
                        "{} takes a JSON object as input, not {other}",
                        self.spec.name
                    ));
                }
            };
            let params = CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments);
            let call = tokio::time::timeout(self.timeout, self.conn.client.call_tool(params));
            let result = tokio::select! {
                r = call => r,
                () = ctx.cancel.cancelled() => return ToolOutput::error("cancelled"),
            };
            let result = match result {
                Err(_) => {
                    return ToolOutput::error(format!(
                        "{} did not answer within {}s",
                        self.spec.name,
                        self.timeout.as_secs()
                    ));
                }
                Ok(Err(e)) => {
                    return ToolOutput::error(format!(
                        "MCP server `{}` failed to run {}: {e}",
                        self.conn.slug, self.remote
                    ));
                }
                Ok(Ok(result)) => result,
            };
            let text = render(&result);
            let ok = result.is_error != Some(true);
            let total = text.chars().count();
            if total > OUTPUT_CAP {
                let mut cut: String = text.chars().take(OUTPUT_CAP).collect();
                cut.push_str(&format!(
                    "\n[truncated: showing {OUTPUT_CAP} of {total} characters]"
                ));
                ToolOutput {
                    ok,
                    output: cut,
                    truncated: true,
                }
            } else {
                ToolOutput {
                    ok,
                    output: text,
                    truncated: false,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn names_and_descriptions() {
        assert_eq!(sanitize("read.file"), "read_file");
        assert_eq!(
            first_sentence("Read a file. Use it for text.\nMore."),
            "Read a file."
        );
        assert_eq!(first_sentence("Read v1.2 files\nmore"), "Read v1.2 files");
    }
}
