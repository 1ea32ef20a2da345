//! The run's event vocabulary ([`RunEvent`]) and its envelope ([`EventRecord`]: `seq`, `ts`,
//! `type`, fields): what every reader of a run (the engine's journal, the store, the CLI's
//! progress display, the HTTP stream) shares.

use serde::{Deserialize, Serialize};

use crate::{Dialect, EndReason, RunScratch, RunStatus, SubtaskOutcome, ToolMode, Usage};

/// One change in a run. Serialised with `type` as the snake_case variant name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        run_id: String,
        piece: String,
        dialect: Dialect,
        piece_hash: String,
        task: String,
        max_movements: u32,
        initial_movement: String,
        /// The run directory (`events.jsonl`, `reports/`, `logs/`).
        run_dir: String,
        /// The root the tools work in.
        workspace: String,
        /// The `cycle` of each loop monitor, so replay needs nothing but the events.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        loop_monitors: Vec<Vec<String>>,
        /// The model's context window in tokens as known at the start; a resumed run uses this
        /// rather than asking the endpoint again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_window: Option<u64>,
        /// The piece file the run was started from, when it came from one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        piece_file: Option<String>,
        /// The run could spawn subtasks (it was offered `SpawnSubTask` where a movement allows
        /// it); a replay offers the same tools.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        subtasks: bool,
    },
    MovementStarted {
        movement: String,
        /// Top-level movements started so far in the run, this one included.
        iteration: u32,
        /// Visits of this movement so far, this one included.
        movement_iteration: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<String>,
        /// The full system and first user message, written under `logs/` (prompts are too
        /// large for an event line).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_log: Option<String>,
    },
    LlmRequest {
        movement: String,
        purpose: CallPurpose,
        messages: usize,
        tools: usize,
    },
    LlmRetry {
        movement: String,
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// The model's tool mode changed for the rest of the run (`tool_mode: auto`): the endpoint
    /// refused native tools, or the model answered in plain text where a control tool was
    /// required. The request is sent again in the new mode.
    ToolModeChanged {
        movement: String,
        model: String,
        mode: ToolMode,
        reason: String,
    },
    LlmResponse {
        movement: String,
        purpose: CallPurpose,
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        tool_calls: usize,
        text_chars: usize,
        /// The whole answer (text and tool calls, secrets removed): a resumed run reuses it
        /// instead of asking again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<RecordedAnswer>,
    },
    ToolCall {
        movement: String,
        tool: String,
        call_id: String,
        /// The arguments as JSON; a string when the model sent text that is not JSON.
        input: serde_json::Value,
    },
    ToolResult {
        movement: String,
        tool: String,
        call_id: String,
        ok: bool,
        output_chars: usize,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
        /// The whole result as the model read it (secrets removed): a resumed run reuses it
        /// instead of running the tool again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
    },
    /// A judge or `ai()` call is about to pick a rule.
    JudgeRequest {
        movement: String,
        kind: JudgeKind,
        conditions: Vec<String>,
    },
    ReportWritten {
        movement: String,
        name: String,
        path: String,
        bytes: usize,
    },
    ContextWarning {
        movement: String,
        level: ContextLevel,
        used_tokens: u64,
        context_length: u64,
    },
    /// The engine asked the model again in the same conversation.
    Reminder {
        movement: String,
        kind: ReminderKind,
        attempt: u32,
        message: String,
    },
    LoopWarning {
        movement: String,
        consecutive: u32,
        threshold: u32,
    },
    /// The due movement continues a cycle of movements the run keeps going round (maestro
    /// dialect); the warning is carried into its prompt.
    CycleWarning {
        movement: String,
        /// One round of the cycle, in order.
        cycle: Vec<String>,
        /// Rounds entered, this one included.
        rounds: u32,
        threshold: u32,
    },
    /// The run ends as `loop_detected`: `cycle` (one movement for consecutive revisits) would
    /// have been entered more often than `threshold` allows.
    LoopDetected {
        cycle: Vec<String>,
        rounds: u32,
        threshold: u32,
    },
    LoopMonitorTriggered {
        monitor: usize,
        cycle_count: u32,
        judge: String,
    },
    Warning {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        movement: Option<String>,
        message: String,
    },
    /// Tool state (the checklist) changed.
    ScratchUpdated {
        /// The movement whose tool call changed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        movement: Option<String>,
        scratch: RunScratch,
    },
    MovementFinished {
        movement: String,
        /// The target label: a movement name, `COMPLETE`, `ABORT`, `ASK`; for a parallel
        /// sub-movement, the condition it matched.
        next: String,
        via: OutcomeSource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<String>,
        /// 1-based index of the rule that decided, when a rule did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<usize>,
        /// The movement's final answer (the next movement's `{previous_response}`).
        response: String,
        /// The visit's whole conversation (every message, tool calls and results included,
        /// secrets removed), one JSON message per line under `logs/`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        transcript: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        lessons: Vec<String>,
        /// Graph dialect: the rendered edge prompt handed to the next role.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        edge_prompt: Option<String>,
        /// Why the engine ended the visit when the model did not: `max_iterations` (the
        /// movement used up `engine.max_iterations_per_movement`) or `context_exhausted`. Set
        /// also when `default_next` carried the run on (`via: default_next`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<EndReason>,
    },
    RunFinished {
        status: RunStatus,
        result: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<EndReason>,
    },
    /// A person answered the question the run ended with (`maestro jobs answer`): the movement
    /// that asked goes on in the same conversation, the answer its next user message, and
    /// `{user_inputs}` holds every answer so far.
    UserInput { movement: String, text: String },
    /// Every subtask the run was waiting for (`WAIT_SUBTASKS`) has ended: the movement that
    /// waited goes on in the same conversation, told how each child ended.
    SubtasksEnded {
        movement: String,
        children: Vec<SubtaskOutcome>,
    },
    /// The run goes on from its record after it stopped (a worker died, or `maestro run
    /// --resume` after a stop): the events before this one are reused, not repeated.
    RunResumed {
        /// The last recorded `seq` the run resumed from.
        after_seq: u64,
    },
}

