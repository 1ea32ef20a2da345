//! Makes a tool's input schema self-contained so it can be nested inside the combined JSON-mode
//! schema: local `$ref`s (`#/$defs/X`, `#/definitions/X`, any `#/...` pointer) are replaced by
//! the schema they point to, and `$schema`, `$defs` and `definitions` are dropped.
//!
//! Once nested under `anyOf[i].properties.arguments`, a `#/$defs/X` pointer would resolve
//! against the combined schema's root, where nothing lives, so every reference must go.
//! schemars emits such references for nested structs and enums.

use serde_json::{Map, Value};

/// Deepest chain of references followed; beyond it the occurrence becomes `{}` (any value), which
/// keeps shared-but-not-recursive definitions from blowing up the schema.
const MAX_REF_DEPTH: usize = 32;

/// Keywords whose values are data, not subschemas: a `$ref` key inside them is left alone.
const DATA_KEYWORDS: &[&str] = &["const", "enum", "default", "examples"];

/// `input` with every local reference inlined. A reference that is already being expanded
/// further up (a recursive type) and one that points nowhere become `{}`.
pub(super) fn inline_refs(input: &Value) -> Value {
    let mut out = expand(input, input, &mut vec![String::new()]);
    if let Some(map) = out.as_object_mut() {
        for key in ["$schema", "$defs", "definitions"] {
            map.remove(key);
        }
    }
    out
}

/// `stack` holds the JSON pointers being expanded, the root (`""`) first.
fn expand(node: &Value, root: &Value, stack: &mut Vec<String>) -> Value {
    match node {
        Value::Object(map) => match map.get("$ref").and_then(Value::as_str) {
            Some(reference) if reference.starts_with('#') => {
                expand_ref(reference, map, root, stack)
            }
            _ => Value::Object(
                map.iter()
                    .map(|(key, value)| {
                        let value = if DATA_KEYWORDS.contains(&key.as_str()) {
                            value.clone()
                        } else {
                            expand(value, root, stack)
                        };
                        (key.clone(), value)
                    })
                    .collect(),
            ),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| expand(v, root, stack)).collect()),
        other => other.clone(),
    }
}

fn expand_ref(
    reference: &str,
    node: &Map<String, Value>,
    root: &Value,
    stack: &mut Vec<String>,
) -> Value {
    let pointer = decode_fragment(&reference[1..]);
    let target = match root.pointer(&pointer) {
        Some(target) if !stack.contains(&pointer) && stack.len() <= MAX_REF_DEPTH => {
            stack.push(pointer);
            let expanded = expand(target, root, stack);
            stack.pop();
            expanded
        }
        _ => Value::Object(Map::new()),
    };
    let siblings: Map<String, Value> = node
        .iter()
        .filter(|(key, _)| *key != "$ref")
        .map(|(key, value)| (key.clone(), expand(value, root, stack)))
        .collect();
    match target {
        _ if siblings.is_empty() => target,
        Value::Object(mut merged) => {
            for key in ["$schema", "$defs", "definitions", "$id"] {
                merged.remove(key);
            }
            // Keywords written beside the reference (a field's description) are the more
            // specific ones.
            merged.extend(siblings);
            Value::Object(merged)
        }
        other => {
            let mut all = siblings;
            all.insert("allOf".into(), Value::Array(vec![other]));
            Value::Object(all)
        }
    }
}

/// A URI fragment as a JSON pointer: percent-escapes decoded (`%24defs` is `$defs`); the `~0`/`~1`
/// escapes stay, as `Value::pointer` reads them.
fn decode_fragment(fragment: &str) -> String {
    let bytes = fragment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| fragment.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[test]
    fn references_are_replaced_by_their_definitions() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "mode": {"$ref": "#/$defs/Mode", "description": "How to open it."},
                "range": {"$ref": "#/definitions/Range"},
                "ranges": {"type": "array", "items": {"$ref": "#/%24defs/Range2"}},
                "example": {"const": {"$ref": "#/$defs/Mode"}}
            },
            "$defs": {
                "Mode": {"type": "string", "enum": ["read", "write"]},
                "Range2": {"$ref": "#/definitions/Range"}
            },
            "definitions": {
                "Range": {"type": "object", "properties": {"start": {"type": "integer"}}}
            }
        });
        let range = json!({"type": "object", "properties": {"start": {"type": "integer"}}});
        assert_eq!(
            inline_refs(&schema),
            json!({
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["read", "write"], "description": "How to open it."},
                    "range": range,
                    "ranges": {"type": "array", "items": range},
                    "example": {"const": {"$ref": "#/$defs/Mode"}}
                }
            })
        );
    }

    #[test]
    fn a_recursive_occurrence_becomes_an_open_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Node"}, "missing": {"$ref": "#/$defs/Nope"}},
            "$defs": {"Node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                "root": {"$ref": "#"}
            }}}
        });
        assert_eq!(
            inline_refs(&schema),
            json!({
                "type": "object",
                "properties": {
                    "tree": {"type": "object", "properties": {
                        "children": {"type": "array", "items": {}},
                        "root": {}
                    }},
                    "missing": {}
                }
            })
        );
    }

    #[test]
    fn a_boolean_target_with_siblings_is_kept_under_all_of() {
        let schema = json!({"properties": {"x": {"$ref": "#/$defs/Any", "description": "d"}}, "$defs": {"Any": true}});
        assert_eq!(
            inline_refs(&schema),
            json!({"properties": {"x": {"description": "d", "allOf": [true]}}})
        );
    }
}
