//! A positioned YAML tree built from `saphyr-parser` events.
//!
//! Every node keeps its byte span and 1-based line/column so the dialect loaders can point at
//! the exact place a problem is. The builder refuses what would make loading unsafe or
//! ambiguous: duplicate keys, nesting deeper than [`MAX_DEPTH`], alias expansion beyond
//! [`MAX_NODES`] nodes, non-scalar keys and several documents in one file.

use std::collections::{HashMap, HashSet};

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, ScanError};

/// Deepest nesting accepted; real pieces stay under 15.
pub(crate) const MAX_DEPTH: usize = 128;
/// Most nodes a document may produce, counting every alias expansion.
pub(crate) const MAX_NODES: usize = 100_000;
/// YAML problems reported one by one; the rest are counted in one closing line.
pub(crate) const MAX_ERRORS: usize = 100;

/// `59990` as `59,990`, for counts in messages.
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Where a node or key sits in the source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Span {
    /// Byte offsets, end exclusive.
    pub start: usize,
    pub end: usize,
    /// 1-based line and column (columns count characters).
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub value: Value,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Map(Vec<(Key, Node)>),
    Seq(Vec<Node>),
    Scalar(Scalar),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Key {
    pub text: String,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scalar {
    pub text: String,
    /// Plain (unquoted, untagged) scalars are typed by the YAML 1.2 core schema; quoted and
    /// block scalars are always strings, so `"123"` stays text.
    pub plain: bool,
}

/// What a scalar means under the YAML 1.2 core schema.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ScalarKind {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str,
}

impl Scalar {
    pub(crate) fn kind(&self) -> ScalarKind {
        if !self.plain {
            return ScalarKind::Str;
        }
        let t = self.text.as_str();
        match t {
            "" | "~" | "null" | "Null" | "NULL" => return ScalarKind::Null,
            "true" | "True" | "TRUE" => return ScalarKind::Bool(true),
            "false" | "False" | "FALSE" => return ScalarKind::Bool(false),
            ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
                return ScalarKind::Float(f64::INFINITY);
            }
            "-.inf" | "-.Inf" | "-.INF" => return ScalarKind::Float(f64::NEG_INFINITY),
            ".nan" | ".NaN" | ".NAN" => return ScalarKind::Float(f64::NAN),
            _ => {}
        }
        let radix = [("0x", 16), ("0o", 8)]
            .iter()
            .find_map(|(prefix, radix)| Some((t.strip_prefix(prefix)?, *radix)));
        if let Some((digits, radix)) = radix
            && let Ok(n) = i64::from_str_radix(digits, radix)
        {
            return ScalarKind::Int(n);
        }
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = t.parse::<i64>() {
                return ScalarKind::Int(n);
            }
            return ScalarKind::Float(t.parse::<f64>().unwrap_or(f64::NAN));
        }
        let looks_numeric = digits
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
            && digits.bytes().any(|b| b.is_ascii_digit());
        if looks_numeric && let Ok(f) = t.parse::<f64>() {
            return ScalarKind::Float(f);
        }
        ScalarKind::Str
    }
}

impl Node {
    /// A short description of the node's type for error messages ("a list", "an integer").
    pub(crate) fn kind_name(&self) -> String {
        match &self.value {
            Value::Map(_) => "a mapping".to_owned(),
            Value::Seq(_) => "a list".to_owned(),
            Value::Scalar(s) => match s.kind() {
                ScalarKind::Null => "nothing (null)".to_owned(),
                ScalarKind::Bool(b) => format!("the boolean `{b}`"),
                ScalarKind::Int(_) => format!("the integer `{}`", s.text),
                ScalarKind::Float(_) => format!("the number `{}`", s.text),
                ScalarKind::Str if s.text.chars().count() <= 40 && !s.text.contains('\n') => {
                    format!("the string `{}`", s.text)
                }
                ScalarKind::Str => "a string".to_owned(),
            },
        }
    }

