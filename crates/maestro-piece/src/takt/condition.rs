//! Takt rule conditions: plain text, `ai("…")`, `all("A", …)` and `any("A", …)`.

use crate::ir::Condition;

/// Parses a condition as written in a takt rule. Plain text is [`Condition::Text`]; text that
/// starts like a call but is malformed is an error naming the expected form.
pub(crate) fn parse_condition(text: &str) -> Result<Condition, String> {
    let trimmed = text.trim();
    for (name, make) in [
        (
            "ai",
            make_ai as fn(Vec<String>) -> Result<Condition, String>,
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
            .ok_or_else(|| format!("`{name}(` is not closed; expected {}", form(name)))
            .and_then(|inner| {
                parse_args(inner).map_err(|e| format!("{e}; expected {}", form(name)))
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

fn make_ai(mut args: Vec<String>) -> Result<Condition, String> {
    if args.len() != 1 {
        return Err(format!(
            "`ai(…)` takes exactly one quoted condition, found {}",
            args.len()
        ));
    }
    Ok(Condition::Ai(args.remove(0)))
}

fn make_all(args: Vec<String>) -> Result<Condition, String> {
    nonempty("all", &args)?;
    Ok(Condition::All(args))
}

fn make_any(args: Vec<String>) -> Result<Condition, String> {
    nonempty("any", &args)?;
    Ok(Condition::Any(args))
}

fn nonempty(name: &str, args: &[String]) -> Result<(), String> {
    if args.is_empty() {
        return Err(format!("`{name}()` needs at least one quoted condition"));
    }
    Ok(())
}

/// Comma-separated quoted strings (`"…"` or `'…'`, backslash escapes in double quotes).
fn parse_args(inner: &str) -> Result<Vec<String>, String> {
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
            return Err(format!(
                "found `{quote}` where a quoted string should start"
            ));
        }
        let mut arg = String::new();
        loop {
            match chars.next() {
                None => return Err("a quoted string is not closed".to_owned()),
                Some('\\') if quote == '"' => match chars.next() {
                    Some(c) => arg.push(c),
                    None => return Err("a quoted string is not closed".to_owned()),
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
            Some(c) => return Err(format!("found `{c}` where `,` or `)` should be")),
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

    #[test]
    fn malformed_calls_say_what_is_expected() {
        assert_eq!(
            parse_condition(r#"all("a", b)"#),
            Err("found `b` where a quoted string should start; expected `all(\"A\")` or `all(\"A\", \"B\", …)`".into())
        );
        assert_eq!(
            parse_condition(r#"ai("a""#),
            Err("`ai(` is not closed; expected `ai(\"condition\")`".into())
        );
        assert_eq!(
            parse_condition(r#"ai("a", "b")"#),
            Err("`ai(…)` takes exactly one quoted condition, found 2".into())
        );
        assert_eq!(
            parse_condition("any()"),
            Err("`any()` needs at least one quoted condition".into())
        );
    }
}
