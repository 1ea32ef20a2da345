//! Jobs as a front end that serves many people lists and shows them: a page at a time, newest
//! first, and one job with everything a client may see of it. No host path leaves here.

use maestro_config::LlmConfig;
use maestro_protocol::Usage;
use maestro_store::{
    Comment, CommentKind, Job, JobFilter, JobId, JobQueue, JobStatus, Store, StoreError,
};
use serde::Serialize;

use crate::job_spend::{JobSpend, job_spend};
use crate::jobs::{JobError, JobSummary, summary};

/// The most jobs one page holds.
pub const MAX_PAGE: u32 = 200;

/// One page of jobs, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobPage {
    /// The jobs of this page.
    pub jobs: Vec<JobDetail>,
    /// Give this as the next request's cursor to read the next page; `None` on the last page.
    pub next_cursor: Option<JobId>,
}

/// A job as a client sees it: what `maestro jobs show --json` prints, with the task, its
/// scheduling fields and the tokens its run used. The result carries no host path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobDetail {
    /// What `maestro jobs show --json` prints; `result` is `{run_id, status, result, usage}`
    /// (the run's id, how it ended, the text it ended with, its tokens) once the run has ended
    /// or parked.
    #[serde(flatten)]
    pub summary: JobSummary,
    /// The task the run was given.
    pub task: String,
    /// Higher runs first among queued jobs.
    pub priority: i64,
    /// The task class, which chooses the workers that may claim it.
    pub class: String,
    /// The tokens of the job's own model calls: from its record for one job, as of the run's
    /// last end or park in a page of jobs.
    pub usage: Usage,
    /// For one job (not in a page of jobs, where reading every job's record would cost too
    /// much): what its calls cost (`cost_usd`, `null` when a model has no price), and the same
    /// for the job with every subtask under it (`tree_usage`, `tree_cost_usd`).
    #[serde(flatten)]
    pub spend: Option<TreeSpend>,
}

/// What a job's calls cost, and what the job with every subtask under it used and cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TreeSpend {
    /// The cost of the job's own calls in US dollars; `None` when a model has no price.
    pub cost_usd: Option<f64>,
    /// The tokens of the job and every subtask under it.
    pub tree_usage: Usage,
    /// Their cost in US dollars; `None` when any call in the tree has a model without a price.
    pub tree_cost_usd: Option<f64>,
}

/// Up to `limit` jobs (at most [`MAX_PAGE`]) matching `filter`, newest first, after the job
/// `cursor` (the previous page's `next_cursor`).
pub async fn jobs_page(
    store: &Store,
    filter: &JobFilter,
    cursor: Option<JobId>,
    limit: u32,
) -> Result<JobPage, JobError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let rows = store.jobs_page(filter, cursor, limit).await?;
    let next_cursor = match rows.last() {
        Some(last) if rows.len() == limit as usize => Some(last.id),
        _ => None,
    };
    let mut jobs = Vec::with_capacity(rows.len());
    for job in rows {
        jobs.push(detail_of(store, job, None).await?);
    }
    Ok(JobPage { jobs, next_cursor })
}

/// One job as a client sees it, its spend priced by `llm`.
pub async fn job_detail(store: &Store, id: JobId, llm: &LlmConfig) -> Result<JobDetail, JobError> {
    let job = store.job(id).await?.ok_or(JobError::NoSuchJob(id))?;
    detail_of(store, job, Some(llm)).await
}

/// `llm` prices the job's record; without it the detail carries the stored usage only.
async fn detail_of(
    store: &Store,
    job: Job,
    llm: Option<&LlmConfig>,
) -> Result<JobDetail, JobError> {
    let spend = match llm {
        Some(llm) => Some(job_spend(store, job.id, llm).await?),
        None => None,
    };
    let task = job.task.clone();
    let priority = job.priority;
    let class = job.task_class.clone();
    let mut summary = summary(store, job).await?;
    if let Some(serde_json::Value::Object(result)) = summary.result.as_mut() {
        result.remove("run_dir");
    }
    let usage = match &spend {
        Some(spend) => spend.usage,
        None => summary
            .result
            .as_ref()
            .and_then(|r| r.get("usage"))
            .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok())
            .unwrap_or_default(),
    };
    Ok(JobDetail {
        summary,
        task,
        priority,
        class,
        usage,
        spend: spend.map(|s: JobSpend| TreeSpend {
            cost_usd: s.cost_usd,
            tree_usage: s.tree_usage,
            tree_cost_usd: s.tree_cost_usd,
        }),
    })
}

