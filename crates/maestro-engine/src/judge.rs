//! Picking a takt rule for an answer, in the order of engine-semantics.md: aggregate → last tag
//! → the only rule → `ai()` conditions (one structured call for all) → one judge call
//! (`{rule: N}`) → nothing. Calls are made only when the cheaper steps found nothing.

use maestro_llm::{ChatRequest, Message, ResponseSchema};
use maestro_piece::{Condition, Movement, Rule};
use serde_json::{Value, json};

use crate::ctx::RunCtx;
use crate::error::EngineError;
use crate::event::{CallPurpose, JudgeKind, OutcomeSource, RunEvent};
use crate::outcome::{aggregate, condition_text, eligible_rules, last_tag};

const JUDGE_SYSTEM: &str = "You read an agent's answer and decide which of the listed conditions it meets. \
Reply only with the JSON object asked for.";

/// The 1-based rule chosen for `answer`, and how; `None` when nothing matched.
pub(crate) async fn decide_rule(
    run: &RunCtx,
    movement: &Movement,
    answer: &str,
    sub_results: Option<&[Option<String>]>,
) -> Result<Option<(usize, OutcomeSource)>, EngineError> {
    let rules = eligible_rules(movement, run.config.interactive);
    if let Some(found) = sub_results.and_then(|subs| aggregate(&rules, subs)) {
        return Ok(Some((found, OutcomeSource::Aggregate)));
    }
    if let Some(tag) = last_tag(&movement.name, answer, movement.rules.len())
        .filter(|n| rules.iter().any(|(i, _)| i == n))
    {
        return Ok(Some((tag, OutcomeSource::Tag)));
    }
    if let [(only, _)] = rules.as_slice() {
        return Ok(Some((*only, OutcomeSource::SingleRule)));
    }
    let ai: Vec<(usize, &Rule)> = rules
        .iter()
        .filter(|(_, r)| matches!(r.condition, Condition::Ai(_)))
        .copied()
        .collect();
    if !ai.is_empty()
        && let Some(found) = judge_ai_conditions(run, movement, answer, &ai).await?
    {
        return Ok(Some((found, OutcomeSource::AiCondition)));
    }
    let judgeable: Vec<(usize, &Rule)> = rules
        .iter()
        .filter(|(_, r)| matches!(r.condition, Condition::Text(_) | Condition::Ai(_)))
        .copied()
        .collect();
    if judgeable.is_empty() {
        return Ok(None);
    }
    Ok(judge_rule(run, movement, answer, &judgeable)
        .await?
        .map(|n| (n, OutcomeSource::Judge)))
}

async fn judge_ai_conditions(
    run: &RunCtx,
    movement: &Movement,
    answer: &str,
    ai: &[(usize, &Rule)],
) -> Result<Option<usize>, EngineError> {
    let conditions: Vec<String> = ai
        .iter()
        .map(|(_, r)| condition_text(&r.condition))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {"results": {"type": "array", "items": {"type": "boolean"}, "minItems": ai.len(), "maxItems": ai.len()}},
        "required": ["results"],
        "additionalProperties": false
    });
    let question = format!(
        "For each condition, in order, say whether it holds for the answer. Reply {{\"results\": [true or false, …]}} with {} values.",
        ai.len()
    );
    let reply = ask(
        run,
        movement,
        JudgeKind::AiConditions,
        answer,
        &conditions,
        &question,
        "ai_conditions",
        schema,
    )
    .await?;
    let results = reply
        .as_ref()
        .and_then(|v| v.get("results"))
        .and_then(Value::as_array);
    Ok(results
        .and_then(|r| r.iter().position(|b| b.as_bool() == Some(true)))
        .and_then(|i| ai.get(i))
        .map(|(n, _)| *n))
}

/// One judge call picking among `rules` by number; the chosen rule's index.
pub(crate) async fn judge_rule(
    run: &RunCtx,
    movement: &Movement,
    answer: &str,
    rules: &[(usize, &Rule)],
) -> Result<Option<usize>, EngineError> {
    let conditions: Vec<String> = rules
        .iter()
        .map(|(_, r)| condition_text(&r.condition))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {"rule": {"type": "integer", "minimum": 1, "maximum": rules.len()}},
        "required": ["rule"],
        "additionalProperties": false
    });
    let question = "Which condition describes the outcome of this answer? Reply {\"rule\": N} with its number.";
    let reply = ask(
        run,
        movement,
        JudgeKind::Judge,
        answer,
        &conditions,
        question,
        "rule_choice",
        schema,
    )
    .await?;
    let picked = reply
        .as_ref()
        .and_then(|v| v.get("rule"))
        .and_then(Value::as_u64)
        .map(|n| n as usize);
    Ok(picked
        .filter(|n| (1..=rules.len()).contains(n))
        .map(|n| rules[n - 1].0))
}

#[allow(clippy::too_many_arguments)]
async fn ask(
    run: &RunCtx,
    movement: &Movement,
    kind: JudgeKind,
    answer: &str,
    conditions: &[String],
    question: &str,
    schema_name: &str,
    schema: Value,
) -> Result<Option<Value>, EngineError> {
    run.emit(RunEvent::JudgeRequest {
        movement: movement.name.clone(),
        kind,
        conditions: conditions.to_vec(),
    })
    .await?;
    let listed: Vec<String> = conditions
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{}. {c}", i + 1))
        .collect();
    let user = format!(
        "## Answer of movement `{}`\n{}\n\n## Conditions\n{}\n\n{question}",
        movement.name,
        tail(answer, run.config.max_carried_chars),
        listed.join("\n")
    );
    let request = ChatRequest {
        model: run.config.model.clone(),
        messages: vec![
            Message::System {
                content: JUDGE_SYSTEM.into(),
            },
            Message::user(user),
        ],
        tools: Default::default(),
        response_schema: Some(ResponseSchema {
            name: schema_name.into(),
            schema,
        }),
        temperature: Some(0.0),
        max_tokens: None,
        headers: Vec::new(),
    };
    let purpose = match kind {
        JudgeKind::Judge => CallPurpose::Judge,
        JudgeKind::AiConditions => CallPurpose::AiConditions,
    };
    let response = run.chat(&movement.name, purpose, request).await?;
    Ok(parse_json_object(&response.content))
}

/// The JSON object in a reply, tolerating a code fence or prose around it.
pub(crate) fn parse_json_object(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    serde_json::from_str(text.get(start..=end)?).ok()
}

/// The last `max` characters (outcomes sit at the end of an answer).
fn tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let skipped: String = text.chars().skip(count - max).collect();
    format!("[… {} earlier characters omitted]\n{skipped}", count - max)
}
