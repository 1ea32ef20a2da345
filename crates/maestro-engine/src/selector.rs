//! TAKT's internal selector: one agent turn with read-only tools (`Read`, `Glob`, `Grep`) in a
//! fresh conversation that answers a strict JSON object `{"selected_ids": […], "rationale":
//! "…"}`. A dynamic parallel step asks it which pool items run; a step with `dynamic_facets`
//! asks it which facet candidates join its prompt.
//!
//! Its model calls and tool calls are recorded under the movement `<step>/selector`, so a
//! resumed or replayed run reuses them like any other; the choice itself is recorded as
//! `selection_made` by the caller. An answer that breaks the contract is not repaired or
//! retried: the step fails before anything of it starts, as in TAKT.

use std::collections::BTreeSet;

use maestro_llm::Message;
use maestro_piece::{Movement, SelectorGuidance, SessionMode};
use serde_json::Value;

use crate::agent::{Agent, TurnEnd};
use crate::ctx::RunCtx;
use crate::error::EngineError;

/// The tools a selector may use: it reads, it never writes.
const SELECTOR_TOOLS: &[&str] = &["Read", "Glob", "Grep"];

/// The movement name a selector's events are recorded under.
pub(crate) fn key(step: &str) -> String {
    format!("{step}/selector")
}

/// A candidate the selector may choose: its id and what it is for.
pub(crate) struct Candidate<'a> {
    pub id: &'a str,
    pub description: &'a str,
}

/// What a selector is asked.
pub(crate) struct Question<'a> {
    /// The step chosen for.
    pub step: &'a str,
    /// What is chosen, for the prompt ("reviewers to run", "facets to add").
    pub what: &'a str,
    /// The step's visit this is for (1: the first entry).
    pub round: u32,
    /// Context for the choice (the task, the target's prompt, the reports), as markdown.
    pub context: String,
    pub candidates: Vec<Candidate<'a>>,
    /// The most ids the answer may hold.
    pub max_selected: Option<usize>,
    pub guidance: Option<&'a SelectorGuidance>,
}

/// A valid answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choice {
    pub selected: Vec<String>,
    pub rationale: String,
}

/// Asks the selector. `Ok(Err(problem))`: its answer broke the contract (the step fails).
pub(crate) async fn select(
    run: &RunCtx,
    question: &Question<'_>,
) -> Result<Result<Choice, String>, EngineError> {
    let movement = selector_movement(question);
    let system = system_message(question);
    let user = user_message(question);
    let mut agent = Agent::new(
        run,
        &movement,
        vec![Message::System { content: system }, Message::user(user)],
    );
    let answer = match agent.drive().await? {
        TurnEnd::Answer(text) => text,
        TurnEnd::ContextExhausted => {
            return Ok(Err(
                "the selector's conversation filled the model's context window before it answered"
                    .into(),
            ));
        }
        TurnEnd::IterationsExhausted => {
            return Ok(Err(format!(
                "the selector used up engine.max_iterations_per_movement ({}) model calls without answering",
                run.config.max_iterations_per_movement
            )));
        }
        TurnEnd::Transition { .. } | TurnEnd::Complete { .. } => {
            return Ok(Err(
                "the selector called a control tool instead of answering with JSON".into(),
            ));
        }
    };
    let ids: Vec<&str> = question.candidates.iter().map(|c| c.id).collect();
    Ok(parse_choice(&answer, &ids, question.max_selected))
}

fn selector_movement(question: &Question<'_>) -> Movement {
    Movement {
        name: key(question.step),
        persona: None,
        policies: Vec::new(),
        knowledge: Vec::new(),
        instruction: None,
        edit: false,
        allowed_tools: SELECTOR_TOOLS.iter().map(|t| t.to_string()).collect(),
        allowed_commands: Some(Vec::new()),
        allowed_ssh_connections: None,
        rules: Vec::new(),
        default_next: None,
        max_consecutive_revisits: None,
        pass_previous_response: false,
        session: SessionMode::Refresh,
        output_contracts: Vec::new(),
        quality_gates: Vec::new(),
        command_gates: Vec::new(),
        companions: Vec::new(),
        parallel: Vec::new(),
        frontmatter_schema: None,
        kind: Default::default(),
        dynamic: None,
        structured_output: None,
        delay_before_ms: None,
        completion_retry: None,
    }
}

fn system_message(question: &Question<'_>) -> String {
    let mut text = String::new();
    if let Some(persona) = question.guidance.and_then(|g| g.persona.as_ref()) {
        text.push_str(persona.text.trim_end());
        text.push_str("\n\n");
    }
    text.push_str(&format!(
        "You are the selector of step `{}`: you choose the {} from a fixed list of candidates. \
         You cannot change the workflow, create agents or write files; you may read files with \
         Read, Glob and Grep when the context points you at them.\n\n\
         Your final answer is one JSON object and nothing else: \
         {{\"selected_ids\": [candidate ids], \"rationale\": \"why, in a sentence or two\"}}. \
         `selected_ids` holds each chosen id once, only ids from the list; no other keys.",
        question.step, question.what
    ));
    if let Some(max) = question.max_selected {
        text.push_str(&format!(" Choose at most {max}."));
    }
    text
}

