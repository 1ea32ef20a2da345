//! The values the store reads and writes: jobs, their statuses, leases and events.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

/// A stored name this build does not know: a corrupt row, or one a newer build wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}`")]
pub struct UnknownName {
    /// What the name was meant to be, e.g. `job status` or `comment kind`.
    pub kind: &'static str,
    /// The name as stored.
    pub value: String,
}

impl UnknownName {
    fn new(kind: &'static str, value: &str) -> UnknownName {
        UnknownName {
            kind,
            value: value.to_string(),
        }
    }
}

/// A job's id: a UUIDv7, so ids sort by creation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub Uuid);

impl JobId {
    /// A new id for a job created now.
    pub fn new() -> JobId {
        JobId(Uuid::now_v7())
    }
}

impl Default for JobId {
    fn default() -> Self {
        JobId::new()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for JobId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(JobId)
    }
}

/// Where a job is in its life. Serialised as the snake_case names below, which are also what
/// the `status` column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting for a worker (new, requeued after a retryable failure, answered, or handed back).
    Queued,
    /// Claimed by a worker that holds its lease.
    Running,
    /// Parked until someone answers the run's question; holds no worker.
    WaitingInput,
    /// Parked until every child job has ended; holds no worker.
    WaitingSubtasks,
    /// The run reached its goal.
    Completed,
    /// The run gave up (the piece's own ABORT).
    Aborted,
    /// The run hit a limit (iterations, visits, budget).
    Exceeded,
    /// Infrastructure failed more often than `max_attempts` allows.
    Failed,
    /// Someone cancelled the job.
    Cancelled,
}

impl JobStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 9] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::WaitingInput,
        JobStatus::WaitingSubtasks,
        JobStatus::Completed,
        JobStatus::Aborted,
        JobStatus::Exceeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];

    /// The column value.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::WaitingInput => "waiting_input",
            JobStatus::WaitingSubtasks => "waiting_subtasks",
            JobStatus::Completed => "completed",
            JobStatus::Aborted => "aborted",
            JobStatus::Exceeded => "exceeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// A job in this status never runs again.
    pub fn is_final(self) -> bool {
        match self {
            JobStatus::Completed
            | JobStatus::Aborted
            | JobStatus::Exceeded
            | JobStatus::Failed
            | JobStatus::Cancelled => true,
            JobStatus::Queued
            | JobStatus::Running
            | JobStatus::WaitingInput
            | JobStatus::WaitingSubtasks => false,
        }
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobStatus {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownName::new("job status", s))
    }
}

/// A job to submit.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// The piece to run: a piece file, a name looked up in `paths.pieces_dirs`, or `auto` (the
    /// worker's classifier chooses).
    pub piece: String,
    /// The task text the run starts with.
    pub task: String,
    /// Who submitted it (a user name, `scheduler`, or the parent job's worker); goes to the
    /// audit log.
    pub submitted_by: String,
    /// The job that spawns this one as a subtask; `None` for a submitted job.
    pub parent_id: Option<JobId>,
    /// Higher runs first; equal priorities run oldest first.
    pub priority: i64,
    /// Only workers serving this class claim the job.
    pub task_class: String,
    /// The absolute directory the run's tools work in; `None`: the run directory's own workspace.
    pub workspace: Option<String>,
    /// Claims allowed before the job ends `failed` (crashed workers and retryable failures
    /// both count).
    pub max_attempts: i64,
    /// Not claimable before this time (None: now).
    pub run_at: Option<OffsetDateTime>,
    /// The user the job belongs to (a user's email; `None`: nobody's, seen by admins only when
    /// the server lists jobs by owner). A subtask takes its parent's owner, and a job a schedule
    /// fires takes the schedule's owner, whatever is given here.
    pub owner: Option<String>,
    /// The job's own caps on what it and its subtasks may spend (the budget ledger's
    /// `job:<id>`); a subtask's are ignored, its root's hold.
    pub budget: crate::budgets::BudgetLimits,
}

