//! Reading one configuration file: checked against the typed [`Config`] so every mistake is
//! reported with its file, line, column and field, then kept as an untyped tree for merging,
//! with the position of every key for later messages.

use std::path::Path;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::{DefaultMessageFormatter, Location, MessageFormatter, Options, Spanned};

use crate::Config;
use crate::error::{ConfigError, Origin, Problem};

/// One file, valid on its own.
#[derive(Debug)]
pub(crate) struct ParsedFile {
    /// The document as written (an empty document is an empty map).
    pub raw: Value,
    pub keys: KeyTree,
}

/// Parses `text` (the contents of `path`) and checks it against [`Config`].
pub(crate) fn parse_file(path: &Path, text: &str) -> Result<ParsedFile, ConfigError> {
    // Strict booleans keep `bash_sandbox: off` a string in the untyped tree; the typed parse
    // after merging still reads `yes`/`no` where a boolean is expected. The untyped parse goes
    // first, so that broken YAML (an unclosed `[` or quote) is said as such, not as a value of
    // the wrong kind where the typed parse first stumbled.
    let mut options = Options::default();
    options.strict_booleans = true;
    let raw = serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|e| {
        let origin = Origin::File {
            path: path.to_path_buf(),
            line: None,
            column: None,
        };
        let mut problem = saphyr_problem_of(origin, None, &e, Some(text));
        problem.fix = "correct the YAML syntax here (an unclosed bracket or quote, or an \
                       indentation that does not line up); see docs/configuration.md"
            .into();
        problem.into_error()
    })?;
    let keys = serde_saphyr::from_str::<KeyTree>(text).unwrap_or_default();
    check_typed(path, text, &keys)?;
    let raw = if raw.is_null() {
        Value::Object(Default::default())
    } else {
        raw
    };
    Ok(ParsedFile { raw, keys })
}

fn check_typed(path: &Path, text: &str, keys: &KeyTree) -> Result<Config, ConfigError> {
    let mut field = None;
    let mut ignored: Vec<Vec<String>> = Vec::new();
    let typed = serde_saphyr::with_deserializer_from_str(text, |de| {
        let mut record = |p: serde_ignored::Path<'_>| ignored.push(segments(&p));
        let de = serde_ignored::Deserializer::new(de, &mut record);
        serde_path_to_error::deserialize::<_, Config>(de).map_err(|e| {
            field = Some(e.path().to_string());
            e.into_inner()
        })
    });
    let config = typed.map_err(|e| {
        let origin = Origin::File {
            path: path.to_path_buf(),
            line: None,
            column: None,
        };
        saphyr_problem(origin, field, &e, Some(text))
    })?;
    // Sections owned by other crates do not all deny unknown fields; refuse them here.
    if let Some(unknown) = ignored.first() {
        let (line, column) = keys.locate(unknown).unzip();
        let (parent, name) = unknown.split_at(unknown.len().saturating_sub(1));
        let known = known_fields(parent);
        return Err(Problem {
            origin: Origin::File {
                path: path.to_path_buf(),
                line,
                column,
            },
            field: unknown.join("."),
            message: format!(
                "unknown field `{}`, expected one of {}",
                name.join(""),
                known.join(", ")
            ),
            fix: "remove it, or correct the spelling to one of the fields listed".into(),
        }
        .into_error());
    }
    Ok(config)
}