fn user_message(question: &Question<'_>) -> String {
    let entry = if question.round <= 1 {
        "the initial entry".to_string()
    } else {
        format!("a new round (visit {})", question.round)
    };
    let candidates: Vec<String> = question
        .candidates
        .iter()
        .map(|c| format!("- `{}`: {}", c.id, c.description.trim()))
        .collect();
    let mut text = format!(
        "Step `{}`, {entry}.\n\n{}\n\n## Candidates\n{}\n",
        question.step,
        question.context.trim_end(),
        candidates.join("\n")
    );
    if let Some(guidance) = question.guidance {
        text.push_str("\n## How to choose\n");
        text.push_str(guidance.instruction.text.trim_end());
        text.push('\n');
    }
    text.push_str("\nAnswer with the JSON object only.");
    text
}

/// Checks an answer against the contract: one JSON object (a ```json fence around it is
/// tolerated), exactly the keys `selected_ids` (an array of distinct candidate ids, at most
/// `max`) and `rationale` (a string).
pub(crate) fn parse_choice(
    answer: &str,
    ids: &[&str],
    max: Option<usize>,
) -> Result<Choice, String> {
    let text = unfence(answer.trim());
    let shown = || {
        let short: String = answer.chars().take(200).collect();
        if short.len() < answer.len() {
            format!("{short}…")
        } else {
            short
        }
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "the selector's answer is not a JSON object ({e}); it answered: {}",
            shown()
        )
    })?;
    let Some(object) = value.as_object() else {
        return Err(format!(
            "the selector's answer is JSON but not an object; it answered: {}",
            shown()
        ));
    };
    if let Some(extra) = object
        .keys()
        .find(|k| *k != "selected_ids" && *k != "rationale")
    {
        return Err(format!(
            "the selector's answer has the key `{extra}`; only `selected_ids` and `rationale` are allowed"
        ));
    }
    let Some(selected) = object.get("selected_ids") else {
        return Err("the selector's answer has no `selected_ids`".into());
    };
    let Some(selected) = selected.as_array() else {
        return Err("`selected_ids` in the selector's answer is not an array".into());
    };
    let Some(rationale) = object.get("rationale").and_then(Value::as_str) else {
        return Err("the selector's answer has no `rationale` string".into());
    };
    let mut seen = BTreeSet::new();
    let mut chosen = Vec::new();
    for item in selected {
        let Some(id) = item.as_str() else {
            return Err(format!(
                "`selected_ids` holds {item}, which is not a string id"
            ));
        };
        if !ids.contains(&id) {
            return Err(format!(
                "`selected_ids` names `{id}`, which is not a candidate; the candidates: {}",
                ids.join(", ")
            ));
        }
        if !seen.insert(id) {
            return Err(format!("`selected_ids` names `{id}` twice"));
        }
        chosen.push(id.to_string());
    }
    if let Some(max) = max
        && chosen.len() > max
    {
        return Err(format!(
            "`selected_ids` names {} candidates; `max_selected` allows {max}",
            chosen.len()
        ));
    }
    Ok(Choice {
        selected: chosen,
        rationale: rationale.to_string(),
    })
}

fn unfence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let rest = rest.strip_prefix("json").unwrap_or(rest);
    rest.strip_suffix("```").unwrap_or(rest).trim()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const IDS: &[&str] = &["frontend", "backend", "security"];

    #[test]
    fn a_valid_answer_keeps_the_selectors_order_and_a_fence_is_tolerated() {
        let choice = parse_choice(
            "```json\n{\"selected_ids\": [\"security\", \"frontend\"], \"rationale\": \"auth code\"}\n```",
            IDS,
            None,
        )
        .unwrap();
        assert_eq!(choice.selected, vec!["security", "frontend"]);
        assert_eq!(choice.rationale, "auth code");
        let empty = parse_choice(
            r#"{"selected_ids": [], "rationale": "none needed"}"#,
            IDS,
            None,
        );
        assert_eq!(empty.unwrap().selected, Vec::<String>::new());
    }

    #[test]
    fn every_breach_of_the_contract_is_refused_with_its_reason() {
        let cases = [
            ("I pick frontend", "not a JSON object"),
            ("[\"frontend\"]", "not an object"),
            (
                r#"{"selected_ids": "frontend", "rationale": "x"}"#,
                "not an array",
            ),
            (
                r#"{"selected_ids": [1], "rationale": "x"}"#,
                "not a string id",
            ),
            (
                r#"{"selected_ids": ["mobile"], "rationale": "x"}"#,
                "`mobile`, which is not a candidate",
            ),
            (
                r#"{"selected_ids": ["backend", "backend"], "rationale": "x"}"#,
                "`backend` twice",
            ),
            (
                r#"{"selected_ids": ["backend"], "rationale": "x", "confidence": 1}"#,
                "the key `confidence`",
            ),
            (r#"{"selected_ids": ["backend"]}"#, "no `rationale`"),
            (
                r#"{"selected_ids": ["backend", "frontend"], "rationale": "x"}"#,
                "`max_selected` allows 1",
            ),
        ];
        for (answer, why) in cases {
            let problem = parse_choice(answer, IDS, Some(1)).unwrap_err();
            assert!(problem.contains(why), "{answer}: {problem}");
        }
    }
}
