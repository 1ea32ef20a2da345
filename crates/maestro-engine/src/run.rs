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
use crate::event::{EventRecord, EventSink, RunEvent};
use crate::journal::Journal;
use crate::log::{EventLog, JsonlLog};
use crate::record::RunRecord;
use crate::recorded::{Divergence, Recorded, ReplayMode};
use crate::runner;
use crate::state::{RunPhase, RunState};
use crate::subtasks::SubtaskHost;

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

/// What to run, and where its events go (see [`Engine::run_spec`]).
pub struct RunSpec {
    /// The piece to run.
    pub piece: Arc<Piece>,
    /// The task the run is given, verbatim.
    pub task: String,
    /// Where the run keeps its files (run directory, workspace).
    pub record: RunRecord,
    /// Durable logs, committed in order before each side effect; the first failure fails the
    /// run ([`crate::AppendError::Fenced`] stops it writing anything more).
    pub logs: Vec<Arc<dyn EventLog>>,
    /// Live displays; they see each event once it is committed.
    pub observers: Vec<Arc<dyn EventSink>>,
    /// The run's recorded events, to resume from; empty for a new run.
    pub history: Vec<EventRecord>,
    /// When the endpoint cannot be reached (after the client's own retries), end with
    /// [`RunEnd::Retry`] and record no end, so the job can run again later; otherwise the run
    /// ends `failed`.
    pub retry_infrastructure: bool,
    /// The piece file, recorded in `run_started` so a resume can find it.
    pub piece_file: Option<PathBuf>,
    /// Cancelling this stops the run where it is and records no end ([`RunEnd::Suspended`]):
    /// a worker shutting down hands the run back to be resumed.
    pub suspend: Option<CancellationToken>,
    /// Every answer people gave to the run's questions, oldest first (those its record already
    /// holds included): a run that ended asking goes on with the next one.
    pub answers: Vec<String>,
    /// The job system's side of subtasks (`SpawnSubTask`, `WAIT_SUBTASKS`); without one,
    /// `SpawnSubTask` is not offered and `WAIT_SUBTASKS` takes the movement's `default_next`.
    pub subtasks: Option<Arc<dyn SubtaskHost>>,
    /// The job system's side of TAKT system steps (`task_queue_context`, `enqueue_task`);
    /// without one the queue reads empty and `enqueue_task` is refused.
    pub system: Option<Arc<dyn crate::steps::SystemHost>>,
    /// Model calls made for the run before it started (the classifier's choice of piece for
    /// `auto`, [`crate::Classified::calls`]): recorded right after `run_started` of a new run,
    /// so that every call is in the record. A resumed or replayed run takes them from its
    /// record instead and ignores these.
    pub preamble: Vec<RunEvent>,
    /// What the run's model calls are attributed to in their `X-Maestro-Job` header: the job's
    /// id for a job; `None` uses the run's id (a local run).
    pub attribution: Option<String>,
    /// Reserves each model call the record does not answer from the job tree's budget, and
    /// settles it after the answer ([`crate::SpendGuard`]); `None`: no cost cap.
    pub spend: Option<Arc<dyn crate::spend::SpendGuard>>,
}

impl std::fmt::Debug for RunSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSpec")
            .field("piece", &self.piece.name)
            .field("record", &self.record)
            .field("logs", &self.logs.len())
            .field("observers", &self.observers.len())
            .field("history", &self.history.len())
            .field("retry_infrastructure", &self.retry_infrastructure)
            .field("piece_file", &self.piece_file)
            .field("suspend", &self.suspend.is_some())
            .field("answers", &self.answers.len())
            .field("subtasks", &self.subtasks.is_some())
            .field("spend", &self.spend.is_some())
            .finish_non_exhaustive()
    }
}

impl RunSpec {
    /// A new run with no logs, no observers and no history.
    pub fn new(piece: Arc<Piece>, task: &str, record: RunRecord) -> RunSpec {
        RunSpec {
            piece,
            task: task.to_string(),
            record,
            logs: Vec::new(),
            observers: Vec::new(),
            history: Vec::new(),
            retry_infrastructure: false,
            piece_file: None,
            suspend: None,
            answers: Vec::new(),
            subtasks: None,
            system: None,
            preamble: Vec::new(),
            attribution: None,
            spend: None,
        }
    }
}

