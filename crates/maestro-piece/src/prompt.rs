//! Prompt assembly: the system message and first user message the engine sends for a movement.
//! `maestro prompt` prints exactly this, so a piece author sees what the model gets.
//!
//! The order of the parts is fixed (see `engine-semantics.md`, "What each call carries"):
//! the system message holds the persona, the policies, the knowledge and a short frame (piece,
//! movements with the current one marked, iteration, and how a movement ends in this dialect);
//! the user message holds the instruction (template variables filled), the task unless the
//! instruction already has `{task}`, the previous answer, feedback, lessons, the takt rule
//! tags, the quality gates and the output contracts.

use std::fmt::Write as _;

use crate::ir::{Condition, Dialect, Movement, Piece};
pub use crate::prompt_context::PromptContext;
use crate::prompt_context::cut;
pub use crate::template::{render_edge_prompt, render_template};

/// The two messages that open a movement's conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The system message: persona, policies, knowledge and the frame.
    pub system: String,
    /// The first user message: the instruction with its template variables filled, then the
    /// carried parts (task, previous answer, feedback, lessons, rule tags, quality gates, reports).
    pub user: String,
}

/// Builds the system message and first user message for `movement` of `piece`.
pub fn assemble(piece: &Piece, movement: &Movement, ctx: &PromptContext) -> Prompt {
    Prompt {
        system: system(piece, movement, ctx),
        user: user(piece, movement, ctx),
    }
}

fn system(piece: &Piece, movement: &Movement, ctx: &PromptContext) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(persona) = &movement.persona {
        parts.push(persona.text.trim_end().to_owned());
    }
    if !movement.policies.is_empty() {
        let mut s = String::from("# Policies");
        for p in &movement.policies {
            let _ = write!(s, "\n\n{}", p.text.trim_end());
        }
        parts.push(s);
    }
    if !movement.knowledge.is_empty() {
        let mut s = String::from("# Knowledge");
        for k in &movement.knowledge {
            let full = match &k.path {
                Some(p) => format!("the full text is {}", p.display()),
                None => "the full text is in the piece".to_owned(),
            };
            let _ = write!(
                s,
                "\n\n{}",
                cut(k.text.trim_end(), ctx.max_carried_chars, &full)
            );
        }
        parts.push(s);
    }
    parts.push(frame(piece, movement, ctx));
    parts.join("\n\n") + "\n"
}

fn frame(piece: &Piece, movement: &Movement, ctx: &PromptContext) -> String {
    let mut s = format!("# Piece `{}`", piece.name);
    if !piece.description.is_empty() {
        let _ = write!(s, "\n{}", piece.description.trim_end());
    }
    s.push_str("\n\nMovements:");
    let here = |name: &str| {
        if name == movement.name {
            "  <- you are here"
        } else {
            ""
        }
    };
    for m in &piece.movements {
        if m.is_parallel() {
            let _ = write!(
                s,
                "\n- {} (sub-movements run in parallel){}",
                m.name,
                here(&m.name)
            );
            for sub in &m.parallel {
                let _ = write!(s, "\n  - {}{}", sub.name, here(&sub.name));
            }
        } else {
            let _ = write!(s, "\n- {}{}", m.name, here(&m.name));
        }
    }
    if piece.movement(&movement.name).is_none() {
        let _ = write!(s, "\n(you are `{}`, outside this list)", movement.name);
    }
    let _ = write!(
        s,
        "\n\nThis is movement {} of at most {} in this run, and visit {} of `{}`.",
        ctx.iteration, ctx.max_movements, ctx.movement_iteration, movement.name
    );
    s.push_str("\n\n");
    s.push_str(&how_it_ends(piece, movement));
    s
}