/// A job's comments (its questions, their answers and notes), oldest first.
pub async fn job_comments(store: &Store, id: JobId) -> Result<Vec<Comment>, JobError> {
    store.job(id).await?.ok_or(JobError::NoSuchJob(id))?;
    Ok(store.comments(id).await?)
}

/// What a comment did.
#[derive(Debug, Clone, PartialEq)]
pub enum Commented {
    /// The job was waiting for input: the comment is its answer, and the job is queued again
    /// to go on in the same conversation.
    Answered(Comment),
    /// The job was not waiting for input: the comment is a note and changes nothing.
    Note(Comment),
    /// The job was waiting for input, but another answer got there first: this one is kept as
    /// a note, and the job goes on with the other.
    LostRace {
        /// The comment, kept as a note.
        note: Comment,
        /// The job's status after the other answer.
        status: JobStatus,
    },
}

/// Comments on a job. On a job waiting for input the comment is the answer to its question,
/// and exactly one of two racing answers wins. `in_reply_to` names the question a client
/// answers (its comment id): when that question is already answered, the comment is kept as a
/// note and reported as [`Commented::LostRace`], however late it comes. Any other comment is a
/// note. An empty comment is refused.
pub async fn comment_on_job(
    store: &Store,
    id: JobId,
    author: &str,
    body: &str,
    in_reply_to: Option<i64>,
) -> Result<Commented, JobError> {
    if body.trim().is_empty() {
        return Err(JobError::EmptyComment(id));
    }
    let job = store.job(id).await?.ok_or(JobError::NoSuchJob(id))?;
    let waiting = job.status == JobStatus::WaitingInput;
    if let Some(question) = in_reply_to {
        // One read of the thread: whether it asked that question, and which one is open.
        let comments = store.comments(id).await?;
        if !comments
            .iter()
            .any(|c| c.id == question && c.kind == CommentKind::Question)
        {
            return Err(JobError::NoSuchQuestion {
                job: id,
                comment: question,
            });
        }
        let open = comments
            .iter()
            .rev()
            .find(|c| c.kind == CommentKind::Question)
            .map(|c| c.id);
        if !waiting || open != Some(question) {
            let status = store.job(id).await?.map_or(job.status, |j| j.status);
            return lost_race(store, id, author, body, status).await;
        }
    }
    if waiting {
        match store.answer(id, author, body).await {
            Ok(comment_id) => {
                return Ok(Commented::Answered(comment(store, id, comment_id).await?));
            }
            Err(StoreError::InvalidTransition { status, .. }) => {
                return lost_race(store, id, author, body, status).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let note = store
        .add_comment(id, author, CommentKind::Note, body)
        .await?;
    Ok(Commented::Note(comment(store, id, note).await?))
}

/// An answer that came too late, kept as a note.
async fn lost_race(
    store: &Store,
    id: JobId,
    author: &str,
    body: &str,
    status: JobStatus,
) -> Result<Commented, JobError> {
    let note = store
        .add_comment(id, author, CommentKind::Note, body)
        .await?;
    Ok(Commented::LostRace {
        note: comment(store, id, note).await?,
        status,
    })
}

async fn comment(store: &Store, job: JobId, id: i64) -> Result<Comment, JobError> {
    store
        .comments(job)
        .await?
        .into_iter()
        .find(|c| c.id == id)
        .ok_or(JobError::NoSuchJob(job))
}

/// How many jobs are in each status.
pub async fn job_counts(store: &Store) -> Result<Vec<(JobStatus, i64)>, JobError> {
    Ok(store.job_counts().await?)
}

/// Why a store is not ready to serve.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// The store does not answer.
    #[error("the store does not answer")]
    Unreachable(#[source] StoreError),
    /// The store's schema is older or newer than this build's.
    #[error(
        "the store's schema is at version {found}, this build needs {wanted}: run the newer \
         build once to migrate it, or this one against a store it created"
    )]
    Schema {
        /// The newest migration applied.
        found: i64,
        /// The newest migration this build has.
        wanted: i64,
    },
}

/// The store answers and its schema is the one this build writes.
pub async fn check_ready(store: &Store) -> Result<(), NotReady> {
    let applied = store
        .applied_migrations()
        .await
        .map_err(NotReady::Unreachable)?;
    let found = applied.iter().copied().max().unwrap_or(0);
    let wanted = maestro_store::SCHEMA_VERSION;
    if found == wanted {
        Ok(())
    } else {
        Err(NotReady::Schema { found, wanted })
    }
}
