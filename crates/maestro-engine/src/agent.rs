//! The agent loop: one movement's ReAct loop. It calls the model, runs the tool calls it asks
//! for (control tools in the engine, the rest through the tool registry), records each step as
//! an event, watches the context and stops at the movement's call bound.
//!
//! It does not decide outcomes: it ends a turn with a [`TurnEnd`], and the dialect's rules
//! (see `movement.rs`) read it, possibly asking again in the same conversation.

use std::collections::BTreeSet;
use std::sync::Arc;

use maestro_llm::{
    ChatRequest, ChatResponse, ImagePart, LlmError, Message, ResponseSchema, ToolMode,
};
use maestro_piece::{Dialect, Movement, Target};
use maestro_protocol::{ImageRef, RunStatus, ToolCall, ToolSpec};
use maestro_tools::attach::ToolImage;
use maestro_tools::regular_file::{self, Access, Create};
use maestro_tools::{ToolContext, ToolOutput};

use crate::context::ContextMeter;
use crate::control::{self, ControlCall};
use crate::ctx::RunCtx;
use crate::error::EngineError;
use crate::event::{CallPurpose, ContextLevel, ReminderKind, RunEvent};
use crate::images;
use crate::outcome::last_tag;
use crate::prompt;
use crate::recorded::{self, ToolRecord};
use crate::review::{self, BATCH_REVIEW};
use crate::subtasks::{self, SPAWN_SUBTASK, SpawnArgs, SpawnRequest, SubtaskError};

/// How a turn of the model ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnEnd {
    /// The model answered without tool calls.
    Answer(String),
    Transition {
        next: Target,
        summary: Option<String>,
        lessons: Vec<String>,
    },
    Complete {
        status: RunStatus,
        result: String,
    },
    /// The context reached the force threshold.
    ContextExhausted,
    /// The movement used up its model calls.
    IterationsExhausted,
}

/// An image a tool result shows: attached by the tool just now, or named by the record.
enum ShownImage {
    New(ToolImage),
    Recorded(ImageRef),
}

/// One movement's conversation and its bookkeeping.
pub(crate) struct Agent<'a> {
    run: &'a RunCtx,
    movement: &'a Movement,
    /// Shared with every request of the visit (a tool loop sends them with each call).
    tools: std::sync::Arc<[ToolSpec]>,
    pub messages: Vec<Message>,
    calls: u32,
    meter: ContextMeter,
    /// Reports written in this visit.
    pub reports_written: BTreeSet<String>,
    report_reminder_sent: bool,
    /// A JSON Schema the next answers must follow (`response_format`), when the movement offers
    /// no tools. Set by the graph dialect after an answer with invalid frontmatter.
    answer_schema: Option<ResponseSchema>,
    /// User messages with the images this turn's tool results showed: sent after every tool
    /// message of the turn, since a `tool` message cannot carry an image and the tool messages
    /// must follow their assistant turn unbroken.
    shown_images: Vec<Message>,
}

