//! The engine-owned control tools: `transition` and `complete` (maestro dialect) and
//! `write_report` (any movement with output contracts). Their specs are built from the movement,
//! so `transition.next` is an enum of exactly the movement's rule targets.

use std::sync::{Arc, LazyLock};

use maestro_piece::{Dialect, Movement, Target};
use maestro_protocol::{RunStatus, ToolSpec};
use maestro_tools::input::{MAX_QUOTED_CHARS, cut_middle, input_schema};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The control tool a maestro-dialect movement ends with, naming the next movement (with a
/// summary and lessons).
pub const TRANSITION: &str = "transition";
/// The control tool a maestro-dialect movement ends the run with (`success`, `aborted` or
/// `needs_user_input`, and the result).
pub const COMPLETE: &str = "complete";
/// The engine's tool a movement writes its `output_contracts` reports with.
pub const WRITE_REPORT: &str = "write_report";

/// `transition`'s arguments; `next` is narrowed to the movement's rule targets in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct TransitionArgs {
    /// One of this movement's rule targets.
    next: String,
    /// What was done and what the next movement should know.
    #[serde(default)]
    summary: String,
    /// Lessons worth keeping for the rest of the run.
    #[serde(default)]
    lessons: Vec<String>,
}

/// How the model ends the run through `complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub(crate) enum CompleteStatus {
    Success,
    Aborted,
    NeedsUserInput,
}

impl From<CompleteStatus> for RunStatus {
    fn from(status: CompleteStatus) -> Self {
        match status {
            CompleteStatus::Success => RunStatus::Completed,
            CompleteStatus::Aborted => RunStatus::Aborted,
            CompleteStatus::NeedsUserInput => RunStatus::NeedsUserInput,
        }
    }
}

/// `complete`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct CompleteArgs {
    status: CompleteStatus,
    /// The run's final output for the user.
    result: String,
}

/// `write_report`'s arguments; `name` is narrowed to the movement's reports in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct WriteReportArgs {
    /// One of this movement's report file names.
    name: String,
    /// The whole report, in Markdown.
    content: String,
}

/// A control tool call, checked against the movement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ControlCall {
    Transition {
        next: Target,
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

/// The schema of `T` as offered to the model: closed to other fields.
fn closed_schema<T: JsonSchema>() -> Value {
    let mut schema = input_schema::<T>();
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("additionalProperties".into(), Value::Bool(false));
    }
    schema
}

/// The control tools' argument schemas, generated once per process (a visit offers them
/// afresh, and generating a schema costs far more than copying one).
static TRANSITION_SCHEMA: LazyLock<Value> = LazyLock::new(closed_schema::<TransitionArgs>);
static COMPLETE_SCHEMA: LazyLock<Arc<Value>> =
    LazyLock::new(|| Arc::new(closed_schema::<CompleteArgs>()));
static WRITE_REPORT_SCHEMA: LazyLock<Value> = LazyLock::new(closed_schema::<WriteReportArgs>);

/// `base` with `field` limited to `values`.
fn restricted(base: &Value, field: &str, values: Vec<String>) -> Arc<Value> {
    let mut schema = base.clone();
    if let Some(prop) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut(field))
        .and_then(Value::as_object_mut)
    {
        prop.insert("enum".into(), json!(values));
    }
    Arc::new(schema)
}

/// The distinct `next` labels of the movement's rules, in order.
pub(crate) fn transition_targets(movement: &Movement) -> Vec<String> {
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

/// The labels of the movement's reports, in order.
fn report_names(movement: &Movement) -> Vec<String> {
    movement
        .output_contracts
        .iter()
        .map(|c| c.name.clone())
        .collect()
}

/// The control tools offered for `movement` in `dialect`.
pub(crate) fn control_tools(dialect: Dialect, movement: &Movement) -> Vec<ToolSpec> {
    let mut tools = Vec::new();
    if dialect == Dialect::Maestro {
        let targets = transition_targets(movement);
        if !targets.is_empty() {
            tools.push(ToolSpec {
                name: TRANSITION.into(),
                description: "End this movement and go on to the next one; `next` is one of this movement's rule targets.".into(),
                input_schema: restricted(&TRANSITION_SCHEMA, "next", targets),
            });
        }
        tools.push(ToolSpec {
            name: COMPLETE.into(),
            description: "End the whole run: success, aborted, or needs_user_input; `result` is what the user sees.".into(),
            input_schema: Arc::clone(&COMPLETE_SCHEMA),
        });
    }
    if !movement.output_contracts.is_empty() {
        tools.push(ToolSpec {
            name: WRITE_REPORT.into(),
            description:
                "Write one of this movement's required reports into the run's report directory."
                    .into(),
            input_schema: restricted(&WRITE_REPORT_SCHEMA, "name", report_names(movement)),
        });
    }
    tools
}

/// Why a control tool call was refused; the message is what the model reads, so it says what
/// the call needs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ControlError {
    #[error("the arguments for `{tool}` must be one JSON object")]
    NotAnObject { tool: String },
    /// serde refused the arguments (`detail`, cut); `needs` says what the tool takes.
    #[error("invalid arguments for `{tool}`: {detail}. {needs}")]
    InvalidArguments {
        tool: String,
        detail: String,
        needs: String,
    },
    #[error("`{next}` is not a valid `next`; choose one of: {}", choices.join(", "))]
    NotATarget { next: String, choices: Vec<String> },
    #[error("`{name}` is not a report of this movement; write one of: {}", choices.join(", "))]
    NotAReport { name: String, choices: Vec<String> },
}

