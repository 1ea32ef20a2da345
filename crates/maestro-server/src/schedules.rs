//! `/api/v1/schedules`: list, one, add, update, pause, resume and delete.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maestro_app::{Misfire, ScheduleError, ScheduleRequest, Spec};
use serde::Deserialize;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::ApiJson;
use crate::jobs::piece_name;
use crate::openapi::schema;
use crate::state::ServerState;

/// A spec error's message as the API says it: the app's messages name the CLI's flags (`--cron
/// `…` is not …`), and a request names no flag but the spec's kind, or the body's field.
fn api_wording(e: &impl std::fmt::Display) -> String {
    let message = e.to_string();
    match message.strip_prefix("--") {
        Some(rest) => rest.to_string(),
        None => message,
    }
}

impl From<ScheduleError> for ApiError {
    fn from(e: ScheduleError) -> ApiError {
        match e {
            ScheduleError::NoSuchSchedule(id) => {
                ApiError::not_found(format!("no schedule with id {id}"))
            }
            ScheduleError::Store(e) => e.into(),
            // Each names the body's field at fault, so that a form can show it beside it.
            e @ ScheduleError::Spec(maestro_app::SpecError::Zone(_)) => {
                ApiError::bad_request(api_wording(&e)).with("field", "tz".into())
            }
            e @ ScheduleError::Spec(maestro_app::SpecError::Misfire(_)) => {
                ApiError::bad_request(api_wording(&e)).with("field", "misfire".into())
            }
            e @ ScheduleError::Spec(_) => {
                ApiError::bad_request(api_wording(&e)).with("field", "spec".into())
            }
            e @ ScheduleError::EmptyTask => {
                ApiError::bad_request(e.to_string()).with("field", "task".into())
            }
            ScheduleError::Piece(e) => crate::error::piece_problem(e),
        }
    }
}

/// A schedule to add, or what to change it to.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleBody {
    /// The piece each fired job runs: a name, or `auto`.
    piece: String,
    /// The task each fired job runs.
    task: String,
    /// When it fires: `cron MIN HOUR DOM MON DOW`, `every 30m`, `daily 09:00`,
    /// `weekly mon@09:00`, `monthly 1@09:00` or `once 2026-12-01T09:00:00Z`.
    spec: String,
    /// The tz database zone its times are read in (default `UTC`).
    #[serde(default)]
    tz: Option<String>,
    /// `skip` (default) or `catch_up_once`: what to do with slots missed while no node ran.
    #[serde(default)]
    misfire: Option<String>,
}

impl ScheduleBody {
    fn request(self, caller: &Caller) -> Result<ScheduleRequest, ApiError> {
        piece_name(&self.piece)?;
        let spec = self.spec.parse::<Spec>().map_err(|e| {
            let why = match e {
                maestro_app::SpecError::Stored(_) => String::new(),
                e => format!(" ({})", api_wording(&e)),
            };
            ApiError::bad_request(format!(
                "`spec` `{}` is not understood{why}; write e.g. `cron 0 9 * * 1-5`, \
                 `every 30m`, `daily 09:00`, `weekly mon@09:00`, `monthly 1@09:00` or \
                 `once 2026-12-01T09:00:00Z`",
                self.spec.escape_debug()
            ))
            .with("field", "spec".into())
        })?;
        let misfire = match self.misfire.as_deref() {
            None => Misfire::default(),
            Some(m) => m.parse::<Misfire>().map_err(|e| {
                ApiError::bad_request(api_wording(&e)).with("field", "misfire".into())
            })?,
        };
        Ok(ScheduleRequest {
            piece: self.piece,
            task: self.task,
            spec,
            tz: self.tz.unwrap_or_else(|| "UTC".to_string()),
            misfire,
            created_by: caller.name.clone(),
            owner: caller.owner.clone(),
        })
    }
}

/// Every schedule with its next slot.
#[utoipa::path(
    get, path = "/api/v1/schedules", tag = "schedules",
    responses((status = 200, description = "Oldest first", body = Vec<schema::Schedule>)),
)]
pub(crate) async fn list(State(state): State<ServerState>, caller: Caller) -> ApiResult<Response> {
    let mut all =
        maestro_app::list_schedules(state.store(), time::OffsetDateTime::now_utc()).await?;
    if let Some(owner) = caller.listing_owner() {
        all.retain(|s| s.owner.as_deref() == Some(owner.as_str()));
    }
    Ok(Json(all).into_response())
}