impl NewJob {
    /// The class a job has when none is named.
    pub const DEFAULT_CLASS: &'static str = "default";
    /// Attempts allowed when none is named.
    pub const DEFAULT_MAX_ATTEMPTS: i64 = 3;

    /// A job with the default class, priority and attempts.
    pub fn new(
        piece: impl Into<String>,
        task: impl Into<String>,
        submitted_by: impl Into<String>,
    ) -> NewJob {
        NewJob {
            piece: piece.into(),
            task: task.into(),
            submitted_by: submitted_by.into(),
            parent_id: None,
            priority: 0,
            task_class: NewJob::DEFAULT_CLASS.to_string(),
            workspace: None,
            max_attempts: NewJob::DEFAULT_MAX_ATTEMPTS,
            run_at: None,
            owner: None,
            budget: crate::budgets::BudgetLimits::default(),
        }
    }
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    /// The job's id.
    pub id: JobId,
    /// The piece to run, as submitted: a file, a name, or `auto`.
    pub piece: String,
    /// The task text the run starts with.
    pub task: String,
    /// Where the job is in its life.
    pub status: JobStatus,
    /// The job that spawned this one as a subtask; `None` for a submitted job.
    pub parent_id: Option<JobId>,
    /// Higher is claimed first; equal priorities are claimed oldest first.
    pub priority: i64,
    /// Only workers serving this class claim the job.
    pub task_class: String,
    /// The absolute directory the run's tools work in; `None`: the run directory's own workspace.
    pub workspace: Option<String>,
    /// Who submitted it, as the audit log records it.
    pub submitted_by: String,
    /// Claims so far (each claim counts, including rescues of a crashed worker's job).
    pub attempts: i64,
    /// Claims allowed before the job ends `failed`.
    pub max_attempts: i64,
    /// The fencing token of the newest claim; 0 before the first.
    pub fence: i64,
    /// The id of the worker that holds the lease, while the job is `running`.
    pub lease_owner: Option<String>,
    /// When that lease runs out unless it is renewed.
    #[serde(with = "time::serde::rfc3339::option")]
    pub lease_expires_at: Option<OffsetDateTime>,
    /// Not claimed before this time: a retry's backoff, otherwise the submit time.
    #[serde(with = "time::serde::rfc3339")]
    pub run_at: OffsetDateTime,
    /// The run's outcome as JSON (`run_id`, `status`, `result`, `run_dir`), once it has ended.
    pub result: Option<serde_json::Value>,
    /// Why the job failed, was cancelled, or is queued again after a failure.
    pub reason: Option<String>,
    /// When it was submitted.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Its last change.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// The schedule that fired it, if one did.
    pub schedule_id: Option<String>,
    /// The schedule's slot it was fired for, if a schedule fired it.
    #[serde(with = "time::serde::rfc3339::option")]
    pub scheduled_for: Option<OffsetDateTime>,
    /// How far below its root job: 0 for a job someone submitted, 1 for its subtasks, ….
    pub depth: i64,
    /// A subtask's title, as its parent gave it.
    pub title: Option<String>,
    /// A subtask's number among its parent's children, from 1 (its workspace is
    /// `subtasks/<n>/` in the parent's).
    pub child_index: Option<i64>,
    /// The user the job belongs to (an email), when it has one.
    pub owner: Option<String>,
    /// The version of the stored piece its run started with (`None` for a piece from a file
    /// or a pieces directory, and before the run starts); a resumed run uses this version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub piece_version: Option<i64>,
    /// The job's own budget, as submitted (a subtask's tree is capped by its root's: see
    /// [`Store::job_tree_budget`](crate::Store::job_tree_budget)). Read with the job, so that a
    /// root job's run needs no query of its own for it.
    #[serde(skip)]
    pub budget: crate::budgets::BudgetLimits,
}

/// Which task classes a worker claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classes {
    /// Jobs of every class.
    Any,
    /// Jobs whose class is one of these.
    Only(Vec<String>),
}

