//! Agent-step `structured_output`: the step is told the schema, its answer must carry one JSON
//! object valid against it, and the value is recorded (`structured_output`) for the rules and
//! later templates. An answer without valid JSON ends the run `failed`
//! (`invalid_structured_output`), as TAKT v0.60 fails the step; no extra call is made.

use maestro_piece::{Movement, StructuredOutput};
use maestro_protocol::RunStatus;
use serde_json::{Map, Value, json};

use crate::ctx::RunCtx;
use crate::end_reason::EndReason;
use crate::error::EngineError;
use crate::event::{OutcomeSource, RunEvent};
use crate::judge::parse_json_object;
use crate::movement::{Ended, Step};

/// The paragraph added to the step's instruction.
pub(crate) fn instruction(so: &StructuredOutput) -> String {
    let schema = serde_json::to_string_pretty(&so.schema).unwrap_or_else(|_| so.schema.to_string());
    format!(
        "\n\n## Structured output\nEnd your answer with one JSON object (schema `{}`), in a ```json block, valid against this JSON Schema:\n```json\n{schema}\n```",
        so.schema_name
    )
}

/// Reads, checks and records the structured output of `answer`; `Some` ends the visit when it
/// has none that is valid.
pub(crate) async fn capture(
    run: &RunCtx,
    movement: &Movement,
    answer: &str,
) -> Result<Option<Ended>, EngineError> {
    let Some(so) = &movement.structured_output else {
        return Ok(None);
    };
    match read(so, answer) {
        Ok(value) => {
            run.emit(RunEvent::StructuredOutput {
                movement: movement.name.clone(),
                value,
            })
            .await?;
            Ok(None)
        }
        Err(problem) => Ok(Some(Ended {
            response: answer.to_owned(),
            via: OutcomeSource::Engine,
            rule: None,
            step: Step::Finish {
                status: RunStatus::Failed,
                result: None,
                reason: Some(EndReason::InvalidStructuredOutput(format!(
                    "step `{}` must answer with JSON valid against schema `{}` (`structured_output.schema_ref: {}`): {problem}",
                    movement.name, so.schema_name, so.schema_ref
                ))),
            },
            summary: None,
            lessons: Vec::new(),
            edge_prompt: None,
            reason: None,
        })),
    }
}

/// The answer's JSON object, validated, with the fields TAKT derives from it.
pub(crate) fn read(so: &StructuredOutput, answer: &str) -> Result<Value, String> {
    let value =
        parse_json_object(answer).ok_or_else(|| "the answer holds no JSON object".to_owned())?;
    let validator = jsonschema::validator_for(&so.schema)
        .map_err(|e| format!("the schema itself is invalid: {e}"))?;
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("at `{path}`: {e}")
            }
        })
        .collect();
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(if so.schema_name == "followup-task" {
        followup_task(value)
    } else {
        value
    })
}

/// TAKT's `followup-task` normalisation: the task's Markdown (`task_markdown`: summary, goals,
/// acceptance criteria) and the issue to open (`issue.title`, `issue.labels`).
fn followup_task(value: Value) -> Value {
    let Value::Object(mut map) = value else {
        return value;
    };
    let text =
        |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let list = |m: &Map<String, Value>, k: &str| -> Vec<String> {
        m.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut md = vec![
        "## Summary".to_owned(),
        text(&map, "summary"),
        String::new(),
        "## Goals".to_owned(),
    ];
    md.extend(list(&map, "goals").iter().map(|g| format!("- {g}")));
    md.push(String::new());
    md.push("## Acceptance Criteria".to_owned());
    md.extend(
        list(&map, "acceptance_criteria")
            .iter()
            .map(|c| format!("- [ ] {c}")),
    );
    let create = map
        .get("issue")
        .and_then(|i| i.get("create"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let issue =
        json!({"create": create, "title": text(&map, "title"), "labels": list(&map, "labels")});
    map.insert("task_markdown".to_owned(), Value::String(md.join("\n")));
    map.insert("issue".to_owned(), issue);
    Value::Object(map)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn so() -> StructuredOutput {
        StructuredOutput {
            schema_ref: "followup-task".into(),
            schema_name: "followup-task".into(),
            schema: json!({
                "type": "object",
                "properties": {"action": {"enum": ["go", "wait"]}, "summary": {"type": "string"},
                  "goals": {"type": "array"}, "acceptance_criteria": {"type": "array"},
                  "issue": {"type": "object"}, "title": {"type": "string"}, "labels": {"type": "array"}},
                "required": ["action"],
                "additionalProperties": false
            }),
        }
    }

    #[test]
    fn a_valid_answer_gives_its_value_with_the_task_markdown() {
        let v = read(
            &so(),
            "Planned.\n```json\n{\"action\": \"go\", \"summary\": \"Fix it\", \"goals\": [\"g\"], \"acceptance_criteria\": [\"a\", \"b\"], \"issue\": {\"create\": true}, \"title\": \"T\", \"labels\": []}\n```",
        )
        .unwrap();
        assert_eq!(v["action"], "go");
        assert_eq!(
            v["task_markdown"],
            "## Summary\nFix it\n\n## Goals\n- g\n\n## Acceptance Criteria\n- [ ] a\n- [ ] b"
        );
        assert_eq!(
            v["issue"],
            json!({"create": true, "title": "T", "labels": []})
        );
    }

    #[test]
    fn an_invalid_answer_says_what_is_wrong() {
        assert!(
            read(&so(), "no json here")
                .unwrap_err()
                .contains("no JSON object")
        );
        let e = read(&so(), "{\"action\": \"run\"}").unwrap_err();
        assert!(e.contains("/action"), "{e}");
        let e = read(&so(), "{\"summary\": \"x\"}").unwrap_err();
        assert!(e.contains("action"), "{e}");
    }
}
