//! Rule conditions of TAKT workflows: a semantic label, a `when(…)` state predicate, an
//! aggregate (`all(…)` / `any(…)`), or a label or aggregate joined to predicates with `&&`.
//! `ai(…)` conditions are gone since TAKT v0.36.

use crate::ir::Condition;
use crate::takt::condition::parse_condition;

/// Parses a workflow rule condition; the error says what to write instead.
pub(crate) fn parse(text: &str) -> Result<Condition, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("a rule condition cannot be empty".to_owned());
    }
    let mut base: Option<Condition> = None;
    let mut predicates: Vec<String> = Vec::new();
    for part in split_and(trimmed) {
        let part = part.trim();
        if starts_call(part, "ai") {
            return Err(
                "`ai(…)` conditions were removed in TAKT v0.36: write the semantic label the status judge picks (e.g. `condition: approved`), or a `when(…)` predicate over the run's state"
                    .to_owned(),
            );
        }
        if starts_call(part, "when") {
            let inner = call_body(part, "when")?;
            if inner.contains("companion.") {
                return Err(
                    "workflow rules cannot reference advisory companion state (`companion.…`); route on the step's own labels or on `context.`, `effect.` or `structured.` state"
                        .to_owned(),
                );
            }
            crate::when::WhenExpr::parse(inner).map_err(|e| format!("in `when({inner})`: {e}"))?;
            predicates.push(inner.to_owned());
            continue;
        }
        if base.is_some() {
            return Err(format!(
                "`{trimmed}` joins two labels or aggregates with `&&`; a condition has at most one label or aggregate, joined to `when(…)` predicates"
            ));
        }
        if part.is_empty() {
            return Err(format!("`{trimmed}` has an empty side of `&&`"));
        }
        let parsed = parse_condition(part).map_err(|e| e.to_string())?;
        base = Some(parsed);
    }
    Ok(match (base, predicates.is_empty()) {
        (Some(base), true) => base,
        (base, false) => Condition::When {
            base: base.map(Box::new),
            predicate: predicates.join(" && "),
        },
        (None, true) => return Err("a rule condition cannot be empty".to_owned()),
    })
}

fn starts_call(part: &str, name: &str) -> bool {
    part.strip_prefix(name)
        .is_some_and(|rest| rest.trim_start().starts_with('('))
}

/// The text between the call's parentheses, which must close at the end.
fn call_body<'t>(part: &'t str, name: &str) -> Result<&'t str, String> {
    let rest = part[name.len()..].trim_start();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("`{part}` is not closed; expected `{name}(<predicate>)`"))?;
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    for c in inner.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("`{part}` has a `)` that closes nothing"));
                }
            }
            _ => {}
        }
    }
    if depth != 0 || quote.is_some() {
        return Err(format!(
            "`{part}` has unbalanced parentheses or quotes; expected `{name}(<predicate>)`"
        ));
    }
    if inner.trim().is_empty() {
        return Err(format!("`{name}()` needs a predicate"));
    }
    Ok(inner.trim())
}

/// Splits on `&&` outside parentheses and quotes.
fn split_and(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let bytes = text.as_bytes();
    let mut depth = 0i32;
    let mut quote: Option<u8> = None;
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match (quote, b) {
            (Some(q), b) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b'"' | b'\'') => quote = Some(b),
            (None, b'(') => depth += 1,
            (None, b')') => depth -= 1,
            (None, b'&') if depth == 0 && bytes.get(i + 1) == Some(&b'&') => {
                parts.push(&text[start..i]);
                i += 2;
                start = i;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(&text[start..]);
    parts
}

/// The semantic label a condition routes on, if it has one (`approved`, `approved && when(…)`).
pub(crate) fn label(condition: &Condition) -> Option<&str> {
    match condition {
        Condition::Text(t) => Some(t),
        Condition::When { base: Some(b), .. } => label(b),
        _ => None,
    }
}

/// The aggregate arguments of a condition (`all("a")`, `any("a") && when(…)`).
pub(crate) fn aggregate(condition: &Condition) -> Option<(&'static str, &[String])> {
    match condition {
        Condition::All(args) => Some(("all", args)),
        Condition::Any(args) => Some(("any", args)),
        Condition::When { base: Some(b), .. } => aggregate(b),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses() {
        assert_eq!(parse("approved"), Ok(Condition::Text("approved".into())));
        assert_eq!(
            parse("when(context.a.b > 0 || context.a.c == \"a && b\")"),
            Ok(Condition::When {
                base: None,
                predicate: "context.a.b > 0 || context.a.c == \"a && b\"".into()
            })
        );
        assert_eq!(
            parse(r#"all("approved") && when(structured.s.ok == true)"#),
            Ok(Condition::When {
                base: Some(Box::new(Condition::All(vec!["approved".into()]))),
                predicate: "structured.s.ok == true".into()
            })
        );
        assert!(
            parse(r#"ai("is it good")"#)
                .unwrap_err()
                .contains("removed")
        );
        assert!(
            parse("when(companion.x.y)")
                .unwrap_err()
                .contains("companion")
        );
        assert!(parse("when(a").is_err());
        assert!(parse("a && b").is_err());
    }
}
