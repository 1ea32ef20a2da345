//! The run's event vocabulary ([`RunEvent`]) and its envelope ([`EventRecord`]: `seq`, `ts`,
//! `type`, fields): what every reader of a run (the engine's journal, the store, the CLI's
//! progress display, the HTTP stream) shares.

use serde::{Deserialize, Serialize};

use crate::{Dialect, EndReason, RunScratch, RunStatus, SubtaskOutcome, ToolMode, Usage};

/// One change in a run. Serialised with `type` as the snake_case variant name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run began: always the first event, carrying everything a replay needs to know
    /// about the piece and where the run keeps its files.
    RunStarted {
        /// The run's id (a time-ordered UUIDv7), also the name of its run directory.
        run_id: String,
        /// The piece's name.
        piece: String,
        /// The dialect the piece was written in.
        dialect: Dialect,
        /// Hex SHA-256 of the piece's source text, so a resume can tell the piece changed.
        piece_hash: String,
        /// The task the run was given, verbatim.
        task: String,
        /// The piece's `max_movements`: top-level movements the run may start.
        max_movements: u32,
        /// The movement the run starts with.
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
        /// The model configured for the run (`llm.model`, or the job's own). Absent in records
        /// written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// `engine.max_iterations_per_movement` as the run started with it (`maestro run
        /// --max-iterations`): a resume or a replay keeps it, since it decides where the run
        /// goes. Absent in records written before it was recorded (those take the setting in
        /// effect).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_iterations_per_movement: Option<u32>,
    },
    /// A visit of a movement began.
    MovementStarted {
        /// The movement visited.
        movement: String,
        /// Top-level movements started so far in the run, this one included.
        iteration: u32,
        /// Visits of this movement so far, this one included.
        movement_iteration: u32,
        /// The parallel movement this one runs under, when it is a sub-movement.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<String>,
        /// The full system and first user message, written under `logs/` (prompts are too
        /// large for an event line).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_log: Option<String>,
    },
    /// A model call is about to be sent (recorded before the call, so every request sent is
    /// in the record).
    LlmRequest {
        /// The movement the call is made for.
        movement: String,
        /// Why the call is made: the movement's own turn, a judge, the `ai()` conditions.
        purpose: CallPurpose,
        /// Messages in the request.
        messages: usize,
        /// Tools offered in the request.
        tools: usize,
    },
    /// A model call failed and is tried again after a delay.
    LlmRetry {
        /// The movement the call is made for.
        movement: String,
        /// The attempt that failed, counting from 1.
        attempt: u32,
        /// How long the client waits before the next attempt, in milliseconds.
        delay_ms: u64,
        /// Why the attempt failed (the provider's message, secrets removed).
        reason: String,
    },
    /// The model's tool mode changed for the rest of the run (`tool_mode: auto`): the endpoint
    /// refused native tools, or the model answered in plain text where a control tool was
    /// required. The request is sent again in the new mode.
    ToolModeChanged {
        /// The movement whose request was refused or answered in plain text.
        movement: String,
        /// The model the mode now holds for.
        model: String,
        /// The mode used from now on.
        mode: ToolMode,
        /// What settled the mode (secrets removed).
        reason: String,
    },
    /// A model call answered.
    LlmResponse {
        /// The movement the call was made for.
        movement: String,
        /// Why the call was made.
        purpose: CallPurpose,
        /// The model that answered: the name the endpoint reported in its answer, else the
        /// model the request asked for. What the call is priced by. Absent in records written
        /// before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The tokens the call used, as reported by the endpoint or estimated.
        usage: Usage,
        /// The endpoint's `finish_reason` (`stop`, `tool_calls`, `length`, …), when it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// Tool calls in the answer.
        tool_calls: usize,
        /// Characters of text in the answer.
        text_chars: usize,
        /// The whole answer (text and tool calls, secrets removed): a resumed run reuses it
        /// instead of asking again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<RecordedAnswer>,
    },
    /// A tool call from the model is about to run (recorded before it runs).
    ToolCall {
        /// The movement whose answer made the call.
        movement: String,
        /// The tool's name.
        tool: String,
        /// The call's id as the model gave it; its `tool_result` carries the same.
        call_id: String,
        /// The arguments as JSON; a string when the model sent text that is not JSON.
        input: serde_json::Value,
    },
    /// A tool call ended and its result goes back to the model.
    ToolResult {
        /// The movement whose answer made the call.
        movement: String,
        /// The tool's name.
        tool: String,
        /// The id of the `tool_call` this result answers.
        call_id: String,
        /// False when the tool failed; the model then reads the error.
        ok: bool,
        /// Characters of the result the model read.
        output_chars: usize,
        /// The tool cut its output; the text then ends with a marker saying so.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
        /// The whole result as the model read it (secrets removed): a resumed run reuses it
        /// instead of running the tool again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
        /// Images the result showed the model (ReadImage), by hash; a resumed run reads their
        /// bytes back from beside the record and sends the same request again.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<crate::ImageRef>,
    },
    /// A judge or `ai()` call is about to pick a rule.
    JudgeRequest {
        /// The movement whose rule is picked.
        movement: String,
        /// Which of the two calls it is.
        kind: JudgeKind,
        /// The rules' conditions the call chooses among, in rule order.
        conditions: Vec<String>,
    },
    /// A movement wrote one of its reports (`write_report`).
    ReportWritten {
        /// The movement that wrote it.
        movement: String,
        /// The report's name as the movement's `output_contracts` declare it.
        name: String,
        /// Where the report was written (under the run directory's `reports/`).
        path: String,
        /// The report's size in bytes.
        bytes: usize,
    },
    /// The movement's conversation crossed a context threshold (0.70, 0.85 or 0.95 of the
    /// window).
    ContextWarning {
        /// The movement whose conversation is filling up.
        movement: String,
        /// Which threshold was crossed.
        level: ContextLevel,
        /// Estimated tokens the conversation uses.
        used_tokens: u64,
        /// The model's context window in tokens.
        context_length: u64,
    },
    /// The engine asked the model again in the same conversation.
    Reminder {
        /// The movement whose conversation the reminder goes into.
        movement: String,
        /// What the model is reminded of.
        kind: ReminderKind,
        /// Which reminder of this kind it is, counting from 1 (always 1 for context pressure
        /// and the tool-call limit).
        attempt: u32,
        /// The text sent to the model as the next user message.
        message: String,
    },
    /// The due movement is visited again in a row; the warning is carried into its prompt
    /// from the second consecutive visit.
    LoopWarning {
        /// The movement due again.
        movement: String,
        /// Consecutive visits, this one included.
        consecutive: u32,
        /// The limit (`max_consecutive_revisits`): one more visit ends the run as
        /// `loop_detected`.
        threshold: u32,
    },
    /// The due movement continues a cycle of movements the run keeps going round (maestro
    /// dialect); the warning is carried into its prompt.
    CycleWarning {
        /// The movement due next.
        movement: String,
        /// One round of the cycle, in order.
        cycle: Vec<String>,
        /// Rounds entered, this one included.
        rounds: u32,
        /// The most rounds allowed (`engine.max_cycle_rounds`, or a higher
        /// `max_consecutive_revisits` of a movement in the cycle).
        threshold: u32,
    },
    /// The run ends as `loop_detected`: `cycle` (one movement for consecutive revisits) would
    /// have been entered more often than `threshold` allows.
    LoopDetected {
        /// One round of the cycle, in order; a single movement for consecutive revisits.
        cycle: Vec<String>,
        /// Rounds (or consecutive visits) counted, the one refused included.
        rounds: u32,
        /// The most rounds (or consecutive visits) allowed.
        threshold: u32,
    },
    /// A loop monitor's cycle completed its `threshold`; its judge runs as the next movement
    /// and the monitor's count starts again.
    LoopMonitorTriggered {
        /// The monitor's 0-based index in the piece's `loop_monitors`.
        monitor: usize,
        /// Times the cycle had completed.
        cycle_count: u32,
        /// The name of the judge movement that runs now.
        judge: String,
    },
    /// Something the person reading the run should know that does not stop it (a refused
    /// request, a report not written, Bash running without a sandbox).
    Warning {
        /// The movement it concerns; `None` for the whole run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        movement: Option<String>,
        /// What happened, in plain words.
        message: String,
    },
    /// Tool state (the checklist) changed.
    ScratchUpdated {
        /// The movement whose tool call changed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        movement: Option<String>,
        /// The whole tool state after the change.
        scratch: RunScratch,
    },
    /// A visit of a movement ended, and where the run goes next was decided.
    MovementFinished {
        /// The movement whose visit ended.
        movement: String,
        /// The target label: a movement name, `COMPLETE`, `ABORT`, `ASK`; for a parallel
        /// sub-movement, the condition it matched.
        next: String,
        /// How the outcome was decided.
        via: OutcomeSource,
        /// The parallel movement this one ran under, when it is a sub-movement.
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
        /// Maestro dialect: the `summary` the model gave `transition`, carried to the next
        /// movement.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
        /// Maestro dialect: the `lessons` the model gave `transition`, kept for the rest of
        /// the run.
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
    /// The run ended (or parked, `waiting_subtasks`): always the last event of a drive.
    RunFinished {
        /// How the run ended; `maestro run` exits with its [`RunStatus::exit_code`].
        status: RunStatus,
        /// The run's result for the user: the final answer, or why it ended so.
        result: String,
        /// The short code saying why, when the run did not simply complete.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<EndReason>,
    },
    /// A TAKT workflow's command quality gate ran once the movement ended: a failing one sends
    /// the movement round again with `output` (the failure) as its previous response.
    QualityGateChecked {
        /// The movement the gate belongs to.
        movement: String,
        /// The gate's `name`.
        gate: String,
        /// The command as written.
        command: String,
        /// Whether it exited with status 0.
        passed: bool,
        /// What it printed (the last 1,000 characters, secrets removed), with its exit status.
        output: String,
    },
    /// A person answered the question the run ended with (`maestro jobs answer`): the movement
    /// that asked goes on in the same conversation, the answer its next user message, and
    /// `{user_inputs}` holds every answer so far.
    UserInput {
        /// The movement that asked and goes on.
        movement: String,
        /// The answer, verbatim.
        text: String,
    },
    /// Every subtask the run was waiting for (`WAIT_SUBTASKS`) has ended: the movement that
    /// waited goes on in the same conversation, told how each child ended.
    SubtasksEnded {
        /// The movement that waited and goes on.
        movement: String,
        /// How each child it waited for ended.
        children: Vec<SubtaskOutcome>,
    },
    /// A TAKT selector chose, before the step it chose for started: the pool items a dynamic
    /// parallel step runs this round, or the facet candidates added to a step's prompt
    /// (`dynamic_facets`). A resumed or replayed run takes the choice from here and the
    /// selector's recorded answer, never from the model again.
    SelectionMade {
        /// The step chosen for: the dynamic parallel parent, or the step (or sub-step) with
        /// `dynamic_facets`.
        movement: String,
        /// What was chosen.
        target: SelectionTarget,
        /// The step's visit this selection is for (1 on the first entry, more on a new round).
        round: u32,
        /// The ids the selector answered (`selected_ids`), as it ordered them.
        selected: Vec<String>,
        /// What takes effect this round, in definition order: with `selection.mode:
        /// cumulative`, the pool items of earlier rounds as well.
        effective: Vec<String>,
        /// The selector's `rationale`.
        rationale: String,
    },
    /// The run goes on from its record after it stopped (a worker died, or `maestro run
    /// --resume` after a stop): the events before this one are reused, not repeated.
    RunResumed {
        /// The last recorded `seq` the run resumed from.
        after_seq: u64,
    },
    /// TAKT workflows: a `workflow_call` step entered the workflow it calls. The called
    /// workflow's steps follow as movements named by the call stack (`develop/plan`), until
    /// `workflow_call_returned`. The call step makes no model call and uses no iteration.
    WorkflowCallStarted {
        /// The calling step, named by the call stack (`develop`, `develop/implement`).
        movement: String,
        /// The called workflow's name.
        workflow: String,
        /// The called workflow's first step, named by the call stack.
        initial_step: String,
        /// Calls entered so far in the run, this one included.
        invocation: u32,
        /// The calling steps from the root down, this one last (`["develop", "implement"]`).
        stack: Vec<String>,
        /// The called workflow's loop monitors' cycles, named by the call stack.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        loop_monitors: Vec<Vec<String>>,
        /// The `vars` the called workflow sees: the caller's, overridden by this call's.
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        vars: std::collections::BTreeMap<String, String>,
    },
    /// TAKT workflows: the called workflow ended and hands its result to the calling step,
    /// whose rules route on it (the `movement_finished` of the calling step follows).
    WorkflowCallReturned {
        /// The calling step, named by the call stack.
        movement: String,
        /// The called workflow's name.
        workflow: String,
        /// How it ended: `COMPLETE`, `ABORT`, or a label of its `subworkflow.returns`.
        result: String,
    },
    /// A TAKT `team_leader` step's leader planned a batch of parts (the first decomposition,
    /// or its answer after a batch ended): the parts that run next, or that planning is done.
    TeamLeaderPlanned {
        /// The team-leader step.
        movement: String,
        /// 1-based batch the parts form (the batch after the one that just ended).
        batch: u32,
        /// The new parts, each run as the sub-movement `<movement>.<id>`.
        parts: Vec<TeamPart>,
        /// True when the leader said no further part is needed (or gave no new one).
        done: bool,
        /// The leader's stated reason, when it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    /// One attempt of a TAKT `arpeggio` batch failed (its model call failed after the client's
    /// own retries); the batch is tried again while `max_retries` allows.
    ArpeggioBatchFailed {
        /// The batch's call key, `<step>/batch:<n>`.
        movement: String,
        /// 1-based batch number.
        batch: u32,
        /// 1-based attempt that failed.
        attempt: u32,
        /// Why it failed.
        error: String,
    },
    /// A TAKT system step read its `system_inputs`: what `context.<step>.<binding>` and
    /// `{context:step.binding}` read from now on.
    SystemInputs {
        /// The system step.
        movement: String,
        /// Each binding (`as`) and the value it read.
        inputs: serde_json::Map<String, serde_json::Value>,
    },
    /// A TAKT system step ran one of its `effects`: what `effect.<step>.<type>.<field>` reads.
    /// A resumed run reuses it instead of running the effect again.
    EffectResult {
        /// The system step.
        movement: String,
        /// The effect type (`enqueue_task`, …).
        effect: String,
        /// The effect's result (`success`, `failed`, and the effect's own fields).
        result: serde_json::Value,
    },
    /// A TAKT agent step's answer carried JSON valid against its `structured_output` schema:
    /// what `structured.<step>.<field>` and `{structured:step.field}` read from now on.
    StructuredOutput {
        /// The agent step.
        movement: String,
        /// The validated value (with the fields TAKT derives, e.g. `task_markdown`).
        value: serde_json::Value,
    },
}

/// One part a team leader planned: a sub-task with its own instruction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamPart {
    /// Unique id within the step (the sub-movement is `<step>.<id>`).
    pub id: String,
    /// A short title.
    pub title: String,
    /// The instruction the part's agent receives.
    pub instruction: String,
}