impl<'a> Agent<'a> {
    pub(crate) fn new(run: &'a RunCtx, movement: &'a Movement, messages: Vec<Message>) -> Self {
        // A movement that names no tools gets none (not even the registry's documentation
        // tools, which only help with tools one has).
        let mut tools = if movement.allowed_tools.is_empty() {
            Vec::new()
        } else {
            run.tools.offered(&movement.allowed_tools, movement.edit)
        };
        tools.extend(control::control_tools(run.piece.dialect, movement));
        if run.subtasks.is_some() && movement.allowed_tools.iter().any(|t| t == SPAWN_SUBTASK) {
            tools.push(subtasks::spawn_spec());
        }
        if movement.allowed_tools.iter().any(|t| t == BATCH_REVIEW) {
            tools.push(review::review_spec());
        }
        Agent {
            run,
            movement,
            tools: tools.into(),
            messages,
            calls: 0,
            meter: ContextMeter::new(run.context_window, run.config.context_thresholds),
            reports_written: BTreeSet::new(),
            report_reminder_sent: false,
            answer_schema: None,
            shown_images: Vec::new(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.movement.name
    }

    /// True once the context reached the force threshold.
    pub(crate) fn context_exhausted(&self) -> bool {
        self.meter.window().is_some_and(|w| {
            self.meter.used() as f64 >= w as f64 * self.run.config.context_thresholds.force
        })
    }

    /// Required reports not written yet in this visit.
    pub(crate) fn missing_reports(&self) -> Vec<String> {
        self.movement
            .output_contracts
            .iter()
            .map(|c| c.name.clone())
            .filter(|n| !self.reports_written.contains(n))
            .collect()
    }

    /// Constrains the following answers to `schema` through structured output, so that even a
    /// model that cannot write the format freely produces a valid answer. Returns false (and
    /// leaves the request unconstrained) when the movement offers tools, since an endpoint takes
    /// either tools or a response format.
    pub(crate) fn constrain_answer(&mut self, schema: ResponseSchema) -> bool {
        if !self.tools.is_empty() {
            return false;
        }
        self.answer_schema = Some(schema);
        true
    }

    /// Adds a user message (a reminder or a follow-up) and records why.
    pub(crate) async fn ask_again(
        &mut self,
        kind: ReminderKind,
        attempt: u32,
        message: String,
    ) -> Result<(), EngineError> {
        self.run
            .emit(RunEvent::Reminder {
                movement: self.name().to_string(),
                kind,
                attempt,
                message: message.clone(),
            })
            .await?;
        self.messages.push(Message::user(message));
        Ok(())
    }

    /// The model answered in plain text where a control tool was required. When the provider was
    /// still finding out how this model takes tools (`tool_mode: auto`), it now offers them in
    /// JSON mode: the plain answer is dropped and the same request goes again (returns true).
    pub(crate) async fn resend_with_json_tools(&mut self) -> Result<bool, EngineError> {
        if self.tools.is_empty() {
            return Ok(false);
        }
        // A resumed or replayed run switches where its record did (the provider may have
        // settled on a mode since); past the record, the provider decides.
        let recorded = self
            .run
            .journal
            .recorded()
            .and_then(|r| r.switched_tool_mode(self.name()));
        let switch = match recorded {
            Some(false) => false,
            Some(true) => {
                self.run
                    .provider
                    .switch_to_json_tools(&self.run.config.model);
                true
            }
            None => self
                .run
                .provider
                .switch_to_json_tools(&self.run.config.model),
        };
        if !switch {
            return Ok(false);
        }
        if let Some(Message::Assistant { tool_calls, .. }) = self.messages.last()
            && tool_calls.is_empty()
        {
            self.messages.pop();
        }
        self.run
            .emit(RunEvent::ToolModeChanged {
                movement: self.name().to_string(),
                model: self.run.config.model.clone(),
                mode: ToolMode::Json,
                reason: "the model answered in plain text where a control tool was required".into(),
            })
            .await?;
        Ok(true)
    }

    /// Takt: a turn that wrote its reports and already names its outcome (a rule's tag) ends the
    /// movement, without asking the model again after the tool results. That holds when the
    /// turn's only tool calls are `write_report`, or when every required report is written.
    fn reported_with_outcome(&self, response: &ChatResponse) -> bool {
        self.run.piece.dialect == Dialect::Takt
            && last_tag(
                &self.movement.name,
                &response.content,
                self.movement.rules.len(),
            )
            .is_some()
            && (response
                .tool_calls
                .iter()
                .all(|c| c.name == control::WRITE_REPORT)
                || self.missing_reports().is_empty())
    }

    /// Asks once for missing reports after an answer; returns whether it asked.
    pub(crate) async fn ask_for_missing_reports(&mut self) -> Result<bool, EngineError> {
        let missing = self.missing_reports();
        if missing.is_empty() || self.report_reminder_sent {
            return Ok(false);
        }
        self.report_reminder_sent = true;
        self.ask_again(ReminderKind::Report, 1, prompt::report_reminder(&missing))
            .await?;
        Ok(true)
    }

    /// Runs the loop until the model's turn ends.
    pub(crate) async fn drive(&mut self) -> Result<TurnEnd, EngineError> {
        loop {
            if self.calls >= self.run.config.max_iterations_per_movement {
                return Ok(TurnEnd::IterationsExhausted);
            }
            if self.context_exhausted() || self.surely_too_long().await? {
                return Ok(TurnEnd::ContextExhausted);
            }
            self.calls += 1;
            let response = match self.call_model().await {
                Ok(response) => response,
                // The endpoint counted more tokens than our estimate: the conversation no
                // longer fits, which is the context manager's outcome, not a failed run.
                Err(EngineError::Llm(e @ LlmError::ContextOverflow { .. })) => {
                    self.run
                        .emit(RunEvent::Warning {
                            movement: Some(self.name().to_string()),
                            message: format!("the endpoint refused the request as too long: {e}"),
                        })
                        .await?;
                    return Ok(TurnEnd::ContextExhausted);
                }
                Err(e) => return Err(e),
            };
            let level = self.observe_context(&response).await?;
            if response.tool_calls.is_empty() {
                self.messages.push(Message::Assistant {
                    content: response.content.clone(),
                    tool_calls: vec![],
                });
                return Ok(TurnEnd::Answer(response.content));
            }
            // Only the first calls of an answer run; the rest are left out of the conversation
            // (their arguments would ride every later request) and the model is told.
            let cap = self.run.config.max_tool_calls_per_answer.max(1) as usize;
            let asked = response.tool_calls.len();
            let mut calls = response.tool_calls.clone();
            calls.truncate(cap);
            self.messages.push(Message::Assistant {
                content: response.content.clone(),
                tool_calls: calls.clone(),
            });
            let mut end = None;
            for call in &calls {
                if end.is_some() {
                    self.messages.push(Message::Tool {
                        tool_call_id: call.id.clone(),
                        content: "not run: the movement had already ended".into(),
                    });
                    continue;
                }
                end = self.run_tool_call(call).await?;
            }
            self.messages.append(&mut self.shown_images);
            if let Some(end) = end {
                return Ok(end);
            }
            if self.reported_with_outcome(&response) {
                return Ok(TurnEnd::Answer(response.content));
            }
            if asked > cap {
                self.ask_again(
                    ReminderKind::ToolCallLimit,
                    1,
                    prompt::tool_call_limit(asked, cap),
                )
                .await?;
            }
            match level {
                Some(ContextLevel::Force) => return Ok(TurnEnd::ContextExhausted),
                Some(ContextLevel::Prompt) => {
                    self.ask_again(
                        ReminderKind::ContextPressure,
                        1,
                        prompt::CONTEXT_PRESSURE.to_string(),
                    )
                    .await?
                }
                Some(ContextLevel::Warn) | None => {}
            }
        }
    }

    /// A request whose estimated size (4 characters a token) already fills the window is not
    /// sent: the endpoint would refuse it, and the movement ends as if the context were full.
    ///
    /// The estimate counts text that differs from one copy of the run to another (the paths of
    /// its directories, the tools on offer), so a resumed or replayed run takes the decision
    /// from its record where the record reached this point: a recorded `context_warning` of
    /// level `force` is written again as it was, a recorded request is sent.
    async fn surely_too_long(&mut self) -> Result<bool, EngineError> {
        let Some(window) = self.meter.window() else {
            return Ok(false);
        };
        let recorded = self
            .run
            .journal
            .recorded()
            .and_then(|r| r.next_event(self.name()));
        match recorded {
            Some(
                event @ RunEvent::ContextWarning {
                    level: ContextLevel::Force,
                    ..
                },
            ) => {
                self.run.emit(event).await?;
                return Ok(true);
            }
            Some(RunEvent::LlmRequest { .. }) => return Ok(false),
            _ => {}
        }
        let estimate = crate::spend::estimated_tokens(&self.messages, &self.tools);
        if estimate < window {
            return Ok(false);
        }
        self.run
            .emit(RunEvent::ContextWarning {
                movement: self.name().to_string(),
                level: ContextLevel::Force,
                used_tokens: estimate,
                context_length: window,
            })
            .await?;
        Ok(true)
    }

    async fn call_model(&self) -> Result<ChatResponse, EngineError> {
        let request = ChatRequest {
            model: self.run.config.model.clone(),
            messages: self.messages.clone(),
            tools: self.tools.clone(),
            response_schema: self.answer_schema.clone(),
            temperature: self.run.config.temperature,
            max_tokens: self.run.config.max_tokens,
            headers: Vec::new(),
        };
        self.run
            .chat(self.name(), CallPurpose::Movement, request)
            .await
    }

    async fn observe_context(
        &mut self,
        response: &ChatResponse,
    ) -> Result<Option<ContextLevel>, EngineError> {
        let level = self.meter.observe(&response.usage);
        if let (Some(level), Some(window)) = (level, self.meter.window()) {
            self.run
                .emit(RunEvent::ContextWarning {
                    movement: self.name().to_string(),
                    level,
                    used_tokens: self.meter.used(),
                    context_length: window,
                })
                .await?;
        }
        Ok(level)
    }

    /// Runs one tool call, answers it in the conversation, and returns the turn's end when it
    /// was a control tool that ends the movement.
    async fn run_tool_call(&mut self, call: &ToolCall) -> Result<Option<TurnEnd>, EngineError> {
        let movement = self.name().to_string();
        let input = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        let replayed = self
            .run
            .emit_replayed(RunEvent::ToolCall {
                movement: movement.clone(),
                tool: call.name.clone(),
                call_id: call.id.clone(),
                input,
            })
            .await?;
        let mut end = None;
        let mut images = Vec::new();
        let output =
            match control::parse_control(&self.tools, self.movement, &call.name, &call.arguments) {
                Some(Ok(ControlCall::WriteReport { name, content })) => {
                    self.write_report(&name, &content).await?
                }
                Some(Ok(ControlCall::Transition {
                    next,
                    summary,
                    lessons,
                })) => self.end_turn(
                    &mut end,
                    TurnEnd::Transition {
                        next,
                        summary,
                        lessons,
                    },
                ),
                Some(Ok(ControlCall::Complete { status, result })) => {
                    self.end_turn(&mut end, TurnEnd::Complete { status, result })
                }
                Some(Err(refused)) => ToolOutput::error(refused.to_string()),
                None => {
                    let (output, shown) = self.recorded_or_run(call, replayed).await?;
                    images = shown;
                    output
                }
            };
        let output = maestro_tools::input::bounded_error(output);
        let (parts, references, missing) = self.images_shown(images).await?;
        self.run
            .emit(RunEvent::ToolResult {
                movement,
                tool: call.name.clone(),
                call_id: call.id.clone(),
                ok: output.ok,
                output_chars: output.output.chars().count(),
                truncated: output.truncated,
                output: Some(self.run.redact(&output.output)),
                images: references,
            })
            .await?;
        let content = if output.ok {
            output.output
        } else {
            format!("error: {}", output.output)
        };
        self.messages.push(Message::Tool {
            tool_call_id: call.id.clone(),
            content,
        });
        if !parts.is_empty() || !missing.is_empty() {
            let mut content = format!(
                "The image{} the `{}` call {} showed:",
                if parts.len() == 1 { "" } else { "s" },
                call.name,
                call.id
            );
            for why in missing {
                content.push('\n');
                content.push_str(&why);
            }
            self.shown_images.push(Message::User {
                content,
                images: parts,
            });
        }
        Ok(end)
    }

    /// The images a tool result showed, as message parts and as the record names them; images
    /// of a recorded result are read back from beside the record, and one that cannot be is
    /// named in the third list instead (the model is told to call the tool again).
    async fn images_shown(
        &self,
        images: Vec<ShownImage>,
    ) -> Result<(Vec<ImagePart>, Vec<ImageRef>, Vec<String>), EngineError> {
        let mut parts = Vec::new();
        let mut references = Vec::new();
        let mut missing = Vec::new();
        for image in images {
            match image {
                ShownImage::New(image) => {
                    let (part, reference, kept) = images::keep(&self.run.record.dir, image);
                    if let Err(why) = kept {
                        self.run
                            .emit(RunEvent::Warning {
                                movement: Some(self.name().to_string()),
                                message: why,
                            })
                            .await?;
                    }
                    parts.push(part);
                    references.push(reference);
                }
                ShownImage::Recorded(reference) => {
                    match images::load(&self.run.record.dir, &reference) {
                        Ok(part) => parts.push(part),
                        Err(why) => missing.push(why),
                    }
                    references.push(reference);
                }
            }
        }
        Ok((parts, references, missing))
    }

    /// Accepts a control tool that ends the movement, unless a required report is missing and
    /// the model has not been told yet: then the call is refused once, saying which.
    fn end_turn(&mut self, end: &mut Option<TurnEnd>, ending: TurnEnd) -> ToolOutput {
        let missing = self.missing_reports();
        if !missing.is_empty() && !self.report_reminder_sent {
            self.report_reminder_sent = true;
            return ToolOutput::error(prompt::report_reminder(&missing));
        }
        *end = Some(ending);
        ToolOutput::ok("recorded")
    }

    /// A resumed run reuses a recorded result. A call whose start is recorded but whose result
    /// is not was interrupted: a tool that only reads runs again, any other gets
    /// [`recorded::INTERRUPTED`] as its result.
    async fn recorded_or_run(
        &self,
        call: &ToolCall,
        replayed: bool,
    ) -> Result<(ToolOutput, Vec<ShownImage>), EngineError> {
        let Some(record) = self.run.journal.recorded() else {
            return self.run_registry_tool(call).await;
        };
        match record.tool(self.name(), &call.id) {
            ToolRecord::Done(done) => {
                if let Some(scratch) = done.scratch {
                    if let Ok(mut current) = self.run.scratch.lock() {
                        *current = scratch.clone();
                    }
                    self.run
                        .emit(RunEvent::ScratchUpdated {
                            movement: Some(self.name().to_string()),
                            scratch,
                        })
                        .await?;
                }
                Ok((
                    ToolOutput {
                        ok: done.ok,
                        output: done.output,
                        truncated: done.truncated,
                    },
                    done.images.into_iter().map(ShownImage::Recorded).collect(),
                ))
            }
            ToolRecord::Diverged(d) => Err(EngineError::Diverged(d)),
            ToolRecord::InFlight if self.run.verifying() => {
                Err(EngineError::Diverged(recorded::Divergence {
                    seq: None,
                    expected: None,
                    got: format!(
                        "a `{}` call in `{}` whose result the record does not hold",
                        call.name,
                        self.name()
                    ),
                }))
            }
            ToolRecord::InFlight
                if replayed && !recorded::safe_to_repeat(&call.name, self.movement.edit) =>
            {
                self.run
                    .emit(RunEvent::Warning {
                        movement: Some(self.name().to_string()),
                        message: format!(
                            "the `{}` call {} was interrupted by the stop; it was not run again",
                            call.name, call.id
                        ),
                    })
                    .await?;
                Ok((ToolOutput::error(recorded::INTERRUPTED), Vec::new()))
            }
            ToolRecord::InFlight => self.run_registry_tool(call).await,
        }
    }

    async fn run_registry_tool(
        &self,
        call: &ToolCall,
    ) -> Result<(ToolOutput, Vec<ShownImage>), EngineError> {
        if call.name == SPAWN_SUBTASK && self.tools.iter().any(|t| t.name == SPAWN_SUBTASK) {
            return Ok((self.spawn_subtask(call).await?, Vec::new()));
        }
        if call.name == BATCH_REVIEW && self.tools.iter().any(|t| t.name == BATCH_REVIEW) {
            return Ok((
                review::run_review(self.run, self.name(), call).await?,
                Vec::new(),
            ));
        }
        let ctx = ToolContext {
            workspace: self.run.record.workspace.clone(),
            workspace_kind: self.run.record.workspace_kind,
            edit: self.movement.edit,
            allowed_commands: self.movement.allowed_commands.clone(),
            allowed_ssh_connections: self.movement.allowed_ssh_connections.clone(),
            cancel: self.run.cancel.child_token(),
            scratch: Arc::clone(&self.run.scratch),
        };
        let before = self.run.scratch_snapshot();
        let (output, images) = maestro_tools::attach::collect(self.run.tools.execute_allowed(
            &ctx,
            &self.movement.allowed_tools,
            &call.name,
            &call.arguments,
        ))
        .await;
        let after = self.run.scratch_snapshot();
        if after != before {
            self.run
                .emit(RunEvent::ScratchUpdated {
                    movement: Some(self.name().to_string()),
                    scratch: after,
                })
                .await?;
        }
        Ok((output, images.into_iter().map(ShownImage::New).collect()))
    }

    /// Spawns a child run through the host, keyed by this call so that a spawn repeated after
    /// a crash finds the child it made. A limit or an unknown piece is the model's to fix.
    async fn spawn_subtask(&self, call: &ToolCall) -> Result<ToolOutput, EngineError> {
        let Some(host) = &self.run.subtasks else {
            return Ok(ToolOutput::error("subtasks are not available to this run"));
        };
        let input = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        let args: SpawnArgs = match maestro_tools::input::parse_input(SPAWN_SUBTASK, input) {
            Ok(args) => args,
            Err(refused) => return Ok(refused),
        };
        if args.task.trim().is_empty() {
            return Ok(ToolOutput::error(
                "invalid input for `SpawnSubTask`: `task` is empty; say what the subtask must do",
            ));
        }
        let visit = self.run.journal.state().visits_of(self.name());
        let request = SpawnRequest {
            key: format!("{}/{visit}/{}/{}", self.name(), self.calls, call.id),
            title: subtasks::title_of(&args),
            task: args.task,
            piece: args.piece.filter(|p| !p.trim().is_empty()),
        };
        match host.spawn(request).await {
            Ok(spawned) => Ok(ToolOutput::ok(subtasks::spawned_output(&spawned))),
            Err(SubtaskError::Refused(why)) => Ok(ToolOutput::error(why)),
            Err(e) => Err(e.into()),
        }
    }

    async fn write_report(&mut self, name: &str, content: &str) -> Result<ToolOutput, EngineError> {
        if name.contains(['/', '\\', '\0']) || name.starts_with('.') {
            return Ok(ToolOutput::error(format!(
                "`{name}` is not a plain file name"
            )));
        }
        let path = self.run.record.reports_dir().join(name);
        // The report directory can lie inside the workspace: a link or FIFO planted there by a
        // command is refused rather than followed or blocked on.
        if let Err(e) = regular_file::write(&path, content.as_bytes(), Create::OrTruncate) {
            return Ok(ToolOutput::error(format!(
                "cannot write report: {}",
                e.explain(name, "write_report", Access::Write)
            )));
        }
        self.run
            .emit(RunEvent::ReportWritten {
                movement: self.name().to_string(),
                name: name.to_string(),
                path: path.display().to_string(),
                bytes: content.len(),
            })
            .await?;
        self.reports_written.insert(name.to_string());
        Ok(ToolOutput::ok(format!("report `{name}` written")))
    }
}
