//! The `when(…)` predicate language of TAKT workflow rules (v0.60), parsed once at load time
//! so a malformed predicate is a positioned load error, and evaluated by the engine over the
//! run's recorded state.
//!
//! The grammar, as TAKT v0.60 has it:
//!
//! ```text
//! expression  := conjunction ( "||" conjunction )*
//! conjunction := clause ( "&&" clause )*          // `&&` binds tighter than `||`
//! clause      := "true" | "false"
//!              | operand OP operand               // OP: == != > < >= <=
//!              | state-reference                  // must resolve to a boolean
//!              | "exists(" state-reference "," item-predicate ")"
//!              | "contains(" list "," operand ")"
//! operand     := "true" | "false" | "null" | number | "\"string\"" | state-reference
//! state-ref   := context.<step>.<binding>… | structured.<step>.<field>…
//!              | effect.<step>.<type>.<field>…    // `name[0]` indexes a list
//! ```
//!
//! There is no `!` and no grouping parentheses: TAKT has neither. Ordering operators need
//! numbers on both sides; a literal that is not a number next to one is a load error.

use std::fmt;

use serde_json::Value;

/// A parsed `when(…)` predicate: alternatives joined by `||`, each a conjunction of clauses.
#[derive(Debug, Clone, PartialEq)]
pub struct WhenExpr {
    /// The `||` alternatives; each holds when all of its clauses hold.
    pub alternatives: Vec<Vec<Clause>>,
}

/// One clause of a conjunction.
#[derive(Debug, Clone, PartialEq)]
pub enum Clause {
    /// `true` or `false`.
    Bool(bool),
    /// A bare state reference, which must resolve to a boolean.
    Operand(StateRef),
    /// `left OP right`.
    Compare {
        /// The operator.
        op: CompareOp,
        /// The left operand.
        left: Operand,
        /// The right operand.
        right: Operand,
    },
    /// `exists(list, item.a == x && contains(item.b, y))`: some item of the list satisfies
    /// every item clause.
    Exists {
        /// The list.
        list: StateRef,
        /// The clauses every matching item satisfies (`==` comparisons and `contains`).
        predicate: Vec<Clause>,
    },
    /// `contains(list, value)`: the list holds the value.
    Contains {
        /// The list: a state reference, or `item.…` inside `exists`.
        list: Operand,
        /// The value looked for.
        value: Operand,
    },
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// `==`: same type and value.
    Eq,
    /// `!=`.
    Ne,
    /// `>` (numbers).
    Gt,
    /// `<` (numbers).
    Lt,
    /// `>=` (numbers).
    Ge,
    /// `<=` (numbers).
    Le,
}

impl CompareOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            CompareOp::Eq => "==",
            CompareOp::Ne => "!=",
            CompareOp::Gt => ">",
            CompareOp::Lt => "<",
            CompareOp::Ge => ">=",
            CompareOp::Le => "<=",
        }
    }
}

/// An operand of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// A literal: boolean, null, number or string.
    Literal(Value),
    /// A reference into the run's state.
    State(StateRef),
    /// `item.a.b` inside `exists(…)`: a path into the list item.
    Item(Vec<String>),
}

/// Which recorded state a reference reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRoot {
    /// A system step's `system_inputs` bindings.
    Context,
    /// An agent step's validated `structured_output`.
    Structured,
    /// A system step's effect results, by effect type.
    Effect,
}

impl StateRoot {
    /// The root as written (`context`, `structured`, `effect`).
    pub fn name(self) -> &'static str {
        match self {
            StateRoot::Context => "context",
            StateRoot::Structured => "structured",
            StateRoot::Effect => "effect",
        }
    }
}

/// `root.step.path…`, with `name[0]` split into `name`, `0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRef {
    /// The reference as written.
    pub text: String,
    /// The state it reads.
    pub root: StateRoot,
    /// The step whose state it reads.
    pub step: String,
    /// The keys (or list indices, or `length`) below the step.
    pub path: Vec<String>,
}

