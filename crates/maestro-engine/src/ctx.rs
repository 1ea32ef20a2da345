//! What every part of one run shares ([`RunCtx`]): the piece, the journal, the model call with
//! its events, the tool scratch and the kept conversations. A leaf of the crate: the run, the
//! runner, movements, agents and judges all import it, and it imports none of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use maestro_llm::{ChatRequest, ChatResponse, Message, Provider, StreamEvent};
use maestro_piece::Piece;
use maestro_protocol::{Secret, ToolCall};
use maestro_tools::{Registry, RunScratch};
use tokio_util::sync::CancellationToken;

use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::event::{CallPurpose, RecordedAnswer, RunEvent};
use crate::journal::Journal;
use crate::record::RunRecord;
use crate::recorded::{Divergence, ReplayMode};
use crate::subtasks::{SubtaskHost, SubtaskOutcome};

/// What every part of one run shares.
pub(crate) struct RunCtx {
    pub piece: Arc<Piece>,
    pub config: EngineConfig,
    pub provider: Arc<dyn Provider>,
    pub tools: Registry,
    pub journal: Journal,
    pub record: RunRecord,
    pub cancel: CancellationToken,
    pub scratch: Arc<Mutex<RunScratch>>,
    pub context_window: Option<u64>,
    /// Conversations kept for `session: continue` movements, by movement name.
    pub sessions: Mutex<HashMap<String, Vec<Message>>>,
    /// The conversation of each movement whose visit ended asking the user, to go on with
    /// when the answer comes.
    pub asked: Mutex<HashMap<String, Vec<Message>>>,
    /// Answers given since the record was written, not yet used.
    pub answers: Mutex<std::collections::VecDeque<String>>,
    pub secrets: Vec<Secret>,
    /// The job system's side of subtasks; `None` where there is none (subtasks off).
    pub subtasks: Option<Arc<dyn SubtaskHost>>,
    /// The job system's side of TAKT system steps; `None` in a plain engine run.
    pub system: Option<Arc<dyn crate::steps::SystemHost>>,
    /// What every model call is attributed to (`X-Maestro-Job`): the job's id, else the run's.
    pub attribution: String,
    /// Reserves each new model call from the job tree's budget; `None`: no cap.
    pub spend: Option<Arc<dyn crate::spend::SpendGuard>>,
}

impl RunCtx {
    /// Records `event` and resolves once it is committed.
    pub(crate) async fn emit(&self, event: RunEvent) -> Result<(), EngineError> {
        self.journal.emit(event).await.map(drop)
    }

    /// Records `event` in order without waiting for its commit, for an event that no side
    /// effect of its own follows (`movement_started`, `llm_response`, `movement_finished`): the
    /// next side effect waits for its own event, and the writer commits in order, so this one is
    /// durable before it. A failed commit fails that next wait (the writer's failure is sticky).
    pub(crate) fn emit_queued(&self, event: RunEvent) -> Result<(), EngineError> {
        self.journal.emit_nowait(event)
    }

    /// Like [`RunCtx::emit`]; true when the run's record already held the event.
    pub(crate) async fn emit_replayed(&self, event: RunEvent) -> Result<bool, EngineError> {
        self.journal.emit(event).await
    }

    /// The answer to `movement`'s question: the one the record holds, else the next new one.
    pub(crate) fn next_answer(&self, movement: &str) -> Option<String> {
        if let Some(recorded) = self.journal.recorded().and_then(|r| r.user_input(movement)) {
            return Some(recorded);
        }
        self.answers.lock().ok()?.pop_front()
    }

    /// How the subtasks `movement` waits for ended: as the record holds it, else from the
    /// host once every pending one has ended. `None`: some are still open (the run parks), or
    /// in a replay past the record.
    pub(crate) async fn subtasks_ended(
        &self,
        movement: &str,
    ) -> Result<Option<Vec<SubtaskOutcome>>, EngineError> {
        if let Some(recorded) = self
            .journal
            .recorded()
            .and_then(|r| r.subtasks_ended(movement))
        {
            return Ok(Some(recorded));
        }
        let Some(host) = &self.subtasks else {
            return Ok(None);
        };
        if self.verifying() {
            return Ok(None);
        }
        let pending = self.journal.state().pending_subtasks();
        // A host that runs the children itself waits here; the run's stop ends the wait.
        tokio::select! {
            ended = host.ended(&pending) => Ok(ended?),
            _ = self.cancel.cancelled() => Err(crate::subtasks::SubtaskError::Failed(
                "stopped while waiting for subtasks".into(),
            )
            .into()),
        }
    }

    /// True when the run only goes through its record (`maestro replay`): no model call and no
    /// tool runs.
    pub(crate) fn verifying(&self) -> bool {
        self.journal
            .recorded()
            .is_some_and(|r| r.mode() == ReplayMode::Verify)
    }

    /// The context for a shell command the engine itself runs in the sandbox on the workflow's
    /// behalf (a quality gate, `{review_scope}`): any program, writable where an editing
    /// movement may write when `edit`.
    pub(crate) fn engine_tool_context(&self, edit: bool) -> maestro_tools::ToolContext {
        maestro_tools::ToolContext {
            workspace: self.record.workspace.clone(),
            workspace_kind: self.record.workspace_kind,
            edit,
            allowed_commands: Some(vec!["*".to_string()]),
            allowed_ssh_connections: None,
            cancel: self.cancel.child_token(),
            scratch: Arc::clone(&self.scratch),
        }
    }