impl RunEvent {
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
            | RunEvent::QualityGateChecked { movement, .. }
            | RunEvent::SubtasksEnded { movement, .. }
            | RunEvent::WorkflowCallStarted { movement, .. }
            | RunEvent::WorkflowCallReturned { movement, .. }
            | RunEvent::TeamLeaderPlanned { movement, .. }
            | RunEvent::ArpeggioBatchFailed { movement, .. }
            | RunEvent::SelectionMade { movement, .. }
            | RunEvent::SystemInputs { movement, .. }
            | RunEvent::EffectResult { movement, .. }
            | RunEvent::StructuredOutput { movement, .. }
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

    /// The `type` field's value (`run_started`, `llm_response`, …).
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
            RunEvent::QualityGateChecked { .. } => "quality_gate_checked",
            RunEvent::SubtasksEnded { .. } => "subtasks_ended",
            RunEvent::WorkflowCallStarted { .. } => "workflow_call_started",
            RunEvent::WorkflowCallReturned { .. } => "workflow_call_returned",
            RunEvent::TeamLeaderPlanned { .. } => "team_leader_planned",
            RunEvent::ArpeggioBatchFailed { .. } => "arpeggio_batch_failed",
            RunEvent::SelectionMade { .. } => "selection_made",

            RunEvent::SystemInputs { .. } => "system_inputs",
            RunEvent::EffectResult { .. } => "effect_result",
            RunEvent::StructuredOutput { .. } => "structured_output",
        }
    }
}