impl fmt::Display for StateRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Parses a state reference (`context.step.binding.field`, `{context:…}` without the braces
/// and with the colon already a dot).
pub fn parse_state_ref(text: &str) -> Result<StateRef, String> {
    let invalid = || format!("`{text}` is not a workflow state reference");
    let mut segments = text.split('.');
    let root = match segments.next() {
        Some("context") => StateRoot::Context,
        Some("structured") => StateRoot::Structured,
        Some("effect") => StateRoot::Effect,
        Some("companion") => {
            return Err(format!(
                "`{text}` reads advisory companion state, which workflow rules cannot route on"
            ));
        }
        _ => {
            return Err(format!(
                "`{text}` must start with `context.`, `structured.` or `effect.`"
            ));
        }
    };
    let step = segments
        .next()
        .filter(|s| !s.is_empty())
        .ok_or_else(invalid)?;
    let raw: Vec<&str> = segments.collect();
    if raw.iter().any(|s| s.is_empty()) {
        return Err(invalid());
    }
    if root == StateRoot::Effect && raw.len() < 2 {
        return Err(format!(
            "`{text}`: effect references are written `effect.<step>.<type>.<field>`"
        ));
    }
    let mut path = Vec::new();
    for segment in raw {
        let (field, mut rest) = match segment.find('[') {
            Some(at) => (&segment[..at], &segment[at..]),
            None => (segment, ""),
        };
        if !field.is_empty() {
            path.push(field.to_owned());
        }
        while !rest.is_empty() {
            let close = rest.find(']').ok_or_else(invalid)?;
            let index = &rest[1..close];
            if !rest.starts_with('[')
                || index.is_empty()
                || !index.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(invalid());
            }
            path.push(index.to_owned());
            rest = &rest[close + 1..];
        }
    }
    Ok(StateRef {
        text: text.to_owned(),
        root,
        step: step.to_owned(),
        path,
    })
}

impl WhenExpr {
    /// Parses the text inside `when(…)`; the error says what is wrong with which part.
    pub fn parse(text: &str) -> Result<WhenExpr, String> {
        balanced(text)?;
        let alternatives = split_top(text, "||")?
            .into_iter()
            .map(|alt| {
                split_top(alt, "&&")?
                    .into_iter()
                    .map(parse_clause)
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(WhenExpr { alternatives })
    }

    /// Every state reference the predicate reads, in order.
    pub fn references(&self) -> Vec<&StateRef> {
        fn operand<'a>(o: &'a Operand, out: &mut Vec<&'a StateRef>) {
            if let Operand::State(r) = o {
                out.push(r);
            }
        }
        fn clause<'a>(c: &'a Clause, out: &mut Vec<&'a StateRef>) {
            match c {
                Clause::Bool(_) => {}
                Clause::Operand(r) => out.push(r),
                Clause::Compare { left, right, .. } => {
                    operand(left, out);
                    operand(right, out);
                }
                Clause::Exists { list, predicate } => {
                    out.push(list);
                    predicate.iter().for_each(|p| clause(p, out));
                }
                Clause::Contains { list, value } => {
                    operand(list, out);
                    operand(value, out);
                }
            }
        }
        let mut out = Vec::new();
        self.alternatives
            .iter()
            .flatten()
            .for_each(|c| clause(c, &mut out));
        out
    }
}

/// Whether the quote at `at` is escaped by an odd number of backslashes.
fn escaped(bytes: &[u8], at: usize) -> bool {
    bytes[..at]
        .iter()
        .rev()
        .take_while(|b| **b == b'\\')
        .count()
        % 2
        == 1
}

fn balanced(text: &str) -> Result<(), String> {
    let bytes = text.as_bytes();
    let (mut in_string, mut depth) = (false, 0i32);
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'"' if !escaped(bytes, i) => in_string = !in_string,
            _ if in_string => {}
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("`{text}` has a `)` that closes nothing"));
                }
            }
            _ => {}
        }
    }
    if in_string {
        return Err(format!("`{text}` has a string that is not closed"));
    }
    if depth != 0 {
        return Err(format!("`{text}` has an unclosed `(`"));
    }
    Ok(())
}

/// Splits on `sep` outside strings and parentheses; an empty side is an error.
fn split_top<'t>(text: &'t str, sep: &str) -> Result<Vec<&'t str>, String> {
    let bytes = text.as_bytes();
    let (mut in_string, mut depth, mut start, mut i) = (false, 0i32, 0, 0);
    let mut parts = Vec::new();
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'"' && !escaped(bytes, i) {
            in_string = !in_string;
        } else if !in_string {
            match b {
                b'(' => depth += 1,
                b')' => depth -= 1,
                _ if depth == 0 && text[i..].starts_with(sep) => {
                    parts.push(&text[start..i]);
                    i += sep.len();
                    start = i;
                    continue;
                }
                _ => {}
            }
        }
        i += 1;
    }
    parts.push(&text[start..]);
    if parts.iter().any(|p| p.trim().is_empty()) {
        return Err(format!("`{}` has an empty side of `{sep}`", text.trim()));
    }
    Ok(parts.into_iter().map(str::trim).collect())
}