/// A worker's right to run one job until `expires_at`. Every write about the job after the
/// claim carries it; the store refuses the write when `fence` is no longer the job's newest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The job the lease is for.
    pub job_id: JobId,
    /// The id of the worker that holds it (the job's `lease_owner`).
    pub worker: String,
    /// The fencing token: the job's claim counter at this claim.
    pub fence: i64,
    /// When the lease runs out unless it is renewed with a heartbeat.
    pub expires_at: OffsetDateTime,
}

impl Lease {
    /// Which claim of which job this lease is: what tells an old claim still winding down
    /// from a newer claim of the same job.
    pub fn key(&self) -> LeaseKey {
        LeaseKey {
            job: self.job_id,
            fence: self.fence,
        }
    }
}

/// One claim of one job: the job and the fencing token of that claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseKey {
    /// The job.
    pub job: JobId,
    /// The fencing token: the job's claim counter at that claim.
    pub fence: i64,
}

/// A job a worker has just claimed, with its lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The job as the claim left it: `running`, with its attempt and fencing token counted.
    pub job: Job,
    /// The lease every later write about the job must carry.
    pub lease: Lease,
    /// Whether the job has input files (they come only with its submission). Read with the
    /// claim, once for all of a batch's jobs, so that a run without inputs reads none; `true`
    /// when it could not be read (the run then looks for itself).
    pub has_inputs: bool,
    /// Whether the store held a piece of the name the job gives when it was claimed (read with
    /// the claim, once for a batch's names), so that a job whose piece comes from a file or a
    /// pieces directory makes no query for a stored one; `true` when it could not be read.
    pub piece_stored: bool,
}

/// An event to append to a job's stream. `seq` is chosen by the writer (one more than the last
/// stored), so a replayed append collides instead of duplicating.
///
/// The payload is JSON text, serialised once by whoever makes the event
/// ([`NewEvent::new`]) and stored as it is.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The event's number in the job's stream, one more than the last stored.
    pub seq: i64,
    /// The event's type, e.g. `run_started` or `tool_result`.
    pub kind: String,
    /// The event's body, as JSON text.
    pub payload: Box<serde_json::value::RawValue>,
}

impl NewEvent {
    /// An event whose payload is `payload` as JSON.
    pub fn new(
        seq: i64,
        kind: impl Into<String>,
        payload: &impl serde::Serialize,
    ) -> Result<NewEvent, serde_json::Error> {
        Ok(NewEvent {
            seq,
            kind: kind.into(),
            payload: serde_json::value::to_raw_value(payload)?,
        })
    }
}

impl PartialEq for NewEvent {
    fn eq(&self, other: &NewEvent) -> bool {
        self.seq == other.seq
            && self.kind == other.kind
            && self.payload.get() == other.payload.get()
    }
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    /// The job whose stream holds it.
    pub job_id: JobId,
    /// Its number in the job's stream, from 1.
    pub seq: i64,
    /// The fencing token of the claim that wrote it.
    pub fence: i64,
    /// The event's type, e.g. `run_started` or `tool_result`.
    pub kind: String,
    /// The event's body.
    pub payload: serde_json::Value,
    /// When it was stored.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// How a run that a worker held ended (or parked).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// One of `completed`, `aborted`, `exceeded`, `waiting_input`, `waiting_subtasks`.
    pub status: JobStatus,
    /// The run's outcome as JSON, stored as the job's `result`.
    pub result: Option<serde_json::Value>,
    /// Why it ended this way, stored as the job's `reason`; `None` when there is nothing to say.
    pub reason: Option<String>,
}

/// What happened to a job whose worker reported an infrastructure failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailDisposition {
    /// Queued again, claimable from this time on (exponential backoff with jitter).
    Requeued {
        /// When the job becomes claimable again.
        run_at: OffsetDateTime,
    },
    /// Attempts used up: the job ended `failed`.
    Failed,
}

/// A comment on a job: the run's question, a person's answer, or a note.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comment {
    /// The comment's id, increasing in the order comments were added.
    pub id: i64,
    /// The job it is about.
    pub job_id: JobId,
    /// Who wrote it: a person's name, or the worker for a run's question.
    pub author: String,
    /// Whether it is a question, an answer or a note.
    pub kind: CommentKind,
    /// Its text.
    pub body: String,
    /// When it was added.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// What a comment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommentKind {
    /// The question a run parked on as `waiting_input`.
    Question,
    /// A person's answer to that question (`maestro jobs answer`); it queues the job again.
    Answer,
    /// Any other remark; it changes nothing about the job.
    Note,
}