fn how_it_ends(piece: &Piece, movement: &Movement) -> String {
    match piece.dialect {
        Dialect::Maestro => {
            let mut s = String::from("## How this movement ends\n");
            if movement.rules.is_empty() {
                s.push_str("This movement has no transitions.");
            } else {
                s.push_str(
                    "Call the `transition` tool with `next` set to the movement whose condition holds, and a short `summary` of what you did:",
                );
                for rule in &movement.rules {
                    if let Some(next) = &rule.next {
                        let _ = write!(
                            s,
                            "\n- `{}`: {}",
                            next.label(),
                            condition_text(&rule.condition)
                        );
                    }
                }
            }
            s.push_str(
                "\nWhen the whole task is done, or cannot be done, call `complete` with `status` (`success`, `aborted` or `needs_user_input`) and the `result` the user will read. Do not end your turn with plain text.",
            );
            s
        }
        Dialect::Takt => format!(
            "## How this movement ends\nWhen you are done, answer without further tool calls and end the answer with the tag of the rule that applies, `[{}:N]`, where N is the rule's number in the list at the end of the task message.",
            tag_name(&movement.name)
        ),
        Dialect::Graph => {
            let mut s = String::from(
                "## How this movement ends\nStart your answer with YAML frontmatter between two `---` lines, then write the rest of your answer below it.",
            );
            if let Some(schema) = &movement.frontmatter_schema {
                let pretty = serde_json::to_string_pretty(schema).unwrap_or_default();
                let _ = write!(
                    s,
                    "\nThe frontmatter must match this JSON Schema:\n```json\n{pretty}\n```"
                );
            }
            let statuses = graph_statuses(movement);
            let _ = write!(
                s,
                "\n`$status` decides what happens next; valid values: {}.",
                statuses
                    .iter()
                    .map(|v| format!("`{v}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            s
        }
    }
}

/// `$status` values a graph role may answer: its schema's, else its edge keys.
fn graph_statuses(movement: &Movement) -> Vec<String> {
    if let Some(set) = movement
        .frontmatter_schema
        .as_ref()
        .and_then(crate::graph::schema_statuses)
    {
        return set.into_iter().collect();
    }
    movement
        .rules
        .iter()
        .filter_map(|r| match &r.condition {
            Condition::Status(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

/// The movement's name as used in takt tags: upper case. A step of a called TAKT workflow,
/// named by the call stack (`develop/plan`), tags with its own name (`PLAN`), as in TAKT.
pub fn tag_name(movement: &str) -> String {
    movement
        .rsplit('/')
        .next()
        .unwrap_or(movement)
        .to_uppercase()
}

fn condition_text(c: &Condition) -> String {
    match c {
        Condition::Text(t) | Condition::Ai(t) | Condition::Status(t) => t.clone(),
        Condition::All(args) => format!("every sub-movement: {}", args.join(" / ")),
        Condition::Any(args) => format!("any sub-movement: {}", args.join(" / ")),
        Condition::When {
            base: None,
            predicate,
        } => format!("when({predicate})"),
        Condition::When {
            base: Some(base),
            predicate,
        } => format!("{} && when({predicate})", condition_text(base)),
    }
}

fn user(piece: &Piece, movement: &Movement, ctx: &PromptContext) -> String {
    let mut parts: Vec<String> = Vec::new();
    let edge = ctx.edge_prompt.clone().or_else(|| {
        (movement.name == piece.initial_movement && ctx.iteration <= 1)
            .then(|| piece.start_prompt.clone())
            .flatten()
    });
    if let Some(edge) = edge.filter(|e| !e.trim().is_empty()) {
        parts.push(edge.trim_end().to_owned());
    }
    let template = movement
        .instruction
        .as_ref()
        .map(|f| f.text.as_str())
        .unwrap_or("");
    if !template.trim().is_empty() {
        parts.push(render_template(template.trim_end(), ctx));
    }
    if !template.contains("{task}") {
        parts.push(format!("## Task\n{}", ctx.task.trim_end()));
    }
    if movement.pass_previous_response
        && !template.contains("{previous_response}")
        && let Some(previous) = &ctx.previous_response
    {
        parts.push(format!(
            "## Previous response\n{}",
            cut(
                previous.trim_end(),
                ctx.max_carried_chars,
                "the full answer is kept in the run directory"
            )
        ));
    }
    if let Some(feedback) = &ctx.feedback {
        parts.push(format!(
            "## Feedback from the previous movement\n{}",
            feedback.trim_end()
        ));
    }
    if !ctx.lessons.is_empty() {
        parts.push(format!("## Lessons so far\n{}", bullets(&ctx.lessons)));
    }
    if piece.dialect == Dialect::Takt && !movement.rules.is_empty() {
        parts.push(takt_rules(movement));
    }
    if !movement.quality_gates.is_empty() {
        parts.push(format!(
            "## Quality gates\nBefore you finish, make sure that:\n{}",
            bullets(&movement.quality_gates)
        ));
    }
    if !movement.output_contracts.is_empty() {
        parts.push(output_contracts(movement, ctx));
    }
    if let Some(warning) = &ctx.loop_warning {
        parts.push(format!("## Warning\n{}", warning.trim_end()));
    }
    parts.join("\n\n") + "\n"
}

fn bullets(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("- {}", i.trim_end()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// "[PLAN:1] condition" lines; `interactive_only` rules are left out (runs are not
/// interactive) but keep their numbers, so tags match the piece file.
fn takt_rules(movement: &Movement) -> String {
    let tag = tag_name(&movement.name);
    let mut s =
        String::from("## Rules\nEnd your answer with the tag of the first rule that applies:");
    for (i, rule) in movement.rules.iter().enumerate() {
        if rule.interactive_only {
            continue;
        }
        let _ = write!(
            s,
            "\n- [{tag}:{}] {}",
            i + 1,
            condition_text(&rule.condition)
        );
        if let Some(appendix) = &rule.appendix {
            for line in appendix.trim_end().lines() {
                let _ = write!(s, "\n  {line}");
            }
        }
    }
    s
}

fn output_contracts(movement: &Movement, ctx: &PromptContext) -> String {
    let mut s = format!(
        "## Reports\nWrite each of these reports into `{}` with the `write_report` tool (`name`, `content`) before you finish:",
        ctx.report_dir
    );
    for contract in &movement.output_contracts {
        let label = contract
            .label
            .as_ref()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default();
        let _ = write!(s, "\n\n### `{}`{label}", contract.name);
        if let Some(format) = &contract.format {
            let _ = write!(s, "\nUse this format:\n{}", format.text.trim_end());
        }
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_known_variables_and_keep_the_rest() {
        let mut ctx = PromptContext {
            task: "fix the bug".into(),
            iteration: 3,
            max_movements: 10,
            previous_response: Some("done".into()),
            cycle_count: 2,
            ..PromptContext::default()
        };
        ctx.reports.insert("plan.md".into(), "the plan".into());
        assert_eq!(
            render_template(
                "{task} {iteration}/{max_movements} {previous_response} {cycle_count} {report:plan.md} {report:x.md} {Question 1} {",
                &ctx
            ),
            "fix the bug 3/10 done 2 the plan (report x.md has not been written yet) {Question 1} {"
        );
    }

    #[test]
    fn workflow_names_of_the_counters_and_the_review_scope_fill_in_a_run() {
        let mut ctx = PromptContext {
            max_movements: 12,
            movement_iteration: 2,
            ..PromptContext::default()
        };
        assert_eq!(
            render_template("{step_iteration}/{max_steps} {review_scope}", &ctx),
            "2/12 {review_scope}"
        );
        ctx.review_scope = Some("- src/lib.rs".into());
        assert_eq!(
            render_template("scope: {review_scope}", &ctx),
            "scope: - src/lib.rs"
        );
    }
}
