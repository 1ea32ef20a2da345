//! `/api/v1/jobs`: submit, list, show, cancel, children and comments.

use axum::Json;
use axum::extract::{FromRequest as _, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maestro_app::{Commented, JobFilter, JobId, JobStatus, Submission};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::ApiJson;
use crate::openapi::schema;
use crate::state::ServerState;

/// `POST /jobs` as JSON.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubmitBody {
    /// A piece's name (from `GET /pieces`), or `auto` to let the worker choose. Never a path.
    piece: String,
    /// What the run should do.
    task: String,
    /// Higher runs first among queued jobs (default 0).
    #[serde(default)]
    priority: i64,
    /// The task class, which chooses the workers that may claim it (default `default`).
    #[serde(default)]
    class: Option<String>,
    /// Claims allowed before the job ends `failed` (default 3).
    #[serde(default)]
    max_attempts: Option<i64>,
    /// The job's own caps on what it and all its subtasks may spend together; the
    /// configuration's caps apply as well, the tightest winning.
    #[serde(default)]
    budget: Option<BudgetBody>,
}

/// A job's cost caps in `POST /jobs`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BudgetBody {
    /// The most tokens (prompt and completion together); above 0.
    #[serde(default)]
    max_total_tokens: Option<u64>,
    /// The most US dollars, priced by `llm.models.<model>.price`; above 0.
    #[serde(default)]
    max_cost_usd: Option<f64>,
}

/// A piece given to the API must be a name: a path would let any client run any file on the
/// worker hosts.
pub(crate) fn piece_name(piece: &str) -> Result<(), ApiError> {
    let ok = !piece.is_empty()
        && piece.len() <= 128
        && !piece.starts_with('.')
        && piece
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !piece.ends_with(".yaml")
        && !piece.ends_with(".yml");
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "`piece` must be a piece's name as `GET /api/v1/pieces` lists it, or `auto`; `{}` is \
             not one (the API never runs a file path)",
            piece.escape_debug()
        ))
        .with("field", "piece".into()))
    }
}

impl SubmitBody {
    pub(crate) fn into_submission(self, caller: &Caller) -> Result<Submission, ApiError> {
        piece_name(&self.piece)?;
        if let Some(class) = &self.class
            && (class.is_empty() || class.len() > 64)
        {
            return Err(ApiError::bad_request(
                "`class` must be 1 to 64 characters: the name of a task class workers serve",
            )
            .with("field", "class".into()));
        }
        let budget = match self.budget {
            Some(b) => maestro_config::BudgetSettings {
                max_total_tokens: b.max_total_tokens,
                max_cost_usd: b.max_cost_usd,
            },
            None => maestro_config::BudgetSettings::default(),
        };
        if let Some((field, message, fix)) = budget.problems().into_iter().next() {
            return Err(
                ApiError::bad_request(format!("`budget.{field}`: {message}; {fix}"))
                    .with("field", format!("budget.{field}").into()),
            );
        }
        Ok(Submission {
            piece: self.piece,
            task: self.task,
            workspace: None,
            class: self.class,
            priority: self.priority,
            max_attempts: self.max_attempts,
            submitted_by: caller.name.clone(),
            owner: caller.owner.clone(),
            inputs: Vec::new(),
            budget,
        })
    }
}

/// Queue a task.
#[utoipa::path(
    post, path = "/api/v1/jobs", tag = "jobs",
    request_body(content = SubmitBody, description = "The task, as JSON; or multipart/form-data \
        with the same fields and files (each part with a filename lands in `input/`)"),
    responses(
        (status = 201, description = "Queued", body = schema::Job),
        (status = 400, description = "A field is missing, unknown or wrong", body = schema::Problem),
        (status = 422, description = "No piece of that name", body = schema::Problem),
    ),
)]
pub(crate) async fn submit(
    State(state): State<ServerState>,
    caller: Caller,
    request: axum::extract::Request,
) -> ApiResult<Response> {
    let multipart =
        crate::extract::media_type(request.headers()).as_deref() == Some("multipart/form-data");
    let submission = if multipart {
        let form = axum::extract::Multipart::from_request(request, &state)
            .await
            .map_err(|e| {
                ApiError::new(
                    e.status(),
                    format!("the multipart body could not be read: {e}"),
                )
            })?;
        multipart_submission(form, &caller).await?
    } else {
        let ApiJson(body) = ApiJson::<SubmitBody>::from_request(request, &state).await?;
        body.into_submission(&caller)?
    };
    let id = maestro_app::submit(state.store(), &*state.current_config().await, submission).await?;
    let job = maestro_app::job_detail(state.store(), id, &state.current_config().await.llm).await?;
    state.wake_worker();
    Ok((StatusCode::CREATED, Json(job)).into_response())
}