/// A model's whole answer as recorded in `llm_response`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedAnswer {
    /// The answer's text (empty when it was only tool calls).
    pub content: String,
    /// The tool calls the answer made, in order.
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
    /// One chunk of a `BatchReviewTextWithLLM` call; its `movement` is
    /// `<movement>/review:<chunk key>`, so each chunk's call is matched on its own in a resume.
    Review,
    /// A TAKT step's `completion_retry` judge: is the answer complete against its instruction?
    CompletionJudge,
}

/// What a TAKT selector chose in `selection_made`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionTarget {
    /// The pool sub-steps of a dynamic parallel step (`parallel: {fixed, pool, selection}`).
    Participants,
    /// The facet candidates of a step's `dynamic_facets` pool.
    Facets,
}

/// Which call picks a takt movement's rule in `judge_request`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeKind {
    /// The judge: the model picks one rule by number from the rules' conditions.
    Judge,
    /// One structured call evaluating every `ai("…")` condition of the movement.
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
    /// Maestro: the model called `transition`.
    TransitionTool,
    /// Maestro: the model called `complete`.
    CompleteTool,
    /// The movement's `default_next` carried the run on (the visit was cut short, or nothing
    /// else decided).
    DefaultNext,
    /// Takt: an `all()` / `any()` rule over the parallel sub-movements' outcomes.
    Aggregate,
    /// Takt: the answer's last rule tag (`[PLAN:1]`).
    Tag,
    /// Takt: the movement has only one eligible rule.
    SingleRule,
    /// Takt: the structured call evaluating the `ai("…")` conditions.
    AiCondition,
    /// Takt: the judge call picking a rule by number.
    Judge,
    /// TAKT workflows: a command quality gate failed, so the movement goes round again.
    QualityGate,
    /// Graph: the answer's frontmatter `$status` chose the edge.
    Frontmatter,
    /// TAKT workflows: a rule's `when(…)` predicate held over the run's recorded state.
    When,
    /// No rule matched, the context ran out, or a bound was hit.
    Engine,
    /// TAKT workflows: the result a called workflow returned chose the `workflow_call`
    /// step's rule.
    Returned,
}

