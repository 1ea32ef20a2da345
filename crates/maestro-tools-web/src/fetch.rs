//! `WebFetch`: one web page, as readable markdown (HTML) or as text (plain, markdown, JSON, XML).

use schemars::JsonSchema;
use serde::Deserialize;

use super::WebError;
use super::client::{WebClient, read_limited};
use maestro_tools::{ToolContext, ToolOutput, TypedTool};

pub(crate) struct WebFetch {
    client: WebClient,
    max_output_chars: usize,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebFetchInput {
    /// http or https URL of the page
    url: String,
}

/// How a response body is turned into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Html,
    Text,
}

impl WebFetch {
    pub(crate) fn new(client: WebClient, max_output_chars: usize) -> Self {
        WebFetch {
            client,
            max_output_chars,
        }
    }

    async fn fetch(&self, ctx: &ToolContext, input: WebFetchInput) -> Result<ToolOutput, WebError> {
        let fetched = self.client.get(&input.url, &ctx.cancel).await?;
        let declared = fetched.content_type.as_deref().map(mime_of);
        let kind = match declared {
            Some(mime) => Some(classify(mime).ok_or_else(|| not_text(&fetched.final_url, mime))?),
            None => None,
        };
        let limit = self.client.max_bytes;
        let (bytes, cut_bytes) =
            read_limited(&self.client, fetched.response, limit, &ctx.cancel).await?;
        let kind = match kind {
            Some(kind) => kind,
            None => sniff(&bytes).ok_or_else(|| not_text(&fetched.final_url, "binary data"))?,
        };
        let raw = String::from_utf8_lossy(&bytes).into_owned();
        let text = match kind {
            Body::Html => tokio::task::spawn_blocking(move || html_to_markdown(&raw))
                .await
                .map_err(WebError::Conversion)??,
            Body::Text => raw,
        };
        let mut out = format!(
            "URL: {}\nContent-Type: {}\n\n",
            fetched.final_url,
            fetched.content_type.as_deref().unwrap_or("(none)")
        );
        let mut truncated = cut_bytes;
        let chars = text.chars().count();
        if chars > self.max_output_chars {
            out.extend(text.chars().take(self.max_output_chars));
            out.push_str(&format!(
                "\n\n[truncated: showing {} of {chars} characters]",
                self.max_output_chars
            ));
            truncated = true;
        } else {
            out.push_str(text.trim_end());
            if cut_bytes {
                out.push_str(&format!(
                    "\n\n[truncated: the page is larger than {limit} bytes]"
                ));
            }
        }
        Ok(ToolOutput {
            ok: true,
            output: out,
            truncated,
        })
    }
}

impl TypedTool for WebFetch {
    type Input = WebFetchInput;
    const NAME: &'static str = "WebFetch";
    const DESCRIPTION: &'static str =
        "Fetch a public web page and return its content as readable markdown or text.";

    async fn run(&self, ctx: &ToolContext, input: WebFetchInput) -> ToolOutput {
        let url = input.url.clone();
        self.fetch(ctx, input)
            .await
            .unwrap_or_else(|e| ToolOutput::error(format!("WebFetch {url}: {e}")))
    }
}

pub(crate) fn mime_of(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

fn classify(mime: &str) -> Option<Body> {
    let (top, sub) = mime.split_once('/')?;
    match (top, sub) {
        ("text", "html") | ("application", "xhtml+xml") => Some(Body::Html),
        ("text", _) => Some(Body::Text),
        (
            "application",
            "json" | "xml" | "javascript" | "yaml" | "x-yaml" | "x-ndjson" | "toml",
        ) => Some(Body::Text),
        ("application", s) if s.ends_with("+json") || s.ends_with("+xml") => Some(Body::Text),
        _ => None,
    }
}

/// For a response without a Content-Type: text when it decodes as UTF-8 without NUL bytes.
fn sniff(bytes: &[u8]) -> Option<Body> {
    let head = &bytes[..bytes.len().min(4096)];
    if head.contains(&0) {
        return None;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        // A cut at the byte limit may split a character.
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&bytes[..e.valid_up_to()]).ok()?,
        Err(_) => return None,
    };
    let start = text
        .trim_start()
        .get(..15)
        .unwrap_or("")
        .to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        Some(Body::Html)
    } else {
        Some(Body::Text)
    }
}

fn not_text(url: &str, what: &str) -> WebError {
    WebError::NotText {
        url: url.to_string(),
        what: what.to_string(),
    }
}

pub(crate) fn html_to_markdown(html: &str) -> Result<String, WebError> {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "svg", "iframe", "object", "embed", "head",
        ])
        .build();
    let markdown = converter.convert(html).map_err(WebError::Html)?;
    Ok(collapse_blank_lines(&markdown))
}

fn collapse_blank_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        if line.trim().is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(
            classify(mime_of("text/html; charset=utf-8")),
            Some(Body::Html)
        );
        assert_eq!(classify("application/ld+json"), Some(Body::Text));
        assert_eq!(classify("text/markdown"), Some(Body::Text));
        assert_eq!(classify("application/pdf"), None);
        assert_eq!(classify("image/png"), None);
        assert_eq!(sniff(b"<!DOCTYPE html><p>x"), Some(Body::Html));
        assert_eq!(sniff(b"plain"), Some(Body::Text));
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0\0"), None);
    }

    #[test]
    fn html_becomes_markdown_without_scripts() {
        let html = "<html><head><title>T</title><style>p{}</style></head><body>\
                    <h1>Hello</h1><script>alert(1)</script><p>A <a href=\"/x\">link</a>.</p></body></html>";
        assert_eq!(
            html_to_markdown(html).unwrap(),
            "# Hello\n\nA [link](/x).\n"
        );
    }
}
