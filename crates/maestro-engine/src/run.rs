//! The public entry point: an [`Engine`] (provider, tools, settings) runs a piece for a task into
//! a [`RunRecord`] and returns a [`RunReport`]. Also the per-run context every part of the run
//! shares ([`RunCtx`]): the journal, the model call with its events, the tool scratch.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use maestro_llm::Provider;
use maestro_piece::Piece;
use maestro_protocol::{RunStatus, Secret};
use maestro_tools::Registry;
use tokio_util::sync::CancellationToken;

use crate::config::EngineConfig;
use crate::ctx::RunCtx;
use crate::end_reason::EndReason;
use crate::error::{EngineError, InternalError, RecordError};
use crate::event::{EventSink, JsonlSink, RunEvent};
use crate::journal::Journal;
use crate::record::RunRecord;
use crate::runner;
use crate::state::{RunPhase, RunState};

/// Runs pieces. Cheap to share; one engine can run many pieces one after another or at once.
///
/// ```no_run
/// # async fn demo(piece: maestro_piece::Piece, llm: std::sync::Arc<dyn maestro_llm::Provider>)
/// #     -> Result<(), maestro_engine::EngineError> {
/// use std::sync::Arc;
/// use maestro_engine::{Engine, EngineConfig, RunRecord};
///
/// let engine = Engine::new(llm, maestro_tools::Registry::builtin(Default::default()), EngineConfig::new("local"));
/// let record = RunRecord::create(".maestro/runs".as_ref(), None)?;
/// let report = engine.run(Arc::new(piece), "Add a README", record, vec![]).await?;
/// println!("{}: {}", report.status, report.result);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    provider: Arc<dyn Provider>,
    tools: Registry,
    config: EngineConfig,
    secrets: Vec<Secret>,
    cancel: CancellationToken,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub run_id: String,
    pub status: RunStatus,
    /// The user-visible result: `complete.result`, or the last movement's answer.
    pub result: String,
    pub reason: Option<EndReason>,
    pub run_dir: PathBuf,
    /// The final state (equal to replaying `events.jsonl`).
    pub state: RunState,
}

impl Engine {
    pub fn new(provider: Arc<dyn Provider>, tools: Registry, config: EngineConfig) -> Self {
        Engine {
            provider,
            tools,
            config,
            secrets: Vec::new(),
            cancel: CancellationToken::new(),
        }
    }

    /// Secrets to scrub from anything the run records (provider messages in retries, errors).
    pub fn with_secret(mut self, secret: Secret) -> Self {
        if !secret.is_empty() {
            self.secrets.push(secret);
        }
        self
    }

    /// Cancelling this token stops running tools and ends the run as `failed` (`cancelled`).
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Runs `piece` for `task` to a terminal status. Every event goes to
    /// `record`'s `events.jsonl` (flushed per line) and then to `observers`.
    ///
    /// Errors only when the record itself cannot be written; everything else (the endpoint down,
    /// a piece that cannot run) ends the run as `failed` with a reason.
    pub async fn run(
        &self,
        piece: Arc<Piece>,
        task: &str,
        record: RunRecord,
        observers: Vec<Arc<dyn EventSink>>,
    ) -> Result<RunReport, EngineError> {
        let durable =
            JsonlSink::append_to(&record.events_path()).map_err(|e| RecordError::Open {
                path: record.events_path(),
                source: e,
            })?;
        let context_window = match self.config.context_length {
            Some(length) => Some(length),
            None => self.provider.context_length(&self.config.model).await,
        };
        let run = Arc::new(RunCtx {
            piece: Arc::clone(&piece),
            config: self.config.clone(),
            provider: Arc::clone(&self.provider),
            tools: self.tools.clone(),
            journal: Journal::new(Arc::new(durable), observers),
            record: record.clone(),
            cancel: self.cancel.child_token(),
            scratch: Arc::default(),
            context_window,
            sessions: Mutex::default(),
            secrets: self.secrets.clone(),
        });
        run.emit(RunEvent::RunStarted {
            run_id: record.run_id.clone(),
            piece: piece.name.clone(),
            dialect: piece.dialect,
            piece_hash: piece.hash.clone(),
            task: task.to_string(),
            max_movements: piece.max_movements,
            initial_movement: piece.initial_movement.clone(),
            run_dir: record.dir.display().to_string(),
            workspace: record.workspace.display().to_string(),
            loop_monitors: piece
                .loop_monitors
                .iter()
                .map(|m| m.cycle.clone())
                .collect(),
        })?;
        if self.tools.get("Bash").is_some()
            && self.tools.config().bash_sandbox == maestro_tools::BashSandboxMode::UnsafeNoSandbox
        {
            tracing::warn!(
                "this run's Bash commands run with NO SANDBOX (safety.bash_sandbox: unsafe_no_sandbox)"
            );
            run.emit(RunEvent::Warning {
                movement: None,
                message: "Bash commands run with NO SANDBOX (safety.bash_sandbox: unsafe_no_sandbox): they have Maestro's own access to this host".into(),
            })?;
        }
        if context_window.is_none() {
            run.emit(RunEvent::Warning {
                movement: None,
                message: "the model's context window is unknown; context thresholds are off".into(),
            })?;
        }
        let finish = match runner::drive(&run).await {
            Ok(finish) => finish,
            Err(e @ EngineError::Record(_)) => return Err(e),
            Err(e) => runner::Finish {
                status: RunStatus::Failed,
                result: String::new(),
                reason: Some(if run.cancel.is_cancelled() {
                    EndReason::Cancelled
                } else {
                    e.reason().redacted(|text| run.redact(text))
                }),
            },
        };
        run.emit(RunEvent::RunFinished {
            status: finish.status,
            result: finish.result,
            reason: finish.reason,
        })?;
        let state = run.journal.state();
        let RunPhase::Finished {
            status,
            result,
            reason,
        } = state.phase.clone()
        else {
            return Err(InternalError::NoTerminalStatus.into());
        };
        Ok(RunReport {
            run_id: record.run_id,
            status,
            result,
            reason,
            run_dir: record.dir,
            state,
        })
    }
}
