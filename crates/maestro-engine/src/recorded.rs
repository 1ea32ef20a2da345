//! A run's recorded events, as a resumed (or replayed) run goes through them again.
//!
//! A resumed run executes the piece from the start, but every event it produces is first
//! matched against the record: a matching event is not written again, a recorded model answer
//! is reused instead of calling the model, and a recorded tool result is reused instead of
//! running the tool. Events are matched per movement (parallel sub-movements interleave
//! differently each time) and in order within a movement. Past the end of a movement's record
//! the run goes on live; an event that contradicts the record is a divergence.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use maestro_llm::ChatResponse;
use maestro_tools::RunScratch;

use crate::event::{CallPurpose, EventRecord, RecordedAnswer, RunEvent};
use crate::subtasks::SubtaskOutcome;

/// How the record is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayMode {
    /// Reuse what is recorded, then go on live (a resumed run).
    Resume,
    /// Reuse what is recorded and never call the model or run a tool: anything the record
    /// does not hold is a divergence (`maestro replay`).
    Verify,
}

/// What the record says about an event the run is about to write.
#[derive(Debug)]
pub(crate) enum Matched {
    /// The record holds it (the recorded copy): do not write it again.
    Recorded(Box<EventRecord>),
    /// The record has nothing more for its movement: write it.
    New,
    /// The record holds something else at this point.
    Diverged(Divergence),
}

/// Where a run left its record.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct Divergence {
    /// The recorded event that was expected, if any.
    pub seq: Option<u64>,
    /// What the record holds at `seq`, described (e.g. "`tool_call` of `plan` (Bash)").
    pub expected: Option<String>,
    /// What this run produced instead, described the same way.
    pub got: String,
}

impl Divergence {
    fn describe(&self) -> String {
        match (&self.seq, &self.expected) {
            (Some(seq), Some(expected)) => format!(
                "the run left its record at seq {seq}: the record has {expected}, this run produced {}",
                self.got
            ),
            _ => format!("the run left its record: it produced {}", self.got),
        }
    }
}

/// A recorded tool call's outcome.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordedTool {
    pub ok: bool,
    pub output: String,
    pub truncated: bool,
    /// The checklist as the call left it, when it changed it.
    pub scratch: Option<RunScratch>,
    /// The images the result showed the model, by hash.
    pub images: Vec<maestro_protocol::ImageRef>,
}

/// What the record holds for a tool call that was just matched.
#[derive(Debug)]
pub(crate) enum ToolRecord {
    Done(RecordedTool),
    /// The call started but its result was never recorded: the worker stopped during it.
    InFlight,
    /// The record holds something else.
    Diverged(Divergence),
}

pub(crate) struct Recorded {
    mode: ReplayMode,
    inner: Mutex<Streams>,
}

#[derive(Default)]
struct Streams {
    /// Unmatched recorded events per movement (`""` for the run's own events), in order.
    by_movement: HashMap<String, VecDeque<EventRecord>>,
}

/// Events the provider emits during a call; a reused answer does not produce them again.
fn passive(event: &RunEvent) -> bool {
    matches!(
        event,
        RunEvent::LlmRetry { .. } | RunEvent::ToolModeChanged { .. }
    )
}

/// Fields that name where this copy of the run keeps its files, or which model it runs on (a
/// resume or a replay may run with another configured model), not what it did.
const PLACE_FIELDS: &[&str] = &[
    "model",
    "prompt_log",
    "transcript",
    "run_dir",
    "workspace",
    "path",
    "run_id",
    "piece_file",
    "context_window",
    // Taken from the record when it holds it; older records do not.
    "max_iterations_per_movement",
];

fn essence(event: &RunEvent) -> serde_json::Value {
    let mut value = serde_json::to_value(event).unwrap_or(serde_json::Value::Null);
    if let Some(map) = value.as_object_mut() {
        for field in PLACE_FIELDS {
            map.remove(*field);
        }
    }
    value
}

/// `kind` of `movement` (or of the run), for messages.
pub(crate) fn describe(event: &RunEvent) -> String {
    let mut text = format!("`{}`", event.kind());
    if let Some(movement) = event.movement().filter(|m| !m.is_empty()) {
        text.push_str(&format!(" of `{movement}`"));
    }
    match event {
        RunEvent::MovementFinished { next, .. } => text.push_str(&format!(" → {next}")),
        RunEvent::ToolCall { tool, .. } | RunEvent::ToolResult { tool, .. } => {
            text.push_str(&format!(" ({tool})"))
        }
        RunEvent::RunFinished { status, .. } => text.push_str(&format!(" ({status})")),
        _ => {}
    }
    text
}

