//! WebFetch, DownloadFile and WebSearch against a real HTTP server on 127.0.0.1, reached through
//! a configured exception (the guard itself is covered in web_ssrf.rs).

use crate::web_support;

use maestro_tools::ToolOutput;
use maestro_tools_web::{SearchProvider, WebConfig};
use pretty_assertions::assert_eq;
use serde_json::json;
use web_support::{BINARY, call, start};

fn local() -> WebConfig {
    WebConfig {
        allow_hosts: vec!["127.0.0.1".into()],
        ..WebConfig::default()
    }
}

#[tokio::test]
async fn fetch_turns_html_into_markdown_without_scripts() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let url = server.url("127.0.0.1", "/page");
    let out = call(local(), &[], "WebFetch", json!({"url": url}), ws.path()).await;
    assert_eq!(
        out,
        ToolOutput::ok(format!(
            "URL: {url}\nContent-Type: text/html; charset=utf-8\n\n# Welcome\n\nSome **bold** text."
        ))
    );
}

#[tokio::test]
async fn fetch_refuses_binaries_and_cuts_large_pages() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let url = server.url("127.0.0.1", "/bin");
    let out = call(local(), &[], "WebFetch", json!({"url": url}), ws.path()).await;
    assert_eq!(
        out,
        ToolOutput::error(format!(
            "WebFetch {url}: {url} is image/png, not a text page; WebFetch reads HTML, plain text, \
             markdown, JSON and XML. Use DownloadFile to save other files into input/"
        ))
    );
    let config = WebConfig {
        max_bytes: 1000,
        max_output_chars: 300,
        ..local()
    };
    let out = call(
        config,
        &[],
        "WebFetch",
        json!({"url": server.url("127.0.0.1", "/big")}),
        ws.path(),
    )
    .await;
    assert!(out.ok && out.truncated, "{out:?}");
    assert!(
        out.output
            .ends_with("[truncated: showing 300 of 1000 characters]"),
        "{}",
        out.output
    );
}

#[tokio::test]
async fn fetch_gives_up_at_the_time_limit() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let config = WebConfig {
        timeout_secs: 1,
        ..local()
    };
    let out = call(
        config,
        &[],
        "WebFetch",
        json!({"url": server.url("127.0.0.1", "/slow")}),
        ws.path(),
    )
    .await;
    assert!(
        !out.ok && out.output.ends_with("request timed out after 1s"),
        "{out:?}"
    );
}

#[tokio::test]
async fn download_saves_into_input_with_a_safe_unique_name() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let url = server.url("127.0.0.1", "/bin");
    let out = call(local(), &[], "DownloadFile", json!({"url": url}), ws.path()).await;
    assert_eq!(
        out,
        ToolOutput::ok(format!(
            "Saved {} bytes from {url} to input/bin (image/png)",
            BINARY.len()
        ))
    );
    assert_eq!(std::fs::read(ws.path().join("input/bin")).unwrap(), BINARY);

    let out = call(
        local(),
        &[],
        "DownloadFile",
        json!({"url": url, "filename": "logo image.png"}),
        ws.path(),
    )
    .await;
    assert!(out.output.contains("to input/logo_image.png"), "{out:?}");
    let out = call(
        local(),
        &[],
        "DownloadFile",
        json!({"url": url, "filename": "logo image.png"}),
        ws.path(),
    )
    .await;
    assert!(out.output.contains("to input/logo_image-1.png"), "{out:?}");
    assert_eq!(
        std::fs::read(ws.path().join("input/logo_image-1.png")).unwrap(),
        BINARY
    );

    let out = call(
        local(),
        &[],
        "DownloadFile",
        json!({"url": url, "filename": "../escape"}),
        ws.path(),
    )
    .await;
    assert!(
        !out.ok && out.output.contains("must be a plain file name"),
        "{out:?}"
    );
    assert!(!ws.path().join("escape").exists());
}

#[tokio::test]
async fn download_refuses_files_over_the_limit_and_leaves_nothing() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let config = WebConfig {
        max_bytes: 1000,
        ..local()
    };
    let out = call(
        config,
        &[],
        "DownloadFile",
        json!({"url": server.url("127.0.0.1", "/big")}),
        ws.path(),
    )
    .await;
    assert!(
        !out.ok
            && out
                .output
                .ends_with("the file is 5000 bytes, larger than the 1000-byte limit"),
        "{out:?}"
    );
    let left: Vec<_> = std::fs::read_dir(ws.path().join("input"))
        .map(|d| d.count())
        .into_iter()
        .collect();
    assert!(left.is_empty() || left == [0], "{left:?}");
}

#[tokio::test]
async fn search_without_a_provider_says_so() {
    let ws = tempfile::tempdir().unwrap();
    let out = call(
        WebConfig::default(),
        &[],
        "WebSearch",
        json!({"query": "rust"}),
        ws.path(),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::error("WebSearch is not configured: set web.search.searxng_url")
    );
}

#[tokio::test]
async fn search_queries_the_searxng_json_api() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    // The provider's host is trusted for searching only; the other web tools still refuse it.
    let config = WebConfig {
        search: Some(SearchProvider {
            searxng_url: server.url("127.0.0.1", "/"),
        }),
        ..WebConfig::default()
    };
    let out = call(
        config.clone(),
        &[],
        "WebSearch",
        json!({"query": "rust ssh", "max_results": 2}),
        ws.path(),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::ok(
            "Results for \"rust ssh\":\n\n1. First result\n   https://example.org/a\n   About a.\n\n\
             2. Second result\n   https://example.org/b\n"
        )
    );
    assert_eq!(
        server.hits(),
        vec!["/search?format=json&q=rust ssh".to_string()]
    );
    let out = call(
        config,
        &[],
        "WebFetch",
        json!({"url": server.url("127.0.0.1", "/page")}),
        ws.path(),
    )
    .await;
    assert!(
        !out.ok && out.output.contains("refused to connect to 127.0.0.1"),
        "{out:?}"
    );
}

#[tokio::test]
async fn bad_input_says_what_is_expected() {
    let ws = tempfile::tempdir().unwrap();
    let out = call(
        WebConfig::default(),
        &[],
        "WebFetch",
        json!({"link": "x"}),
        ws.path(),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::error(
            "invalid input for `WebFetch`: unknown field `link`, expected `url`. Expected fields: `url` (string, required)"
        )
    );
}
