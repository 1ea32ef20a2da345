//! Typed tool input: JSON Schemas generated from Rust types, parsing with errors the model can
//! act on, and the output cap with its honest "truncated" marker.

use maestro_protocol::ToolSpec;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ToolOutput;

/// The JSON Schema of `T`, without the `$schema`/`title` noise that would ride every call.
pub fn input_schema<T: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(T).to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
    }
    schema
}

/// A [`ToolSpec`] whose input schema comes from `T`.
pub fn spec_for<T: JsonSchema>(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: input_schema::<T>(),
    }
}

/// Parses a tool's input, or says what is wrong and which fields the tool expects.
pub fn parse_input<T: DeserializeOwned>(spec: &ToolSpec, input: Value) -> Result<T, ToolOutput> {
    let input = match input {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    if !input.is_object() {
        return Err(ToolOutput::error(format!(
            "invalid input for `{}`: expected a JSON object, got {}. Expected fields: {}",
            spec.name,
            kind(&input),
            expected_fields(&spec.input_schema)
        )));
    }
    serde_json::from_value(input).map_err(|e| {
        ToolOutput::error(format!(
            "invalid input for `{}`: {e}. Expected fields: {}",
            spec.name,
            expected_fields(&spec.input_schema)
        ))
    })
}

/// `file_path` (string, required), `offset` (integer), ... from an object schema.
pub fn expected_fields(schema: &Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "none (send {})".to_string();
    };
    if props.is_empty() {
        return "none (send {})".to_string();
    }
    props
        .iter()
        .map(|(name, prop)| {
            let ty = type_name(prop);
            if required.contains(&name.as_str()) {
                format!("`{name}` ({ty}, required)")
            } else {
                format!("`{name}` ({ty}, optional)")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn type_name(prop: &Value) -> String {
    match prop.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join("|"),
        _ if prop.get("enum").is_some() || prop.get("oneOf").is_some() => {
            "one of the listed values".to_string()
        }
        _ => "any".to_string(),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Cuts `text` to at most `cap` bytes (on a character boundary) and, when it had to cut, ends it
/// with a marker saying how much was dropped.
pub fn capped(text: String, cap: usize) -> ToolOutput {
    let total = text.len();
    if total <= cap {
        return ToolOutput::ok(text);
    }
    let mut cut = cap;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = text;
    out.truncate(cut);
    out.push_str(&truncation_marker(cut, total));
    ToolOutput {
        ok: true,
        output: out,
        truncated: true,
    }
}

/// The marker appended to cut output.
pub fn truncation_marker(shown: usize, total: usize) -> String {
    format!("\n[output truncated: showing the first {shown} of {total} bytes]")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    struct Sample {
        /// A path.
        file_path: String,
        #[allow(dead_code)]
        limit: Option<u64>,
    }

    #[test]
    fn missing_field_names_the_expected_fields() {
        let spec = spec_for::<Sample>("Sample", "test");
        let err = parse_input::<Sample>(&spec, serde_json::json!({"limit": 3}))
            .err()
            .unwrap();
        assert!(!err.ok);
        assert_eq!(
            err.output,
            "invalid input for `Sample`: missing field `file_path`. Expected fields: `file_path` (string, required), `limit` (integer, optional)"
        );
        let err = parse_input::<Sample>(&spec, serde_json::json!({"file_path": 3}))
            .err()
            .unwrap();
        assert!(
            err.output
                .contains("invalid type: integer `3`, expected a string"),
            "{}",
            err.output
        );
        let ok = parse_input::<Sample>(&spec, serde_json::json!({"file_path": "a"})).unwrap();
        assert_eq!(ok.file_path, "a");
    }

    #[test]
    fn capping_marks_truncation_on_a_char_boundary() {
        let out = capped("héllo".to_string(), 2);
        assert_eq!(
            out,
            ToolOutput {
                ok: true,
                output: format!("h{}", truncation_marker(1, 6)),
                truncated: true
            }
        );
        assert_eq!(capped("abc".to_string(), 3), ToolOutput::ok("abc"));
    }
}