impl CommentKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CommentKind::Question => "question",
            CommentKind::Answer => "answer",
            CommentKind::Note => "note",
        }
    }

    pub(crate) fn parse(s: &str) -> Result<CommentKind, UnknownName> {
        match s {
            "question" => Ok(CommentKind::Question),
            "answer" => Ok(CommentKind::Answer),
            "note" => Ok(CommentKind::Note),
            other => Err(UnknownName::new("comment kind", other)),
        }
    }
}

/// A live (or recently seen) worker process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerInfo {
    /// The worker's id: a UUIDv7, one per profile of the process.
    pub id: String,
    /// The name the worker was given (`maestro worker --name`).
    pub name: String,
    /// The name of the profile (`workers:` entry) these slots serve.
    pub profile: String,
    /// The task classes it claims; empty: every class.
    pub task_classes: Vec<String>,
    /// The host name of the machine it runs on.
    pub host: String,
    /// Its process id on that host.
    pub pid: i64,
    /// When it registered.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// Its last heartbeat; a worker whose heartbeat is old is no longer listed as live.
    #[serde(with = "time::serde::rfc3339")]
    pub heartbeat_at: OffsetDateTime,
}

/// A schedule to add. `spec` is the schedule's rule as the scheduler writes it (cron, every,
/// daily, …); the store keeps it as text.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSchedule {
    /// The piece each fired job runs.
    pub piece: String,
    /// The task text each fired job starts with.
    pub task: String,
    /// The rule as the scheduler writes it (`cron …`, `every 30s`, `daily 02:30`, …).
    pub spec: String,
    /// The tz database zone the rule's wall-clock times are read in (`--tz`, e.g. `UTC`).
    pub tz: String,
    /// What to do with slots missed while no node ran: `skip` or `catch_up_once` (`--misfire`).
    pub misfire: String,
    /// Who added it, as the audit log records it.
    pub created_by: String,
    /// The user the schedule and every job it fires belong to (an email); `None`: nobody's.
    pub owner: Option<String>,
}

/// A stored schedule and what it fired so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    /// The schedule's id (a UUIDv7).
    pub id: String,
    /// The piece each fired job runs.
    pub piece: String,
    /// The task text each fired job starts with.
    pub task: String,
    /// The rule as the scheduler wrote it (`cron …`, `every 30s`, `daily 02:30`, …).
    pub spec: String,
    /// The tz database zone the rule's wall-clock times are read in.
    pub tz: String,
    /// What to do with slots missed while no node ran: `skip` or `catch_up_once`.
    pub misfire: String,
    /// A paused schedule fires nothing until it is resumed.
    pub paused: bool,
    /// Slots that passed with no node running (skipped, or caught up by one job).
    pub missed: i64,
    /// Slots that fired a job.
    pub fired: i64,
    /// The latest slot fired or recorded as missed.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_slot: Option<OffsetDateTime>,
    /// Who added it.
    pub created_by: String,
    /// The user it and the jobs it fires belong to, when it has one.
    pub owner: Option<String>,
    /// When it was added.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it was added, paused or resumed last.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// One entry of the audit log: who did what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    /// The entry's id, increasing in the order entries were written.
    pub id: i64,
    /// When it happened.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Who did it: a user name, `scheduler`, or the worker that spawned a subtask.
    pub actor: String,
    /// What was done.
    pub action: AuditAction,
    /// The job it was done to, for the job actions.
    pub job_id: Option<JobId>,
    /// The schedule it was done to, for the schedule actions.
    pub schedule_id: Option<String>,
    /// More about the action: the rule of an added schedule; `None` for the others.
    pub detail: Option<String>,
}

