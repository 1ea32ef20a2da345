//! Maestro's use cases, shared by every front end (the CLI today, the server next): finding and
//! classifying pieces, choosing the model, assembling the tool set from the configuration,
//! choosing the job store, submitting and inspecting jobs, and the worker that runs them under
//! fenced leases.
//!
//! It knows no terminal and no HTTP: functions return typed errors and values, and the front
//! end presents them.
//!
//! ```no_run
//! # async fn demo(config: maestro_config::Config) -> Result<(), Box<dyn std::error::Error>> {
//! use maestro_app::{Submission, open_store, submit};
//! use maestro_store::PoolSize;
//!
//! let store = open_store(None, &config, PoolSize::Shared).await?;
//! let id = submit(&store, &config, Submission {
//!     piece: "default".into(), task: "fix the tests".into(), workspace: None, class: None,
//!     priority: 0, max_attempts: None, submitted_by: "alice".into(), owner: None,
//!     inputs: Vec::new(),
//!     budget: Default::default(),
//! }).await?;
//! println!("{id}");
//! # Ok(()) }
//! ```

mod access;
mod budget;
mod children;
mod clients;
mod completer;
mod context;
mod db;
mod errors;
mod files;
mod gateway;
mod hand;
mod handle;
mod job_spend;
mod jobs;
mod knowledge;
mod knowledge_tools;
mod lease;
mod lease_owner;
mod listing;
mod live;
mod models;
mod outcome;
mod outputs;
mod piece_store;
mod piece_view;
mod pieces;
mod run;
mod runtime_config;
mod schedule;
mod spend;
mod store_log;
mod subtasks;
mod system_host;
mod toolbox;
mod watch;
mod worker;

pub use access::{
    AUDIT_PAGE_MAX, AccessError, AuthVia, LOCAL_ACTOR, NewSession, PendingLogin, Principal, Role,
    SHARE_PREFIX, SHOWN_PREFIX_LEN, Scope, SessionCsrf, ShareInfo, TOKEN_PREFIX, TokenInfo, User,
    add_user, add_user_as, audit_log, audit_log_newest, authenticate_token, begin_login,
    create_session, create_share, create_token, create_token_as, end_session, find_user,
    list_jobs_of, list_shares, list_tokens, list_users, login_user, record_audit, resolve_share,
    revoke_share, revoke_share_as, revoke_token, revoke_token_as, session_principal, set_role,
    set_role_as, take_login,
};
pub use budget::BudgetError;
pub use context::RunObserver;
pub use errors::error_chain;
pub use files::{
    FileError, FileLimits, InputError, JobFile, JobPath, MAX_PATH_BYTES, MAX_SEGMENT_BYTES, Upload,
    job_files, read_job_file,
};
pub use gateway::{
    Gateway, GatewayError, GatewayKey, GatewayKeyError, KEY_PREFIX, NewGatewayKey, UsageGroup,
    UsageTotal, create_gateway_key_as, gateway, gateway_key_view, key_hash, new_key,
    revoke_gateway_key_as, rfc3339,
};
pub use hand::{
    ToolCallError, ToolCallRequest, ToolCallResult, ToolListing, call_tool, list_tools,
};
pub use handle::{
    Canceller, LOCAL_LEASE, RecordReadError, RunHandle, RunKind, RunRequest, StartError,
    recorded_run, start,
};
pub use job_spend::{JobSpend, job_spend};
pub use knowledge::{
    DEFAULT_COLLECTION, DEFAULT_K, DocumentInfo, DocumentSource, IngestOutcome, IngestRequest,
    Knowledge, KnowledgeError, MAX_K, SearchHit,
};
pub use knowledge_tools::{KNOWLEDGE_TOOLS, knowledge_tool_specs, knowledge_tools};
pub use listing::{
    Commented, JobDetail, JobPage, MAX_PAGE, NotReady, TreeSpend, check_ready, comment_on_job,
    job_comments, job_counts, job_detail, jobs_page,
};
pub use live::{LIVE_CAPACITY, Live, Subscription};
/// Which side of a run a job's file is on.
pub use maestro_piece::Piece;
pub use maestro_store::FileKind;
/// The owner of a shared knowledge collection.
pub use maestro_store::SHARED_OWNER;
pub use outcome::{RunError, RunOutcome, RunSummary};
pub use run::recorded_piece;
pub use runtime_config::{
    ConfigError, ConfigIssue, ConfigWatch, ConfigWriteError, ETag, config_json, effective_config,
    put_config,
};
pub use spend::{Spend, run_spend, run_spend_in};

/// The run's events and how runs end, as every reader of a run sees them.
pub use maestro_protocol::{EndReason, EventRecord, RunEvent, RunStatus};
/// The store's names a front end uses: ids, statuses, the store handle and where its URL came
/// from. Front ends reach the store only through this crate.
pub use maestro_store::{
    AuditAction, AuditEntry, Comment, CommentKind, JobFilter, JobId, JobQueue, JobStatus, PoolSize,
    Store, StoreError, StoreUrl, UrlOrigin,
};
/// How the Bash tool is confined, and what a tool answers: what `maestro tools call` sets and
/// prints.
pub use maestro_tools::{BashSandboxMode, ToolOutput};

pub use db::{ENV_DB, open_store, open_store_existing, open_store_in, open_url, store_url};
pub use jobs::{
    FollowError, JobError, JobSummary, POLL, Submission, WAIT_TIMED_OUT_EXIT, WorkerSummary,
    answer_job, cancel_job, exit_code, follow_events, list_jobs, live_workers, show_job, submit,
    wait_job,
};
/// The reader child of the document tools: the `maestro` binary runs [`document_reader_main`]
/// when its first argument is [`DOCUMENT_READER_ARG`] (the tools re-execute it to parse an
/// untrusted file outside the worker, under limits).
pub use maestro_tools_documents::{
    READER_ARG as DOCUMENT_READER_ARG, reader_main as document_reader_main,
};
pub use models::{
    ModelError, check_served, client, endpoint_unreachable, ensure_served, no_endpoint,
    served_model, tool_mode_cache,
};
pub use piece_store::{
    PieceDiagnostic, PieceListing, PieceOrigin, PieceSource, PieceWriteError, StoredPiece,
    available_pieces_in, check_piece_text, delete_piece, find_piece_in, get_piece, list_pieces,
    put_piece, valid_piece_name, validate_piece_text,
};
pub use piece_view::{
    EdgeKind, GraphEdge, GraphMovement, MovementKind, MovementView, NoSuchMovement, PieceGraph,
    PieceLookupError, Runs, loaded_piece, movement_prompt, movement_view, piece_graph,
};
pub use pieces::{
    AUTO, Available, Chosen, Found, PieceError, Skipped, available_pieces, classify_piece,
    find_piece, load_piece,
};
pub use schedule::{
    GRACE, Misfire, NEXT_FIRES, ScheduleError, ScheduleRequest, ScheduleSummary, Spec, SpecError,
    TICK, TickReport, Zone, ZoneOffset, add_schedule, list_schedules, remove_schedule, set_paused,
    tick, update_schedule, zone,
};
pub use store_log::{AppendFailure, EventWriter, StopLatch, StoreLog};
pub use toolbox::{McpSelection, RequiredMcp, Toolbox, ToolboxError, load_options, tool_catalog};
pub use watch::{JobWatch, Watched, watch_job};
pub use worker::{
    Profile, Shutdown, Worker, WorkerError, WorkerOptions, WorkerStats, classes, scheduler_ticks,
};