    pub(crate) fn as_map(&self) -> Option<&[(Key, Node)]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The value under `key`, when this node is a mapping that has it.
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.text == key)
            .map(|(_, v)| v)
    }

    /// The text of a string-typed scalar.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar(s) if s.kind() == ScalarKind::Str => Some(&s.text),
            _ => None,
        }
    }

    /// Converts to JSON with core-schema typing (for frontmatter JSON Schemas).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.text.clone(), v.to_json()))
                    .collect(),
            ),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Scalar(s) => match s.kind() {
                ScalarKind::Null => serde_json::Value::Null,
                ScalarKind::Bool(b) => serde_json::Value::Bool(b),
                ScalarKind::Int(n) => serde_json::Value::from(n),
                ScalarKind::Float(f) => serde_json::Number::from_f64(f)
                    .map(serde_json::Value::Number)
                    .unwrap_or(serde_json::Value::Null),
                ScalarKind::Str => serde_json::Value::String(s.text.clone()),
            },
        }
    }
}

/// A problem found while reading the YAML itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct YamlError {
    pub message: String,
    pub span: Span,
    /// YAML-level path of the offending key, when known (duplicate keys).
    pub path: String,
}

/// The result of parsing: the tree when one could be built, and every problem found.
/// Duplicate keys are reported but still give a tree (the first value wins), so the loader
/// can report further problems in the same pass.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub root: Option<Node>,
    pub errors: Vec<YamlError>,
}

/// Parses one YAML document into a positioned tree.
pub(crate) fn parse(source: &str) -> Parsed {
    let mut builder = Builder {
        parser: Parser::new_from_str(source),
        positions: Positions::new(source),
        anchors: HashMap::new(),
        produced: 0,
        errors: Vec::new(),
    };
    let root = match builder.document() {
        Ok(root) => root,
        Err(fatal) => {
            builder.errors.push(fatal);
            None
        }
    };
    let mut errors = builder.errors;
    if errors.len() > MAX_ERRORS {
        let more = errors.len() - MAX_ERRORS;
        let span = errors[MAX_ERRORS].span;
        errors.truncate(MAX_ERRORS);
        errors.push(YamlError {
            message: format!("and {} more YAML problems like these", thousands(more)),
            span,
            path: String::new(),
        });
    }
    // Paths are only worked out for the keys that need one, so a clean parse allocates none.
    if let Some(root) = &root {
        for e in &mut errors {
            if let Some(key) = e.path.strip_prefix(DUPLICATE) {
                e.path = join_key(&path_at(root, e.span.start, ""), key);
            }
        }
    }
    Parsed { root, errors }
}

/// Maps the parser's character positions to byte offsets.
struct Positions<'a> {
    source: &'a str,
    /// Byte offset of every character, only built when the source is not pure ASCII.
    char_bytes: Option<Vec<usize>>,
}

impl<'a> Positions<'a> {
    fn new(source: &'a str) -> Self {
        let char_bytes =
            (!source.is_ascii()).then(|| source.char_indices().map(|(b, _)| b).collect());
        Positions { source, char_bytes }
    }

    fn byte(&self, char_index: usize) -> usize {
        match &self.char_bytes {
            None => char_index.min(self.source.len()),
            Some(table) => table.get(char_index).copied().unwrap_or(self.source.len()),
        }
    }

    fn span(&self, start: Marker, end: Marker) -> Span {
        let s = self.byte(start.index());
        let e = self.byte(end.index()).max(s);
        Span {
            start: s,
            end: e,
            line: start.line().max(1),
            column: start.col() + 1,
        }
    }

    fn point(&self, at: Marker) -> Span {
        self.span(at, at)
    }
}

struct Builder<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    positions: Positions<'a>,
    /// Anchored nodes with their expanded size.
    anchors: HashMap<usize, (Node, usize)>,
    produced: usize,
    errors: Vec<YamlError>,
}

type Step<'a> = (Event<'a>, saphyr_parser::Span);

