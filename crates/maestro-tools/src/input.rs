//! Typed tool input: JSON Schemas generated from Rust types, parsing with errors the model can
//! act on, and the output cap with its honest "truncated" marker.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use maestro_protocol::ToolSpec;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ToolOutput;

/// The JSON Schema of `T`, without the `$schema`/`title` noise that would ride every call. The
/// input type's own doc comment is for readers of the code and is left out too: the tool's
/// `DESCRIPTION` says what it does, its fields' doc comments what to send.
pub fn input_schema<T: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(T).to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
        obj.remove("description");
    }
    schema
}

/// [`input_schema`] of `T`, generated once per process and shared: a tool registered for every
/// run (the knowledge tools, BrowseWeb) would otherwise generate it again each time, and
/// generating a schema costs far more, in time and memory, than sharing one.
pub fn shared_input_schema<T: JsonSchema + 'static>() -> Arc<Value> {
    static SCHEMAS: LazyLock<RwLock<HashMap<TypeId, Arc<Value>>>> = LazyLock::new(Default::default);
    let id = TypeId::of::<T>();
    if let Some(schema) = SCHEMAS.read().ok().and_then(|s| s.get(&id).cloned()) {
        return schema;
    }
    let schema = Arc::new(input_schema::<T>());
    match SCHEMAS.write() {
        Ok(mut schemas) => Arc::clone(schemas.entry(id).or_insert(schema)),
        Err(_) => schema,
    }
}

/// A [`ToolSpec`] whose input schema comes from `T` (shared: see [`shared_input_schema`]).
pub fn spec_for<T: JsonSchema + 'static>(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: shared_input_schema::<T>(),
    }
}

/// Parses the input of the tool `tool` into `T`, or says what is wrong and which fields the tool
/// expects: the one error every built-in tool gives for input that does not fit its schema.
pub fn parse_input<T: DeserializeOwned + JsonSchema>(
    tool: &str,
    input: Value,
) -> Result<T, ToolOutput> {
    let input = match input {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    if !input.is_object() {
        return Err(ToolOutput::error(format!(
            "invalid input for `{tool}`: expected a JSON object, got {}. Expected fields: {}",
            kind(&input),
            expected_fields(&input_schema::<T>())
        )));
    }
    serde_path_to_error::deserialize(input).map_err(|e| {
        // A missing or unknown field names itself; a value of the wrong type is named by its
        // path. serde quotes the offending value, which may be a megabyte the model sent.
        let path = e.path().to_string();
        let message = e.inner().to_string();
        let at = if path == "." || message.contains(&format!("`{path}`")) {
            String::new()
        } else {
            format!("field `{path}`: ")
        };
        ToolOutput::error(format!(
            "invalid input for `{tool}`: {at}{}. Expected fields: {}",
            cut_middle(&message, MAX_QUOTED_CHARS),
            expected_fields(&input_schema::<T>())
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

/// How much of a model's own input an error message quotes back.
pub const MAX_QUOTED_CHARS: usize = 300;

/// The longest error text handed back to the model; longer ones (which can only be quoting
/// the model's input) are cut in the middle, keeping the start and the fix at the end.
pub const MAX_ERROR_CHARS: usize = 1_000;

/// `text` if it has at most `max_chars` characters, else its start and end around a marker
/// saying how much was left out. An error that quotes a megabyte argument would otherwise be
/// re-sent to the model with every later request.
pub fn cut_middle(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_string();
    }
    let head = max_chars * 3 / 5;
    let tail = max_chars - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(total - tail).collect();
    format!(
        "{start}…[{} characters not shown]…{end}",
        total - head - tail
    )
}

/// An error output cut to [`MAX_ERROR_CHARS`] with [`cut_middle`]; successful output is left
/// alone (it has its own cap and marker).
pub fn bounded_error(output: ToolOutput) -> ToolOutput {
    if output.ok {
        return output;
    }
    ToolOutput {
        output: cut_middle(&output.output, MAX_ERROR_CHARS),
        ..output
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

    #[derive(Deserialize, JsonSchema)]
    struct Other {
        #[allow(dead_code)]
        name: String,
    }

    #[test]
    fn a_types_schema_is_generated_once_and_shared_by_every_spec() {
        let first = spec_for::<Sample>("A", "first");
        let second = spec_for::<Sample>("B", "second");
        assert!(Arc::ptr_eq(&first.input_schema, &second.input_schema));
        assert_eq!(*first.input_schema, input_schema::<Sample>());
        assert_eq!(
            (first.name.as_str(), second.description.as_str()),
            ("A", "second")
        );
        let other = spec_for::<Other>("C", "other");
        assert!(!Arc::ptr_eq(&first.input_schema, &other.input_schema));
        assert_eq!(*other.input_schema, input_schema::<Other>());
    }

    #[test]
    fn missing_field_names_the_expected_fields() {
        let err = parse_input::<Sample>("Sample", serde_json::json!({"limit": 3}))
            .err()
            .unwrap();
        assert!(!err.ok);
        assert_eq!(
            err.output,
            "invalid input for `Sample`: missing field `file_path`. Expected fields: `file_path` (string, required), `limit` (integer, optional)"
        );
        let err = parse_input::<Sample>("Sample", serde_json::json!({"file_path": 3}))
            .err()
            .unwrap();
        assert_eq!(
            err.output,
            "invalid input for `Sample`: field `file_path`: invalid type: integer `3`, expected a string. Expected fields: `file_path` (string, required), `limit` (integer, optional)"
        );
        let ok = parse_input::<Sample>("Sample", serde_json::json!({"file_path": "a"})).unwrap();
        assert_eq!(ok.file_path, "a");
    }

    #[test]
    fn an_oversized_argument_is_quoted_cut() {
        let huge = "é".repeat(1_000_000);
        let err = parse_input::<Sample>(
            "Sample",
            serde_json::json!({"file_path": "a", "limit": huge}),
        )
        .err()
        .unwrap();
        assert!(err.output.len() < 1_000, "{} bytes", err.output.len());
        assert!(
            err.output.ends_with(
                "Expected fields: `file_path` (string, required), `limit` (integer, optional)"
            ),
            "{}",
            err.output
        );
        let err = bounded_error(ToolOutput::error(format!("bad `{huge}`; use a short name")));
        assert!(err.output.chars().count() < MAX_ERROR_CHARS + 50);
        assert!(err.output.contains("characters not shown"));
        assert!(err.output.ends_with("; use a short name"));
        assert_eq!(cut_middle("short", 10), "short");
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