/// Longest field value a divergence message quotes.
const QUOTED_CHARS: usize = 120;

/// `expected` and `got` described for a divergence message. When both read the same (the same
/// kind of event of the same movement), each also names its values of the fields that differ,
/// e.g. "`context_warning` of `plan` (used_tokens: 20328)".
pub(crate) fn describe_pair(expected: &RunEvent, got: &RunEvent) -> (String, String) {
    let (mut left, mut right) = (describe(expected), describe(got));
    if left != right {
        return (left, right);
    }
    let (a, b) = (essence(expected), essence(got));
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return (left, right);
    };
    let null = serde_json::Value::Null;
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|k| a.get(*k).unwrap_or(&null) != b.get(*k).unwrap_or(&null))
        .collect();
    if differing.is_empty() {
        return (left, right);
    }
    let fields = |map: &serde_json::Map<String, serde_json::Value>| {
        differing
            .iter()
            .map(|k| format!("{k}: {}", quoted(map.get(*k).unwrap_or(&null))))
            .collect::<Vec<_>>()
            .join(", ")
    };
    left.push_str(&format!(" ({})", fields(a)));
    right.push_str(&format!(" ({})", fields(b)));
    (left, right)
}

/// A field's value as JSON, cut to [`QUOTED_CHARS`] characters.
fn quoted(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= QUOTED_CHARS {
        return text;
    }
    let cut: String = text.chars().take(QUOTED_CHARS).collect();
    format!("{cut}…")
}

impl Recorded {
    /// In `Resume` mode a run that ended `failed` (stopped by its user, or by an error such as
    /// an endpoint that went away) goes on past that end: the recorded end is not expected
    /// again.
    pub(crate) fn new(mode: ReplayMode, mut history: Vec<EventRecord>) -> Recorded {
        // An end the run went on past (it was resumed after it) is not expected again, nor is
        // the mark of the resume itself: a resumed run produces neither at that point.
        let last_resume = history
            .iter()
            .rposition(|r| matches!(r.event, RunEvent::RunResumed { .. }));
        if let Some(last_resume) = last_resume {
            let mut index = 0;
            history.retain(|r| {
                let superseded = match r.event {
                    RunEvent::RunResumed { .. } => true,
                    RunEvent::RunFinished { .. } => index < last_resume,
                    _ => false,
                };
                let keep = !superseded;
                index += 1;
                keep
            });
        }
        if mode == ReplayMode::Resume
            && history.last().is_some_and(|r| {
                matches!(
                    &r.event,
                    RunEvent::RunFinished {
                        status: maestro_protocol::RunStatus::Failed
                            | maestro_protocol::RunStatus::NeedsUserInput
                            | maestro_protocol::RunStatus::WaitingSubtasks,
                        ..
                    }
                )
            })
        {
            history.pop();
        }
        let mut streams = Streams::default();
        for record in history {
            let key = record.event.movement().unwrap_or("").to_string();
            streams
                .by_movement
                .entry(key)
                .or_default()
                .push_back(record);
        }
        Recorded {
            mode,
            inner: Mutex::new(streams),
        }
    }

    /// What `read` takes from the record's `run_started`; `None` when none is recorded.
    fn run_started<T>(&self, read: impl Fn(&RunEvent) -> Option<T>) -> Option<T> {
        let streams = self.inner.lock().ok()?;
        streams
            .by_movement
            .get("")?
            .iter()
            .find_map(|r| read(&r.event))
    }

    /// The context window the record's `run_started` names (`Some(None)`: recorded as
    /// unknown; `None`: no `run_started` recorded).
    pub(crate) fn context_window(&self) -> Option<Option<u64>> {
        self.run_started(|event| match event {
            RunEvent::RunStarted { context_window, .. } => Some(*context_window),
            _ => None,
        })
    }

    /// The `engine.max_iterations_per_movement` the record's `run_started` names, when it
    /// names one.
    pub(crate) fn max_iterations_per_movement(&self) -> Option<u32> {
        self.run_started(|event| match event {
            RunEvent::RunStarted {
                max_iterations_per_movement,
                ..
            } => *max_iterations_per_movement,
            _ => None,
        })
    }