    pub(crate) fn redact(&self, text: &str) -> String {
        self.secrets
            .iter()
            .fold(text.to_string(), |t, s| s.redact(&t))
    }

    pub(crate) fn scratch_snapshot(&self) -> RunScratch {
        self.scratch.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// One model call with its `llm_request` / `llm_retry` / `llm_response` events.
    pub(crate) async fn chat(
        &self,
        movement: &str,
        purpose: CallPurpose,
        mut request: ChatRequest,
    ) -> Result<ChatResponse, EngineError> {
        request.headers = vec![
            ("X-Maestro-Job".to_string(), self.attribution.clone()),
            ("X-Maestro-Movement".to_string(), movement.to_string()),
        ];
        if self.cancel.is_cancelled() {
            return Err(EngineError::Llm(maestro_llm::LlmError::Cancelled));
        }
        self.emit(RunEvent::LlmRequest {
            movement: movement.to_string(),
            purpose,
            messages: request.messages.len(),
            tools: request.tools.len(),
        })
        .await?;
        let requested = request.model.clone();
        // A resumed run reuses the answer its record holds for this call.
        let recorded = self.journal.recorded().and_then(|r| r.answer(movement));
        if let Some(response) = recorded {
            return self
                .record_response(movement, purpose, &requested, response)
                .await;
        }
        if self.verifying() {
            return Err(EngineError::Diverged(Divergence {
                seq: None,
                expected: None,
                got: format!("a model call for `{movement}` that the record holds no answer to"),
            }));
        }
        // Only a call the record does not answer spends: it is reserved first.
        let ticket = match &self.spend {
            Some(guard) => Some(
                guard
                    .reserve(crate::spend::ask_for(movement, purpose, &request))
                    .await?,
            ),
            None => None,
        };
        if let Some(cap) = ticket.as_ref().and_then(|t| t.answer_cap) {
            request.max_tokens = Some(cap);
        }
        let observer = retry_observer(self, movement);
        let response = tokio::select! {
            response = self.provider.chat(request, &observer) => response,
            _ = self.cancel.cancelled() => Err(maestro_llm::LlmError::Cancelled),
        };
        if let (Some(guard), Some(ticket)) = (&self.spend, ticket) {
            match &response {
                Ok(answer) => {
                    let model = answer.model.as_deref().unwrap_or(&requested).to_string();
                    guard.settle(ticket, model, answer.usage).await;
                }
                Err(_) => guard.release(ticket).await,
            }
        }
        let response = response.map_err(|e| match e {
            maestro_llm::LlmError::Http { status, message } => {
                EngineError::Llm(maestro_llm::LlmError::Http {
                    status,
                    message: self.redact(&message),
                })
            }
            maestro_llm::LlmError::ContextOverflow { status, message } => {
                EngineError::Llm(maestro_llm::LlmError::ContextOverflow {
                    status,
                    message: self.redact(&message),
                })
            }
            other => EngineError::Llm(other),
        })?;
        self.record_response(movement, purpose, &requested, response)
            .await
    }

    async fn record_response(
        &self,
        movement: &str,
        purpose: CallPurpose,
        requested: &str,
        response: ChatResponse,
    ) -> Result<ChatResponse, EngineError> {
        self.emit_queued(RunEvent::LlmResponse {
            movement: movement.to_string(),
            purpose,
            // The endpoint's word for who answered wins: a gateway may route elsewhere.
            model: Some(response.model.as_deref().unwrap_or(requested).to_string()),
            usage: response.usage,
            finish_reason: response.finish_reason.clone(),
            tool_calls: response.tool_calls.len(),
            text_chars: response.content.chars().count(),
            answer: Some(RecordedAnswer {
                content: self.redact(&response.content),
                tool_calls: response
                    .tool_calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: self.redact(&c.arguments),
                    })
                    .collect(),
            }),
        })?;
        Ok(response)
    }
}

/// Forwards a provider's retries and tool-mode changes into the run's events.
pub(crate) fn retry_observer<'r>(
    run: &'r RunCtx,
    movement: &'r str,
) -> impl Fn(StreamEvent) + Send + Sync + 'r {
    move |event| match event {
        StreamEvent::Retry {
            attempt,
            delay,
            reason,
        } => {
            let _ = run.journal.emit_nowait(RunEvent::LlmRetry {
                movement: movement.to_string(),
                attempt,
                delay_ms: delay.as_millis() as u64,
                reason: run.redact(&reason),
            });
        }
        StreamEvent::ToolModeChanged { mode, reason } => {
            let _ = run.journal.emit_nowait(RunEvent::ToolModeChanged {
                movement: movement.to_string(),
                model: run.config.model.clone(),
                mode,
                reason: run.redact(&reason),
            });
        }
        StreamEvent::TextDelta(text) => run.journal.text_delta(movement, &run.redact(&text)),
    }
}