impl<'a> Builder<'a> {
    fn next(&mut self) -> Result<Step<'a>, YamlError> {
        match self.parser.next_event() {
            Some(Ok(step)) => Ok(step),
            Some(Err(e)) => Err(self.scan_error(&e)),
            None => Err(YamlError {
                message: "unexpected end of the YAML stream".to_owned(),
                span: self.positions.point(Marker::default()),
                path: String::new(),
            }),
        }
    }

    fn scan_error(&self, e: &ScanError) -> YamlError {
        let at = *e.marker();
        let mut span = self.positions.point(at);
        let info = e.info();
        let about_tabs = info
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| w == "tab" || w == "tabs");
        if about_tabs && let Some(tab) = self.indenting_tab_after(span) {
            span = tab;
        }
        let found = self
            .positions
            .source
            .get(span.start..)
            .and_then(|rest| rest.chars().next());
        let message = if info == "recursion limit exceeded" {
            format!("nesting deeper than {MAX_DEPTH} levels")
        } else if found == Some('\0') {
            "the file contains a NUL byte (U+0000) here; a piece is text: remove it".to_owned()
        } else if info.contains("unprintable") {
            let code = found.map_or(String::new(), |c| format!(" (U+{:04X})", u32::from(c)));
            format!(
                "YAML syntax error: {info}{code}; YAML allows no control characters but tab and \
                 line breaks: remove it"
            )
        } else if about_tabs {
            format!("YAML syntax error: {info}; indent with spaces, not tabs")
        } else {
            format!("YAML syntax error: {info}")
        };
        YamlError {
            message,
            span,
            path: String::new(),
        }
    }

    /// The tab a tab error is about, where the parser's mark is not on it: the tab in the
    /// indentation of the marked line (the mark is past the indentation, on the content), or,
    /// when the parser marked the start of the value it was reading (a multi-line plain
    /// scalar, a block scalar's indicator), the first tab in the indentation of a later line
    /// that has content. `None` when the mark is on a tab already or no such tab is found.
    fn indenting_tab_after(&self, at: Span) -> Option<Span> {
        let source = self.positions.source;
        if source.get(at.start..)?.starts_with('\t') {
            return None;
        }
        let tab_in_indentation = |line_start: usize| {
            let rest = source.get(line_start..)?;
            let text = rest.split('\n').next().unwrap_or(rest);
            let indent = text.len() - text.trim_start_matches([' ', '\t']).len();
            let content = text[indent..].trim_end_matches('\r');
            let tab = text[..indent].find('\t')?;
            Some((tab, indent, content.is_empty() || content.starts_with('#')))
        };
        let span_at = |line_start: usize, tab: usize, line: usize| Span {
            start: line_start + tab,
            end: line_start + tab + 1,
            line,
            column: tab + 1,
        };
        let marked_line = source.get(..at.start)?.rfind('\n').map_or(0, |n| n + 1);
        if let Some((tab, indent, _)) = tab_in_indentation(marked_line)
            && at.start >= marked_line + indent
        {
            return Some(span_at(marked_line, tab, at.line));
        }
        let mut line_start = at.start + source.get(at.start..)?.find('\n')? + 1;
        let mut line = at.line + 1;
        while line_start < source.len() {
            if let Some((tab, _, blank)) = tab_in_indentation(line_start)
                && !blank
            {
                return Some(span_at(line_start, tab, line));
            }
            line_start += source
                .get(line_start..)?
                .find('\n')
                .map_or(source.len() - line_start, |n| n + 1);
            line += 1;
        }
        None
    }

    fn document(&mut self) -> Result<Option<Node>, YamlError> {
        let mut root = None;
        loop {
            let (event, span) = self.next()?;
            match event {
                Event::StreamStart | Event::Nothing | Event::DocumentEnd => {}
                Event::StreamEnd => return Ok(root),
                Event::DocumentStart(_) => {
                    if root.is_some() {
                        return Err(YamlError {
                            message: "a piece file holds one YAML document; found a second `---`"
                                .to_owned(),
                            span: self.positions.span(span.start, span.end),
                            path: String::new(),
                        });
                    }
                    let (event, span) = self.next()?;
                    if matches!(event, Event::DocumentEnd) {
                        continue;
                    }
                    root = Some(self.node(event, span, 0)?);
                }
                other => {
                    root = Some(self.node(other, span, 0)?);
                }
            }
        }
    }

    fn count(&mut self, n: usize, span: Span) -> Result<(), YamlError> {
        self.produced += n;
        if self.produced > MAX_NODES {
            return Err(YamlError {
                message: format!(
                    "the document expands to more than {MAX_NODES} nodes (alias expansion?); \
                     a piece is far smaller"
                ),
                span,
                path: String::new(),
            });
        }
        Ok(())
    }

    fn node(
        &mut self,
        event: Event<'a>,
        span: saphyr_parser::Span,
        depth: usize,
    ) -> Result<Node, YamlError> {
        let here = self.positions.span(span.start, span.end);
        if depth > MAX_DEPTH {
            return Err(YamlError {
                message: format!("nesting deeper than {MAX_DEPTH} levels"),
                span: here,
                path: String::new(),
            });
        }
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                self.count(1, here)?;
                let tagged_str = tag.as_ref().is_some_and(|t| t.suffix == "str");
                let node = Node {
                    value: Value::Scalar(Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain && !tagged_str,
                    }),
                    span: here,
                };
                self.remember(anchor, &node, 1);
                Ok(node)
            }
            Event::Alias(id) => {
                let Some((node, size)) = self.anchors.get(&id).cloned() else {
                    return Err(YamlError {
                        message: "alias to an unknown anchor".to_owned(),
                        span: here,
                        path: String::new(),
                    });
                };
                self.count(size, here)?;
                Ok(node)
            }
            Event::SequenceStart(anchor, _) => {
                let before = self.produced;
                self.count(1, here)?;
                let mut items = Vec::new();
                let mut end = here.end;
                loop {
                    let (event, span) = self.next()?;
                    if matches!(event, Event::SequenceEnd) {
                        break;
                    }
                    let child = self.node(event, span, depth + 1)?;
                    end = end.max(child.span.end);
                    items.push(child);
                }
                let node = Node {
                    value: Value::Seq(items),
                    span: Span { end, ..here },
                };
                self.remember(anchor, &node, self.produced - before);
                Ok(node)
            }
            Event::MappingStart(anchor, _) => {
                let before = self.produced;
                self.count(1, here)?;
                let mut entries: Vec<(Key, Node)> = Vec::new();
                // The line of each key set so far: duplicates are found in constant time, so a
                // mapping of many thousand keys loads in linear time.
                let mut seen: HashMap<String, usize> = HashMap::new();
                // Entries brought in by merge keys (`<<: *base`); explicit keys win.
                let mut merged: Vec<(Key, Node)> = Vec::new();
                let mut merged_seen: HashSet<String> = HashSet::new();
                let mut end = here.end;
                loop {
                    let (event, span) = self.next()?;
                    if matches!(event, Event::MappingEnd) {
                        break;
                    }
                    let key_span = self.positions.span(span.start, span.end);
                    let is_merge_key = matches!(
                        &event,
                        Event::Scalar(text, ScalarStyle::Plain, ..) if text == "<<"
                    );
                    let (key_text, key_problem) = match event {
                        Event::Scalar(text, ..) => (Some(text.into_owned()), ""),
                        Event::Alias(_) => (
                            None,
                            "an alias (`*name`) cannot be a mapping key; write the key out \
                             (aliases may stand for values, and `<<: *name` merges a mapping)",
                        ),
                        other => {
                            // Build (and discard) the complex key to keep the stream in step.
                            self.node(other, span, depth + 1)?;
                            (
                                None,
                                "a mapping key must be a plain string, not a list or mapping",
                            )
                        }
                    };
                    let (value_event, value_span) = self.next()?;
                    let value = self.node(value_event, value_span, depth + 1)?;
                    end = end.max(value.span.end);
                    if is_merge_key {
                        self.merge_into(&mut merged, &mut merged_seen, value, key_span);
                        continue;
                    }
                    let Some(text) = key_text else {
                        self.errors.push(YamlError {
                            message: key_problem.to_owned(),
                            span: key_span,
                            path: String::new(),
                        });
                        continue;
                    };
                    if let Some(first_line) = seen.get(&text) {
                        self.errors.push(YamlError {
                            message: format!(
                                "duplicate key `{text}`; it is already set on line {first_line}"
                            ),
                            span: key_span,
                            path: format!("{DUPLICATE}{text}"),
                        });
                        continue;
                    }
                    seen.insert(text.clone(), key_span.line);
                    entries.push((
                        Key {
                            text,
                            span: key_span,
                        },
                        value,
                    ));
                }
                for (key, value) in merged {
                    if !seen.contains_key(&key.text) {
                        entries.push((key, value));
                    }
                }
                let node = Node {
                    value: Value::Map(entries),
                    span: Span { end, ..here },
                };
                self.remember(anchor, &node, self.produced - before);
                Ok(node)
            }
            Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd
            | Event::SequenceEnd
            | Event::MappingEnd
            | Event::Nothing => Err(YamlError {
                message: "malformed YAML structure".to_owned(),
                span: here,
                path: String::new(),
            }),
        }
    }

    /// A merge key's value (`<<: *base` or `<<: [*a, *b]`): its mappings' entries, the first
    /// mapping winning over later ones, are added where the mapping has no such key itself.
    fn merge_into(
        &mut self,
        merged: &mut Vec<(Key, Node)>,
        merged_seen: &mut HashSet<String>,
        value: Node,
        key_span: Span,
    ) {
        let sources = match value.value {
            Value::Map(entries) => vec![entries],
            Value::Seq(items) => {
                let mut maps = Vec::new();
                for item in items {
                    match item.value {
                        Value::Map(entries) => maps.push(entries),
                        _ => {
                            self.errors.push(YamlError {
                                message: "a merge key `<<` takes a mapping or a list of mappings"
                                    .to_owned(),
                                span: item.span,
                                path: String::new(),
                            });
                        }
                    }
                }
                maps
            }
            Value::Scalar(_) => {
                self.errors.push(YamlError {
                    message: "a merge key `<<` takes a mapping or a list of mappings".to_owned(),
                    span: key_span,
                    path: String::new(),
                });
                Vec::new()
            }
        };
        for (key, node) in sources.into_iter().flatten() {
            if merged_seen.insert(key.text.clone()) {
                merged.push((key, node));
            }
        }
    }

    fn remember(&mut self, anchor: usize, node: &Node, size: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), size.max(1)));
        }
    }
}

