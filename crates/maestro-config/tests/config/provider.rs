//! `llm.provider`: which API the endpoint speaks, its default endpoint, its key, and the error a
//! person sees for a value that is not one.

use std::collections::BTreeMap;

use maestro_config::{
    Config, ConfigError, DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_BASE_URL, LoadFrom, Origin,
    ProviderKind,
};
use pretty_assertions::assert_eq;

fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let file = root.join("config.yaml");
    std::fs::write(&file, text).unwrap();
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let from = LoadFrom {
        explicit: Some(file),
        cwd: root.clone(),
        home: Some(root.join("home")),
    };
    Config::load_with_env(from, move |name| env.get(name).cloned()).map(|(config, _)| config)
}

#[test]
fn the_provider_is_openai_unless_named() {
    let config = load("llm:\n  model: m\n", &[]).unwrap();
    assert_eq!(config.llm.provider, ProviderKind::OpenAi);
    assert_eq!(config.llm.base_url, DEFAULT_BASE_URL);
    assert_eq!(Config::default().llm.provider, ProviderKind::OpenAi);
}

#[test]
fn anthropic_defaults_to_the_anthropic_api_and_reads_its_key_from_api_key_env() {
    let config = load(
        "llm:\n  provider: anthropic\n  model: claude-sonnet-4-5\n  api_key_env: ANTHROPIC_API_KEY\n",
        &[("ANTHROPIC_API_KEY", "sk-ant-from-env")],
    )
    .unwrap();
    assert_eq!(config.llm.provider, ProviderKind::Anthropic);
    assert_eq!(config.llm.base_url, DEFAULT_ANTHROPIC_BASE_URL);
    assert_eq!(config.llm.base_url, "https://api.anthropic.com");
    assert_eq!(
        config.llm.api_key.as_ref().map(|k| k.expose().to_string()),
        Some("sk-ant-from-env".to_string())
    );
    assert!(!config.redacted_yaml().contains("sk-ant-from-env"));
    assert!(config.redacted_yaml().contains("provider: anthropic"));

    // A base URL that is set, in the file or the environment, is kept.
    let config = load(
        "llm:\n  provider: anthropic\n  base_url: http://127.0.0.1:9/\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.llm.base_url, "http://127.0.0.1:9/");
    let config = load(
        "llm:\n  provider: anthropic\n",
        &[("MAESTRO_LLM_BASE_URL", "http://127.0.0.1:8/")],
    )
    .unwrap();
    assert_eq!(config.llm.base_url, "http://127.0.0.1:8/");
}

#[test]
fn an_unknown_provider_names_the_field_and_the_choices() {
    let error = load("llm:\n  provider: claude\n", &[]).unwrap_err();
    let ConfigError::Invalid(problem) = error else {
        panic!("expected an invalid configuration, got {error:?}");
    };
    assert_eq!(problem.field, "llm.provider");
    assert!(
        problem.message.contains("`claude`")
            && problem.message.contains("openai")
            && problem.message.contains("anthropic"),
        "{}",
        problem.message
    );
    assert_eq!(problem.fix, "use one of the values listed");
    assert!(
        matches!(&problem.origin, Origin::File { line: Some(2), .. }),
        "{:?}",
        problem.origin
    );
}