/// The arguments of a call to `spec`, or an error naming the field serde refused and then
/// what the tool `needs`, in the words the model is offered.
fn arguments_of<T: DeserializeOwned>(
    spec: &ToolSpec,
    args: Value,
    needs: &str,
) -> Result<T, ControlError> {
    serde_json::from_value(args).map_err(|e| ControlError::InvalidArguments {
        tool: spec.name.clone(),
        detail: cut_middle(&e.to_string(), MAX_QUOTED_CHARS),
        needs: needs.to_string(),
    })
}

/// Reads a call to a control tool. `None` when `name` is not one offered here; `Some(Err)` with
/// a message the model can act on when the arguments are wrong.
pub(crate) fn parse_control(
    offered: &[ToolSpec],
    movement: &Movement,
    name: &str,
    arguments: &str,
) -> Option<Result<ControlCall, ControlError>> {
    if ![TRANSITION, COMPLETE, WRITE_REPORT].contains(&name) {
        return None;
    }
    let spec = offered.iter().find(|t| t.name == name)?;
    let args: Value = match serde_json::from_str(if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    }) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(_) | Err(_) => {
            return Some(Err(ControlError::NotAnObject {
                tool: name.to_string(),
            }));
        }
    };
    Some(match name {
        TRANSITION => arguments_of::<TransitionArgs>(
            spec,
            args,
            &format!(
                "`transition` needs `next`, one of: {}",
                transition_targets(movement).join(", ")
            ),
        )
        .and_then(|args| {
            let target = movement
                .rules
                .iter()
                .filter_map(|r| r.next.as_ref())
                .find(|t| t.label() == args.next);
            match target {
                Some(next) => Ok(ControlCall::Transition {
                    next: next.clone(),
                    summary: Some(args.summary).filter(|s| !s.trim().is_empty()),
                    lessons: args.lessons,
                }),
                None => Err(ControlError::NotATarget {
                    next: args.next,
                    choices: transition_targets(movement),
                }),
            }
        }),
        COMPLETE => arguments_of::<CompleteArgs>(
            spec,
            args,
            "`complete` needs `status`: success, aborted or needs_user_input, and `result`: the \
             run's output for the user",
        )
        .map(|args| ControlCall::Complete {
            status: args.status.into(),
            result: args.result,
        }),
        _ => arguments_of::<WriteReportArgs>(
            spec,
            args,
            &format!(
                "`write_report` needs `name` (one of: {}) and `content`",
                report_names(movement).join(", ")
            ),
        )
        .and_then(|args| {
            let names = report_names(movement);
            if names.contains(&args.name) {
                Ok(ControlCall::WriteReport {
                    name: args.name,
                    content: args.content,
                })
            } else {
                Err(ControlError::NotAReport {
                    name: args.name,
                    choices: names,
                })
            }
        }),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use maestro_piece::{Condition, OutputContract, Rule, SessionMode};
    use pretty_assertions::assert_eq;

    use super::*;

    fn rule(next: Target) -> Rule {
        Rule {
            condition: Condition::Text("done".into()),
            next: Some(next),
            requires_user_input: false,
            interactive_only: false,
            appendix: None,
            prompt: None,
        }
    }

    fn movement() -> Movement {
        Movement {
            name: "review".into(),
            persona: None,
            policies: vec![],
            knowledge: vec![],
            instruction: None,
            edit: false,
            allowed_tools: vec![],
            allowed_commands: None,
            allowed_ssh_connections: None,
            rules: vec![
                rule(Target::Movement("fix".into())),
                rule(Target::WaitSubtasks),
            ],
            default_next: None,
            max_consecutive_revisits: None,
            pass_previous_response: true,
            session: SessionMode::Continue,
            output_contracts: vec![OutputContract {
                name: "review.md".into(),
                label: None,
                format: None,
            }],
            quality_gates: vec![],
            command_gates: Vec::new(),
            companions: Vec::new(),
            parallel: vec![],
            frontmatter_schema: None,
            kind: Default::default(),
            dynamic: None,
            structured_output: None,
            delay_before_ms: None,
            completion_retry: None,
        }
    }

    fn tool(name: &str) -> ToolSpec {
        control_tools(Dialect::Maestro, &movement())
            .into_iter()
            .find(|t| t.name == name)
            .unwrap()
    }

    /// The property names, required fields and enums the model sees, as written by hand before
    /// the schemas came from the argument types.
    #[test]
    fn the_schemas_come_from_the_argument_types_with_the_movements_values() {
        let shape = |schema: &Value| {
            let props = schema["properties"].as_object().unwrap();
            let fields: Vec<(String, Value, Value)> = props
                .iter()
                .map(|(k, v)| (k.clone(), v["type"].clone(), v["enum"].clone()))
                .collect();
            (
                fields,
                schema["required"].clone(),
                schema["additionalProperties"].clone(),
            )
        };
        let transition = tool(TRANSITION).input_schema;
        assert_eq!(
            shape(&transition),
            (
                vec![
                    (
                        "next".into(),
                        json!("string"),
                        json!(["fix", "WAIT_SUBTASKS"])
                    ),
                    ("summary".into(), json!("string"), Value::Null),
                    ("lessons".into(), json!("array"), Value::Null),
                ],
                json!(["next"]),
                json!(false)
            )
        );
        assert_eq!(
            transition["properties"]["lessons"]["items"],
            json!({"type": "string"})
        );
        assert_eq!(
            shape(&tool(COMPLETE).input_schema),
            (
                vec![
                    (
                        "status".into(),
                        json!("string"),
                        json!(["success", "aborted", "needs_user_input"])
                    ),
                    ("result".into(), json!("string"), Value::Null),
                ],
                json!(["status", "result"]),
                json!(false)
            )
        );
        assert_eq!(
            shape(&tool(WRITE_REPORT).input_schema),
            (
                vec![
                    ("name".into(), json!("string"), json!(["review.md"])),
                    ("content".into(), json!("string"), Value::Null),
                ],
                json!(["name", "content"]),
                json!(false)
            )
        );
    }

    #[test]
    fn a_transition_is_parsed_to_its_typed_target() {
        let offered = control_tools(Dialect::Maestro, &movement());
        let call = parse_control(
            &offered,
            &movement(),
            TRANSITION,
            r#"{"next": "WAIT_SUBTASKS", "summary": " ", "lessons": ["a"]}"#,
        );
        assert_eq!(
            call,
            Some(Ok(ControlCall::Transition {
                next: Target::WaitSubtasks,
                summary: None,
                lessons: vec!["a".into()],
            }))
        );
    }

    #[test]
    fn a_bad_argument_names_the_field_and_what_is_expected() {
        let offered = control_tools(Dialect::Maestro, &movement());
        let parse = |name, args| {
            parse_control(&offered, &movement(), name, args)
                .unwrap()
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            parse(COMPLETE, r#"{"status": "done", "result": "x"}"#),
            Err(
                "invalid arguments for `complete`: unknown variant `done`, expected one of \
                 `success`, `aborted`, `needs_user_input`. `complete` needs `status`: success, \
                 aborted or needs_user_input, and `result`: the run's output for the user"
                    .into()
            )
        );
        assert_eq!(
            parse(TRANSITION, r#"{"summary": "x"}"#),
            Err(
                "invalid arguments for `transition`: missing field `next`. `transition` needs \
                 `next`, one of: fix, WAIT_SUBTASKS"
                    .into()
            )
        );
        assert_eq!(
            parse(TRANSITION, r#"{"next": "COMPLETE"}"#),
            Err("`COMPLETE` is not a valid `next`; choose one of: fix, WAIT_SUBTASKS".into())
        );
        assert_eq!(
            parse(WRITE_REPORT, r#"{"name": "plan.md", "content": "x"}"#),
            Err("`plan.md` is not a report of this movement; write one of: review.md".into())
        );
        assert_eq!(
            parse(WRITE_REPORT, "[1]"),
            Err("the arguments for `write_report` must be one JSON object".into())
        );
    }
}
