//! `/api/v1/gateway/keys` (the gateway's virtual keys) and `/api/v1/usage` (what went through
//! it): admins only. A key is shown once, in the answer that makes it.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::ApiJson;
use crate::openapi::schema;
use crate::state::ServerState;

fn now_ms() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp() * 1000
}

impl From<maestro_app::GatewayKeyError> for ApiError {
    fn from(e: maestro_app::GatewayKeyError) -> ApiError {
        match e {
            maestro_app::GatewayKeyError::Invalid { field, message } => {
                ApiError::bad_request(format!("`{field}`: {message}")).with("field", field.into())
            }
            maestro_app::GatewayKeyError::NameTaken(existing) => {
                let id = existing.id.clone();
                let taken = maestro_app::GatewayKeyError::NameTaken(existing);
                ApiError::conflict(format!("`name`: {taken}"))
                    .with("field", "name".into())
                    .with("existing_id", id.into())
            }
            e @ maestro_app::GatewayKeyError::NotFound(_) => ApiError::not_found(e.to_string()),
            maestro_app::GatewayKeyError::Store(e) => e.into(),
        }
    }
}

/// The gateway's virtual keys, revoked and expired ones included (never the keys themselves).
#[utoipa::path(
    get, path = "/api/v1/gateway/keys", tag = "gateway",
    responses(
        (status = 200, description = "The keys", body = Vec<schema::GatewayKey>),
        (status = 403, description = "Not an admin", body = schema::Problem),
    ),
)]
pub(crate) async fn keys(State(state): State<ServerState>, _caller: Caller) -> ApiResult<Response> {
    let now = now_ms();
    let keys = state.store().gateway_keys().await?;
    let views: Vec<_> = keys
        .iter()
        .map(|k| maestro_app::gateway_key_view(k, now))
        .collect();
    Ok(Json(views).into_response())
}

/// `POST /gateway/keys`: what `maestro gateway keys create` takes.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewKeyBody {
    /// A name to tell the key apart (lists, usage, metrics).
    name: String,
    /// The public model names it may call; empty or absent: every model.
    #[serde(default)]
    models: Vec<String>,
    /// Its budget in US dollars, per `period` or in all.
    #[serde(default)]
    budget_usd: Option<f64>,
    /// Its budget in tokens, per `period` or in all.
    #[serde(default)]
    budget_tokens: Option<u64>,
    /// `day`, `week` or `month`; absent: the budgets are totals.
    #[serde(default)]
    period: Option<String>,
    /// Requests per minute.
    #[serde(default)]
    rpm: Option<u64>,
    /// Tokens per minute.
    #[serde(default)]
    tpm: Option<u64>,
    /// When it stops working, RFC 3339.
    #[serde(default)]
    expires: Option<String>,
}

/// Make a virtual key. The answer holds the key this once; the store keeps only its hash.
#[utoipa::path(
    post, path = "/api/v1/gateway/keys", tag = "gateway", request_body = NewKeyBody,
    responses(
        (status = 201, description = "Made: `key` is shown this once", body = schema::NewGatewayKey),
        (status = 400, description = "A field cannot be used (the problem names it): a model no route of `gateway.models` serves, a `period` without a budget, an `expires` that has passed, …", body = schema::Problem),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 409, description = "Another key has the name (revoked keys keep theirs); `existing_id` names it", body = schema::Problem),
    ),
)]
pub(crate) async fn create_key(
    State(state): State<ServerState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewKeyBody>,
) -> ApiResult<Response> {
    let new = maestro_app::NewGatewayKey {
        name: body.name,
        models: body.models,
        budget_usd: body.budget_usd,
        budget_tokens: body.budget_tokens,
        period: body.period,
        rpm: body.rpm,
        tpm: body.tpm,
        expires: body.expires,
    };
    // The routes of the configuration in effect are the models a key may name.
    let config = state.current_config().await;
    let (secret, stored) =
        maestro_app::create_gateway_key_as(state.store(), &caller.name, &config.gateway, new)
            .await?;
    let mut view = maestro_app::gateway_key_view(&stored, now_ms());
    if let Some(object) = view.as_object_mut() {
        object.insert("key".into(), secret.into());
    }
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// Revoke a virtual key: from then on the gateway answers it 401.
#[utoipa::path(
    delete, path = "/api/v1/gateway/keys/{id}", tag = "gateway",
    params(("id" = String, Path, description = "The key's id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 404, description = "No such key", body = schema::Problem),
    ),
)]
pub(crate) async fn revoke_key(
    State(state): State<ServerState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    maestro_app::revoke_gateway_key_as(state.store(), &caller.name, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /usage`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageQuery {
    /// `key`, `model` (default) or `job`.
    by: Option<String>,
    /// From this time on, RFC 3339; default: the beginning.
    from: Option<String>,
    /// Up to this time, exclusive, RFC 3339; default: now.
    to: Option<String>,
}

fn time_param(text: Option<&str>, field: &'static str) -> ApiResult<Option<i64>> {
    let Some(text) = text else {
        return Ok(None);
    };
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| {
            ApiError::bad_request(format!(
                "`{field}` {text:?} is not an RFC 3339 time; write e.g. 2026-11-01T00:00:00Z"
            ))
            .with("field", field.into())
        })?;
    Ok(Some(
        i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX),
    ))
}

/// What went through the gateway, summed by key, model or job: requests, tokens and cost.
#[utoipa::path(
    get, path = "/api/v1/usage", tag = "gateway", params(UsageQuery),
    responses(
        (status = 200, description = "The sums, largest cost first", body = schema::GatewayUsage),
        (status = 400, description = "An unknown `by`, or a time that is not RFC 3339", body = schema::Problem),
        (status = 403, description = "Not an admin", body = schema::Problem),
    ),
)]
pub(crate) async fn usage(
    State(state): State<ServerState>,
    _caller: Caller,
    Query(q): Query<UsageQuery>,
) -> ApiResult<Response> {
    let by = match q.by.as_deref() {
        None | Some("model") => maestro_app::UsageGroup::Model,
        Some("key") => maestro_app::UsageGroup::Key,
        Some("job") => maestro_app::UsageGroup::Job,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "`by` `{}` is not a grouping; write `key`, `model` or `job`",
                other.escape_debug()
            ))
            .with("field", "by".into()));
        }
    };
    let from = time_param(q.from.as_deref(), "from")?;
    let to = time_param(q.to.as_deref(), "to")?;
    let rows = state
        .store()
        .gateway_usage(by, from.unwrap_or(0), to.unwrap_or(i64::MAX))
        .await?;
    let groups: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({
                "key": r.key, "model": r.model, "job": r.job, "requests": r.requests,
                "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                "cost_usd": r.cost_usd,
            })
        })
        .collect();
    Ok(Json(json!({
        "by": q.by.as_deref().unwrap_or("model"),
        "from": maestro_app::rfc3339(from),
        "to": maestro_app::rfc3339(to),
        "groups": groups,
    }))
    .into_response())
}