    /// The calls the record holds from before the run started (the classifier's, purpose
    /// `classifier`), in order: a resumed run writes them again, so they match, rather than
    /// making them again.
    pub(crate) fn preamble(&self) -> Vec<RunEvent> {
        let Ok(streams) = self.inner.lock() else {
            return Vec::new();
        };
        streams
            .by_movement
            .get(crate::classifier::CLASSIFIER_MOVEMENT)
            .into_iter()
            .flatten()
            .filter(|r| {
                matches!(
                    r.event,
                    RunEvent::LlmRequest {
                        purpose: CallPurpose::Classifier,
                        ..
                    } | RunEvent::LlmResponse {
                        purpose: CallPurpose::Classifier,
                        ..
                    }
                )
            })
            .map(|r| r.event.clone())
            .collect()
    }

    /// True when the record ends the run for good (a `run_finished` that is still expected).
    pub(crate) fn holds_final_end(&self) -> bool {
        self.inner.lock().is_ok_and(|streams| {
            streams.by_movement.get("").is_some_and(|q| {
                q.iter()
                    .any(|r| matches!(r.event, RunEvent::RunFinished { .. }))
            })
        })
    }

    pub(crate) fn mode(&self) -> ReplayMode {
        self.mode
    }

    /// Matches an event the run is about to write against the record.
    pub(crate) fn match_event(&self, event: &RunEvent) -> Matched {
        let Ok(mut streams) = self.inner.lock() else {
            return Matched::New;
        };
        if matches!(event, RunEvent::RunResumed { .. }) {
            return Matched::New;
        }
        let key = event.movement().unwrap_or("");
        if !passive(event) {
            streams.skip_passive(key);
        }
        let front = streams.by_movement.get(key).and_then(|q| q.front());
        match front {
            Some(recorded) if essence(&recorded.event) == essence(event) => {
                let Some(recorded) = streams.by_movement.get_mut(key).and_then(|q| q.pop_front())
                else {
                    return Matched::New;
                };
                Matched::Recorded(Box::new(recorded))
            }
            Some(_) if passive(event) => Matched::New,
            Some(recorded) => {
                let (expected, got) = describe_pair(&recorded.event, event);
                Matched::Diverged(Divergence {
                    seq: Some(recorded.seq),
                    expected: Some(expected),
                    got,
                })
            }
            None => {
                let strict = match event {
                    RunEvent::MovementStarted { parent, .. } => parent.is_none(),
                    _ => key.is_empty(),
                };
                match streams.first_pending() {
                    Some(recorded)
                        if self.mode == ReplayMode::Verify || (strict && !passive(event)) =>
                    {
                        Matched::Diverged(Divergence {
                            seq: Some(recorded.seq),
                            expected: Some(describe(&recorded.event)),
                            got: describe(event),
                        })
                    }
                    None if self.mode == ReplayMode::Verify && !passive(event) => {
                        Matched::Diverged(Divergence {
                            seq: None,
                            expected: None,
                            got: format!("{}, which the record does not hold", describe(event)),
                        })
                    }
                    _ => Matched::New,
                }
            }
        }
    }

    /// The recorded answer to the model call whose `llm_request` was just matched, if the
    /// record holds one.
    pub(crate) fn answer(&self, movement: &str) -> Option<ChatResponse> {
        let mut streams = self.inner.lock().ok()?;
        streams.skip_passive(movement);
        match &streams.by_movement.get(movement)?.front()?.event {
            RunEvent::LlmResponse {
                answer:
                    Some(RecordedAnswer {
                        content,
                        tool_calls,
                    }),
                usage,
                finish_reason,
                model,
                ..
            } => Some(ChatResponse {
                content: content.clone(),
                tool_calls: tool_calls.clone(),
                usage: *usage,
                finish_reason: finish_reason.clone(),
                model: model.clone(),
            }),
            _ => None,
        }
    }

    /// The answer the record holds for `movement`'s question, when the run reached it before.
    pub(crate) fn user_input(&self, movement: &str) -> Option<String> {
        let mut streams = self.inner.lock().ok()?;
        streams.skip_passive(movement);
        match &streams.by_movement.get(movement)?.front()?.event {
            RunEvent::UserInput { text, .. } => Some(text.clone()),
            _ => None,
        }
    }

    /// The outcome of `movement`'s next command quality gate (`passed`, `output`), when the
    /// record holds it: a resumed or replayed run does not run the command again.
    pub(crate) fn quality_gate(&self, movement: &str) -> Option<(bool, String)> {
        let mut streams = self.inner.lock().ok()?;
        streams.skip_passive(movement);
        match &streams.by_movement.get(movement)?.front()?.event {
            RunEvent::QualityGateChecked { passed, output, .. } => Some((*passed, output.clone())),
            _ => None,
        }
    }

