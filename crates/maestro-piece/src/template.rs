//! Template variables: takt's `{task}`-style variables and the graph dialect's Mustache-style
//! `{{{field}}}` / `{{field}}` edge prompts (never HTML-escaped: the reader is a model).

use serde_json::{Map, Value};

use crate::prompt_context::{PromptContext, cut};

/// Fills takt template variables: `{task}`, `{previous_response}`, `{iteration}`,
/// `{max_movements}` (`{max_steps}` in TAKT workflows), `{movement_iteration}`
/// (`{step_iteration}`), `{report_dir}`, `{report:<file>}`, `{user_inputs}`, `{cycle_count}`
/// and, in a run, `{review_scope}`. Anything else in braces (`{Question 1}` in an
/// example) is left as it is.
pub fn render_template(template: &str, ctx: &PromptContext) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find(['}', '{', '\n']);
        let Some(close) = close.filter(|&c| after.as_bytes()[c] == b'}') else {
            out.push('{');
            rest = after;
            continue;
        };
        let name = &after[..close];
        match variable(name, ctx) {
            Some(value) => out.push_str(&value),
            None => {
                out.push('{');
                out.push_str(name);
                out.push('}');
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

fn variable(name: &str, ctx: &PromptContext) -> Option<String> {
    let value = match name {
        "task" => ctx.task.clone(),
        "previous_response" => match &ctx.previous_response {
            Some(text) => cut(
                text,
                ctx.max_carried_chars,
                "the full answer is kept in the run directory",
            ),
            None => "(no previous response)".to_owned(),
        },
        "iteration" => ctx.iteration.to_string(),
        "max_movements" | "max_steps" => ctx.max_movements.to_string(),
        "movement_iteration" | "step_iteration" => ctx.movement_iteration.to_string(),
        "review_scope" => ctx.review_scope.clone()?,
        "report_dir" => ctx.report_dir.clone(),
        "user_inputs" => {
            if ctx.user_inputs.is_empty() {
                "(none)".to_owned()
            } else {
                ctx.user_inputs.join("\n")
            }
        }
        "cycle_count" => ctx.cycle_count.to_string(),
        _ => {
            let file = name.strip_prefix("report:")?;
            match ctx.reports.get(file) {
                Some(text) => cut(
                    text,
                    ctx.max_carried_chars,
                    &format!("the full report is {}/{file}", ctx.report_dir),
                ),
                None => format!("(report {file} has not been written yet)"),
            }
        }
    };
    Some(value)
}

/// The names used as `{{{x}}}` or `{{x}}` in an edge prompt, in order of appearance.
pub(crate) fn mustache_names(template: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start..];
        let (open, close) = if after.starts_with("{{{") {
            ("{{{", "}}}")
        } else {
            ("{{", "}}")
        };
        let body = &after[open.len()..];
        let Some(end) = body.find(close) else {
            break;
        };
        let name = body[..end].trim();
        if !name.is_empty() && !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
        rest = &body[end + close.len()..];
    }
    names
}

/// An edge prompt names a field the frontmatter does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the edge prompt uses `{placeholder}` but the frontmatter has no field `{field}`; it has: {}",
    crate::check::known_list(known)
)]
pub struct MissingField {
    /// The placeholder as written, braces included (`{{{b}}}`).
    pub placeholder: String,
    /// The field it names.
    pub field: String,
    /// The fields the frontmatter has.
    pub known: Vec<String>,
}

/// Fills `{{{x}}}` and `{{x}}` from frontmatter fields. Strings go in as they are; other
/// values as compact JSON. A field the frontmatter lacks is an error naming it.
pub fn render_edge_prompt(
    template: &str,
    fields: &Map<String, Value>,
) -> Result<String, MissingField> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let (open, close) = if after.starts_with("{{{") {
            ("{{{", "}}}")
        } else {
            ("{{", "}}")
        };
        let body = &after[open.len()..];
        let Some(end) = body.find(close) else {
            out.push_str(after);
            return Ok(out);
        };
        let name = body[..end].trim();
        match fields.get(name) {
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Null) => {}
            Some(other) => out.push_str(&other.to_string()),
            None => {
                return Err(MissingField {
                    placeholder: format!("{open}{name}{close}"),
                    field: name.to_owned(),
                    known: fields.keys().cloned().collect(),
                });
            }
        }
        rest = &body[end + close.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn fields(v: serde_json::Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn finds_both_brace_forms() {
        assert_eq!(
            mustache_names("Counter {{{argument}}} and {{ score }}; again {{{argument}}}"),
            vec!["argument".to_owned(), "score".to_owned()]
        );
        assert!(mustache_names("no vars {single}").is_empty());
    }

    #[test]
    fn renders_without_escaping() {
        let f = fields(serde_json::json!({"argument": "a < b & \"c\"", "n": 3, "list": ["x"]}));
        assert_eq!(
            render_edge_prompt(
                "Counter: {{{argument}}} / {{argument}} / {{n}} / {{{list}}}",
                &f
            ),
            Ok("Counter: a < b & \"c\" / a < b & \"c\" / 3 / [\"x\"]".to_owned())
        );
    }

    #[test]
    fn missing_fields_are_named() {
        let f = fields(serde_json::json!({"a": "x"}));
        assert_eq!(
            render_edge_prompt("{{{b}}}", &f).map_err(|e| e.to_string()),
            Err(
                "the edge prompt uses `{{{b}}}` but the frontmatter has no field `b`; it has: a"
                    .to_owned()
            )
        );
    }

    #[test]
    fn unclosed_braces_stay_as_text() {
        assert_eq!(
            render_edge_prompt("a {{b", &Map::new()),
            Ok("a {{b".to_owned())
        );
    }
}
