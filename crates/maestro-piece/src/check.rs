//! The diagnostic sink and the typed readers the dialect loaders walk the YAML tree with.
//!
//! Each reader takes the node and its field path, and on a type mismatch records an error that
//! says what was found and what is expected, then returns `None` so the loader carries on and
//! reports every problem in one pass.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::diagnostic::{Diagnostic, Severity};
use crate::yaml::{Key, Node, ScalarKind, Span, Value, join_index, join_key, thousands};

/// Collects errors and warnings for one file.
#[derive(Debug)]
pub(crate) struct Sink {
    file: PathBuf,
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
    /// Warnings reported once per key (keys that have no meaning for us, tools not set up
    /// here), so a file reports each once.
    ignored: Vec<(String, Diagnostic, usize)>,
    /// Where each key sits in `ignored`.
    ignored_at: HashMap<String, usize>,
    /// Errors and warnings beyond [`MAX_PER_FILE`], counted, with the first one left out.
    dropped_errors: (usize, Option<Diagnostic>),
    dropped_warnings: (usize, Option<Diagnostic>),
}

/// Errors (and, apart, warnings) reported one by one for a file; the rest are counted in one
/// closing diagnostic, so a file of 60,000 bad keys gets a readable report in linear time.
pub(crate) const MAX_PER_FILE: usize = 200;

/// Unknown keys of one mapping reported one by one; the rest are summed up in one diagnostic.
pub(crate) const MAX_UNKNOWN_PER_MAPPING: usize = 10;

impl Sink {
    pub(crate) fn new(file: &Path) -> Self {
        Sink {
            file: file.to_owned(),
            errors: Vec::new(),
            warnings: Vec::new(),
            ignored: Vec::new(),
            ignored_at: HashMap::new(),
            dropped_errors: (0, None),
            dropped_warnings: (0, None),
        }
    }

    fn make(&self, severity: Severity, path: &str, span: Span, message: String) -> Diagnostic {
        Diagnostic {
            severity,
            file: self.file.clone(),
            path: path.to_owned(),
            line: span.line,
            column: span.column,
            span: (span.start, span.end),
            message,
        }
    }

    pub(crate) fn error(&mut self, path: &str, span: Span, message: impl Into<String>) {
        let d = self.make(Severity::Error, path, span, message.into());
        keep(&mut self.errors, &mut self.dropped_errors, d);
    }

    pub(crate) fn warn(&mut self, path: &str, span: Span, message: impl Into<String>) {
        let d = self.make(Severity::Warning, path, span, message.into());
        keep(&mut self.warnings, &mut self.dropped_warnings, d);
    }

    /// Records a key we accept but do not use; reported once per key name, with a count.
    pub(crate) fn ignored(&mut self, key: &str, path: &str, span: Span, why: &str) {
        self.warn_once(key, path, span, || format!("`{key}` is ignored: {why}"));
    }

    /// A warning reported once per `key` in a file (the first place, with a count of the
    /// others), for findings that repeat in every movement.
    pub(crate) fn warn_once(
        &mut self,
        key: &str,
        path: &str,
        span: Span,
        message: impl FnOnce() -> String,
    ) {
        if let Some(entry) = self
            .ignored_at
            .get(key)
            .and_then(|&at| self.ignored.get_mut(at))
        {
            entry.2 += 1;
            return;
        }
        let d = self.make(Severity::Warning, path, span, message());
        self.ignored_at.insert(key.to_owned(), self.ignored.len());
        self.ignored.push((key.to_owned(), d, 1));
    }

    /// The file the findings are about.
    pub(crate) fn file(&self) -> &Path {
        &self.file
    }

    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Errors and warnings, each sorted by position.
    pub(crate) fn finish(mut self) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
        for (_, mut d, count) in std::mem::take(&mut self.ignored) {
            if count > 1 {
                d.message.push_str(&format!(
                    " ({count} places in this file; the first is shown)"
                ));
            }
            keep(&mut self.warnings, &mut self.dropped_warnings, d);
        }
        let by_position =
            |a: &Diagnostic, b: &Diagnostic| (a.line, a.column).cmp(&(b.line, b.column));
        self.errors.sort_by(by_position);
        self.warnings.sort_by(by_position);
        for (list, dropped, what) in [
            (&mut self.errors, self.dropped_errors, "errors"),
            (&mut self.warnings, self.dropped_warnings, "warnings"),
        ] {
            if let (count, Some(mut first)) = dropped {
                first.message = format!(
                    "and {} more {what} in this file, not shown; the first of them: {}",
                    thousands(count),
                    first.message
                );
                list.push(first);
            }
        }
        (self.errors, self.warnings)
    }
}