    /// How the subtasks `movement` waited for ended, when the record holds it.
    pub(crate) fn subtasks_ended(&self, movement: &str) -> Option<Vec<SubtaskOutcome>> {
        let mut streams = self.inner.lock().ok()?;
        streams.skip_passive(movement);
        match &streams.by_movement.get(movement)?.front()?.event {
            RunEvent::SubtasksEnded { children, .. } => Some(children.clone()),
            _ => None,
        }
    }

    /// The error of the model call that comes next for `movement`, when the record holds that
    /// call as failed (an `llm_request` followed by `arpeggio_batch_failed`): a resumed run
    /// records the failure again instead of repeating the call.
    pub(crate) fn failed_call(&self, movement: &str) -> Option<String> {
        let streams = self.inner.lock().ok()?;
        let mut next = streams
            .by_movement
            .get(movement)?
            .iter()
            .filter(|r| !passive(&r.event));
        match (next.next().map(|r| &r.event), next.next().map(|r| &r.event)) {
            (
                Some(RunEvent::LlmRequest { .. }),
                Some(RunEvent::ArpeggioBatchFailed { error, .. }),
            ) => Some(error.clone()),
            _ => None,
        }
    }

    /// The next recorded event of `movement` not matched yet, `None` past the end of its
    /// record: a system step reuses its recorded inputs and effect results through it.
    pub(crate) fn next_event(&self, movement: &str) -> Option<RunEvent> {
        let mut streams = self.inner.lock().ok()?;
        streams.skip_passive(movement);
        Some(streams.by_movement.get(movement)?.front()?.event.clone())
    }

    /// Whether the record has `movement` switch to JSON tool mode next (after a plain answer
    /// where a control tool was required); `None` past the end of its record.
    pub(crate) fn switched_tool_mode(&self, movement: &str) -> Option<bool> {
        let streams = self.inner.lock().ok()?;
        let next = streams
            .by_movement
            .get(movement)?
            .iter()
            .find(|r| !matches!(r.event, RunEvent::LlmRetry { .. }))?;
        Some(matches!(next.event, RunEvent::ToolModeChanged { .. }))
    }

    /// How many answers the record holds.
    pub(crate) fn answers_recorded(&self) -> usize {
        self.inner
            .lock()
            .map(|s| {
                s.by_movement
                    .values()
                    .flatten()
                    .filter(|r| matches!(r.event, RunEvent::UserInput { .. }))
                    .count()
            })
            .unwrap_or(0)
    }

    /// The recorded outcome of the tool call `call_id` whose `tool_call` was just matched.
    pub(crate) fn tool(&self, movement: &str, call_id: &str) -> ToolRecord {
        let Ok(mut streams) = self.inner.lock() else {
            return ToolRecord::InFlight;
        };
        streams.skip_passive(movement);
        let Some(queue) = streams.by_movement.get(movement) else {
            return ToolRecord::InFlight;
        };
        let mut scratch = None;
        for record in queue.iter() {
            match &record.event {
                RunEvent::ScratchUpdated { scratch: s, .. } if scratch.is_none() => {
                    scratch = Some(s.clone());
                }
                RunEvent::ToolResult {
                    call_id: id,
                    ok,
                    truncated,
                    output: Some(output),
                    images,
                    ..
                } if id == call_id => {
                    return ToolRecord::Done(RecordedTool {
                        ok: *ok,
                        output: output.clone(),
                        truncated: *truncated,
                        scratch,
                        images: images.clone(),
                    });
                }
                other => {
                    return ToolRecord::Diverged(Divergence {
                        seq: Some(record.seq),
                        expected: Some(describe(other)),
                        got: format!("the result of tool call `{call_id}`"),
                    });
                }
            }
        }
        ToolRecord::InFlight
    }

    /// The first recorded event no part of the run has produced again, if any.
    pub(crate) fn first_unmatched(&self) -> Option<EventRecord> {
        let mut streams = self.inner.lock().ok()?;
        let keys: Vec<String> = streams.by_movement.keys().cloned().collect();
        for key in keys {
            streams.skip_passive(&key);
        }
        streams.first_pending().cloned()
    }
}

impl Streams {
    fn skip_passive(&mut self, key: &str) {
        if let Some(queue) = self.by_movement.get_mut(key) {
            while queue.front().is_some_and(|r| passive(&r.event)) {
                queue.pop_front();
            }
        }
    }

