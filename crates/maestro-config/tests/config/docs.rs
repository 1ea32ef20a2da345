//! docs/configuration.md stays true: its example loads, it documents every field the
//! configuration has, and the display form of that example is what a person would expect.

use std::path::Path;

use maestro_config::Config;
use serde_json::Value;

fn docs() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
    )
    .unwrap()
}

fn example(docs: &str) -> String {
    let start = docs.find("## Example").unwrap();
    let block = &docs[start..];
    let body = &block[block.find("```yaml\n").unwrap() + 8..];
    body[..body.find("```").unwrap()].to_string()
}

/// Dotted paths of the leaves of the default configuration; maps of user-named entries
/// (`llm.models`, `mcp.servers`) and lists count as leaves.
fn leaves(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map)
            if !map.is_empty() && !["llm.models", "mcp.servers"].contains(&prefix) =>
        {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(child, &path, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

#[test]
fn every_field_is_documented() {
    let docs = docs();
    let mut fields = Vec::new();
    leaves(&Config::default().redacted_value(), "", &mut fields);
    let missing: Vec<&String> = fields
        .iter()
        .filter(|f| !docs.contains(&format!("| `{f}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "fields without a row in docs/configuration.md: {missing:?}"
    );
    assert!(fields.len() > 40, "{fields:?}");
}

#[test]
fn the_example_loads_and_displays_as_written() {
    let config = Config::from_yaml_str(&example(&docs()), Path::new("example.yaml")).unwrap();
    assert_eq!(
        config.llm.model.as_deref(),
        Some("qwen2.5-coder-7b-instruct")
    );
    insta::assert_snapshot!(config.redacted_yaml());
}

#[test]
fn an_error_reads_as_documented() {
    let err = Config::from_yaml_str(
        "llm:\n  model: m\n  modle: n\n",
        Path::new("/home/ana/proj/.maestro/config.yaml"),
    )
    .unwrap_err();
    insta::assert_snapshot!(err.to_string());
    assert!(
        docs().contains(&err.to_string()),
        "docs/configuration.md shows another message"
    );
}
