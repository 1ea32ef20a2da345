//! The SSRF guard against a real HTTP server on 127.0.0.1: refused by default, by address, by a
//! name that resolves to loopback, and on redirects; reachable only through a configured exception.

use crate::web_support;

use maestro_tools_web::WebConfig;
use serde_json::json;
use web_support::{call, start};

fn refused(out: &maestro_tools::ToolOutput, expected: &str) {
    assert!(!out.ok, "expected a refusal, got {out:?}");
    assert!(
        out.output.contains(expected),
        "expected {expected:?} in {:?}",
        out.output
    );
}

#[tokio::test]
async fn loopback_literal_is_refused_by_default() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let url = server.url("127.0.0.1", "/page");
    let out = call(
        WebConfig::default(),
        &[],
        "WebFetch",
        json!({"url": url}),
        ws.path(),
    )
    .await;
    refused(&out, "refused to connect to 127.0.0.1 (loopback address)");
    let out = call(
        WebConfig::default(),
        &[],
        "DownloadFile",
        json!({"url": server.url("127.0.0.1", "/bin")}),
        ws.path(),
    )
    .await;
    refused(&out, "refused to connect to 127.0.0.1");
    assert_eq!(
        server.hits(),
        Vec::<String>::new(),
        "no request may reach the server"
    );
    assert!(
        !ws.path().join("input").exists()
            || std::fs::read_dir(ws.path().join("input"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[tokio::test]
async fn ipv6_loopback_and_metadata_literals_are_refused_before_connecting() {
    let ws = tempfile::tempdir().unwrap();
    let out = call(
        WebConfig::default(),
        &[],
        "WebFetch",
        json!({"url": "http://[::1]:9/x"}),
        ws.path(),
    )
    .await;
    refused(&out, "refused to connect to ::1 (loopback address)");
    let out = call(
        WebConfig::default(),
        &[],
        "WebFetch",
        json!({"url": "http://169.254.169.254/latest/meta-data/"}),
        ws.path(),
    )
    .await;
    refused(
        &out,
        "169.254.169.254 (link-local / cloud metadata address)",
    );
    let out = call(
        WebConfig::default(),
        &[],
        "WebFetch",
        json!({"url": "http://[::ffff:10.0.0.1]/"}),
        ws.path(),
    )
    .await;
    refused(&out, "private network address");
    // Other spellings of loopback are normalised by the URL parser and refused the same way.
    for url in [
        "http://2130706433:9/",
        "http://0x7f.1:9/",
        "http://127.1:9/",
    ] {
        let out = call(
            WebConfig::default(),
            &[],
            "WebFetch",
            json!({"url": url}),
            ws.path(),
        )
        .await;
        refused(&out, "refused to connect to 127.0.0.1 (loopback address)");
    }
}

#[tokio::test]
async fn localhost_is_refused_after_system_resolution() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let tools = maestro_tools_web::tools(WebConfig::default());
    let fetch = web_support::tool(&tools, "WebFetch");
    let out = fetch
        .call(
            &web_support::ctx(ws.path()),
            json!({"url": server.url("localhost", "/page")}),
        )
        .await;
    refused(&out, "refused to connect to localhost: it resolves to");
    assert!(out.output.contains("loopback address"), "{}", out.output);
    assert_eq!(server.hits(), Vec::<String>::new());
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let names = [("evil.test", "127.0.0.1")];
    let out = call(
        WebConfig::default(),
        &names,
        "WebFetch",
        json!({"url": server.url("evil.test", "/page")}),
        ws.path(),
    )
    .await;
    refused(
        &out,
        "refused to connect to evil.test: it resolves to 127.0.0.1 (loopback address)",
    );
    let names = [("meta.test", "169.254.169.254")];
    let out = call(
        WebConfig::default(),
        &names,
        "WebFetch",
        json!({"url": "http://meta.test/latest"}),
        ws.path(),
    )
    .await;
    refused(&out, "meta.test: it resolves to 169.254.169.254");
    assert_eq!(server.hits(), Vec::<String>::new());
}

#[tokio::test]
async fn redirects_to_loopback_are_refused() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    // allowed.test is an explicit exception; the addresses it redirects to are not.
    let config = WebConfig {
        allow_hosts: vec!["allowed.test".into()],
        ..WebConfig::default()
    };
    let names = [("allowed.test", "127.0.0.1"), ("evil.test", "127.0.0.1")];

    let to_literal = format!("/redirect?to=http://127.0.0.1:{}/page", server.port);
    let out = call(
        config.clone(),
        &names,
        "WebFetch",
        json!({"url": server.url("allowed.test", &to_literal)}),
        ws.path(),
    )
    .await;
    refused(&out, "refused to connect to 127.0.0.1 (loopback address)");

    let to_name = format!("/redirect?to=http://evil.test:{}/page", server.port);
    let out = call(
        config.clone(),
        &names,
        "WebFetch",
        json!({"url": server.url("allowed.test", &to_name)}),
        ws.path(),
    )
    .await;
    refused(
        &out,
        "refused to connect to evil.test: it resolves to 127.0.0.1",
    );

    let to_file = "/redirect?to=file:///etc/passwd";
    let out = call(
        config.clone(),
        &names,
        "WebFetch",
        json!({"url": server.url("allowed.test", to_file)}),
        ws.path(),
    )
    .await;
    refused(
        &out,
        "redirects to file:///etc/passwd, which was not followed",
    );

    let out = call(
        config,
        &names,
        "DownloadFile",
        json!({"url": server.url("allowed.test", &to_literal)}),
        ws.path(),
    )
    .await;
    refused(&out, "refused to connect to 127.0.0.1");
    // The redirecting endpoint was asked; the page behind the redirect never was.
    assert!(
        !server.hits().contains(&"/page".to_string()),
        "{:?}",
        server.hits()
    );
}

#[tokio::test]
async fn exceptions_go_through_the_same_guard() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let by_address = WebConfig {
        allow_hosts: vec!["127.0.0.1".into()],
        ..WebConfig::default()
    };
    let out = call(
        by_address.clone(),
        &[],
        "WebFetch",
        json!({"url": server.url("127.0.0.1", "/page")}),
        ws.path(),
    )
    .await;
    assert!(out.ok, "{out:?}");
    // An address exception also covers names that resolve to it...
    let names = [("svc.test", "127.0.0.1"), ("other.test", "127.0.0.2")];
    let out = call(
        by_address.clone(),
        &names,
        "WebFetch",
        json!({"url": server.url("svc.test", "/page")}),
        ws.path(),
    )
    .await;
    assert!(out.ok, "{out:?}");
    // ...but not other loopback addresses.
    let out = call(
        by_address,
        &names,
        "WebFetch",
        json!({"url": server.url("other.test", "/page")}),
        ws.path(),
    )
    .await;
    refused(&out, "resolves to 127.0.0.2 (loopback address)");

    let everything = WebConfig {
        allow_private: true,
        ..WebConfig::default()
    };
    let out = call(
        everything,
        &[],
        "WebFetch",
        json!({"url": server.url("127.0.0.1", "/page")}),
        ws.path(),
    )
    .await;
    assert!(out.ok, "{out:?}");
}

#[tokio::test]
async fn other_schemes_and_redirect_loops_are_refused() {
    let server = start().await;
    let ws = tempfile::tempdir().unwrap();
    let out = call(
        WebConfig::default(),
        &[],
        "WebFetch",
        json!({"url": "file:///etc/passwd"}),
        ws.path(),
    )
    .await;
    refused(&out, "unsupported URL scheme \"file\"");
    let config = WebConfig {
        allow_hosts: vec!["127.0.0.1".into()],
        ..WebConfig::default()
    };
    let out = call(
        config,
        &[],
        "WebFetch",
        json!({"url": server.url("127.0.0.1", "/loop")}),
        ws.path(),
    )
    .await;
    refused(&out, "stopped after 5 redirects");
}