impl RunEvent {
    /// The `type` field's value.
    /// The movement an event belongs to (`None` for the run's own events). A resumed run
    /// matches its events against the record per movement, since parallel sub-movements
    /// interleave differently each time.
    pub fn movement(&self) -> Option<&str> {
        match self {
            RunEvent::MovementStarted { movement, .. }
            | RunEvent::LlmRequest { movement, .. }
            | RunEvent::LlmRetry { movement, .. }
            | RunEvent::ToolModeChanged { movement, .. }
            | RunEvent::LlmResponse { movement, .. }
            | RunEvent::ToolCall { movement, .. }
            | RunEvent::ToolResult { movement, .. }
            | RunEvent::JudgeRequest { movement, .. }
            | RunEvent::ReportWritten { movement, .. }
            | RunEvent::ContextWarning { movement, .. }
            | RunEvent::Reminder { movement, .. }
            | RunEvent::LoopWarning { movement, .. }
            | RunEvent::CycleWarning { movement, .. }
            | RunEvent::UserInput { movement, .. }
            | RunEvent::SubtasksEnded { movement, .. }
            | RunEvent::MovementFinished { movement, .. } => Some(movement),
            RunEvent::Warning { movement, .. } | RunEvent::ScratchUpdated { movement, .. } => {
                movement.as_deref()
            }
            RunEvent::RunStarted { .. }
            | RunEvent::LoopDetected { .. }
            | RunEvent::LoopMonitorTriggered { .. }
            | RunEvent::RunFinished { .. }
            | RunEvent::RunResumed { .. } => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            RunEvent::RunStarted { .. } => "run_started",
            RunEvent::MovementStarted { .. } => "movement_started",
            RunEvent::LlmRequest { .. } => "llm_request",
            RunEvent::LlmRetry { .. } => "llm_retry",
            RunEvent::ToolModeChanged { .. } => "tool_mode_changed",
            RunEvent::LlmResponse { .. } => "llm_response",
            RunEvent::ToolCall { .. } => "tool_call",
            RunEvent::ToolResult { .. } => "tool_result",
            RunEvent::JudgeRequest { .. } => "judge_request",
            RunEvent::ReportWritten { .. } => "report_written",
            RunEvent::ContextWarning { .. } => "context_warning",
            RunEvent::Reminder { .. } => "reminder",
            RunEvent::LoopWarning { .. } => "loop_warning",
            RunEvent::CycleWarning { .. } => "cycle_warning",
            RunEvent::LoopDetected { .. } => "loop_detected",
            RunEvent::LoopMonitorTriggered { .. } => "loop_monitor_triggered",
            RunEvent::Warning { .. } => "warning",
            RunEvent::ScratchUpdated { .. } => "scratch_updated",
            RunEvent::MovementFinished { .. } => "movement_finished",
            RunEvent::RunFinished { .. } => "run_finished",
            RunEvent::RunResumed { .. } => "run_resumed",
            RunEvent::UserInput { .. } => "user_input",
            RunEvent::SubtasksEnded { .. } => "subtasks_ended",
        }
    }
}

