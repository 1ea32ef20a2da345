//! Every tool the toolbox assembles (core, data, checklist, pieces, docs, skills, web, SSH) is
//! defined one way: its schema comes from its input type, and input that does not fit gets one
//! uniform error.

use std::sync::{Arc, Mutex};

use maestro_app::{McpSelection, Toolbox};
use maestro_config::Config;
use maestro_protocol::ToolSpec;
use maestro_tools::input::expected_fields;
use maestro_tools::{
    BashSandboxMode, CancellationToken, Registry, RunScratch, ToolContext, ToolOutput,
    prepare_workspace,
};
use pretty_assertions::assert_eq;
use serde_json::{Map, Value, json};

/// Every tool the toolbox has, with all of them set up (skills need a skills directory), and a
/// context in a fresh workspace.
struct Bench {
    _dir: tempfile::TempDir,
    registry: Registry,
    ctx: ToolContext,
}

async fn everything(skills: &std::path::Path) -> Bench {
    let mut config = Config::default();
    config.tools.bash_sandbox = BashSandboxMode::UnsafeNoSandbox;
    config.tools.skills_dirs = vec![skills.to_path_buf()];
    let registry = Toolbox::build(&config, &McpSelection::none())
        .await
        .unwrap()
        .registry;
    let dir = tempfile::tempdir().unwrap();
    prepare_workspace(dir.path()).unwrap();
    let ctx = ToolContext {
        workspace: dir.path().to_path_buf(),
        workspace_kind: maestro_tools::WorkspaceKind::Job,
        // Write and Edit are offered.
        edit: true,
        // Bash refuses every program before running anything.
        allowed_commands: Some(Vec::new()),
        allowed_ssh_connections: None,
        cancel: CancellationToken::new(),
        scratch: Arc::new(Mutex::new(RunScratch::default())),
    };
    Bench {
        _dir: dir,
        registry,
        ctx,
    }
}

/// A value of the type a property's schema asks for (the least it allows, for numbers).
fn sample(property: &Value) -> Value {
    let ty = match &property["type"] {
        Value::String(t) => t.as_str(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap(),
        other => panic!("a property without a type: {other}"),
    };
    match ty {
        "string" => json!("x"),
        "integer" | "number" => property.get("minimum").cloned().unwrap_or(json!(1)),
        "boolean" => json!(true),
        "array" => json!([]),
        "object" => json!({}),
        other => panic!("unexpected type {other}"),
    }
}

fn required(spec: &ToolSpec) -> Vec<&str> {
    spec.input_schema["required"]
        .as_array()
        .map(|r| r.iter().map(|n| n.as_str().unwrap()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn every_schema_is_an_object_whose_required_fields_parse() {
    let skills = tempfile::tempdir().unwrap();
    let b = everything(skills.path()).await;
    let specs = b.registry.list();
    assert_eq!(specs.len(), 33, "{:?}", specs.iter().map(|s| &s.name));
    for spec in &specs {
        let schema = &spec.input_schema;
        assert_eq!(schema["type"], "object", "{}: {schema}", spec.name);
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
        let properties = schema["properties"].as_object();
        let mut input = Map::new();
        for field in required(spec) {
            let property = properties
                .and_then(|p| p.get(field))
                .unwrap_or_else(|| panic!("{}: required `{field}` is not a property", spec.name));
            assert!(
                property["description"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{}: `{field}` has no description",
                spec.name
            );
            input.insert(field.to_string(), sample(property));
        }
        let out = b
            .registry
            .execute(&b.ctx, &spec.name, &Value::Object(input).to_string())
            .await;
        assert!(
            !out.output.starts_with("invalid input for"),
            "{}: {out:?}",
            spec.name
        );
    }
}

#[tokio::test]
async fn bad_input_gets_the_same_error_from_every_tool() {
    let skills = tempfile::tempdir().unwrap();
    let b = everything(skills.path()).await;
    for spec in b.registry.list() {
        let name = &spec.name;
        let expected = expected_fields(&spec.input_schema);
        let out = b.registry.execute(&b.ctx, name, "[1]").await;
        assert_eq!(
            out,
            ToolOutput::error(format!(
                "invalid input for `{name}`: expected a JSON object, got an array. Expected fields: {expected}"
            ))
        );
        let Some(field) = required(&spec).first().map(|f| f.to_string()) else {
            continue;
        };
        let property = &spec.input_schema["properties"][&field];
        let wrong = if sample(property).is_string() {
            json!(true)
        } else {
            json!("x")
        };
        let out = b
            .registry
            .execute(&b.ctx, name, &json!({ field.clone(): wrong }).to_string())
            .await;
        let prefix = format!("invalid input for `{name}`: field `{field}`: invalid type: ");
        assert!(
            !out.ok
                && out.output.starts_with(&prefix)
                && out
                    .output
                    .ends_with(&format!(". Expected fields: {expected}")),
            "{out:?}"
        );
    }
}

#[tokio::test]
async fn web_and_ssh_schemas_keep_their_limits() {
    let skills = tempfile::tempdir().unwrap();
    let b = everything(skills.path()).await;
    let schema = |name: &str| Value::clone(&b.registry.spec(name).unwrap().input_schema);
    assert_eq!(
        schema("WebSearch"),
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "search terms"},
                "max_results": {
                    "type": ["integer", "null"],
                    "format": "uint",
                    "minimum": 1,
                    "maximum": 20,
                    "description": "how many results to return (default 8)"
                }
            },
            "required": ["query"],
            "additionalProperties": false
        })
    );
    assert_eq!(
        schema("SshExec")["properties"]["timeout"],
        json!({
            "type": ["integer", "null"],
            "format": "uint64",
            "minimum": 1,
            "maximum": 600,
            "description": "seconds before giving up (default 60)"
        })
    );
    assert_eq!(
        schema("SshUpload")["required"],
        json!(["connection_id", "local_path", "remote_path"])
    );
    assert_eq!(schema("DownloadFile")["additionalProperties"], false);
}
