//! `InstallSkill` with a URL: a skill archive served on 127.0.0.1 (allowed by a configured
//! exception) is fetched through the guard and installed with the workspace tool's checks; a
//! page that is not an archive and an address the guard refuses install nothing; workspace
//! sources still go to the workspace tool.

use crate::web_support;

use std::sync::Arc;

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::get;
use maestro_tools::ToolsConfig;
use maestro_tools_web::WebConfig;
use serde_json::json;
use web_support::{ctx, lookup};

fn skill_archive(dir: &std::path::Path, name: &str) -> Vec<u8> {
    let skill = dir.join(name);
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: Greets people politely.\n---\n\nSay hello.\n"),
    )
    .unwrap();
    let archive = dir.join(format!("{name}.tar.gz"));
    let status = std::process::Command::new("tar")
        .arg("czf")
        .arg(&archive)
        .arg("-C")
        .arg(dir)
        .arg(name)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read(archive).unwrap()
}

#[tokio::test]
async fn a_skill_archive_from_a_url_is_installed_through_the_guard() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = skill_archive(tmp.path(), "greet");
    let app = Router::new()
        .route(
            "/skills/greet.tar.gz",
            get(move || {
                let body = archive.clone();
                async move { ([("content-type", "application/gzip")], body).into_response() }
            }),
        )
        .route("/page", get(|| async { axum::response::Html("<p>hi</p>") }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let installed = tmp.path().join("installed");
    let tools = Arc::new(ToolsConfig {
        skills_install_dir: Some(installed.clone()),
        ..ToolsConfig::default()
    });
    let web = WebConfig {
        allow_hosts: vec!["127.0.0.1".into()],
        ..WebConfig::default()
    };
    let tool = maestro_tools_web::install_skill_tool_with_lookup(&web, tools, lookup(&[]));
    let ws = tempfile::tempdir().unwrap();
    let mut context = ctx(ws.path());
    context.edit = true;

    let url = format!("http://127.0.0.1:{port}/skills/greet.tar.gz");
    let out = tool.call(&context, json!({"source": url})).await;
    assert!(out.ok, "{}", out.output);
    assert!(
        out.output.contains("installed skill `greet`"),
        "{}",
        out.output
    );
    assert!(
        std::fs::read_to_string(installed.join("greet/SKILL.md"))
            .unwrap()
            .contains("Say hello.")
    );

    // Not an archive: refused, nothing installed.
    let page = format!("http://127.0.0.1:{port}/page");
    let out = tool.call(&context, json!({"source": page})).await;
    assert!(!out.ok);
    assert!(
        out.output.contains("is not a skill archive"),
        "{}",
        out.output
    );

    // An address the guard refuses: nothing is fetched or installed.
    let out = tool
        .call(
            &context,
            json!({"source": "http://169.254.169.254/latest/skill.tar.gz"}),
        )
        .await;
    assert!(!out.ok, "{}", out.output);
    assert!(
        out.output
            .starts_with("InstallSkill http://169.254.169.254/"),
        "{}",
        out.output
    );
    let names: Vec<String> = std::fs::read_dir(&installed)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["greet".to_string()]);

    // A workspace folder still installs through the workspace tool.
    skill_archive(ws.path(), "tidy");
    let out = tool.call(&context, json!({"source": "tidy"})).await;
    assert!(out.ok, "{}", out.output);
    assert!(installed.join("tidy/SKILL.md").exists());
}