    /// The earliest recorded event (by `seq`) that is still unmatched and not passive.
    fn first_pending(&self) -> Option<&EventRecord> {
        self.by_movement
            .values()
            .filter_map(|q| q.iter().find(|r| !passive(&r.event)))
            .min_by_key(|r| r.seq)
    }
}

/// The tools whose calls only read: nothing in the workspace or elsewhere changes.
const ONLY_READ: &[&str] = &[
    "Read",
    "Glob",
    "Grep",
    "WebFetch",
    "WebSearch",
    "GetChecklist",
    "ListPieces",
    "GetPiece",
    "ReadToolDoc",
    "ReadSkill",
    "ListSkills",
    "ReadImage",
];

/// Whether a call of `tool` may have changed files under the workspace's `output/`: every tool
/// but those that only read, the spawn (it makes `subtasks/<n>/`), BatchReviewTextWithLLM (it
/// writes under `input/`) and the movement's control tools (`write_report` writes in the run's
/// `reports/`). A tool of an MCP server, a command or a download may write anywhere, so it
/// counts. The files such a call left are recorded before its result is (`maestro-app`).
pub fn may_write_outputs(tool: &str) -> bool {
    !(ONLY_READ.contains(&tool)
        || matches!(
            tool,
            crate::subtasks::SPAWN_SUBTASK
                | crate::review::BATCH_REVIEW
                | crate::control::TRANSITION
                | crate::control::COMPLETE
                | crate::control::WRITE_REPORT
        ))
}

/// Whether a tool call that was interrupted before its result was recorded may simply run
/// again: tools that only read. Everything else (writes, commands, downloads, remote hosts, MCP
/// servers, piece edits) might have done part of its work, so the model is told instead.
pub(crate) fn safe_to_repeat(tool: &str, edit: bool) -> bool {
    match tool {
        t if ONLY_READ.contains(&t) => true,
        // Without `edit`, SQLite opens the database read-only.
        "SQLite" => !edit,
        // A spawn is keyed by the call: repeated, it finds the child it made.
        crate::subtasks::SPAWN_SUBTASK => true,
        // Each chunk's call is keyed by the chunk: repeated, it reuses the recorded answers,
        // calls only the chunks without one, and writes its JSONL whole again.
        crate::review::BATCH_REVIEW => true,
        _ => false,
    }
}

/// The result a side-effecting tool call gets when it was interrupted before its result was
/// recorded.
pub(crate) const INTERRUPTED: &str = "this call was interrupted before it finished (the run \
     was stopped and resumed) and its effect is unknown: it may have done all, part or none of \
     its work. Check the current state before you retry it.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ContextLevel;

    fn warning(used_tokens: u64) -> RunEvent {
        RunEvent::ContextWarning {
            movement: "develop/plan".into(),
            level: ContextLevel::Force,
            used_tokens,
            context_length: 4_096,
        }
    }

    #[test]
    fn a_divergence_between_events_of_one_kind_names_the_fields_that_differ() {
        let (expected, got) = describe_pair(&warning(20_328), &warning(20_400));
        assert_eq!(
            expected,
            "`context_warning` of `develop/plan` (used_tokens: 20328)"
        );
        assert_eq!(
            got,
            "`context_warning` of `develop/plan` (used_tokens: 20400)"
        );
        let long = RunEvent::Warning {
            movement: Some("plan".into()),
            message: "x".repeat(500),
        };
        let short = RunEvent::Warning {
            movement: Some("plan".into()),
            message: "y".into(),
        };
        let (expected, got) = describe_pair(&long, &short);
        assert!(expected.ends_with("…)"), "{expected}");
        assert!(expected.chars().count() < 200, "{expected}");
        assert_eq!(got, "`warning` of `plan` (message: \"y\")");
        // Events of different kinds are told apart by their kind alone.
        assert_eq!(describe_pair(&warning(1), &short).1, "`warning` of `plan`");
    }

    #[test]
    fn only_tools_that_may_write_files_count_as_writing_outputs() {
        for writes in [
            "Write",
            "Edit",
            "Bash",
            "SQLite",
            "DownloadFile",
            "mcp__fs__write",
        ] {
            assert!(may_write_outputs(writes), "{writes}");
        }
        for reads in [
            "Read",
            "Glob",
            "Grep",
            "complete",
            "transition",
            "write_report",
        ] {
            assert!(!may_write_outputs(reads), "{reads}");
        }
        assert!(!may_write_outputs(crate::subtasks::SPAWN_SUBTASK));
    }
}
