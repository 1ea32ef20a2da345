//! TAKT workflows' `completion_retry`: after each answer of a step that opts in, a fresh
//! completion judge (one model call, no tools, a strict JSON decision) says whether the answer
//! closes what the step's instruction asked; an incomplete answer is retried in the same
//! conversation with the step's `retry_instruction` and the gaps the judge named, at most
//! `max_retry` times, and at least `min_retry` times whatever the judge says. As in TAKT, a judge
//! that gives no usable decision ends the episode at once and the latest answer stands; so does
//! the last retry, with a warning naming the gaps left. Every call is recorded like any other,
//! so a resumed run or `maestro replay` goes through the same episode without calling again.

use maestro_llm::{ChatRequest, Message, ResponseSchema};
use maestro_piece::{CompletionRetry, Movement};
use serde_json::{Value, json};

use crate::ctx::RunCtx;
use crate::error::EngineError;
use crate::event::{CallPurpose, RunEvent};
use crate::judge::parse_json_object;
use crate::movement::{self, Ended, Step};

const JUDGE_SYSTEM: &str = "You are a read-only review-completeness judge. Treat the step's \
instruction as the only source of its scope and authority, and decide whether the answer closes \
what that instruction explicitly requires. Never ask for work the instruction does not require. \
Reply only with the JSON object asked for.";

/// One gap the judge named.
#[derive(Debug, Clone, PartialEq)]
struct Gap {
    kind: String,
    family: String,
    path: String,
    reason: String,
}

/// The judge's decision.
#[derive(Debug, Clone, PartialEq)]
struct Decision {
    complete: bool,
    reason: String,
    gaps: Vec<Gap>,
}

/// Runs `movement`'s completion-retry episode over the visit that just ended; returns the
/// visit's end and conversation, those of the last retry when it retried.
pub(crate) async fn episode(
    run: &RunCtx,
    movement: &Movement,
    instruction: &str,
    mut ended: Ended,
    mut messages: Vec<Message>,
) -> Result<(Ended, Vec<Message>), EngineError> {
    let Some(config) = &movement.completion_retry else {
        return Ok((ended, messages));
    };
    let mut used = 0u32;
    // Only an answer that ended on a rule is judged: a question, a wait or a failure is not an
    // answer to check.
    while matches!(ended.step, Step::Go(_) | Step::Matched(_)) {
        let Some(decision) = judge(run, movement, instruction, &ended.response).await? else {
            warn(
                run,
                movement,
                "the completion judge gave no usable decision; the latest answer stands",
            )
            .await?;
            break;
        };
        if decision.complete && used >= config.min_retry {
            break;
        }
        if used >= config.max_retry {
            warn(
                run,
                movement,
                &format!(
                    "completion_retry: max_retry ({}) reached with obligations still open: {}",
                    config.max_retry,
                    gap_lines(&decision.gaps).join("; ")
                ),
            )
            .await?;
            break;
        }
        messages.push(Message::user(retry_text(instruction, config, &decision)));
        (ended, messages) = movement::visit(run, movement, messages).await?;
        used += 1;
    }
    Ok((ended, messages))
}

async fn warn(run: &RunCtx, movement: &Movement, message: &str) -> Result<(), EngineError> {
    run.emit(RunEvent::Warning {
        movement: Some(movement.name.clone()),
        message: message.to_string(),
    })
    .await
}

/// One fresh judge call over the task, the step's instruction and its answer.
async fn judge(
    run: &RunCtx,
    movement: &Movement,
    instruction: &str,
    answer: &str,
) -> Result<Option<Decision>, EngineError> {
    let task = run.journal.state().task;
    let payload = json!({
        "task": task,
        "reviewer_instruction": instruction,
        "reviewer_report": answer,
    });
    let user = format!(
        "Compare only the explicit requirements of reviewer_instruction with reviewer_report. \
         When every required path is closed, answer complete: true with no missing_obligations; \
         otherwise complete: false and each concrete unverified path.\n\n{}",
        serde_json::to_string_pretty(&payload).unwrap_or_default()
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
            name: "completion_decision".into(),
            schema: schema(),
        }),
        temperature: Some(0.0),
        max_tokens: None,
        headers: Vec::new(),
    };
    let response = run
        .chat(&movement.name, CallPurpose::CompletionJudge, request)
        .await?;
    Ok(parse_json_object(&response.content).and_then(|v| decision(&v)))
}

