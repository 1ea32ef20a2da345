//! Takt rule conditions: plain text, `ai("…")`, `all("A", …)` and `any("A", …)`.

use crate::ir::Condition;

/// Why a condition that starts like `ai(`, `all(` or `any(` is not a well-formed call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConditionError {
    #[error("`{name}(` is not closed; expected {}", form(name))]
    NotClosed { name: &'static str },
    #[error("{source}; expected {}", form(name))]
    Arguments {
        name: &'static str,
        #[source]
        source: ArgumentError,
    },
    #[error("`ai(…)` takes exactly one quoted condition, found {0}")]
    AiArity(usize),
    #[error("`{name}()` needs at least one quoted condition")]
    NoArguments { name: &'static str },
}

/// Why the arguments of a call are not comma-separated quoted strings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ArgumentError {
    #[error("found `{0}` where a quoted string should start")]
    NotQuoted(char),
    #[error("a quoted string is not closed")]
    Unclosed,
    #[error("found `{0}` where `,` or `)` should be")]
    NoSeparator(char),
}

/// Parses a condition as written in a takt rule. Plain text is [`Condition::Text`]; text that
/// starts like a call but is malformed is an error naming the expected form.
pub(crate) fn parse_condition(text: &str) -> Result<Condition, ConditionError> {
    let trimmed = text.trim();
    for (name, make) in [
        (
            "ai",
            make_ai as fn(Vec<String>) -> Result<Condition, ConditionError>,
        ),
        ("all", make_all),
        ("any", make_any),
    ] {
        let Some(rest) = trimmed.strip_prefix(name) else {
            continue;
        };
        let Some(inner) = rest.trim_start().strip_prefix('(') else {
            continue;
        };
        let args = inner
            .strip_suffix(')')
            .ok_or(ConditionError::NotClosed { name })
            .and_then(|inner| {
                parse_args(inner).map_err(|source| ConditionError::Arguments { name, source })
            })?;
        return make(args);
    }
    Ok(Condition::Text(trimmed.to_owned()))
}

fn form(name: &str) -> &'static str {
    match name {
        "ai" => "`ai(\"condition\")`",
        "all" => "`all(\"A\")` or `all(\"A\", \"B\", …)`",
        _ => "`any(\"A\")` or `any(\"A\", \"B\", …)`",
    }
}

fn make_ai(mut args: Vec<String>) -> Result<Condition, ConditionError> {
    if args.len() != 1 {
        return Err(ConditionError::AiArity(args.len()));
    }
    Ok(Condition::Ai(args.remove(0)))
}

fn make_all(args: Vec<String>) -> Result<Condition, ConditionError> {
    nonempty("all", &args)?;
    Ok(Condition::All(args))
}

fn make_any(args: Vec<String>) -> Result<Condition, ConditionError> {
    nonempty("any", &args)?;
    Ok(Condition::Any(args))
}

fn nonempty(name: &'static str, args: &[String]) -> Result<(), ConditionError> {
    if args.is_empty() {
        return Err(ConditionError::NoArguments { name });
    }
    Ok(())
}

/// Comma-separated quoted strings (`"…"` or `'…'`, backslash escapes in double quotes).
fn parse_args(inner: &str) -> Result<Vec<String>, ArgumentError> {
    let mut args = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(quote) = chars.next() else {
            return Ok(args);
        };
        if quote != '"' && quote != '\'' {
            return Err(ArgumentError::NotQuoted(quote));
        }
        let mut arg = String::new();
        loop {
            match chars.next() {
                None => return Err(ArgumentError::Unclosed),
                Some('\\') if quote == '"' => match chars.next() {
                    Some(c) => arg.push(c),
                    None => return Err(ArgumentError::Unclosed),
                },
                Some(c) if c == quote => break,
                Some(c) => arg.push(c),
            }
        }
        args.push(arg);
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.next() {
            None => return Ok(args),
            Some(',') => {}
            Some(c) => return Err(ArgumentError::NoSeparator(c)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            parse_condition("Plan ready"),
            Ok(Condition::Text("Plan ready".into()))
        );
        assert_eq!(
            parse_condition(r#"ai("code has \"issues\"")"#),
            Ok(Condition::Ai(r#"code has "issues""#.into()))
        );
        assert_eq!(
            parse_condition(r#"all("approved", "All checks passed")"#),
            Ok(Condition::All(vec![
                "approved".into(),
                "All checks passed".into()
            ]))
        );
        assert_eq!(
            parse_condition("any('needs_fix')"),
            Ok(Condition::Any(vec!["needs_fix".into()]))
        );
        // A word that merely starts like a call is text.
        assert_eq!(
            parse_condition("anything else"),
            Ok(Condition::Text("anything else".into()))
        );
    }

    fn message(text: &str) -> String {
        parse_condition(text).unwrap_err().to_string()
    }

    #[test]
    fn malformed_calls_say_what_is_expected() {
        assert_eq!(
            message(r#"all("a", b)"#),
            "found `b` where a quoted string should start; expected `all(\"A\")` or `all(\"A\", \"B\", …)`"
        );
        assert_eq!(
            message(r#"ai("a""#),
            "`ai(` is not closed; expected `ai(\"condition\")`"
        );
        assert_eq!(
            message(r#"ai("a", "b")"#),
            "`ai(…)` takes exactly one quoted condition, found 2"
        );
        assert_eq!(
            message("any()"),
            "`any()` needs at least one quoted condition"
        );
    }
}