/// Marks a duplicate-key error whose path is filled in after the tree is built.
const DUPLICATE: &str = "\u{0}duplicate:";

/// The path of the deepest node whose value contains byte `offset`.
fn path_at(node: &Node, offset: usize, path: &str) -> String {
    let inside = |n: &Node| n.span.start <= offset && offset < n.span.end;
    match &node.value {
        Value::Map(entries) => {
            for (k, v) in entries {
                if inside(v) {
                    return path_at(v, offset, &join_key(path, &k.text));
                }
            }
        }
        Value::Seq(items) => {
            for (i, v) in items.iter().enumerate() {
                if inside(v) {
                    return path_at(v, offset, &join_index(path, i));
                }
            }
        }
        Value::Scalar(_) => {}
    }
    path.to_owned()
}

/// `parent.key`, or `key` at the top.
pub(crate) fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// `parent[i]`.
pub(crate) fn join_index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn errors(src: &str) -> Vec<String> {
        parse(src).errors.into_iter().map(|e| e.message).collect()
    }

    #[test]
    fn builds_a_positioned_tree() {
        let parsed = parse("name: x\nlist:\n  - a\n  - \"12\"\n");
        assert!(parsed.errors.is_empty());
        let root = parsed.root.unwrap();
        let list = root.get("list").unwrap();
        let Value::Seq(items) = &list.value else {
            panic!("not a list")
        };
        assert_eq!(items[1].as_str(), Some("12"));
        assert_eq!((items[1].span.line, items[1].span.column), (4, 5));
        assert_eq!(root.as_map().unwrap()[1].0.span.line, 2);
    }

    #[test]
    fn plain_scalars_follow_the_core_schema() {
        let root = parse("a: 12\nb: true\nc: ~\nd: 1.5\ne: '12'\nf: text\n")
            .root
            .unwrap();
        let kind = |k: &str| match &root.get(k).unwrap().value {
            Value::Scalar(s) => s.kind(),
            _ => panic!(),
        };
        assert_eq!(kind("a"), ScalarKind::Int(12));
        assert_eq!(kind("b"), ScalarKind::Bool(true));
        assert_eq!(kind("c"), ScalarKind::Null);
        assert_eq!(kind("d"), ScalarKind::Float(1.5));
        assert_eq!(kind("e"), ScalarKind::Str);
        assert_eq!(kind("f"), ScalarKind::Str);
    }

    #[test]
    fn duplicate_keys_are_errors_with_both_lines() {
        let parsed = parse("a: 1\nb: 2\na: 3\n");
        assert_eq!(
            parsed.errors[0].message,
            "duplicate key `a`; it is already set on line 1"
        );
        assert_eq!(parsed.errors[0].span.line, 3);
        assert_eq!(parsed.errors[0].path, "a");
    }

    #[test]
    fn tabs_in_indentation_are_errors() {
        let errs = errors("a:\n\tb: 1\n");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].contains("tab"), "{errs:?}");
    }

    #[test]
    fn syntax_errors_carry_positions() {
        let parsed = parse("a: [1, 2\nb: 3\n");
        assert_eq!(parsed.errors.len(), 1);
        assert!(parsed.errors[0].message.starts_with("YAML syntax error"));
        assert!(parsed.errors[0].span.line >= 1);
    }

    #[test]
    fn alias_bombs_are_stopped() {
        let mut src = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = i - 1;
            src.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let errs = errors(&src);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].contains("more than 100000 nodes"), "{errs:?}");
    }

    #[test]
    fn deep_nesting_is_stopped() {
        let flow = "[".repeat(200) + &"]".repeat(200);
        assert_eq!(
            errors(&flow),
            vec!["nesting deeper than 128 levels".to_owned()]
        );
        let block: String = (0..200)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect();
        assert_eq!(
            errors(&block),
            vec!["nesting deeper than 128 levels".to_owned()]
        );
        // Past the parser's own flow limit the error still comes back as a diagnostic.
        let very_deep = "[".repeat(10_000);
        assert_eq!(errors(&very_deep).len(), 1);
    }

    #[test]
    fn non_ascii_spans_are_byte_offsets() {
        let src = "名前: 値\nb: x\n";
        let root = parse(src).root.unwrap();
        let b = root.get("b").unwrap();
        assert_eq!(&src[b.span.start..b.span.end], "x");
        assert_eq!((b.span.line, b.span.column), (2, 4));
    }

    #[test]
    fn merge_keys_bring_in_entries_that_the_mapping_does_not_set() {
        let src = "base: &base\n  edit: false\n  persona: coder\nother: &other\n  policy: review\n  persona: reviewer\nm:\n  <<: [*base, *other]\n  persona: planner\n";
        let parsed = parse(src);
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        let m = parsed.root.unwrap().get("m").unwrap().to_json();
        assert_eq!(
            m,
            serde_json::json!({"persona": "planner", "edit": false, "policy": "review"})
        );
        assert_eq!(
            errors("m:\n  <<: 3\n"),
            vec!["a merge key `<<` takes a mapping or a list of mappings"]
        );
        // a quoted `<<` is an ordinary key
        let quoted = parse("m:\n  \"<<\": 1\n").root.unwrap();
        assert_eq!(
            quoted.get("m").unwrap().to_json(),
            serde_json::json!({"<<": 1})
        );
    }

    #[test]
    fn second_document_is_an_error() {
        let errs = errors("a: 1\n---\nb: 2\n");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].contains("one YAML document"));
    }

    #[test]
    fn empty_source_has_no_root() {
        let parsed = parse("");
        assert!(parsed.root.is_none());
        assert!(parsed.errors.is_empty());
    }
}