/// A multipart submission: the fields of [`SubmitBody`] as text parts, and files as parts
/// with a filename, each landing at `input/<filename>`.
async fn multipart_submission(
    mut form: axum::extract::Multipart,
    caller: &Caller,
) -> Result<Submission, ApiError> {
    let mut fields = serde_json::Map::new();
    let mut inputs = Vec::new();
    loop {
        let field = form.next_field().await.map_err(|e| {
            ApiError::new(
                e.status(),
                format!("the multipart body could not be read: {}", e.body_text()),
            )
        })?;
        let Some(field) = field else { break };
        let name = field.name().unwrap_or_default().to_string();
        if let Some(file_name) = field.file_name().map(str::to_string) {
            let bytes = field.bytes().await.map_err(|e| {
                ApiError::new(
                    e.status(),
                    format!(
                        "the file \"{}\" could not be read ({}); uploads together may be at most \
                         `maestro serve --max-upload-mb`",
                        file_name.escape_debug(),
                        e.body_text()
                    ),
                )
            })?;
            inputs.push(maestro_app::Upload {
                path: file_name,
                bytes,
            });
            continue;
        }
        let text = field.text().await.map_err(|e| {
            ApiError::bad_request(format!("the form part `{name}` is not text: {e}"))
                .with("field", name.clone().into())
        })?;
        let value = match name.as_str() {
            "priority" | "max_attempts" => text
                .trim()
                .parse::<i64>()
                .map(serde_json::Value::from)
                .map_err(|_| {
                    ApiError::bad_request(format!(
                        "the form part `{name}` must be a whole number, not `{}`",
                        text.escape_debug()
                    ))
                    .with("field", name.clone().into())
                })?,
            "budget" => serde_json::from_str(&text).map_err(|_| {
                ApiError::bad_request(
                    "the form part `budget` is not accepted: `budget` must be JSON: \
                     {\"max_total_tokens\": N, \"max_cost_usd\": X}",
                )
                .with("field", "budget".into())
            })?,
            _ => serde_json::Value::String(text),
        };
        fields.insert(name, value);
    }
    let body: SubmitBody = crate::extract::parse_form(fields)?;
    let mut submission = body.into_submission(caller)?;
    submission.inputs = inputs;
    Ok(submission)
}

/// The query of `GET /jobs`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only jobs in this status (`queued`, `running`, `waiting_input`, `completed`, …).
    status: Option<String>,
    /// Only jobs of this piece (as submitted).
    piece: Option<String>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Jobs per page (1 to 200, default 50).
    limit: Option<u32>,
}

/// List jobs, newest first, a page at a time.
#[utoipa::path(
    get, path = "/api/v1/jobs", tag = "jobs", params(ListQuery),
    responses(
        (status = 200, description = "A page of jobs", body = schema::JobPage),
        (status = 400, description = "A bad filter, cursor or limit", body = schema::Problem),
    ),
)]
pub(crate) async fn list(
    State(state): State<ServerState>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    let status = q
        .status
        .as_deref()
        .map(|s| {
            s.parse::<JobStatus>().map_err(|_| {
                ApiError::bad_request(format!(
                    "`status` `{}` is not a job status; use one of queued, running, \
                     waiting_input, waiting_subtasks, completed, aborted, exceeded, failed, \
                     cancelled",
                    s.escape_debug()
                ))
                .with("field", "status".into())
            })
        })
        .transpose()?;
    let cursor = q
        .cursor
        .as_deref()
        .map(|c| {
            c.parse::<JobId>().map_err(|_| {
                ApiError::bad_request(format!(
                    "`cursor` `{}` is not one: pass the `next_cursor` of the page before (a \
                     job's id), or leave it out for the first page",
                    c.escape_debug()
                ))
                .with("field", "cursor".into())
            })
        })
        .transpose()?;
    let filter = JobFilter {
        status,
        piece: q.piece,
        parent: None,
        owner: caller.listing_owner(),
    };
    let limit = match q.limit {
        None => 50,
        Some(n @ 1..=200) => n,
        Some(n) => {
            return Err(ApiError::bad_request(format!(
                "`limit` {n} is out of range; give 1 to 200 jobs per page (default 50), and \
                 follow `next_cursor` for more"
            ))
            .with("field", "limit".into()));
        }
    };
    let page = maestro_app::jobs_page(state.store(), &filter, cursor, limit).await?;
    Ok(Json(page).into_response())
}

/// Parses a job id from a path or query.
pub(crate) fn parse_job_id(text: &str) -> Result<JobId, ApiError> {
    text.parse::<JobId>().map_err(|_| {
        ApiError::not_found(format!(
            "`{}` is not a job id (ids are UUIDs, as `GET /api/v1/jobs` lists them)",
            text.escape_debug()
        ))
    })
}

