//! Whatever a configuration file holds, loading it ends in a config or a located problem,
//! never a panic.

use std::path::Path;

use maestro_config::{Config, ConfigError};
use proptest::prelude::*;

/// Lines built from the configuration's own vocabulary, so most inputs get past the YAML parser
/// and reach the typed checks.
fn yamlish() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "llm",
        "model",
        "base_url",
        "retry",
        "max_attempts",
        "jitter",
        "tools",
        "bash_sandbox",
        "mcp",
        "servers",
        "fs",
        "command",
        "url",
        "ssh",
        "connections",
        "paths",
        "runs_dir",
        "modle",
    ]);
    let value = prop::sample::select(vec![
        "", "1", "-1", "0.5", "yes", "off", "~", "[a, 1]", "{x: 1}", "\"s\"", "&a x", "*a", "|",
    ]);
    let line = (0usize..4, key, value)
        .prop_map(|(indent, k, v)| format!("{}{k}: {v}", "  ".repeat(indent)));
    prop::collection::vec(line, 0..8).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #[test]
    fn any_document_loads_or_names_its_problem(text in prop_oneof![yamlish(), any::<String>()]) {
        match Config::from_yaml_str(&text, Path::new("c.yaml")) {
            Ok(_) => {}
            Err(ConfigError::Invalid(problem)) => {
                prop_assert!(!problem.field.is_empty() && !problem.fix.is_empty(), "{problem}");
            }
            Err(other) => prop_assert!(false, "unexpected error kind: {other}"),
        }
    }
}
