//! TAKT workflow state: system-step inputs, effect results and structured outputs, which
//! `when(…)` rules and `{context:…}` / `{structured:…}` templates read, and the host a job gives
//! system steps (its queue).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::event::RunEvent;

use super::when;

/// What TAKT workflow rules and templates read: system-step inputs, effect results and
/// structured outputs, each by step name. Changed only by recorded events.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WorkflowState {
    /// `context.<step>.<binding>`: each system step's last `system_inputs`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub contexts: BTreeMap<String, Map<String, Value>>,
    /// `effect.<step>.<type>`: each system step's last effect results, by effect type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub effects: BTreeMap<String, Map<String, Value>>,
    /// `structured.<step>`: each agent step's last validated structured output.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub structured: BTreeMap<String, Value>,
}

impl WorkflowState {
    /// True when no workflow event was recorded.
    pub fn is_empty(&self) -> bool {
        self.contexts.is_empty() && self.effects.is_empty() && self.structured.is_empty()
    }

    /// Applies one of the workflow events; other events leave it as it is. A step inside a
    /// called workflow is recorded under its name in that workflow (`route` for
    /// `develop/route`), which is how the workflow's own `when(…)` rules and templates name it.
    pub(crate) fn apply(&mut self, event: &RunEvent) {
        let own = |movement: &str| movement.rsplit('/').next().unwrap_or(movement).to_string();
        match event {
            RunEvent::SystemInputs { movement, inputs } => {
                self.contexts.insert(own(movement), inputs.clone());
            }
            RunEvent::EffectResult {
                movement,
                effect,
                result,
            } => {
                self.effects
                    .entry(own(movement))
                    .or_default()
                    .insert(effect.clone(), result.clone());
            }
            RunEvent::StructuredOutput { movement, value } => {
                self.structured.insert(own(movement), value.clone());
            }
            _ => {}
        }
    }
}

/// What a [`SystemHost`] call returns; the error text says what went wrong, for the effect's
/// recorded result.
pub type SystemFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// The job system's side of TAKT system steps, for one run: the job queue that
/// `task_queue_context` reads and `enqueue_task` adds to. A plain engine run has none: its
/// `task_queue_context` reads an empty queue and its `enqueue_task` is refused.
pub trait SystemHost: Send + Sync {
    /// The queue's jobs by state; `exclude_current` leaves the run's own job out.
    fn queue(&self, exclude_current: bool) -> SystemFuture<'_, QueueCounts>;

    /// Enqueues a job; the same `request.key` returns the same job, so an effect repeated
    /// after a crash makes no second one.
    fn enqueue(&self, request: EnqueueRequest) -> SystemFuture<'_, EnqueuedTask>;
}

/// The job queue, counted by state, as `task_queue_context` reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Jobs waiting to run.
    pub pending: u64,
    /// Jobs running (or parked waiting for subtasks or an answer).
    pub running: u64,
    /// Jobs that completed.
    pub completed: u64,
    /// Jobs that failed, were aborted or cancelled.
    pub failed: u64,
    /// Jobs that ended over a limit.
    pub exceeded: u64,
}

/// An `enqueue_task` effect, as the engine asks the host for it.
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueRequest {
    /// Names this effect in the run (run, step, visit): the idempotency key.
    pub key: String,
    /// The new job's task.
    pub task: String,
    /// The piece (workflow) the job runs; `None` has one chosen for the task.
    pub piece: Option<String>,
    /// A short title: the task's first line, shortened.
    pub title: String,
}

/// A job `enqueue_task` created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueuedTask {
    /// The job's id.
    pub id: String,
}

/// Resolves one `{context:…}`, `{structured:…}` or `{effect:…}` reference (the text between
/// the braces).
fn reference(inner: &str, state: &WorkflowState) -> Option<Result<Value, String>> {
    let (root, rest) = inner.split_once(':')?;
    if !matches!(root, "context" | "structured" | "effect") {
        return None;
    }
    let text = format!("{root}.{}", rest.replace(':', "."));
    Some(maestro_piece::when::parse_state_ref(&text).and_then(|r| when::resolve(&r, state)))
}

/// The `{root:…}` references in `text`: (start, end, inner) byte ranges.
fn references(text: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find('{').map(|i| i + from) {
        let Some(close) = text[open..].find('}').map(|i| i + open) else {
            break;
        };
        let inner = &text[open + 1..close];
        if ["context:", "structured:", "effect:"]
            .iter()
            .any(|p| inner.starts_with(p))
            && !inner.contains('{')
        {
            out.push((open, close + 1, inner));
            from = close + 1;
        } else {
            from = open + 1;
        }
    }
    out
}

/// A scalar as text, anything else as compact JSON.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "null".to_owned(),
        other => other.to_string(),
    }
}

/// Fills `{context:step.binding.field}`, `{structured:step.field}` and `{effect:…}` in an
/// instruction from the run's state. A value that is not a string is written as JSON; a
/// reference the state does not hold yet is left as written.
pub(crate) fn render_instruction(text: &str, state: &WorkflowState) -> String {
    let found = references(text);
    if found.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, end, inner) in found {
        out.push_str(&text[last..start]);
        match reference(inner, state) {
            Some(Ok(value)) => out.push_str(&as_text(&value)),
            _ => out.push_str(&text[start..end]),
        }
        last = end;
    }
    out.push_str(&text[last..]);
    out
}

/// An effect's string field with its references filled, as TAKT does: a field that is one
/// reference takes the value itself (an object stays an object); references inside more text
/// must be scalars. A reference the state does not hold is an error naming it.
pub(crate) fn render_field(text: &str, state: &WorkflowState) -> Result<Value, String> {
    let found = references(text);
    if let [(0, end, inner)] = found.as_slice()
        && *end == text.len()
    {
        return reference(inner, state).unwrap_or_else(|| Ok(Value::String(text.to_owned())));
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, end, inner) in found {
        out.push_str(&text[last..start]);
        let value = reference(inner, state).unwrap_or_else(|| Ok(Value::String(String::new())))?;
        if value.is_object() || value.is_array() {
            return Err(format!(
                "`{{{inner}}}` is not a single value, so it cannot stand inside more text"
            ));
        }
        out.push_str(&as_text(&value));
        last = end;
    }
    out.push_str(&text[last..]);
    Ok(Value::String(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn templates_fill_from_the_state_and_leave_the_unknown() {
        let mut state = WorkflowState::default();
        state.structured.insert(
            "plan".into(),
            json!({"task_markdown": "## Summary\nx", "issue": {"create": true}, "n": 3}),
        );
        state.contexts.insert(
            "route".into(),
            json!({"prs": []}).as_object().unwrap().clone(),
        );
        assert_eq!(
            render_instruction(
                "Count {context:route.prs.length}, prs {context:route.prs}, {structured:plan.n}, {structured:later.x}, {task}",
                &state
            ),
            "Count 0, prs [], 3, {structured:later.x}, {task}"
        );
        assert_eq!(
            render_field("{structured:plan.issue}", &state),
            Ok(json!({"create": true}))
        );
        assert_eq!(
            render_field("PR {structured:plan.n}", &state),
            Ok(json!("PR 3"))
        );
        assert!(render_field("{structured:plan.missing}", &state).is_err());
        assert!(render_field("x {structured:plan.issue}", &state).is_err());
    }
}
