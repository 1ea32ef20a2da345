//! The `auth:` section: its defaults, a full section read from a file, the checks that name the
//! file, line and field, and the OIDC client secret read from the variable it names.

use std::path::{Path, PathBuf};

use maestro_config::{AuthConfig, Config, ConfigError, LoadFrom, OidcConfig, Origin, Problem};
use pretty_assertions::assert_eq;

fn load(text: &str) -> (Result<Config, ConfigError>, PathBuf, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let file = root.join(".maestro/config.yaml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, text).unwrap();
    let from = LoadFrom {
        explicit: None,
        cwd: root.clone(),
        home: None,
    };
    let loaded = Config::load_with_env(from, |_| None).map(|(config, _)| config);
    (loaded, file, tmp)
}

fn problem(result: Result<Config, ConfigError>) -> Problem {
    match result {
        Err(ConfigError::Invalid(problem)) => *problem,
        other => panic!("expected an invalid configuration, got {other:?}"),
    }
}

#[test]
fn auth_is_off_by_default_with_twelve_hour_sessions() {
    let (config, _, _tmp) = load("");
    let auth = config.unwrap().auth;
    assert_eq!(auth, AuthConfig::default());
    assert!(!auth.enabled);
    assert_eq!(auth.session_ttl_hours, 12);
    assert_eq!(auth.oidc, None);
}

#[test]
fn a_full_auth_section_is_read_with_default_scopes() {
    let (config, _, _tmp) = load(
        "auth:\n  enabled: true\n  admins: [ana@example.com]\n  session_ttl_hours: 8\n  \
         public_url: https://maestro.example.com\n  oidc:\n    issuer: https://id.example.com\n    \
         client_id: maestro\n    client_secret_env: OIDC_SECRET\n",
    );
    let auth = config.unwrap().auth;
    assert_eq!(
        auth,
        AuthConfig {
            enabled: true,
            admins: vec!["ana@example.com".into()],
            session_ttl_hours: 8,
            oidc: Some(OidcConfig {
                issuer: "https://id.example.com".into(),
                client_id: "maestro".into(),
                client_secret_env: "OIDC_SECRET".into(),
                redirect_url: None,
                scopes: vec!["openid".into(), "email".into(), "profile".into()],
            }),
            public_url: Some("https://maestro.example.com".into()),
        }
    );
    let oidc = auth.oidc.unwrap();
    let secret = oidc
        .client_secret(|name| (name == "OIDC_SECRET").then(|| "s3cret".to_string()))
        .unwrap();
    assert_eq!(secret.expose(), "s3cret");
    let missing = oidc.client_secret(|_| None).unwrap_err();
    let message = missing.to_string();
    assert!(message.contains("OIDC_SECRET"), "{message}");
    assert!(message.contains("export OIDC_SECRET="), "{message}");
    assert_eq!(
        missing.problem().unwrap().origin,
        Origin::Env {
            var: "OIDC_SECRET".into()
        }
    );
}

#[test]
fn a_bad_auth_value_names_the_file_line_and_field() {
    let (config, file, _tmp) =
        load("auth:\n  enabled: true\n  admins:\n    - ana@example.com\n    - bob\n");
    assert_eq!(
        problem(config),
        Problem {
            origin: Origin::File {
                path: file,
                line: Some(5),
                column: Some(7)
            },
            field: "auth.admins.1".into(),
            message: "\"bob\" is not an email address".into(),
            fix: "list the admins' emails as the provider reports them, e.g. ana@example.com"
                .into(),
        }
    );
    let (config, _, _tmp) = load(
        "auth:\n  oidc:\n    issuer: id.example.com\n    client_id: m\n    client_secret_env: S\n",
    );
    assert_eq!(problem(config).field, "auth.oidc.issuer");
    let (config, _, _tmp) = load(
        "auth:\n  oidc:\n    issuer: https://id\n    client_id: m\n    client_secret_env: \"hunter 2\"\n",
    );
    let found = problem(config);
    assert_eq!(found.field, "auth.oidc.client_secret_env");
    assert!(
        found.fix.contains("never the secret itself"),
        "{}",
        found.fix
    );
    let (config, _, _tmp) = load(
        "auth:\n  oidc:\n    issuer: https://id\n    client_id: m\n    client_secret_env: S\n    scopes: [email]\n",
    );
    assert_eq!(problem(config).field, "auth.oidc.scopes");
    let (config, _, _tmp) = load("auth:\n  session_ttl_hours: 0\n");
    assert_eq!(problem(config).field, "auth.session_ttl_hours");
    let (config, _, _tmp) = load("auth:\n  public_url: maestro.example.com\n");
    assert_eq!(problem(config).field, "auth.public_url");
}

#[test]
fn a_client_secret_in_the_file_is_refused() {
    let (config, _, _tmp) = load(
        "auth:\n  oidc:\n    issuer: https://id\n    client_id: m\n    client_secret_env: S\n    client_secret: hunter2\n",
    );
    let found = problem(config);
    assert_eq!(found.field, "auth.oidc.client_secret");
    assert!(!found.to_string().contains("hunter2"), "{found}");
}

#[test]
fn the_display_form_shows_the_auth_section() {
    let config = Config::from_yaml_str(
        "auth:\n  enabled: true\n  admins: [ana@example.com]\n",
        Path::new("x.yaml"),
    )
    .unwrap();
    let shown = config.redacted_value();
    assert_eq!(shown["auth"]["enabled"], serde_json::json!(true));
    assert_eq!(shown["auth"]["session_ttl_hours"], serde_json::json!(12));
}
