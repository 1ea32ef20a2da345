//! `gateway:` read from a real file: the shape the documentation gives, upstream keys from the
//! environment (never shown), and the errors a person sees for routes and keys.

use std::path::PathBuf;

use maestro_config::{Config, ConfigError, LoadFrom, Origin, Problem, UpstreamKind};
use pretty_assertions::assert_eq;

const ISSUE_YAML: &str = r#"gateway:
  enabled: true
  upstreams:
    primary:  {kind: openai, base_url: "https://llm.example.com/v1", api_key_env: PRIMARY_KEY}
    claude:   {kind: anthropic, base_url: "https://api.anthropic.com", api_key_env: ANTHROPIC_KEY}
    local:    {kind: openai, base_url: "http://127.0.0.1:8088/v1"}
  models:
    team-model:
      - {upstream: primary, model: some-model}
      - {upstream: local, model: other-model, weight: 0}
llm:
  models:
    some-model: {price: {input_per_mtok: 0.5, output_per_mtok: 1.5}}
"#;

fn load(text: &str, env: &[(&str, &str)]) -> (Result<Config, ConfigError>, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    let from = LoadFrom {
        explicit: Some(path.clone()),
        cwd: dir.path().to_path_buf(),
        home: None,
    };
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let result = Config::load_with_env(from, move |name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .map(|(config, _)| config);
    (result, path)
}

fn problem(result: Result<Config, ConfigError>) -> Problem {
    match result {
        Err(ConfigError::Invalid(problem)) => *problem,
        other => panic!("expected an invalid configuration, got {other:?}"),
    }
}

#[test]
fn the_documented_shape_loads_with_the_upstream_keys_from_the_environment() {
    let env = [
        ("PRIMARY_KEY", "sk-primary-7d1e"),
        ("ANTHROPIC_KEY", "sk-ant-9c2b"),
    ];
    let (config, _) = load(ISSUE_YAML, &env);
    let config = config.unwrap();
    let gateway = &config.gateway;
    assert!(gateway.enabled);
    assert_eq!(gateway.upstreams["claude"].kind, UpstreamKind::Anthropic);
    assert_eq!(
        gateway.upstreams["primary"]
            .api_key
            .as_ref()
            .map(|k| k.expose()),
        Some("sk-primary-7d1e")
    );
    assert_eq!(gateway.upstreams["local"].api_key, None);
    let route = &gateway.models["team-model"];
    assert_eq!(route[0].weight, 1, "the default weight");
    assert_eq!(route[1].weight, 0);
    // The keys never show.
    let shown = format!("{}\n{:?}", config.redacted_yaml(), config);
    assert!(shown.contains("PRIMARY_KEY"), "{shown}");
    for key in ["sk-primary-7d1e", "sk-ant-9c2b"] {
        assert!(!shown.contains(key), "{shown}");
    }
}

#[test]
fn a_missing_upstream_key_names_the_upstream_the_variable_and_the_line() {
    let (result, path) = load(ISSUE_YAML, &[("PRIMARY_KEY", "k")]);
    assert_eq!(
        problem(result),
        Problem {
            origin: Origin::File {
                path,
                line: Some(5),
                column: Some(72),
            },
            field: "gateway.upstreams.claude.api_key_env".into(),
            message: "names the environment variable ANTHROPIC_KEY, which is not set".into(),
            fix: "export ANTHROPIC_KEY=<the upstream's API key>, or remove api_key_env for a server that needs no key".into(),
        }
    );
}

#[test]
fn a_route_naming_an_unknown_upstream_is_refused_with_the_known_ones() {
    let text = "gateway:\n  upstreams:\n    local: {kind: openai, base_url: \"http://127.0.0.1:8088/v1\"}\n  models:\n    team-model:\n      - {upstream: lokal, model: m}\n";
    let (result, path) = load(text, &[]);
    assert_eq!(
        problem(result),
        Problem {
            origin: Origin::File {
                path,
                line: Some(6),
                column: Some(10),
            },
            field: "gateway.models.team-model.0.upstream".into(),
            message: "names the upstream \"lokal\", which is not configured".into(),
            fix: "use one of local or declare it under gateway.upstreams".into(),
        }
    );
}

#[test]
fn an_unknown_kind_and_a_bad_url_are_refused() {
    let text = "gateway:\n  upstreams:\n    x: {kind: gemini, base_url: \"http://h/v1\"}\n";
    let unknown = problem(load(text, &[]).0);
    assert_eq!(unknown.field, "gateway.upstreams.x.kind");
    assert!(
        unknown.message.contains("openai") && unknown.message.contains("anthropic"),
        "{}",
        unknown.message
    );
    let text = "gateway:\n  upstreams:\n    x: {kind: openai, base_url: \"h:8080\"}\n";
    let url = problem(load(text, &[]).0);
    assert_eq!(url.field, "gateway.upstreams.x.base_url");
    assert_eq!(url.message, "\"h:8080\" is not an http(s) URL");
}