/// An event with its envelope: `{"seq":1,"ts":"…","type":"run_started",…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Gapless from 1 within a run.
    pub seq: u64,
    /// RFC 3339, UTC.
    pub ts: String,
    /// The event itself; its fields sit beside `seq` and `ts`, under its `type`.
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
                model: Some("served-model".into()),
                usage: Usage {
                    prompt_tokens: 10,
                    completion_tokens: 2,
                    total_tokens: 12,
                    cached_prompt_tokens: 0,
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
            r#"{"seq":3,"ts":"2026-01-01T00:00:00Z","type":"llm_response","movement":"plan","purpose":"movement","model":"served-model","usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12},"finish_reason":"stop","tool_calls":0,"text_chars":5}"#
        );
        let back: EventRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, record);
        assert_eq!(record.event.kind(), "llm_response");
    }

    #[test]
    fn records_written_before_models_were_recorded_still_read() {
        let old = [
            r#"{"seq":1,"ts":"2026-01-01T00:00:00Z","type":"run_started","run_id":"r","piece":"p","dialect":"maestro","piece_hash":"h","task":"t","max_movements":3,"initial_movement":"plan","run_dir":"/r","workspace":"/w"}"#,
            r#"{"seq":2,"ts":"2026-01-01T00:00:01Z","type":"llm_response","movement":"plan","purpose":"movement","usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12},"tool_calls":0,"text_chars":5}"#,
        ];
        for line in old {
            let record: EventRecord = serde_json::from_str(line).unwrap();
            match &record.event {
                RunEvent::RunStarted { model, .. } | RunEvent::LlmResponse { model, .. } => {
                    assert_eq!(model, &None)
                }
                other => panic!("unexpected event {other:?}"),
            }
            // Written back, the line is what it was: no field appears from nowhere.
            assert_eq!(serde_json::to_string(&record).unwrap(), line);
        }
    }
}
