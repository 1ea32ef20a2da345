//! `maestro config show`: the configuration in effect, from the files alone or with the store's
//! overlay, and never a secret.

use maestro_app::{Store, StoreUrl, effective_config, put_config};
use maestro_config::{Config, LoadFrom};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{Project, stderr};

const SECRET: &str = "sk-file-secret-7";

fn project() -> Project {
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        format!("llm:\n  tool_mode: native\n  model: model-a\n  api_key: {SECRET}\n"),
    )
    .unwrap();
    project
}

/// The project's store with an overlay that changes the model, written as the API writes it.
async fn overlay(project: &Project) {
    let from = LoadFrom {
        explicit: None,
        cwd: project.path().to_path_buf(),
        home: Some(project.path().to_path_buf()),
    };
    let (base, _) = Config::load_with_env(from, |_| None).unwrap();
    let store = Store::open(&StoreUrl::Sqlite {
        path: project.path().join(".maestro/maestro.db"),
    })
    .await
    .unwrap();
    let (_, tag) = effective_config(&store, &base).await.unwrap();
    put_config(
        &store,
        &base,
        json!({"llm": {"model": "model-b", "api_key": "***"}}),
        Some(tag.as_str()),
        "alice",
    )
    .await
    .unwrap();
    store.close().await;
}

fn shown(project: &Project, out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let root = project.path().canonicalize().unwrap();
    text.replace(&root.display().to_string(), "[project]")
        .replace(&project.path().display().to_string(), "[project]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_show_lays_the_store_overlay_over_the_files() {
    let project = project();
    overlay(&project).await;
    let out = project.maestro(&["config", "show"]).await;
    let yaml = shown(&project, &out);
    assert!(
        stderr(&out).contains("overlay version 1"),
        "{}",
        stderr(&out)
    );
    assert!(!yaml.contains(SECRET), "{yaml}");
    insta::assert_snapshot!(yaml);

    let out = project.maestro(&["config", "show", "--json"]).await;
    let json: Value = serde_json::from_str(&shown(&project, &out)).unwrap();
    assert_eq!(json["llm"]["model"], "model-b");
    assert_eq!(json["llm"]["api_key"], "***");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_show_without_a_store_shows_the_files() {
    let project = project();
    let out = project.maestro(&["config", "show", "--json"]).await;
    let text = shown(&project, &out);
    assert!(!text.contains(SECRET), "{text}");
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["llm"]["model"], "model-a");
    assert_eq!(json["llm"]["api_key"], "***");
    assert!(
        stderr(&out).contains("the configuration files alone"),
        "{}",
        stderr(&out)
    );
    // Nothing was created.
    assert!(!project.path().join(".maestro/maestro.db").exists());
    // A store named with --db must be there.
    let missing = project
        .maestro(&["config", "show", "--db", "sqlite://nowhere/maestro.db"])
        .await;
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("does not exist"),
        "{}",
        stderr(&missing)
    );
}