/// The actions the audit log records. The column holds each action's name ([`AuditAction::as_str`]);
/// a name this build does not know (written by a newer build, or by hand) reads back as
/// [`AuditAction::Unknown`], so one such row never makes the log unreadable. Serialised as its
/// name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AuditAction {
    /// A job was submitted.
    Submit,
    /// A job was cancelled.
    Cancel,
    /// A waiting job's question was answered.
    Answer,
    /// A schedule was added.
    ScheduleAdd,
    /// A schedule was paused.
    SchedulePause,
    /// A paused schedule was resumed.
    ScheduleResume,
    /// A schedule was removed.
    ScheduleRemove,
    /// A schedule's piece, task or timing was changed.
    ScheduleUpdate,
    /// An API token was created (the detail names its scopes; never the token).
    TokenCreated,
    /// An API token was revoked.
    TokenRevoked,
    /// A user was added.
    UserAdded,
    /// A user's role was changed (the detail holds the new role).
    UserRoleChanged,
    /// A user signed in (a session began).
    Login,
    /// A user signed out (a session ended).
    Logout,
    /// A share link to a job was created.
    ShareCreated,
    /// A share link was revoked.
    ShareRevoked,
    /// A piece was added, changed or removed.
    PieceChanged,
    /// The configuration was changed.
    ConfigChanged,
    /// A gateway virtual key was made (the detail names it and its prefix; never the key).
    GatewayKeyCreated,
    /// A gateway virtual key was revoked.
    GatewayKeyRevoked,
    /// An action this build does not know, by its stored name.
    Unknown(String),
}

impl AuditAction {
    /// Every action this build knows (not [`AuditAction::Unknown`]).
    pub const KNOWN: [AuditAction; 20] = [
        AuditAction::Submit,
        AuditAction::Cancel,
        AuditAction::Answer,
        AuditAction::ScheduleAdd,
        AuditAction::SchedulePause,
        AuditAction::ScheduleResume,
        AuditAction::ScheduleRemove,
        AuditAction::ScheduleUpdate,
        AuditAction::TokenCreated,
        AuditAction::TokenRevoked,
        AuditAction::UserAdded,
        AuditAction::UserRoleChanged,
        AuditAction::Login,
        AuditAction::Logout,
        AuditAction::ShareCreated,
        AuditAction::ShareRevoked,
        AuditAction::PieceChanged,
        AuditAction::ConfigChanged,
        AuditAction::GatewayKeyCreated,
        AuditAction::GatewayKeyRevoked,
    ];

    /// The name stored in the `action` column (an unknown action's own name).
    pub fn as_str(&self) -> &str {
        match self {
            AuditAction::Submit => "submit",
            AuditAction::Cancel => "cancel",
            AuditAction::Answer => "answer",
            AuditAction::ScheduleAdd => "schedule_add",
            AuditAction::SchedulePause => "schedule_pause",
            AuditAction::ScheduleResume => "schedule_resume",
            AuditAction::ScheduleRemove => "schedule_remove",
            AuditAction::ScheduleUpdate => "schedule_update",
            AuditAction::TokenCreated => "token_created",
            AuditAction::TokenRevoked => "token_revoked",
            AuditAction::UserAdded => "user_added",
            AuditAction::UserRoleChanged => "user_role_changed",
            AuditAction::Login => "login",
            AuditAction::Logout => "logout",
            AuditAction::ShareCreated => "share_created",
            AuditAction::ShareRevoked => "share_revoked",
            AuditAction::PieceChanged => "piece_changed",
            AuditAction::ConfigChanged => "config_changed",
            AuditAction::GatewayKeyCreated => "gateway_key_created",
            AuditAction::GatewayKeyRevoked => "gateway_key_revoked",
            AuditAction::Unknown(name) => name,
        }
    }

    /// The action a stored name stands for; a name this build does not know is
    /// [`AuditAction::Unknown`] (never an error).
    pub fn from_name(name: &str) -> AuditAction {
        AuditAction::KNOWN
            .into_iter()
            .find(|a| a.as_str() == name)
            .unwrap_or_else(|| AuditAction::Unknown(name.to_string()))
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for AuditAction {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}