/// Adds `d` to `list`, or counts it once the list is full.
fn keep(list: &mut Vec<Diagnostic>, dropped: &mut (usize, Option<Diagnostic>), d: Diagnostic) {
    if list.len() < MAX_PER_FILE {
        list.push(d);
        return;
    }
    dropped.0 += 1;
    dropped.1.get_or_insert(d);
}

/// What to do with a key a mapping does not define.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unknown {
    Error,
    Warn,
}

/// A mapping whose keys were checked against the known set.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'n> {
    pub node: &'n Node,
    pub entries: &'n [(Key, Node)],
    pub path: &'n str,
}

/// Reads a mapping and reports keys outside `known` (an error or a warning, per `unknown`).
pub(crate) fn fields<'n>(
    sink: &mut Sink,
    node: &'n Node,
    path: &'n str,
    what: &str,
    known: &[&str],
    unknown: Unknown,
) -> Option<Fields<'n>> {
    let Some(entries) = node.as_map() else {
        sink.error(
            path,
            node.span,
            format!("expected {what} (a mapping), found {}", node.kind_name()),
        );
        return None;
    };
    let mut unknown_keys = entries.iter().map(|(key, _)| key).filter(|key| {
        // `x-…` keys are the author's own (as in Compose files): a home for YAML anchors
        // (`x-defaults: &reader`) that movements merge in with `<<: *reader`.
        !(known.contains(&key.text.as_str()) || key.text.starts_with("x-"))
    });
    for key in unknown_keys.by_ref().take(MAX_UNKNOWN_PER_MAPPING) {
        let key_path = join_key(path, &key.text);
        let hint = crate::catalog::closest(&key.text, known.iter().copied())
            .map(|near| format!("; did you mean `{near}`?"))
            .unwrap_or_default();
        let message = format!(
            "unknown field `{}` in {what}{hint}; known: {}",
            key.text,
            known.join(", ")
        );
        match unknown {
            Unknown::Error => sink.error(&key_path, key.span, message),
            Unknown::Warn => sink.warn(&key_path, key.span, format!("{message}; it is ignored")),
        }
    }
    if let Some(next) = unknown_keys.next() {
        let more = 1 + unknown_keys.count();
        let message = format!(
            "and {} more unknown field{} in {what}, from `{}` on",
            thousands(more),
            if more == 1 { "" } else { "s" },
            next.text
        );
        let key_path = join_key(path, &next.text);
        match unknown {
            Unknown::Error => sink.error(&key_path, next.span, message),
            Unknown::Warn => {
                sink.warn(&key_path, next.span, format!("{message}; they are ignored"))
            }
        }
    }
    Some(Fields {
        node,
        entries,
        path,
    })
}

impl<'n> Fields<'n> {
    pub(crate) fn get(&self, key: &str) -> Option<(&'n Node, String)> {
        self.entries
            .iter()
            .find(|(k, _)| k.text == key)
            .map(|(_, v)| (v, join_key(self.path, key)))
    }

    pub(crate) fn key_span(&self, key: &str) -> Option<Span> {
        self.entries
            .iter()
            .find(|(k, _)| k.text == key)
            .map(|(k, _)| k.span)
    }

    /// The value under `key`, or an error naming the missing field and where it belongs.
    pub(crate) fn required(
        &self,
        sink: &mut Sink,
        key: &str,
        what: &str,
    ) -> Option<(&'n Node, String)> {
        let found = self.get(key);
        if found.is_none() {
            let span = self.entries.first().map_or(self.node.span, |(k, _)| k.span);
            sink.error(
                &join_key(self.path, key),
                span,
                format!("missing required field `{key}` in {what}"),
            );
        }
        found
    }

    /// The string under `key`, which must be present (`None` after an error).
    pub(crate) fn required_string(&self, sink: &mut Sink, key: &str, what: &str) -> Option<String> {
        self.required(sink, key, what)
            .and_then(|(node, path)| string(sink, node, &path).map(str::to_owned))
    }