/// Add a schedule.
#[utoipa::path(
    post, path = "/api/v1/schedules", tag = "schedules", request_body = ScheduleBody,
    responses(
        (status = 201, description = "Added", body = schema::Schedule),
        (status = 400, description = "A bad spec, zone or misfire policy", body = schema::Problem),
        (status = 422, description = "No piece of that name", body = schema::Problem),
    ),
)]
pub(crate) async fn add(
    State(state): State<ServerState>,
    caller: Caller,
    ApiJson(body): ApiJson<ScheduleBody>,
) -> ApiResult<Response> {
    let request = body.request(&caller)?;
    let id =
        maestro_app::add_schedule(state.store(), &*state.current_config().await, request).await?;
    let created = one_of(&state, &caller, &id).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

/// The schedule `id` when the caller may see it (an admin, or its owner); 404 otherwise, so
/// that ids of other people's schedules do not leak.
async fn one_of(
    state: &ServerState,
    caller: &Caller,
    id: &str,
) -> Result<maestro_app::ScheduleSummary, ApiError> {
    maestro_app::list_schedules(state.store(), time::OffsetDateTime::now_utc())
        .await?
        .into_iter()
        .find(|s| {
            s.id == id
                && caller
                    .listing_owner()
                    .is_none_or(|owner| s.owner.as_deref() == Some(owner.as_str()))
        })
        .ok_or_else(|| ApiError::not_found(format!("no schedule with id {id}")))
}

/// One schedule.
#[utoipa::path(
    get, path = "/api/v1/schedules/{id}", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "The schedule", body = schema::Schedule),
        (status = 404, description = "No such schedule", body = schema::Problem),
    ),
)]
pub(crate) async fn show(
    State(state): State<ServerState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    Ok(Json(one_of(&state, &caller, &id).await?).into_response())
}

/// Change a schedule; the slots it fired stay fired.
#[utoipa::path(
    put, path = "/api/v1/schedules/{id}", tag = "schedules", request_body = ScheduleBody,
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "Changed", body = schema::Schedule),
        (status = 400, description = "A bad spec, zone or misfire policy", body = schema::Problem),
        (status = 404, description = "No such schedule", body = schema::Problem),
    ),
)]
pub(crate) async fn update(
    State(state): State<ServerState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ScheduleBody>,
) -> ApiResult<Response> {
    one_of(&state, &caller, &id).await?;
    let request = body.request(&caller)?;
    maestro_app::update_schedule(state.store(), &*state.current_config().await, &id, request)
        .await?;
    Ok(Json(one_of(&state, &caller, &id).await?).into_response())
}

/// Pause a schedule: it fires nothing until resumed.
#[utoipa::path(
    post, path = "/api/v1/schedules/{id}/pause", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "Paused", body = schema::Schedule),
        (status = 404, description = "No such schedule", body = schema::Problem),
    ),
)]
pub(crate) async fn pause(
    State(state): State<ServerState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    one_of(&state, &caller, &id).await?;
    maestro_app::set_paused(state.store(), &id, true, &caller.name).await?;
    Ok(Json(one_of(&state, &caller, &id).await?).into_response())
}

/// Resume a paused schedule; the slots that passed while paused are not fired.
#[utoipa::path(
    post, path = "/api/v1/schedules/{id}/resume", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "Resumed", body = schema::Schedule),
        (status = 404, description = "No such schedule", body = schema::Problem),
    ),
)]
pub(crate) async fn resume(
    State(state): State<ServerState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    one_of(&state, &caller, &id).await?;
    maestro_app::set_paused(state.store(), &id, false, &caller.name).await?;
    Ok(Json(one_of(&state, &caller, &id).await?).into_response())
}

/// Delete a schedule; the jobs it fired stay.
#[utoipa::path(
    delete, path = "/api/v1/schedules/{id}", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such schedule", body = schema::Problem),
    ),
)]
pub(crate) async fn delete(
    State(state): State<ServerState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    one_of(&state, &caller, &id).await?;
    maestro_app::remove_schedule(state.store(), &id, &caller.name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use maestro_app::{ScheduleError, SpecError};

    use crate::error::ApiError;

    #[test]
    fn a_refused_schedule_names_the_field_at_fault() {
        for (error, field) in [
            (SpecError::Zone("Mars/Base".into()), "tz"),
            (SpecError::Misfire("later".into()), "misfire"),
            (SpecError::NeverMatches("0 0 30 2 *".into()), "spec"),
            (SpecError::Daily("25:00".into()), "spec"),
        ] {
            let api = ApiError::from(ScheduleError::Spec(error));
            assert_eq!(api.status.as_u16(), 400);
            assert_eq!(api.extra["field"], field, "{}", api.detail);
            // A request names no CLI flag: the message starts with the spec's kind or field.
            assert!(!api.detail.contains("--"), "{}", api.detail);
            assert!(
                api.detail.starts_with(field) || field == "spec",
                "{}",
                api.detail
            );
        }
        let api = ApiError::from(ScheduleError::EmptyTask);
        assert_eq!(api.extra["field"], "task");
    }
}
