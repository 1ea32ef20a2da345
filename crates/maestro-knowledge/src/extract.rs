//! Documents to text with their structure: each [`Section`] is a run of text under one heading
//! (markdown, HTML) or on one page (plain text with form feeds), and carries where it is.
//!
//! The formats read here are markdown, plain text and HTML ([`Format`]). PDFs and Office
//! documents are read by the document tools' readers, outside the process (`maestro-app`'s
//! knowledge base), into markdown whose headings mark pages, slides and sheets, which is then
//! read here as markdown, so chunking, storage and search do not change.

use std::path::Path;

/// A built-in document format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Markdown (`.md`, `.markdown`): sections follow the `#` headings.
    Markdown,
    /// Plain text (`.txt`, `.text`): one section, or one per page when pages are separated by
    /// form feeds (`\x0c`).
    Text,
    /// HTML (`.html`, `.htm`): converted to markdown first, so sections follow `<h1>`–`<h6>`.
    Html,
}

impl Format {
    /// The format a web response's `Content-Type` (lower-cased, parameters allowed) names.
    pub fn for_content_type(content_type: &str) -> Option<Format> {
        let mime = content_type.split(';').next().unwrap_or("").trim();
        match mime {
            "text/html" | "application/xhtml+xml" => Some(Format::Html),
            "text/markdown" | "text/x-markdown" => Some(Format::Markdown),
            "text/plain" => Some(Format::Text),
            _ => None,
        }
    }
}

/// The built-in format of a file, by its extension (case-insensitive); `None` for any other.
pub fn format_for_path(path: &Path) -> Option<Format> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "md" | "markdown" => Some(Format::Markdown),
        "txt" | "text" => Some(Format::Text),
        "html" | "htm" => Some(Format::Html),
        _ => None,
    }
}

/// A document as text, in sections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extracted {
    /// The title the document gives itself (its first `#` heading, an HTML `<title>`), if any.
    pub title: Option<String>,
    /// The document's text in order, one section per heading or page.
    pub sections: Vec<Section>,
}

/// A run of text under one heading or on one page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Where the text is: the heading trail (`Install > On Debian`), `page N`, or empty for a
    /// document without structure.
    pub location: String,
    /// The text.
    pub text: String,
}

/// Why a document could not be read as text.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The bytes are not UTF-8 text.
    #[error("the document is not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 {
        /// Where the first invalid byte is.
        offset: usize,
    },
    /// The HTML converter failed.
    #[error("the HTML could not be converted to text")]
    Html(#[source] std::io::Error),
}

/// Reads `bytes` in the built-in `format`.
pub fn extract(format: Format, bytes: &[u8]) -> Result<Extracted, ExtractError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ExtractError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    Ok(match format {
        Format::Markdown => markdown_sections(text),
        Format::Text => text_sections(text),
        Format::Html => {
            let mut extracted = markdown_sections(&html_to_markdown(text)?);
            if let Some(title) = html_title(text) {
                extracted.title = Some(title);
            }
            extracted
        }
    })
}

/// HTML as markdown, without scripts, styles and other parts that are not text.
pub fn html_to_markdown(html: &str) -> Result<String, ExtractError> {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "svg", "iframe", "object", "embed", "head",
        ])
        .build();
    converter.convert(html).map_err(ExtractError::Html)
}

fn html_title(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let title = html.get(start..end)?.split_whitespace().collect::<Vec<_>>();
    (!title.is_empty()).then(|| title.join(" "))
}

/// The level and text of an ATX heading line (`## Install`).
fn heading(line: &str) -> Option<(usize, &str)> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let level = trimmed.bytes().take_while(|b| *b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &trimmed[level..];
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
        return None;
    }
    let text = rest.trim().trim_end_matches('#').trim();
    Some((level, text))
}

fn markdown_sections(text: &str) -> Extracted {
    let mut extracted = Extracted::default();
    let mut trail: Vec<(usize, String)> = Vec::new();
    let mut location = String::new();
    let mut body = String::new();
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
        } else if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
        } else if let Some((level, title)) = heading(line) {
            push_section(&mut extracted.sections, &location, &body);
            body.clear();
            if level == 1 && extracted.title.is_none() && !title.is_empty() {
                extracted.title = Some(title.to_string());
            }
            trail.retain(|(l, _)| *l < level);
            if !title.is_empty() {
                trail.push((level, title.to_string()));
            }
            location = trail
                .iter()
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join(" > ");
            continue;
        }
        body.push_str(line);
        body.push('\n');
    }
    push_section(&mut extracted.sections, &location, &body);
    extracted
}

fn text_sections(text: &str) -> Extracted {
    let pages: Vec<&str> = text.split('\u{c}').collect();
    let mut extracted = Extracted::default();
    if pages.len() == 1 {
        push_section(&mut extracted.sections, "", text);
    } else {
        for (n, page) in pages.iter().enumerate() {
            push_section(&mut extracted.sections, &format!("page {}", n + 1), page);
        }
    }
    extracted
}

fn push_section(sections: &mut Vec<Section>, location: &str, body: &str) {
    let text = body.trim();
    if !text.is_empty() {
        sections.push(Section {
            location: location.to_string(),
            text: text.to_string(),
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn locations(extracted: &Extracted) -> Vec<&str> {
        extracted
            .sections
            .iter()
            .map(|s| s.location.as_str())
            .collect()
    }

    #[test]
    fn markdown_sections_follow_the_heading_trail() {
        let doc = "intro line\n# Guide\ntop\n## Install\nsteps\n### On Debian\napt\n```\n# not a heading\n```\n## Use\nrun it\n";
        let extracted = extract(Format::Markdown, doc.as_bytes()).unwrap();
        assert_eq!(extracted.title.as_deref(), Some("Guide"));
        assert_eq!(
            locations(&extracted),
            [
                "",
                "Guide",
                "Guide > Install",
                "Guide > Install > On Debian",
                "Guide > Use"
            ]
        );
        assert!(extracted.sections[3].text.contains("# not a heading"));
    }

    #[test]
    fn text_pages_are_sections() {
        let extracted = extract(Format::Text, b"one\x0ctwo\x0c\x0cfour").unwrap();
        assert_eq!(locations(&extracted), ["page 1", "page 2", "page 4"]);
        assert_eq!(extracted.sections[2].text, "four");
    }

    #[test]
    fn html_becomes_sections_under_its_headings() {
        let html = "<html><head><title>The  Manual</title><style>p{}</style></head><body>\
                    <h1>Manual</h1><p>hello</p><h2>Setup</h2><p>do this</p>\
                    <script>alert(1)</script></body></html>";
        let extracted = extract(Format::Html, html.as_bytes()).unwrap();
        assert_eq!(extracted.title.as_deref(), Some("The Manual"));
        assert_eq!(locations(&extracted), ["Manual", "Manual > Setup"]);
        assert_eq!(extracted.sections[1].text, "do this");
    }

    #[test]
    fn formats_by_extension_and_content_type() {
        assert_eq!(format_for_path(Path::new("a/B.MD")), Some(Format::Markdown));
        assert_eq!(format_for_path(Path::new("a.htm")), Some(Format::Html));
        assert_eq!(format_for_path(Path::new("a.pdf")), None);
        assert_eq!(
            Format::for_content_type("text/html; charset=utf-8"),
            Some(Format::Html)
        );
        assert_eq!(Format::for_content_type("image/png"), None);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused_with_the_offset() {
        let error = extract(Format::Text, b"ok\xff").unwrap_err();
        assert_eq!(
            error.to_string(),
            "the document is not UTF-8 text (invalid byte at offset 2)"
        );
    }
}