    /// The string under `key`, if present (`None` when absent or after an error).
    pub(crate) fn optional_string(&self, sink: &mut Sink, key: &str) -> Option<String> {
        self.get(key)
            .and_then(|(node, path)| string(sink, node, &path).map(str::to_owned))
    }
}

/// A string value with where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Str<'n> {
    pub text: &'n str,
    pub span: Span,
    pub path: String,
}

fn type_error(sink: &mut Sink, node: &Node, path: &str, expected: &str) {
    let mut message = format!("expected {expected}, found {}", node.kind_name());
    if expected == "a string"
        && let Value::Scalar(s) = &node.value
        && matches!(
            s.kind(),
            ScalarKind::Int(_) | ScalarKind::Float(_) | ScalarKind::Bool(_)
        )
    {
        message.push_str(&format!("; quote it (\"{}\") to use it as text", s.text));
    }
    sink.error(path, node.span, message);
}

pub(crate) fn string<'n>(sink: &mut Sink, node: &'n Node, path: &str) -> Option<&'n str> {
    let text = node.as_str();
    if text.is_none() {
        type_error(sink, node, path, "a string");
    }
    text
}

/// A string that must not be empty or blank.
pub(crate) fn nonempty_string<'n>(sink: &mut Sink, node: &'n Node, path: &str) -> Option<&'n str> {
    let text = string(sink, node, path)?;
    if text.trim().is_empty() {
        sink.error(path, node.span, "expected a non-empty string");
        return None;
    }
    Some(text)
}

pub(crate) fn boolean(sink: &mut Sink, node: &Node, path: &str) -> Option<bool> {
    match &node.value {
        Value::Scalar(s) => match s.kind() {
            ScalarKind::Bool(b) => Some(b),
            _ => {
                type_error(sink, node, path, "`true` or `false`");
                None
            }
        },
        _ => {
            type_error(sink, node, path, "`true` or `false`");
            None
        }
    }
}

/// A positive integer that fits in `u32`.
pub(crate) fn positive(sink: &mut Sink, node: &Node, path: &str) -> Option<u32> {
    if let Value::Scalar(s) = &node.value
        && let ScalarKind::Int(n) = s.kind()
    {
        return match u32::try_from(n) {
            Ok(v) if v > 0 => Some(v),
            _ => {
                sink.error(
                    path,
                    node.span,
                    format!(
                        "expected a positive integer (1 to {}), found `{n}`",
                        u32::MAX
                    ),
                );
                None
            }
        };
    }
    type_error(sink, node, path, "a positive integer");
    None
}

pub(crate) fn list<'n>(
    sink: &mut Sink,
    node: &'n Node,
    path: &str,
    what: &str,
) -> Option<&'n [Node]> {
    match &node.value {
        Value::Seq(items) => Some(items),
        _ => {
            type_error(sink, node, path, what);
            None
        }
    }
}

/// A list of strings; bad entries are reported and skipped.
pub(crate) fn string_list<'n>(sink: &mut Sink, node: &'n Node, path: &str) -> Option<Vec<Str<'n>>> {
    let items = list(sink, node, path, "a list of strings")?;
    Some(strings_of(sink, items, path))
}

fn strings_of<'n>(sink: &mut Sink, items: &'n [Node], path: &str) -> Vec<Str<'n>> {
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = join_index(path, i);
        if let Some(text) = string(sink, item, &item_path) {
            out.push(Str {
                text,
                span: item.span,
                path: item_path,
            });
        }
    }
    out
}

/// A single string or a list of strings (takt `policy: review` / `policy: [a, b]`).
pub(crate) fn one_or_many<'n>(sink: &mut Sink, node: &'n Node, path: &str) -> Vec<Str<'n>> {
    match &node.value {
        Value::Seq(items) => strings_of(sink, items, path),
        _ => string(sink, node, path)
            .map(|text| {
                vec![Str {
                    text,
                    span: node.span,
                    path: path.to_owned(),
                }]
            })
            .unwrap_or_default(),
    }
}

/// "`x`; known: a, b" style list of valid names.
pub(crate) fn known_list<S: AsRef<str>>(names: &[S]) -> String {
    if names.is_empty() {
        "(none)".to_owned()
    } else {
        names
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(", ")
    }
}
