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
    pub kind: &'static str,
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
    pub piece: String,
    pub task: String,
    /// Who submitted it (a user name, `scheduler`, or the parent job's worker); goes to the
    /// audit log.
    pub submitted_by: String,
    pub parent_id: Option<JobId>,
    /// Higher runs first; equal priorities run oldest first.
    pub priority: i64,
    /// Only workers serving this class claim the job.
    pub task_class: String,
    pub workspace: Option<String>,
    /// Claims allowed before the job ends `failed` (crashed workers and retryable failures
    /// both count).
    pub max_attempts: i64,
    /// Not claimable before this time (None: now).
    pub run_at: Option<OffsetDateTime>,
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
        }
    }
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    pub id: JobId,
    pub piece: String,
    pub task: String,
    pub status: JobStatus,
    pub parent_id: Option<JobId>,
    pub priority: i64,
    pub task_class: String,
    pub workspace: Option<String>,
    pub submitted_by: String,
    /// Claims so far (each claim counts, including rescues of a crashed worker's job).
    pub attempts: i64,
    pub max_attempts: i64,
    /// The fencing token of the newest claim; 0 before the first.
    pub fence: i64,
    pub lease_owner: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub lease_expires_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub run_at: OffsetDateTime,
    pub result: Option<serde_json::Value>,
    pub reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    pub schedule_id: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub scheduled_for: Option<OffsetDateTime>,
    /// How far below its root job: 0 for a job someone submitted, 1 for its subtasks, ….
    pub depth: i64,
    /// A subtask's title, as its parent gave it.
    pub title: Option<String>,
    /// A subtask's number among its parent's children, from 1 (its workspace is
    /// `subtasks/<n>/` in the parent's).
    pub child_index: Option<i64>,
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
    pub job_id: JobId,
    pub worker: String,
    /// The fencing token: the job's claim counter at this claim.
    pub fence: i64,
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
    pub job: Job,
    pub lease: Lease,
}

/// An event to append to a job's stream. `seq` is chosen by the writer (one more than the last
/// stored), so a replayed append collides instead of duplicating.
///
/// The payload is JSON text, serialised once by whoever makes the event
/// ([`NewEvent::new`]) and stored as it is.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub seq: i64,
    pub kind: String,
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
    pub job_id: JobId,
    pub seq: i64,
    /// The fencing token of the claim that wrote it.
    pub fence: i64,
    pub kind: String,
    pub payload: serde_json::Value,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// How a run that a worker held ended (or parked).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// One of `completed`, `aborted`, `exceeded`, `waiting_input`, `waiting_subtasks`.
    pub status: JobStatus,
    pub result: Option<serde_json::Value>,
    pub reason: Option<String>,
}

/// What happened to a job whose worker reported an infrastructure failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailDisposition {
    /// Queued again, claimable from this time on (exponential backoff with jitter).
    Requeued { run_at: OffsetDateTime },
    /// Attempts used up: the job ended `failed`.
    Failed,
}

/// A comment on a job: the run's question, a person's answer, or a note.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comment {
    pub id: i64,
    pub job_id: JobId,
    pub author: String,
    pub kind: CommentKind,
    pub body: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// What a comment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommentKind {
    Question,
    Answer,
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
    pub id: String,
    pub name: String,
    pub profile: String,
    pub task_classes: Vec<String>,
    pub host: String,
    pub pid: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub heartbeat_at: OffsetDateTime,
}

/// A schedule to add. `spec` is the schedule's rule as the scheduler writes it (cron, every,
/// daily, …); the store keeps it as text.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSchedule {
    pub piece: String,
    pub task: String,
    pub spec: String,
    pub tz: String,
    pub misfire: String,
    pub created_by: String,
}

/// A stored schedule and what it fired so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    pub id: String,
    pub piece: String,
    pub task: String,
    /// The rule as the scheduler wrote it (`cron …`, `every 30s`, `daily 02:30`, …).
    pub spec: String,
    pub tz: String,
    pub misfire: String,
    pub paused: bool,
    /// Slots that passed with no node running (skipped, or caught up by one job).
    pub missed: i64,
    /// Slots that fired a job.
    pub fired: i64,
    /// The latest slot fired or recorded as missed.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_slot: Option<OffsetDateTime>,
    pub created_by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it was added, paused or resumed last.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// One entry of the audit log: who did what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    pub id: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub actor: String,
    pub action: AuditAction,
    pub job_id: Option<JobId>,
    pub schedule_id: Option<String>,
    pub detail: Option<String>,
}

/// The actions the audit log records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    Submit,
    Cancel,
    Answer,
    ScheduleAdd,
    SchedulePause,
    ScheduleResume,
    ScheduleRemove,
}

impl AuditAction {
    const ALL: [AuditAction; 7] = [
        AuditAction::Submit,
        AuditAction::Cancel,
        AuditAction::Answer,
        AuditAction::ScheduleAdd,
        AuditAction::SchedulePause,
        AuditAction::ScheduleResume,
        AuditAction::ScheduleRemove,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AuditAction::Submit => "submit",
            AuditAction::Cancel => "cancel",
            AuditAction::Answer => "answer",
            AuditAction::ScheduleAdd => "schedule_add",
            AuditAction::SchedulePause => "schedule_pause",
            AuditAction::ScheduleResume => "schedule_resume",
            AuditAction::ScheduleRemove => "schedule_remove",
        }
    }

    pub(crate) fn parse(s: &str) -> Result<AuditAction, UnknownName> {
        AuditAction::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownName::new("audit action", s))
    }
}