/// How [`Engine::run_spec`] ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The run reached a terminal status (recorded in `run_finished`).
    Finished(Box<RunReport>),
    /// The endpoint could not be reached; nothing ends the record, so the run can resume.
    Retry {
        /// Why the endpoint could not be reached (secrets removed).
        reason: String,
    },
    /// Stopped on [`RunSpec::suspend`]; nothing ends the record.
    Suspended,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// The run's id (see [`RunRecord::run_id`]).
    pub run_id: String,
    /// How the run ended; `maestro run` exits with its [`RunStatus::exit_code`].
    pub status: RunStatus,
    /// The user-visible result: `complete.result`, or the last movement's answer.
    pub result: String,
    /// Why the run ended so, when it did not simply complete (`run_finished.reason`).
    pub reason: Option<EndReason>,
    /// The run directory (`events.jsonl`, `reports/`, `logs/`).
    pub run_dir: PathBuf,
    /// The final state (equal to replaying `events.jsonl`).
    pub state: RunState,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("secrets", &self.secrets.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine that asks `provider`, offers the movements the tools of `tools` they allow,
    /// and drives runs by `config`.
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

    /// The settings runs are driven by.
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
        let log = JsonlLog::append_to(&record.events_path()).map_err(|e| RecordError::Open {
            path: record.events_path(),
            source: e,
        })?;
        let mut spec = RunSpec::new(piece, task, record);
        spec.logs = vec![Arc::new(log)];
        spec.observers = observers;
        match self.run_spec(spec).await? {
            RunEnd::Finished(report) => Ok(*report),
            RunEnd::Retry { .. } | RunEnd::Suspended => Err(InternalError::NoTerminalStatus.into()),
        }
    }

    /// Drives a finished run again from its record with no model call and no tool run, into
    /// `record` (a scratch directory: reports and logs are written there, not over the
    /// original). Succeeds when the run reaches the same movements, transitions and status;
    /// otherwise the error names the first divergence.
    pub async fn replay(
        &self,
        piece: Arc<Piece>,
        history: Vec<EventRecord>,
        record: RunRecord,
    ) -> Result<RunReport, EngineError> {
        let task = history
            .iter()
            .find_map(|r| match &r.event {
                RunEvent::RunStarted { task, .. } => Some(task.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let had_subtasks = history
            .iter()
            .any(|r| matches!(r.event, RunEvent::RunStarted { subtasks: true, .. }));
        let recorded = Recorded::new(ReplayMode::Verify, history);
        let mut spec = RunSpec::new(piece, &task, record);
        spec.retry_infrastructure = false;
        // The run offered `SpawnSubTask`: so does its replay, whose spawns and waits all come
        // from the record.
        if had_subtasks {
            spec.subtasks = Some(Arc::new(crate::subtasks::RecordOnly));
        }
        let report = match self.drive_spec(Box::new(spec), Some(recorded), 0).await? {
            (RunEnd::Finished(report), run) => {
                let report = *report;
                if let Some(left) = run.journal.recorded().and_then(|r| r.first_unmatched()) {
                    return Err(Divergence {
                        seq: Some(left.seq),
                        expected: Some(crate::recorded::describe(&left.event)),
                        got: "the end of the run".to_string(),
                    }
                    .into());
                }
                report
            }
            _ => return Err(InternalError::NoTerminalStatus.into()),
        };
        Ok(report)
    }

    /// Runs (or, with `spec.history`, resumes) a run as a job does: into the given logs, and
    /// with the job's ways to end without a terminal status ([`RunEnd::Retry`],
    /// [`RunEnd::Suspended`]).
    pub async fn run_spec(&self, mut spec: RunSpec) -> Result<RunEnd, EngineError> {
        let history = std::mem::take(&mut spec.history);
        let last_seq = history.iter().map(|r| r.seq).max().unwrap_or(0);
        let recorded = (!history.is_empty()).then(|| Recorded::new(ReplayMode::Resume, history));
        self.drive_spec(Box::new(spec), recorded, last_seq)
            .await
            .map(|(end, _)| end)
    }

    /// `spec` comes boxed: a future keeps its arguments beside what it takes from them, and
    /// this one lives as long as the run.
    async fn drive_spec(
        &self,
        spec: Box<RunSpec>,
        recorded: Option<Recorded>,
        last_seq: u64,
    ) -> Result<(RunEnd, Arc<RunCtx>), EngineError> {
        let RunSpec {
            piece,
            task,
            record,
            logs,
            observers,
            history: _,
            retry_infrastructure,
            piece_file,
            suspend,
            answers,
            subtasks,
            system,
            preamble,
            attribution,
            spend,
        } = *spec;
        let recorded_answers = recorded.as_ref().map_or(0, |r| r.answers_recorded());
        let fresh_answers: std::collections::VecDeque<String> =
            answers.into_iter().skip(recorded_answers).collect();
        let task = task.as_str();
        // A run whose record already holds its end (its worker died before writing the job's
        // end) is gone through without a `run_resumed`: nothing goes on after that end.
        let resumed_after = recorded
            .as_ref()
            .filter(|r| r.mode() == ReplayMode::Resume && !r.holds_final_end())
            .map(|_| last_seq);
        let recorded_window = recorded.as_ref().and_then(|r| r.context_window());
        // A replay runs with the window the run had, whatever the configuration says now; a
        // resumed run goes on with the configured one.
        let replaying = recorded
            .as_ref()
            .is_some_and(|r| r.mode() == ReplayMode::Verify);
        let context_window = match (self.config.context_length, recorded_window) {
            (_, Some(window)) if replaying => window,
            (Some(length), _) => Some(length),
            (None, Some(window)) => window,
            (None, None) => self.provider.context_length(&self.config.model).await,
        };
        // The limit that decides where the run goes is the one it started with: a resume or a
        // replay with another setting would leave its record.
        let mut config = self.config.clone();
        if let Some(limit) = recorded
            .as_ref()
            .and_then(|r| r.max_iterations_per_movement())
        {
            config.max_iterations_per_movement = limit;
        }
        let run = Arc::new(RunCtx {
            piece: Arc::clone(&piece),
            config,
            provider: Arc::clone(&self.provider),
            tools: self.tools.clone(),
            journal: Journal::with_record(logs, observers, recorded, last_seq),
            record: record.clone(),
            cancel: self.cancel.child_token(),
            scratch: Arc::default(),
            context_window,
            sessions: Mutex::default(),
            asked: Mutex::default(),
            answers: Mutex::new(fresh_answers),
            secrets: self.secrets.clone(),
            subtasks,
            system,
            attribution: attribution.unwrap_or_else(|| record.run_id.clone()),
            spend,
        });
        if let Some(after_seq) = resumed_after {
            run.emit(RunEvent::RunResumed { after_seq }).await?;
        }
        let suspend = suspend.unwrap_or_default();
        let outcome = tokio::select! {
            outcome = self.start_and_drive(&run, &piece, task, &record, Opening { context_window, piece_file, preamble }) => outcome,
            _ = suspend.cancelled() => {
                run.cancel.cancel();
                return Ok((RunEnd::Suspended, run));
            }
        };
        let finish = match outcome {
            Ok(finish) => finish,
            Err(e @ (EngineError::Record(_) | EngineError::Diverged(_))) => return Err(e),
            Err(e)
                if retry_infrastructure && !run.cancel.is_cancelled() && e.is_infrastructure() =>
            {
                return Ok((
                    RunEnd::Retry {
                        reason: run.redact(&e.to_string()),
                    },
                    run,
                ));
            }
            Err(EngineError::Spend(crate::spend::SpendRefused::Exceeded { cap, message })) => {
                run.emit(RunEvent::Warning {
                    movement: None,
                    message: message.clone(),
                })
                .await?;
                runner::Finish {
                    status: RunStatus::Exceeded,
                    result: String::new(),
                    reason: Some(EndReason::Budget(cap)),
                }
            }
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
        })
        .await?;
        run.journal.flush().await?;
        let state = run.journal.state();
        let RunPhase::Finished {
            status,
            result,
            reason,
        } = state.phase.clone()
        else {
            return Err(InternalError::NoTerminalStatus.into());
        };
        Ok((
            RunEnd::Finished(Box::new(RunReport {
                run_id: record.run_id,
                status,
                result,
                reason,
                run_dir: record.dir,
                state,
            })),
            run,
        ))
    }

    async fn start_and_drive(
        &self,
        run: &Arc<RunCtx>,
        piece: &Piece,
        task: &str,
        record: &RunRecord,
        opening: Opening,
    ) -> Result<runner::Finish, EngineError> {
        let Opening {
            context_window,
            piece_file,
            preamble,
        } = opening;
        run.emit_queued(RunEvent::RunStarted {
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
            context_window,
            piece_file: piece_file.map(|p| p.display().to_string()),
            subtasks: run.subtasks.is_some(),
            model: Some(run.config.model.clone()),
            max_iterations_per_movement: Some(run.config.max_iterations_per_movement),
        })?;
        // The calls made before the run (the classifier's): a new run records those it was
        // given; a resumed one goes through those its record holds, so they match and the
        // model is not asked again.
        let preamble = match run.journal.recorded() {
            Some(recorded) => recorded.preamble(),
            None => preamble,
        };
        for event in preamble {
            run.emit_queued(redact_answer(run, event))?;
        }
        if self.tools.get("Bash").is_some()
            && self.tools.config().bash_sandbox == maestro_tools::BashSandboxMode::UnsafeNoSandbox
        {
            tracing::warn!(
                "this run's Bash commands run with NO SANDBOX (safety.bash_sandbox: unsafe_no_sandbox)"
            );
            run.emit(RunEvent::Warning {
                movement: None,
                message: "Bash commands run with NO SANDBOX (safety.bash_sandbox: unsafe_no_sandbox): they have Maestro's own access to this host".into(),
            })
            .await?;
        }
        if context_window.is_none() {
            run.emit(RunEvent::Warning {
                movement: None,
                message: "the model's context window is unknown; context thresholds are off".into(),
            })
            .await?;
        }
        runner::drive(run).await
    }
}

/// What `run_started` and the events right after it carry beyond the piece and the task.
struct Opening {
    context_window: Option<u64>,
    piece_file: Option<PathBuf>,
    preamble: Vec<RunEvent>,
}

/// `event` with the run's known secrets replaced in the answer it carries.
fn redact_answer(run: &RunCtx, event: RunEvent) -> RunEvent {
    match event {
        RunEvent::LlmResponse {
            movement,
            purpose,
            model,
            usage,
            finish_reason,
            tool_calls,
            text_chars,
            answer,
        } => RunEvent::LlmResponse {
            movement,
            purpose,
            model,
            usage,
            finish_reason,
            tool_calls,
            text_chars,
            answer: answer.map(|a| crate::event::RecordedAnswer {
                content: run.redact(&a.content),
                tool_calls: a.tool_calls,
            }),
        },
        other => other,
    }
}
