//! The engine-owned control tools: `transition` and `complete` (maestro dialect) and
//! `write_report` (any movement with output contracts). Their specs are built from the movement,
//! so `transition.next` is an enum of exactly the movement's rule targets.

use maestro_piece::{Dialect, Movement};
use maestro_protocol::{RunStatus, ToolSpec};
use serde_json::{Value, json};

pub const TRANSITION: &str = "transition";
pub const COMPLETE: &str = "complete";
pub const WRITE_REPORT: &str = "write_report";

/// A control tool call, checked against the movement.
#[derive(Debug, Clone, PartialEq)]
pub enum ControlCall {
    Transition {
        next: String,
        summary: Option<String>,
        lessons: Vec<String>,
    },
    Complete {
        status: RunStatus,
        result: String,
    },
    WriteReport {
        name: String,
        content: String,
    },
}

/// The distinct `next` labels of the movement's rules, in order.
pub fn transition_targets(movement: &Movement) -> Vec<String> {
    let mut targets: Vec<String> = Vec::new();
    for label in movement
        .rules
        .iter()
        .filter_map(|r| r.next.as_ref())
        .map(|t| t.label().to_string())
    {
        if !targets.contains(&label) {
            targets.push(label);
        }
    }
    targets
}

/// The control tools offered for `movement` in `dialect`.
pub fn control_tools(dialect: Dialect, movement: &Movement) -> Vec<ToolSpec> {
    let mut tools = Vec::new();
    if dialect == Dialect::Maestro {
        let targets = transition_targets(movement);
        if !targets.is_empty() {
            tools.push(ToolSpec {
                name: TRANSITION.into(),
                description: "End this movement and go on to the next one; `next` is one of this movement's rule targets.".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "next": {"type": "string", "enum": targets},
                        "summary": {"type": "string", "description": "What was done and what the next movement should know."},
                        "lessons": {"type": "array", "items": {"type": "string"}, "description": "Lessons worth keeping for the rest of the run."}
                    },
                    "required": ["next"],
                    "additionalProperties": false
                }),
            });
        }
        tools.push(ToolSpec {
            name: COMPLETE.into(),
            description: "End the whole run: success, aborted, or needs_user_input; `result` is what the user sees.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "status": {"type": "string", "enum": ["success", "aborted", "needs_user_input"]},
                    "result": {"type": "string", "description": "The run's final output for the user."}
                },
                "required": ["status", "result"],
                "additionalProperties": false
            }),
        });
    }
    if !movement.output_contracts.is_empty() {
        let names: Vec<&str> = movement
            .output_contracts
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        tools.push(ToolSpec {
            name: WRITE_REPORT.into(),
            description:
                "Write one of this movement's required reports into the run's report directory."
                    .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "enum": names},
                    "content": {"type": "string", "description": "The whole report, in Markdown."}
                },
                "required": ["name", "content"],
                "additionalProperties": false
            }),
        });
    }
    tools
}

/// Reads a call to a control tool. `None` when `name` is not one offered here; `Some(Err)` with
/// a message the model can act on when the arguments are wrong.
pub fn parse_control(
    offered: &[ToolSpec],
    movement: &Movement,
    name: &str,
    arguments: &str,
) -> Option<Result<ControlCall, String>> {
    if ![TRANSITION, COMPLETE, WRITE_REPORT].contains(&name)
        || !offered.iter().any(|t| t.name == name)
    {
        return None;
    }
    let args: Value = match serde_json::from_str(if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    }) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(_) | Err(_) => {
            return Some(Err(format!(
                "the arguments for `{name}` must be one JSON object"
            )));
        }
    };
    let text = |field: &str| args.get(field).and_then(Value::as_str).map(str::to_string);
    Some(match name {
        TRANSITION => {
            let targets = transition_targets(movement);
            match text("next") {
                Some(next) if targets.contains(&next) => Ok(ControlCall::Transition {
                    next,
                    summary: text("summary").filter(|s| !s.trim().is_empty()),
                    lessons: args
                        .get("lessons")
                        .and_then(Value::as_array)
                        .map(|l| {
                            l.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default(),
                }),
                Some(other) => Err(format!(
                    "`{other}` is not a valid `next`; choose one of: {}",
                    targets.join(", ")
                )),
                None => Err(format!(
                    "`transition` needs `next`, one of: {}",
                    targets.join(", ")
                )),
            }
        }
        COMPLETE => {
            let status = match text("status").as_deref() {
                Some("success") => Ok(RunStatus::Completed),
                Some("aborted") => Ok(RunStatus::Aborted),
                Some("needs_user_input") => Ok(RunStatus::NeedsUserInput),
                _ => Err(
                    "`complete` needs `status`: success, aborted or needs_user_input".to_string(),
                ),
            };
            status.and_then(|status| match text("result") {
                Some(result) => Ok(ControlCall::Complete { status, result }),
                None => Err("`complete` needs `result`: the run's output for the user".to_string()),
            })
        }
        _ => {
            let names: Vec<&str> = movement
                .output_contracts
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            match (text("name"), text("content")) {
                (Some(n), Some(content)) if names.contains(&n.as_str()) => {
                    Ok(ControlCall::WriteReport { name: n, content })
                }
                (Some(n), Some(_)) => Err(format!(
                    "`{n}` is not a report of this movement; write one of: {}",
                    names.join(", ")
                )),
                _ => Err(format!(
                    "`write_report` needs `name` (one of: {}) and `content`",
                    names.join(", ")
                )),
            }
        }
    })
}
