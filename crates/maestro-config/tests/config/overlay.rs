//! The configuration as JSON and back: serialised with every secret as `***`, and an overlay
//! laid over a loaded configuration with the file's types and checks, `***` keeping the secret.

use maestro_config::{Config, LoadFrom, Origin};
use maestro_tools_mcp::McpServer;
use maestro_tools_ssh::{SecretSource, SshAuth};
use pretty_assertions::assert_eq;
use serde_json::json;

const SECRETS: [&str; 5] = [
    "sk-inline-secret-1",
    "env-secret-2",
    "header-secret-3",
    "ssh-secret-4",
    "store-secret-5",
];

/// A project whose file holds a secret of every kind.
fn loaded() -> (tempfile::TempDir, Config) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join(".maestro")).unwrap();
    std::fs::write(
        root.join(".maestro/config.yaml"),
        "llm:\n  api_key: sk-inline-secret-1\n  model: first\n\
         mcp:\n  servers:\n    fs: {command: mcp-fs, env: {TOKEN: env-secret-2}}\n\
         \x20   web: {url: \"http://127.0.0.1:8000/mcp\", headers: {Authorization: Bearer header-secret-3}}\n\
         ssh:\n  connections:\n    - id: 6f9619ff-8b86-d011-b42d-00c04fc964ff\n      name: lab\n      host: 127.0.0.1\n\
         \x20     user: u\n      auth: {password: ssh-secret-4}\n\
         store:\n  url: \"postgres://maestro:store-secret-5@127.0.0.1:5432/jobs\"\n",
    )
    .unwrap();
    let from = LoadFrom {
        explicit: None,
        cwd: root.clone(),
        home: None,
    };
    let (config, _) = Config::load_with_env(from, |_| None).unwrap();
    (dir, config)
}

fn secrets_of(config: &Config) -> Vec<String> {
    let mut found = vec![config.llm.api_key.as_ref().unwrap().expose().to_string()];
    match &config.mcp.servers["fs"] {
        McpServer::Stdio { env, .. } => found.push(env["TOKEN"].expose().to_string()),
        other => panic!("{other:?}"),
    }
    match &config.mcp.servers["web"] {
        McpServer::Http { headers, .. } => {
            found.push(headers["Authorization"].expose().to_string());
        }
        other => panic!("{other:?}"),
    }
    match &config.ssh.connections[0].auth {
        SshAuth::Password(SecretSource::Inline(pw)) => found.push(pw.expose().to_string()),
        other => panic!("{other:?}"),
    }
    found.push(config.store.url.clone().unwrap());
    found
}

#[test]
fn the_configuration_serialises_without_its_secrets() {
    let (_dir, config) = loaded();
    let text = serde_json::to_string(&config).unwrap();
    for secret in SECRETS {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    let value = serde_json::to_value(&config).unwrap();
    assert_eq!(value, config.redacted_value());
    assert_eq!(value["llm"]["api_key"], "***");
}

#[test]
fn its_own_json_laid_over_it_changes_nothing_and_keeps_every_secret() {
    let (_dir, config) = loaded();
    let json = serde_json::to_value(&config).unwrap();
    let again = config.with_overlay(&json).unwrap();
    assert_eq!(again.redacted_value(), config.redacted_value());
    assert_eq!(secrets_of(&again), secrets_of(&config));
    let kept = secrets_of(&again);
    for (kept, secret) in kept.iter().zip(SECRETS) {
        assert!(kept.contains(secret), "{kept} is not {secret}");
    }
}

#[test]
fn an_overlay_changes_what_it_names_and_nothing_else() {
    let (_dir, config) = loaded();
    let overlay = json!({
        "llm": {"model": "second", "api_key": "***"},
        "subtasks": {"max_depth": 0},
        "paths": {"runs_dir": "elsewhere/runs"},
    });
    let changed = config.with_overlay(&overlay).unwrap();
    assert_eq!(changed.llm.model.as_deref(), Some("second"));
    assert_eq!(changed.subtasks.max_depth, 0);
    // A relative path is taken from the project root, as in a file.
    assert_eq!(changed.paths.runs_dir, config.root.join("elsewhere/runs"));
    assert_eq!(changed.llm.base_url, config.llm.base_url);
    assert_eq!(secrets_of(&changed), secrets_of(&config));
    // A new key replaces the kept one.
    let rekeyed = config
        .with_overlay(&json!({"llm": {"api_key": "sk-new"}}))
        .unwrap();
    assert_eq!(rekeyed.llm.api_key.unwrap().expose(), "sk-new");
}

#[test]
fn a_bad_overlay_names_the_field_and_the_fix() {
    let (_dir, config) = loaded();
    let typed = config
        .with_overlay(&json!({"llm": {"idle_timeout_secs": "soon"}}))
        .unwrap_err();
    assert_eq!(typed.len(), 1);
    assert_eq!(typed[0].origin, Origin::Overlay);
    assert_eq!(typed[0].field, "llm.idle_timeout_secs");
    let unknown = config
        .with_overlay(&json!({"llm": {"modle": "x"}}))
        .unwrap_err();
    assert!(unknown[0].message.contains("modle"), "{:?}", unknown[0]);
    let checked = config
        .with_overlay(&json!({"llm": {"retry": {"max_attempts": 0}}, "workers": [{"name": "", "concurrency": 0}]}))
        .unwrap_err();
    let fields: Vec<&str> = checked.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "llm.retry.max_attempts",
            "workers.0.concurrency",
            "workers.0.name"
        ]
    );
    assert!(checked.iter().all(|p| !p.fix.is_empty()));
    let not_object = config.with_overlay(&json!([1])).unwrap_err();
    assert_eq!(not_object[0].field, "(top level)");
    // `***` where no secret is kept.
    let (_other, mut bare) = loaded();
    bare.llm.api_key = None;
    let missing = bare
        .with_overlay(&json!({"llm": {"api_key": "***"}}))
        .unwrap_err();
    assert_eq!(missing[0].field, "llm.api_key");
    assert!(
        missing[0]
            .to_string()
            .contains("the configuration overlay in the store")
    );
}