/// The fields the default configuration has under `parent`.
fn known_fields(parent: &[String]) -> Vec<String> {
    let defaults = Config::default().redacted_value();
    let node = parent.iter().try_fold(&defaults, |node, key| node.get(key));
    match node {
        Some(Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

fn segments(path: &serde_ignored::Path<'_>) -> Vec<String> {
    use serde_ignored::Path;
    match path {
        Path::Root => Vec::new(),
        Path::Seq { parent, index } => {
            let mut out = segments(parent);
            out.push(index.to_string());
            out
        }
        Path::Map { parent, key } => {
            let mut out = segments(parent);
            out.push(key.clone());
            out
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => segments(parent),
    }
}

/// A serde-saphyr error as a [`Problem`] at `origin`, with the location the parser reported.
pub(crate) fn saphyr_problem(
    origin: Origin,
    field: Option<String>,
    error: &serde_saphyr::Error,
    source: Option<&str>,
) -> ConfigError {
    saphyr_problem_of(origin, field, error, source).into_error()
}

/// [`saphyr_problem`], before it becomes the error.
fn saphyr_problem_of(
    origin: Origin,
    field: Option<String>,
    error: &serde_saphyr::Error,
    source: Option<&str>,
) -> Problem {
    let origin = match origin {
        Origin::File { path, .. } => {
            let (line, column) = error
                .location()
                .filter(|l| l.line() > 0)
                .map(|l| (l.line(), l.column()))
                .unzip();
            Origin::File { path, line, column }
        }
        other => other,
    };
    let mut message = DefaultMessageFormatter
        .format_message(error.without_snippet())
        .into_owned();
    if let Some(kind) = message.strip_prefix("invalid ").and_then(plain_kind) {
        let found = match (&origin, source) {
            (
                Origin::File {
                    line: Some(line),
                    column: Some(column),
                    ..
                },
                Some(text),
            ) => value_at(text, *line, *column),
            _ => None,
        };
        message = match found {
            Some(found) => format!("`{found}` is not {kind}"),
            None => format!("expected {kind}"),
        };
    }
    let field = field
        .map(|f| f.trim_end_matches(".?").to_string())
        .filter(|f| !f.is_empty() && f != "?" && f != ".")
        .unwrap_or_else(|| "(top level)".to_string());
    let fix = fix_for(&message, &field);
    Problem {
        origin,
        field,
        message,
        fix,
    }
}

/// A scalar type of serde's messages (`invalid u64`) in words.
fn plain_kind(type_name: &str) -> Option<&'static str> {
    Some(match type_name {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number (0 or more)",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "bool" | "boolean" => "true or false",
        "char" => "a single character",
        _ => return None,
    })
}

/// The scalar written at `line`:`column` (1-based), up to a comment or the line's end.
fn value_at(text: &str, line: u64, column: u64) -> Option<String> {
    let line = text
        .lines()
        .nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
    let rest: String = line
        .chars()
        .skip(usize::try_from(column).ok()?.saturating_sub(1))
        .collect();
    let value = rest.split(" #").next()?.trim().trim_end_matches(',');
    (!value.is_empty() && value.chars().count() <= 80).then(|| value.to_string())
}

/// What to do about a parser or type error, judged from its message.
fn fix_for(message: &str, field: &str) -> String {
    let docs = "see docs/configuration.md";
    if message.starts_with("unknown field") {
        "remove it, or correct the spelling to one of the fields listed".into()
    } else if message.starts_with("unknown variant") {
        "use one of the values listed".into()
    } else if message.contains("duplicate mapping key") {
        "keep only one of the entries".into()
    } else if message.starts_with("missing field") {
        format!("add the missing field to `{field}`; {docs}")
    } else if message.starts_with("invalid")
        || message.starts_with("expected")
        || message.contains(" is not ")
    {
        format!("give `{field}` a value of the expected kind; {docs}")
    } else {
        format!("correct the YAML at this place; {docs}")
    }
}

/// Where each key of a document sits, so problems found after parsing still point at a line.
#[derive(Debug, Default)]
pub(crate) struct KeyTree {
    /// Keys (sequence items by index) with their location and what is below them.
    entries: Vec<(String, Location, KeyTree)>,
}

impl KeyTree {
    /// Line and column of the last key of `path`, if the document has it.
    pub(crate) fn locate(&self, path: &[String]) -> Option<(u64, u64)> {
        let (first, rest) = path.split_first()?;
        let (_, location, below) = self.entries.iter().rev().find(|(key, _, _)| key == first)?;
        if rest.is_empty() {
            Some((location.line(), location.column())).filter(|(line, _)| *line > 0)
        } else {
            below.locate(rest)
        }
    }
}

impl<'de> Deserialize<'de> for KeyTree {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeyTreeVisitor)
    }
}

struct KeyTreeVisitor;

impl<'de> Visitor<'de> for KeyTreeVisitor {
    type Value = KeyTree;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyTree, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let below = map.next_value::<KeyTree>()?;
            entries.push((key.value, key.referenced, below));
        }
        Ok(KeyTree { entries })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyTree, A::Error> {
        let mut entries = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<KeyTree>>()? {
            entries.push((entries.len().to_string(), item.referenced, item.value));
        }
        Ok(KeyTree { entries })
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<KeyTree, D::Error> {
        KeyTree::deserialize(d)
    }

    fn visit_bool<E>(self, _: bool) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
    fn visit_i128<E>(self, _: i128) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
    fn visit_u128<E>(self, _: u128) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
    fn visit_str<E>(self, _: &str) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
    fn visit_unit<E>(self) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
    fn visit_none<E>(self) -> Result<KeyTree, E> {
        Ok(KeyTree::default())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn keys_are_located_through_maps_and_sequences() {
        let text = "llm:\n  model: a\nssh:\n  connections:\n    - name: x\n      host: h\n";
        let keys: KeyTree = serde_saphyr::from_str(text).unwrap();
        let path = |p: &str| p.split('.').map(String::from).collect::<Vec<_>>();
        assert_eq!(keys.locate(&path("llm.model")), Some((2, 3)));
        assert_eq!(keys.locate(&path("ssh.connections.0.host")), Some((6, 7)));
        assert_eq!(keys.locate(&path("llm.base_url")), None);
    }
}