/// The first comparison operator outside strings and parentheses.
fn find_operator(text: &str) -> Option<(CompareOp, usize)> {
    const OPS: [(&str, CompareOp); 6] = [
        (">=", CompareOp::Ge),
        ("<=", CompareOp::Le),
        ("!=", CompareOp::Ne),
        ("==", CompareOp::Eq),
        (">", CompareOp::Gt),
        ("<", CompareOp::Lt),
    ];
    let bytes = text.as_bytes();
    let (mut in_string, mut depth) = (false, 0i32);
    for i in 0..bytes.len() {
        match bytes[i] {
            b'"' if !escaped(bytes, i) => in_string = !in_string,
            _ if in_string => {}
            b'(' => depth += 1,
            b')' => depth -= 1,
            _ if depth == 0 => {
                if let Some((_, op)) = OPS.iter().find(|(s, _)| text[i..].starts_with(s)) {
                    return Some((*op, i));
                }
            }
            _ => {}
        }
    }
    None
}

fn parse_clause(text: &str) -> Result<Clause, String> {
    match text {
        "true" => return Ok(Clause::Bool(true)),
        "false" => return Ok(Clause::Bool(false)),
        _ => {}
    }
    if let Some(args) = call_args(text, "exists")? {
        let [list, predicate] = two_args(args, "exists")?;
        let Operand::State(list) = parse_operand(list, false)? else {
            return Err(format!(
                "exists() needs a workflow state reference, not `{list}`"
            ));
        };
        path_bearing(&list, "exists()")?;
        let predicate = split_top(predicate, "&&")?
            .into_iter()
            .map(|p| {
                if let Some(args) = call_args(p, "contains")? {
                    return contains(args, true);
                }
                match parse_compare(p, true)? {
                    c @ Clause::Compare {
                        op: CompareOp::Eq, ..
                    } => Ok(c),
                    _ => Err(format!(
                        "exists() items are matched with `==`, `contains()` and `&&` only: `{p}`"
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Clause::Exists { list, predicate });
    }
    if let Some(args) = call_args(text, "contains")? {
        return contains(args, false);
    }
    if find_operator(text).is_some() {
        return parse_compare(text, false);
    }
    match parse_operand(text, false)? {
        Operand::State(r) => {
            path_bearing(&r, "a bare clause")?;
            Ok(Clause::Operand(r))
        }
        _ => Err(format!(
            "`{text}` is not a condition: write `true`, `false`, a comparison, or a state reference that holds a boolean"
        )),
    }
}

fn contains(args: &str, in_item: bool) -> Result<Clause, String> {
    let [list, value] = two_args(args, "contains")?;
    let list = parse_operand(list, in_item)?;
    match &list {
        Operand::Literal(_) => {
            return Err(format!(
                "contains() needs a list from the workflow state, not the literal in `{args}`"
            ));
        }
        Operand::State(r) => path_bearing(r, "contains()")?,
        Operand::Item(_) => {}
    }
    Ok(Clause::Contains {
        list,
        value: parse_operand(value, in_item)?,
    })
}

fn path_bearing(r: &StateRef, what: &str) -> Result<(), String> {
    if r.path.is_empty() {
        return Err(format!(
            "{what} needs a path below the step: `{r}` names the whole step state"
        ));
    }
    Ok(())
}

/// The text between `name(` and the final `)`, when `text` is that call.
fn call_args<'t>(text: &'t str, name: &str) -> Result<Option<&'t str>, String> {
    let Some(rest) = text.strip_prefix(name).and_then(|r| r.strip_prefix('(')) else {
        return Ok(None);
    };
    let Some(args) = rest.strip_suffix(')') else {
        return Err(format!(
            "`{text}`: nothing may follow the closing `)` of {name}()"
        ));
    };
    balanced(args).map_err(|_| format!("`{text}` is not one {name}(…) call"))?;
    Ok(Some(args))
}

fn two_args<'t>(args: &'t str, name: &str) -> Result<[&'t str; 2], String> {
    let bytes = args.as_bytes();
    let (mut in_string, mut depth) = (false, 0i32);
    let mut comma = None;
    for i in 0..bytes.len() {
        match bytes[i] {
            b'"' if !escaped(bytes, i) => in_string = !in_string,
            _ if in_string => {}
            b'(' => depth += 1,
            b')' => depth -= 1,
            b',' if depth == 0 => {
                if comma.is_some() {
                    return Err(format!("{name}() takes exactly two arguments: `{args}`"));
                }
                comma = Some(i);
            }
            _ => {}
        }
    }
    let at = comma.ok_or_else(|| format!("{name}() takes exactly two arguments: `{args}`"))?;
    let (first, second) = (args[..at].trim(), args[at + 1..].trim());
    if first.is_empty() || second.is_empty() {
        return Err(format!("{name}() takes exactly two arguments: `{args}`"));
    }
    Ok([first, second])
}

fn parse_compare(text: &str, in_item: bool) -> Result<Clause, String> {
    let (op, at) = find_operator(text).ok_or_else(|| format!("`{text}` is not a comparison"))?;
    let left = parse_operand(&text[..at], in_item)?;
    let right = parse_operand(&text[at + op.symbol().len()..], in_item)?;
    let ordering = !matches!(op, CompareOp::Eq | CompareOp::Ne);
    let non_number = |o: &Operand| matches!(o, Operand::Literal(v) if !v.is_number());
    if ordering && (non_number(&left) || non_number(&right)) {
        return Err(format!(
            "`{}` compares with `{}`, which needs numbers on both sides",
            text.trim(),
            op.symbol()
        ));
    }
    Ok(Clause::Compare { op, left, right })
}

fn parse_operand(raw: &str, in_item: bool) -> Result<Operand, String> {
    let text = raw.trim();
    if text.is_empty() {
        return Err("a comparison has an empty side".to_owned());
    }
    match text {
        "true" => return Ok(Operand::Literal(Value::Bool(true))),
        "false" => return Ok(Operand::Literal(Value::Bool(false))),
        "null" => return Ok(Operand::Literal(Value::Null)),
        _ => {}
    }
    if is_number(text) {
        return text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(|n| Operand::Literal(Value::Number(n)))
            .ok_or_else(|| format!("`{text}` is not a number"));
    }
    if text.len() >= 2 && text.starts_with('"') && text.ends_with('"') {
        return string_literal(text);
    }
    if text.starts_with('\'') {
        return Err(format!(
            "`{text}`: strings in `when(…)` are written in double quotes"
        ));
    }
    if text
        .chars()
        .any(|c| c.is_whitespace() || "(),<>=!&|\"'".contains(c))
    {
        return Err(format!("`{text}` is not a value or a state reference"));
    }
    if in_item && let Some(path) = text.strip_prefix("item.") {
        if path.split('.').any(str::is_empty) {
            return Err(format!("`{text}` is not an item path"));
        }
        return Ok(Operand::Item(path.split('.').map(str::to_owned).collect()));
    }
    parse_state_ref(text).map(Operand::State)
}

fn is_number(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
}

fn string_literal(text: &str) -> Result<Operand, String> {
    let inner = &text[1..text.len() - 1];
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                return Err(format!(
                    "`{text}` has a `\"` inside the string; escape it as `\\\"`"
                ));
            }
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => {
                    return Err(format!(
                        "`{text}`: only `\\\"` and `\\\\` are escapes in a `when(…)` string"
                    ));
                }
            },
            c => out.push(c),
        }
    }
    Ok(Operand::Literal(Value::String(out)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn and_binds_tighter_than_or() {
        let e = WhenExpr::parse("true || false && false").unwrap();
        assert_eq!(e.alternatives.len(), 2);
        assert_eq!(e.alternatives[1].len(), 2);
    }

    #[test]
    fn references_split_indices_and_keep_length() {
        let r = parse_state_ref("context.route.prs[0].number").unwrap();
        assert_eq!(r.root, StateRoot::Context);
        assert_eq!(r.step, "route");
        assert_eq!(r.path, ["prs", "0", "number"]);
        assert_eq!(
            parse_state_ref("context.route.prs.length").unwrap().path,
            ["prs", "length"]
        );
    }

    #[test]
    fn what_takt_rejects_is_rejected() {
        for (bad, says) in [
            ("context.a.b == 'x'", "double quotes"),
            ("context.a.b > \"x\"", "numbers"),
            ("!context.a.b", "not a value"),
            ("effect.s.enqueue_task", "effect.<step>.<type>.<field>"),
            ("foo.a.b == 1", "must start with"),
            ("context.a.b ==", "empty side"),
            ("context.a.b == 1 &&", "empty side"),
            ("(context.a.b == 1", "unclosed"),
            ("\"abc", "not closed"),
            ("1", "not a condition"),
            ("context.a", "path below the step"),
            ("companion.x == 1", "companion"),
            ("exists(context.a.l, item.x > 1)", "exists() items"),
        ] {
            let e = WhenExpr::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn literals_parse_to_values() {
        let e = WhenExpr::parse(
            r#"structured.s.a == "x \"y\"" && context.s.n.count >= -1.5 && effect.s.t.ok != null"#,
        )
        .unwrap();
        let c = &e.alternatives[0];
        assert!(
            matches!(&c[0], Clause::Compare { right: Operand::Literal(Value::String(s)), .. } if s == "x \"y\"")
        );
        assert!(
            matches!(&c[1], Clause::Compare { op: CompareOp::Ge, right: Operand::Literal(v), .. } if v.as_f64() == Some(-1.5))
        );
        assert!(matches!(
            &c[2],
            Clause::Compare {
                op: CompareOp::Ne,
                right: Operand::Literal(Value::Null),
                ..
            }
        ));
        assert_eq!(e.references().len(), 3);
    }
}
