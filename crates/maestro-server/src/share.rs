//! `/share/{token}`: the one unauthenticated read path. A share link shows one job read-only:
//! its status and result, its events and its output files; nothing of any other job, and no
//! configuration. An unknown, revoked or expired link is 404.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maestro_app::JobId;

use crate::error::{ApiError, ApiResult};
use crate::events::{EventsQuery, stream_job};
use crate::openapi::schema;
use crate::state::ServerState;

async fn shared_job(state: &ServerState, token: &str) -> Result<JobId, ApiError> {
    maestro_app::resolve_share(state.store(), token)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(
                "this share link is unknown, revoked or expired; ask its owner for a new one",
            )
        })
}

/// The shared job.
#[utoipa::path(
    get, path = "/share/{token}", tag = "share",
    params(("token" = String, Path, description = "The share link's token")),
    responses(
        (status = 200, description = "The job, read-only", body = schema::SharedJob),
        (status = 404, description = "Unknown, revoked or expired", body = schema::Problem),
    ),
    security(()),
)]
pub(crate) async fn job(
    State(state): State<ServerState>,
    Path(token): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    // A browser following the link gets the read-only job page, which asks for this JSON.
    if maestro_web::wants_html(&headers) {
        return Ok(maestro_web::share_page());
    }
    let id = shared_job(&state, &token).await?;
    let job = maestro_app::job_detail(state.store(), id, &state.current_config().await.llm).await?;
    let s = &job.summary;
    Ok(Json(crate::jobs::with_html(serde_json::json!({
        "id": s.id,
        "status": s.status,
        "piece": s.piece,
        "title": s.title,
        "task": job.task,
        "created_at": s.created_at.format(&time::format_description::well_known::Rfc3339).ok(),
        "updated_at": s.updated_at.format(&time::format_description::well_known::Rfc3339).ok(),
        "result": s.result,
        "question": s.question,
        "usage": job.usage,
    })))
    .into_response())
}

/// The shared job's events, as `GET /api/v1/jobs/{id}/events` gives them.
#[utoipa::path(
    get, path = "/share/{token}/events", tag = "share",
    params(
        ("token" = String, Path, description = "The share link's token"),
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "Server-Sent Events, or JSON lines with `?format=jsonl`",
            content_type = "text/event-stream", body = String),
        (status = 404, description = "Unknown, revoked or expired", body = schema::Problem),
    ),
    security(()),
)]
pub(crate) async fn events(
    State(state): State<ServerState>,
    Path(token): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = shared_job(&state, &token).await?;
    stream_job(state, id, q, &headers).await
}

/// The shared job's output files.
#[utoipa::path(
    get, path = "/share/{token}/files", tag = "share",
    params(("token" = String, Path, description = "The share link's token")),
    responses(
        (status = 200, description = "Its output files", body = Vec<schema::JobFile>),
        (status = 404, description = "Unknown, revoked or expired", body = schema::Problem),
    ),
    security(()),
)]
pub(crate) async fn files(
    State(state): State<ServerState>,
    Path(token): Path<String>,
) -> ApiResult<Response> {
    let id = shared_job(&state, &token).await?;
    let outputs: Vec<_> = maestro_app::job_files(state.store(), id)
        .await?
        .into_iter()
        .filter(|f| f.kind == maestro_app::FileKind::Output)
        .collect();
    Ok(Json(outputs).into_response())
}

/// Download one of the shared job's output files.
#[utoipa::path(
    get, path = "/share/{token}/files/{*path}", tag = "share",
    params(
        ("token" = String, Path, description = "The share link's token"),
        ("path" = String, Path, description = "The file's path"),
        crate::files::FileQuery,
    ),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = String),
        (status = 404, description = "Unknown link, or no such output", body = schema::Problem),
    ),
    security(()),
)]
pub(crate) async fn file(
    State(state): State<ServerState>,
    Path((token, path)): Path<(String, String)>,
    Query(q): Query<crate::files::FileQuery>,
) -> ApiResult<Response> {
    let id = shared_job(&state, &token).await?;
    crate::files::serve_file(
        &state,
        id,
        &path,
        Some(maestro_app::FileKind::Output),
        q.inline(),
    )
    .await
}
