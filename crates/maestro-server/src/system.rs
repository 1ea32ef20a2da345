//! `/api/v1/tools` and `/api/v1/workers`: what runs can use, and who runs them.

use std::collections::HashSet;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maestro_app::{JobId, JobQueue as _, JobStatus};

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::openapi::schema;
use crate::state::ServerState;

/// How recent a worker's heartbeat must be for it to be listed.
const LIVE_WITHIN: Duration = Duration::from_secs(60);

/// The configured tools with their input schemas, and the MCP servers that did not answer.
#[utoipa::path(
    get, path = "/api/v1/tools", tag = "system",
    responses((status = 200, description = "The tools", body = schema::Tools)),
)]
pub(crate) async fn tools(
    State(state): State<ServerState>,
    _caller: Caller,
) -> ApiResult<Response> {
    let listing = maestro_app::list_tools(&*state.current_config().await)
        .await
        .map_err(|e| ApiError::internal("list the tools", &e))?;
    let unavailable: Vec<_> = listing
        .unavailable
        .into_iter()
        .map(|(server, reason)| serde_json::json!({ "server": server, "reason": reason }))
        .collect();
    Ok(
        Json(serde_json::json!({ "tools": listing.specs, "unavailable": unavailable }))
            .into_response(),
    )
}

/// The live workers and the jobs each runs now: every job for an admin, the caller's own for
/// anyone else, so that ids of other people's jobs do not leak.
#[utoipa::path(
    get, path = "/api/v1/workers", tag = "system",
    responses((status = 200, description = "Live workers", body = Vec<schema::WorkerEntry>)),
)]
pub(crate) async fn workers(
    State(state): State<ServerState>,
    caller: Caller,
) -> ApiResult<Response> {
    let mut workers = maestro_app::live_workers(state.store(), LIVE_WITHIN).await?;
    if let Some(owner) = caller.listing_owner() {
        // A job that starts between the two reads is left out: never one of someone else's.
        let own: HashSet<JobId> = state
            .store()
            .jobs(Some(JobStatus::Running))
            .await?
            .into_iter()
            .filter(|job| job.owner.as_deref() == Some(owner.as_str()))
            .map(|job| job.id)
            .collect();
        for worker in &mut workers {
            worker.running.retain(|id| own.contains(id));
        }
    }
    Ok(Json(workers).into_response())
}