/// A model's whole answer as recorded in `llm_response`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedAnswer {
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<crate::ToolCall>,
}

/// Why a model call was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallPurpose {
    /// A turn of the movement's own conversation.
    Movement,
    /// The takt judge picking a rule by number.
    Judge,
    /// One structured call evaluating every `ai("…")` condition of a movement.
    AiConditions,
    /// The piece classifier choosing a piece.
    Classifier,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeKind {
    Judge,
    AiConditions,
}

/// Which context threshold was crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextLevel {
    /// Recorded only.
    Warn,
    /// The model is told to wrap up.
    Prompt,
    /// The engine ends the movement.
    Force,
}

/// What the engine asked again for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReminderKind {
    /// Maestro: the turn ended in plain text instead of `transition` / `complete`.
    ControlTool,
    /// A required report was not written.
    Report,
    /// Graph: the frontmatter was missing or invalid.
    Frontmatter,
    /// The context is nearly full: wrap up.
    ContextPressure,
    /// An answer asked for more tool calls than `engine.max_tool_calls_per_answer`; the rest
    /// were not run.
    ToolCallLimit,
}

/// How a movement's outcome was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeSource {
    TransitionTool,
    CompleteTool,
    DefaultNext,
    Aggregate,
    Tag,
    SingleRule,
    AiCondition,
    Judge,
    Frontmatter,
    /// No rule matched, the context ran out, or a bound was hit.
    Engine,
}

/// An event with its envelope: `{"seq":1,"ts":"…","type":"run_started",…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Gapless from 1 within a run.
    pub seq: u64,
    /// RFC 3339, UTC.
    pub ts: String,
    #[serde(flatten)]
    pub event: RunEvent,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn records_serialise_flat_with_type_and_round_trip() {
        let record = EventRecord {
            seq: 3,
            ts: "2026-01-01T00:00:00Z".into(),
            event: RunEvent::LlmResponse {
                movement: "plan".into(),
                purpose: CallPurpose::Movement,
                usage: Usage {
                    prompt_tokens: 10,
                    completion_tokens: 2,
                    total_tokens: 12,
                    estimated: false,
                },
                finish_reason: Some("stop".into()),
                tool_calls: 0,
                text_chars: 5,
                answer: None,
            },
        };
        let line = serde_json::to_string(&record).unwrap();
        assert_eq!(
            line,
            r#"{"seq":3,"ts":"2026-01-01T00:00:00Z","type":"llm_response","movement":"plan","purpose":"movement","usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12},"finish_reason":"stop","tool_calls":0,"text_chars":5}"#
        );
        let back: EventRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, record);
        assert_eq!(record.event.kind(), "llm_response");
    }
}
