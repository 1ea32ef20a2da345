#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The MCP hub against real servers: the npm reference filesystem server (stdio) and a server
//! built on the official Python SDK (stdio and streamable HTTP).

mod mcp_support;

use std::collections::BTreeMap;

use maestro_tools::ToolOutput;
use maestro_tools_mcp::{McpConfig, McpError, McpHub, McpServer};
use mcp_support::{HttpServer, ctx, filesystem_server, find, names, python_stdio_server};
use pretty_assertions::assert_eq;
use serde_json::json;

fn config(servers: Vec<(&str, McpServer)>) -> McpConfig {
    McpConfig {
        servers: servers
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<BTreeMap<_, _>>(),
        startup_timeout_secs: 30,
        ..McpConfig::default()
    }
}

#[tokio::test]
#[cfg_attr(
    no_mcp_filesystem_server,
    ignore = "needs the reference MCP filesystem server: scripts/prerequisites.sh"
)]
async fn filesystem_server_tools_are_offered_and_called() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "hello from the filesystem server\n").unwrap();
    let hub = McpHub::start(&config(vec![("fs", filesystem_server(&root))])).await;
    assert_eq!(hub.ensure_required(&["fs".to_string()]), Ok(()));
    let tools = hub.tools();
    let listed = names(&tools);
    for expected in [
        "mcp__fs__read_text_file",
        "mcp__fs__list_directory",
        "mcp__fs__write_file",
    ] {
        assert!(
            listed.contains(&expected.to_string()),
            "{expected} missing from {listed:?}"
        );
    }
    let read = find(&tools, "mcp__fs__read_text_file");
    let spec = read.spec();
    assert_eq!(spec.input_schema["properties"]["path"]["type"], "string");
    assert!(
        !spec.description.is_empty() && !spec.description.contains('\n'),
        "{:?}",
        spec.description
    );

    let out = read
        .call(&ctx(), json!({"path": root.join("notes.txt")}))
        .await;
    assert_eq!(out, ToolOutput::ok("hello from the filesystem server\n"));

    // Outside the server's allowed directory: the server answers with an error result.
    let out = read.call(&ctx(), json!({"path": "/etc/hostname"})).await;
    assert!(!out.ok, "{out:?}");
    assert!(
        out.output.contains("outside allowed directories") || out.output.contains("Access denied"),
        "{}",
        out.output
    );
}

#[tokio::test]
#[cfg_attr(
    no_python_mcp,
    ignore = "needs the Python MCP SDK: python3 -m pip install mcp==2.3.0, or scripts/prerequisites.sh"
)]
async fn python_sdk_server_over_stdio_and_http() {
    let http = HttpServer::start();
    let hub = McpHub::start(&config(vec![
        ("calc", python_stdio_server()),
        (
            "remote",
            McpServer::Http {
                url: http.url.clone(),
                headers: BTreeMap::new(),
            },
        ),
    ]))
    .await;
    assert_eq!(
        hub.ensure_required(&["calc".to_string(), "remote".to_string()]),
        Ok(())
    );
    let tools = hub.tools();
    assert_eq!(
        names(&tools),
        vec![
            "mcp__calc__add",
            "mcp__calc__fail",
            "mcp__remote__add",
            "mcp__remote__fail"
        ]
    );
    assert_eq!(
        find(&tools, "mcp__calc__add").spec().description,
        "Add two integers."
    );
    for server in ["calc", "remote"] {
        let add = find(&tools, &format!("mcp__{server}__add"));
        assert_eq!(
            add.call(&ctx(), json!({"a": 2, "b": 3})).await,
            ToolOutput::ok("5"),
            "{server}"
        );
        let fail = find(&tools, &format!("mcp__{server}__fail"));
        let out = fail.call(&ctx(), json!({"reason": "testing"})).await;
        assert!(
            !out.ok && out.output.contains("failed on purpose: testing"),
            "{server}: {out:?}"
        );
        let out = add.call(&ctx(), json!("not an object")).await;
        assert!(
            !out.ok && out.output.contains("takes a JSON object"),
            "{out:?}"
        );
    }
}

#[tokio::test]
async fn required_servers_that_are_down_are_named_with_the_reason() {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let crash = McpServer::Stdio {
        command: "python3".into(),
        args: vec![
            "-c".into(),
            "import sys; sys.stderr.write('boom: MISSING_TOKEN is not set\\n'); sys.exit(3)".into(),
        ],
        env: BTreeMap::new(),
        cwd: None,
    };
    let ghost = McpServer::Stdio {
        command: "/nonexistent/mcp-server".into(),
        args: vec![],
        env: BTreeMap::new(),
        cwd: None,
    };
    let silent = McpServer::Stdio {
        command: "sleep".into(),
        args: vec!["30".into()],
        env: BTreeMap::new(),
        cwd: None,
    };
    let unreachable = McpServer::Http {
        url: format!("http://127.0.0.1:{closed_port}/mcp"),
        headers: BTreeMap::new(),
    };
    let mut cfg = config(vec![
        ("crash", crash),
        ("ghost", ghost),
        ("silent", silent),
        ("unreachable", unreachable),
    ]);
    cfg.startup_timeout_secs = 3;
    let hub = McpHub::start(&cfg).await;
    assert!(hub.tools().is_empty());

    let err = hub.ensure_required(&["crash".to_string()]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("required MCP server `crash` is not available: "),
        "{text}"
    );
    assert!(text.contains("boom: MISSING_TOKEN is not set"), "{text}");

    let text = hub
        .ensure_required(&["ghost".to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("failed to start `/nonexistent/mcp-server`"),
        "{text}"
    );

    let text = hub
        .ensure_required(&["silent".to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("did not start and list its tools within 3s"),
        "{text}"
    );

    let text = hub
        .ensure_required(&["unreachable".to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        text.contains(&format!(
            "cannot connect to http://127.0.0.1:{closed_port}/mcp"
        )),
        "{text}"
    );

    assert_eq!(
        hub.ensure_required(&["search".to_string()]),
        Err(McpError::NotConfigured {
            server: "search".into(),
            configured: vec![
                "crash".into(),
                "ghost".into(),
                "silent".into(),
                "unreachable".into()
            ]
        })
    );
    assert_eq!(
        McpError::NotConfigured {
            server: "search".into(),
            configured: vec![]
        }
        .to_string(),
        "required MCP server `search` is not configured (configured: none); add it under mcp.servers"
    );
}
