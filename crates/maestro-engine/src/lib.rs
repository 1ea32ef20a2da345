//! The Maestro engine: runs a piece against a model endpoint, movement after movement, as an
//! explicit state machine whose every change is an event.
//!
//! It owns the run state and its events, the agent loop (one movement's ReAct loop), the piece
//! runner (transitions, limits, loops, parallel movements, loop monitors), outcome reading per
//! dialect, the context manager and the piece classifier. It knows nothing of HTTP servers or SQL.
//!
//! Start with [`Engine::run`]; read a finished run back with [`read_events`] and
//! [`RunState::replay`].

mod agent;
mod classifier;
mod completion;
mod config;
mod context;
mod control;
mod ctx;
mod cycle;
mod dynamic_facets;
mod dynamic_parallel;
mod end_reason;
mod error;
mod event;
mod gates;
mod images;
mod journal;
mod judge;
mod log;
mod movement;
mod outcome;
mod prompt;
mod record;
mod recorded;
mod review;
mod run;
mod runner;
mod scope;
mod selector;
mod spend;
mod state;
mod steps;
mod subtasks;

pub use classifier::{Classified, ClassifyError, PieceSummary, classify, classify_within};
pub use config::EngineConfig;
pub use context::{ContextMeter, ContextThresholds};
pub use control::{COMPLETE, TRANSITION, WRITE_REPORT};
pub use end_reason::{EndReason, UnknownEndReason};
pub use error::{EngineError, InternalError, RecordError, UnrunnablePiece};
pub use event::{
    CallPurpose, ContextLevel, EventRecord, EventSink, JsonlSink, JudgeKind, OutcomeSource,
    RecordedAnswer, ReminderKind, RunEvent, SelectionTarget, read_events,
};
pub use journal::Journal;
pub use log::{AppendError, AppendFuture, EventLog, JsonlLog, MemoryLog};
pub use outcome::{
    FAILED_SUB_LABEL, FrontmatterError, aggregate, eligible_rules, extract_frontmatter, last_tag,
    route, validate_frontmatter,
};
pub use record::{RunRecord, new_run_id};
pub use recorded::{Divergence, ReplayMode, may_write_outputs};
pub use review::{BATCH_REVIEW, ReviewArgs, review_spec};
pub use run::{Engine, RunEnd, RunReport, RunSpec};
pub use spend::{SpendAsk, SpendFuture, SpendGuard, SpendRefused, SpendTicket};
pub use state::{PieceIdentity, RunPhase, RunState};
pub use steps::frame::CallFrame;
pub use steps::workflow_call::called_workflow;
pub use steps::{
    EnqueueRequest, EnqueuedTask, QueueCounts, SystemFuture, SystemHost, WorkflowState,
};
pub use subtasks::{
    HostFuture, SPAWN_SUBTASK, SpawnArgs, SpawnRequest, SpawnedSubtask, SubtaskError, SubtaskHost,
    SubtaskOutcome,
};
