//! Subtasks: what a run needs from the job system to spawn child runs (`SpawnSubTask`) and to
//! wait for them (`WAIT_SUBTASKS`), as a trait the engine calls ([`SubtaskHost`]) and the
//! values that cross it. The engine knows no store: a worker's host parks the run until the
//! children end; a local run's host runs them in the same process and waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The tool a movement calls to spawn a child run.
pub const SPAWN_SUBTASK: &str = "SpawnSubTask";

/// What a host's calls return.
pub type HostFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, SubtaskError>> + Send + 'a>>;

/// The job system's side of subtasks, for one run.
pub trait SubtaskHost: Send + Sync {
    /// Creates a child run (a job) at once and returns it; the same `request.key` returns the
    /// same child, so a spawn repeated after a crash makes no second one.
    fn spawn(&self, request: SpawnRequest) -> HostFuture<'_, SpawnedSubtask>;

    /// How the children `ids` ended, once every one of them has; `None` while any is still
    /// open (the run then parks as waiting for its subtasks). A host that runs the children
    /// itself may wait here until they end.
    fn ended<'a>(&'a self, ids: &'a [String]) -> HostFuture<'a, Option<Vec<SubtaskOutcome>>>;
}

/// `SpawnSubTask`'s arguments, as the model gives them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnArgs {
    /// What the subtask must do, complete enough to be done without this conversation.
    pub task: String,
    /// The piece to run it with (a name `ListPieces` shows); without it, one is chosen for
    /// the task.
    #[serde(default)]
    pub piece: Option<String>,
    /// A short title for the subtask.
    #[serde(default)]
    pub title: Option<String>,
}

/// A spawn, as the engine asks the host for it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpawnRequest {
    /// Names this spawn in the run (its movement, visit and place in the record).
    pub key: String,
    /// The child's task, as the model wrote it.
    pub task: String,
    /// The piece the child runs; `None` has one chosen for the task.
    pub piece: Option<String>,
    /// The child's title: the one given, else the task's first line, shortened.
    pub title: String,
}

/// A child run that was spawned: what `SpawnSubTask` answers, and what the run remembers to
/// wait for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpawnedSubtask {
    /// The child job's id.
    pub id: String,
    /// Its number among the run's subtasks, from 1.
    pub index: i64,
    /// Its title (see [`SpawnRequest::title`]).
    pub title: String,
    /// Its workspace, relative to the parent's (`subtasks/<n>/`).
    pub workspace: String,
}

pub use maestro_protocol::SubtaskOutcome;

/// Why a host could not spawn or report.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubtaskError {
    /// The spawn breaks a rule the model can act on (a limit, an unknown piece): the model
    /// gets this as the tool's error.
    #[error("{0}")]
    Refused(String),
    /// The job system failed (or the run lost its job); the run stops as for any
    /// infrastructure failure.
    #[error("subtasks: {0}")]
    Failed(String),
}

/// The host of a replay: every spawn and every wait is in the record, so it is never asked
/// for a new one (and would refuse).
pub(crate) struct RecordOnly;

impl SubtaskHost for RecordOnly {
    fn spawn(&self, _request: SpawnRequest) -> HostFuture<'_, SpawnedSubtask> {
        Box::pin(async {
            Err(SubtaskError::Failed(
                "a replay spawns no subtask that its record does not hold".into(),
            ))
        })
    }

    fn ended<'a>(&'a self, _ids: &'a [String]) -> HostFuture<'a, Option<Vec<SubtaskOutcome>>> {
        Box::pin(async { Ok(None) })
    }
}

/// The most characters of one child's result the waiting movement is told; the whole result
/// stays in the child's own run.
const RESULT_CHARS: usize = 4_000;

/// The message the waiting movement goes on with once its subtasks ended.
pub(crate) fn ended_message(children: &[SubtaskOutcome]) -> String {
    let mut text = format!(
        "Your {} ended. Their workspaces are inside yours; read them for the details.\n",
        if children.len() == 1 {
            "subtask has".to_string()
        } else {
            format!("{} subtasks have", children.len())
        }
    );
    for child in children {
        text.push_str(&format!(
            "\n## Subtask {index}: {title}\n- id: {id}\n- status: {status}\n- workspace: {workspace}\n- result:\n{result}\n",
            index = child.index,
            title = child.title,
            id = child.id,
            status = child.status,
            workspace = child.workspace,
            result = maestro_tools::input::cut_middle(child.result.trim(), RESULT_CHARS),
        ));
    }
    text.push_str("\nGo on with this movement's instructions, using these results.");
    text
}

/// `SpawnSubTask` as offered to the model.
pub(crate) fn spawn_spec() -> maestro_protocol::ToolSpec {
    let mut spec = maestro_tools::input::spec_for::<SpawnArgs>(
        SPAWN_SUBTASK,
        "Start a subtask: a separate run that works on `task` in its own workspace (subtasks/<n>/ \
         in yours) while you go on; returns its id at once. To wait for your subtasks and read \
         their results, move to WAIT_SUBTASKS.",
    );
    if let Some(obj) = Arc::make_mut(&mut spec.input_schema).as_object_mut() {
        obj.insert(
            "additionalProperties".into(),
            serde_json::Value::Bool(false),
        );
    }
    spec
}

/// A subtask's title: the one given, else the task's first line, shortened.
pub(crate) fn title_of(args: &SpawnArgs) -> String {
    if let Some(title) = args
        .title
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        return maestro_tools::input::cut_middle(title, 120);
    }
    let first = args.task.trim().lines().next().unwrap_or("").trim();
    maestro_tools::input::cut_middle(first, 80)
}

/// What `SpawnSubTask` answers: the child, as JSON the run state reads back, with a note.
pub(crate) fn spawned_output(spawned: &SpawnedSubtask) -> String {
    let mut value = serde_json::to_value(spawned).unwrap_or_default();
    if let Some(obj) = value.as_object_mut() {
        obj.insert(
            "note".into(),
            "the subtask runs now; move to WAIT_SUBTASKS to wait for your subtasks and read their \
             results"
                .into(),
        );
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(index: i64, status: &str, result: &str) -> SubtaskOutcome {
        SubtaskOutcome {
            id: format!("id-{index}"),
            index,
            title: format!("part {index}"),
            status: status.into(),
            result: result.into(),
            workspace: format!("subtasks/{index}/"),
        }
    }

    #[test]
    fn the_message_gives_each_childs_title_status_result_and_workspace() {
        let text = ended_message(&[
            outcome(1, "completed", "found 3 files"),
            outcome(2, "failed", "endpoint down"),
        ]);
        assert!(text.starts_with("Your 2 subtasks have ended."), "{text}");
        for needle in [
            "## Subtask 1: part 1",
            "- status: completed",
            "found 3 files",
            "- workspace: subtasks/2/",
            "- status: failed",
            "endpoint down",
            "- id: id-2",
        ] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
        let long = ended_message(&[outcome(1, "completed", &"x".repeat(50_000))]);
        assert!(long.len() < 6_000, "{}", long.len());
        assert!(long.starts_with("Your subtask has ended."));
    }
}