/// One job.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job", body = schema::Job),
        (status = 404, description = "No such job (or not one of yours)", body = schema::Problem),
    ),
)]
pub(crate) async fn show(State(state): State<ServerState>, caller: Caller) -> ApiResult<Response> {
    let id = caller.job()?;
    let job = maestro_app::job_detail(state.store(), id, &state.current_config().await.llm).await?;
    Ok(Json(with_html(serde_json::to_value(job).unwrap_or_default())).into_response())
}

/// Adds `result.html` and `question_html`: the result and question rendered from Markdown and
/// sanitised, so that a page can show them without running anything a run wrote.
pub(crate) fn with_html(mut job: serde_json::Value) -> serde_json::Value {
    let html = |text: Option<&serde_json::Value>| {
        text.and_then(|t| t.as_str())
            .map_or(serde_json::Value::Null, |t| {
                maestro_web::markdown_html(t).into()
            })
    };
    if let Some(result) = job.get_mut("result").and_then(|r| r.as_object_mut()) {
        let rendered = html(result.get("result"));
        result.insert("html".into(), rendered);
    }
    let question = html(job.get("question"));
    if let Some(job) = job.as_object_mut() {
        job.insert("question_html".into(), question);
    }
    job
}

/// Cancel a job and its descendants.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/cancel", tag = "jobs",
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The jobs cancelled", body = schema::Cancelled),
        (status = 404, description = "No such job (or not one of yours)", body = schema::Problem),
        (status = 409, description = "The job has already ended", body = schema::Problem),
    ),
)]
pub(crate) async fn cancel(
    State(state): State<ServerState>,
    caller: Caller,
) -> ApiResult<Response> {
    let id = caller.job()?;
    let cancelled = maestro_app::cancel_job(state.store(), id, &caller.name).await?;
    Ok(Json(serde_json::json!({ "cancelled": cancelled })).into_response())
}

/// The subtasks a job spawned.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/children", tag = "jobs",
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "Its children, newest first", body = schema::JobPage),
        (status = 404, description = "No such job (or not one of yours)", body = schema::Problem),
    ),
)]
pub(crate) async fn children(
    State(state): State<ServerState>,
    caller: Caller,
) -> ApiResult<Response> {
    let id = caller.job()?;
    let filter = JobFilter {
        parent: Some(id),
        ..JobFilter::default()
    };
    let page = maestro_app::jobs_page(state.store(), &filter, None, maestro_app::MAX_PAGE).await?;
    Ok(Json(page).into_response())
}

/// A job's comments: its questions, their answers, and notes.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/comments", tag = "jobs",
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "Oldest first", body = Vec<schema::Comment>),
        (status = 404, description = "No such job (or not one of yours)", body = schema::Problem),
    ),
)]
pub(crate) async fn comments(
    State(state): State<ServerState>,
    caller: Caller,
) -> ApiResult<Response> {
    let id = caller.job()?;
    Ok(Json(maestro_app::job_comments(state.store(), id).await?).into_response())
}

/// `POST /jobs/{id}/comments`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CommentBody {
    /// The text. On a job waiting for input it is the answer to its question.
    body: String,
    /// The id of the question (a comment of kind `question`) this answers. When that question
    /// has already been answered, the comment is kept as a note and the answer is 409.
    #[serde(default)]
    in_reply_to: Option<i64>,
}

/// Comment on a job: on a job waiting for input, the answer (the job goes on in the same
/// conversation); otherwise a note.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/comments", tag = "jobs",
    params(("id" = String, Path, description = "The job's id")),
    request_body = CommentBody,
    responses(
        (status = 201, description = "Added; `kind` says whether it answered", body = schema::Comment),
        (status = 404, description = "No such job (or not one of yours)", body = schema::Problem),
        (status = 409, description = "Another answer got there first; this one is kept as a \
            note", body = schema::Problem),
    ),
)]
pub(crate) async fn comment(
    State(state): State<ServerState>,
    caller: Caller,
    ApiJson(body): ApiJson<CommentBody>,
) -> ApiResult<Response> {
    let id = caller.job()?;
    match maestro_app::comment_on_job(
        state.store(),
        id,
        &caller.name,
        &body.body,
        body.in_reply_to,
    )
    .await?
    {
        Commented::Answered(c) => {
            state.wake_worker();
            Ok((StatusCode::CREATED, Json(c)).into_response())
        }
        Commented::Note(c) => Ok((StatusCode::CREATED, Json(c)).into_response()),
        Commented::LostRace { note, status } => Err(ApiError::conflict(format!(
            "the question of job {id} was answered by someone else already and the job is \
             {status} now; your comment is kept as note {} and the run goes on with the other \
             answer",
            note.id
        ))
        .with("note", serde_json::to_value(&note).unwrap_or_default())),
    }
}
