//! `maestro users …` and `maestro tokens …` end to end on a real SQLite file: the token is
//! printed once and authenticates through the app, lists never show it, and a revoked one no
//! longer authenticates.

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support;

use support::jobs::{Project, stderr};

async fn ok(project: &Project, args: &[&str]) -> String {
    let out = project.maestro(args).await;
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

async fn json_lines(project: &Project, args: &[&str]) -> Vec<Value> {
    ok(project, args)
        .await
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn store(project: &Project) -> maestro_app::Store {
    let url: maestro_app::StoreUrl = format!(
        "sqlite://{}",
        project.path().join(".maestro/maestro.db").display()
    )
    .parse()
    .unwrap();
    maestro_app::Store::open(&url).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_are_added_listed_and_their_role_changed() {
    let project = Project::new();
    assert_eq!(
        ok(&project, &["users", "add", "Ana@Example.com", "--admin"]).await,
        "added ana@example.com (admin)\n"
    );
    ok(&project, &["users", "add", "bob@example.com"]).await;
    let users = json_lines(&project, &["users", "list", "--json"]).await;
    let listed: Vec<(&str, &str)> = users
        .iter()
        .map(|u| (u["email"].as_str().unwrap(), u["role"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        vec![("ana@example.com", "admin"), ("bob@example.com", "user")]
    );
    let mut table = ok(&project, &["users", "list"]).await;
    for user in &users {
        table = table.replace(user["created_at"].as_str().unwrap(), "<added>");
    }
    insta::assert_snapshot!("users_list", table);

    // Adding an existing user is refused with the way to change its role.
    let out = project
        .maestro(&["users", "add", "bob@example.com", "--admin"])
        .await;
    assert_eq!(out.status.code(), Some(2));
    insta::assert_snapshot!(stderr(&out));

    assert_eq!(
        ok(
            &project,
            &["users", "set-role", "bob@example.com", "disabled"]
        )
        .await,
        "bob@example.com is now disabled\n"
    );
    let out = project
        .maestro(&["users", "set-role", "bob@example.com", "boss"])
        .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the roles are admin, user and disabled"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_printed_once_authenticates_and_stops_when_revoked() {
    let project = Project::new();
    ok(&project, &["users", "add", "cy@example.com"]).await;
    let created: Value = serde_json::from_str(
        &ok(
            &project,
            &[
                "tokens",
                "create",
                "--user",
                "cy@example.com",
                "--scopes",
                "read,write",
                "--name",
                "ci",
                "--json",
            ],
        )
        .await,
    )
    .unwrap();
    let token = created["token"].as_str().unwrap().to_string();
    let id = created["id"].as_str().unwrap().to_string();
    assert!(token.starts_with("mst_"), "{token}");

    // The token authenticates through the app, with its scopes.
    let store = store(&project).await;
    let who = maestro_app::authenticate_token(&store, &token)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(who.email, "cy@example.com");
    assert!(who.can(maestro_app::Scope::Write));
    assert!(!who.can(maestro_app::Scope::Admin));

    // Lists show its prefix, never the token.
    let listed = ok(&project, &["tokens", "list"]).await;
    assert!(!listed.contains(&token), "{listed}");
    assert!(listed.contains(&format!("{}…", &token[..8])), "{listed}");
    assert!(
        listed.contains(&id) && listed.contains("read,write"),
        "{listed}"
    );
    let as_json = ok(
        &project,
        &["tokens", "list", "--user", "cy@example.com", "--json"],
    )
    .await;
    assert!(!as_json.contains(&token), "{as_json}");
    let rows: Vec<Value> = as_json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0]["id"].as_str(),
            rows[0]["prefix"].as_str(),
            rows[0]["revoked"].as_bool()
        ),
        (Some(id.as_str()), Some(&token[..8]), Some(false))
    );

    assert_eq!(
        ok(&project, &["tokens", "revoke", &id]).await,
        format!("revoked token {id}\n")
    );
    assert_eq!(
        maestro_app::authenticate_token(&store, &token)
            .await
            .unwrap(),
        None
    );
    let rows = json_lines(&project, &["tokens", "list", "--json"]).await;
    assert_eq!(rows[0]["revoked"], Value::Bool(true));
    assert!(ok(&project, &["tokens", "list"]).await.contains("revoked"));
    store.close().await;

    let out = project.maestro(&["tokens", "revoke", "no-such-id"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .contains("no API token with id no-such-id; `maestro tokens list` shows the ids"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_token_output_says_it_is_shown_once_and_errors_name_the_fix() {
    let project = Project::new();
    ok(&project, &["users", "add", "dee@example.com"]).await;
    let out = ok(
        &project,
        &[
            "tokens",
            "create",
            "--user",
            "dee@example.com",
            "--scopes",
            "read",
            "--expires-days",
            "7",
        ],
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("mst_") && lines[0].len() == 68,
        "{out}"
    );
    assert!(
        lines[1].contains("for dee@example.com (read), expires 20"),
        "{out}"
    );
    assert!(out.contains("It will not be shown again"), "{out}");
    let listed = json_lines(&project, &["tokens", "list", "--json"]).await;
    assert!(listed[0]["expires_at"].is_string(), "{listed:?}");

    let out = project
        .maestro(&[
            "tokens",
            "create",
            "--user",
            "nobody@example.com",
            "--scopes",
            "read",
        ])
        .await;
    assert_eq!(out.status.code(), Some(2));
    insta::assert_snapshot!(stderr(&out));
    let out = project
        .maestro(&[
            "tokens",
            "create",
            "--user",
            "dee@example.com",
            "--scopes",
            "read,delete",
        ])
        .await;
    assert_eq!(out.status.code(), Some(2));
    insta::assert_snapshot!(stderr(&out));
    let out = project
        .maestro(&["tokens", "list", "--user", "nobody@example.com"])
        .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("maestro users add nobody@example.com"),
        "{}",
        stderr(&out)
    );
}