fn schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["complete", "reason", "missing_obligations"],
        "properties": {
            "complete": {"type": "boolean"},
            "reason": {"type": "string", "minLength": 1},
            "missing_obligations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["kind", "contract_family", "path", "reason"],
                    "properties": {
                        "kind": {"type": "string", "enum": KINDS},
                        "contract_family": {"type": "string", "minLength": 1},
                        "path": {"type": "string", "minLength": 1},
                        "reason": {"type": "string", "minLength": 1}
                    }
                }
            }
        }
    })
}

/// The kinds of gap TAKT's judge may name.
const KINDS: [&str; 6] = [
    "changed_target_gap",
    "family_lifecycle_gap",
    "accepted_family_unvisited_consumer",
    "remediation_regression",
    "direct_acceptance_criterion_violation",
    "required_consumer_migration",
];

/// A decision read strictly, as TAKT reads it: `None` for anything else (a missing field, an
/// unknown gap kind, or `complete` that disagrees with the gaps).
fn decision(value: &Value) -> Option<Decision> {
    let text = |v: &Value| {
        v.as_str()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    };
    let complete = value.get("complete")?.as_bool()?;
    let reason = text(value.get("reason")?)?;
    let gaps = value
        .get("missing_obligations")?
        .as_array()?
        .iter()
        .map(|g| {
            let kind = text(g.get("kind")?)?;
            KINDS.contains(&kind.as_str()).then_some(())?;
            Some(Gap {
                kind,
                family: text(g.get("contract_family")?)?,
                path: text(g.get("path")?)?,
                reason: text(g.get("reason")?)?,
            })
        })
        .collect::<Option<Vec<Gap>>>()?;
    (complete == gaps.is_empty()).then_some(Decision {
        complete,
        reason,
        gaps,
    })
}

fn gap_lines(gaps: &[Gap]) -> Vec<String> {
    gaps.iter()
        .map(|g| format!("- [{}] {}: {} — {}", g.kind, g.family, g.path, g.reason))
        .collect()
}

/// The retry's message: the original instruction, the retry instruction, then the gaps.
fn retry_text(instruction: &str, config: &CompletionRetry, decision: &Decision) -> String {
    let mut text = format!(
        "{instruction}\n\n{}",
        config.retry_instruction.text.trim_end()
    );
    let lines = gap_lines(&decision.gaps);
    if !lines.is_empty() {
        text.push_str("\n\n");
        text.push_str(&lines.join("\n"));
    } else if !decision.complete {
        text.push_str(&format!("\n\n{}", decision.reason));
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_is_read_strictly() {
        let ok = json!({"complete": false, "reason": "one path", "missing_obligations": [
            {"kind": "changed_target_gap", "contract_family": "config", "path": "src/a.rs", "reason": "not read"}]});
        let d = decision(&ok).unwrap();
        assert!(!d.complete);
        assert_eq!(d.gaps[0].path, "src/a.rs");
        let done = json!({"complete": true, "reason": "all closed", "missing_obligations": []});
        assert!(decision(&done).unwrap().complete);
        // complete with gaps, an unknown kind, a missing field: no decision.
        let disagree = json!({"complete": true, "reason": "x", "missing_obligations": [
            {"kind": "changed_target_gap", "contract_family": "c", "path": "p", "reason": "r"}]});
        assert_eq!(decision(&disagree), None);
        let unknown = json!({"complete": false, "reason": "x", "missing_obligations": [
            {"kind": "style", "contract_family": "c", "path": "p", "reason": "r"}]});
        assert_eq!(decision(&unknown), None);
        assert_eq!(decision(&json!({"complete": true})), None);
    }
}
