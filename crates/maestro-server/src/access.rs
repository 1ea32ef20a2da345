//! Logging in and out (`/auth/…`), who am I (`/api/v1/me`), the admin's users, tokens and
//! audit log (`/api/v1/admin/…`), and share links (`/api/v1/jobs/{id}/share…`).

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maestro_app::{AccessError, AuditAction, AuthVia, Role, Scope};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::{CSRF_COOKIE, Caller, SESSION_COOKIE, cookie};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, OptionalJson};
use crate::oidc::LOGIN_TTL;
use crate::openapi::schema;
use crate::state::ServerState;

/// Who the caller is.
#[utoipa::path(
    get, path = "/api/v1/me", tag = "auth",
    responses(
        (status = 200, description = "The caller", body = schema::Me),
        (status = 401, description = "No valid credentials", body = schema::Problem),
    ),
)]
pub(crate) async fn me(
    State(state): State<ServerState>,
    caller: Caller,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (role, scopes, via) = match &caller.principal {
        None => (
            Role::Admin,
            vec![Scope::Read, Scope::Write, Scope::Admin],
            "none",
        ),
        Some(p) => (
            p.role,
            p.scopes.clone(),
            match p.via {
                AuthVia::Token { .. } => "token",
                AuthVia::Session => "session",
            },
        ),
    };
    let csrf = cookie(&headers, CSRF_COOKIE).map(str::to_string);
    Ok(Json(serde_json::json!({
        "email": caller.name,
        "role": role,
        "scopes": scopes,
        "auth": via,
        "auth_enabled": state.auth().enabled,
        "oidc": state.oidc().is_some(),
        "csrf_token": csrf,
    }))
    .into_response())
}

/// The query of `/auth/login`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct LoginQuery {
    /// Where to go after logging in: a path on this server (default `/`).
    redirect_to: Option<String>,
}

/// A path on this server, never another site (an open redirect would let a link log a user in
/// and send them anywhere).
fn local_path(path: Option<String>) -> String {
    match path {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') => p,
        _ => "/".to_string(),
    }
}

/// Begin an OpenID Connect login: redirects to the provider.
#[utoipa::path(
    get, path = "/auth/login", tag = "auth", params(LoginQuery),
    responses(
        (status = 302, description = "To the provider's login page"),
        (status = 404, description = "No OpenID provider is configured", body = schema::Problem),
        (status = 502, description = "The provider does not answer", body = schema::Problem),
    ),
)]
pub(crate) async fn login(
    State(state): State<ServerState>,
    Query(q): Query<LoginQuery>,
) -> ApiResult<Response> {
    let oidc = state.oidc().ok_or_else(|| {
        ApiError::not_found(
            "no OpenID provider is configured (`auth.oidc`); use an API token instead",
        )
    })?;
    let begun = oidc.begin().await.map_err(|e| {
        tracing::warn!("login: {e}");
        ApiError::new(StatusCode::BAD_GATEWAY, e.to_string())
    })?;
    maestro_app::begin_login(
        state.store(),
        &begun.state,
        &begun.verifier,
        &begun.nonce,
        Some(local_path(q.redirect_to)),
        LOGIN_TTL,
    )
    .await?;
    Ok(Redirect::to(&begun.url).into_response())
}

/// The query the provider sends the browser back with.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct CallbackQuery {
    /// The authorization code.
    code: Option<String>,
    /// The state the login began with.
    state: Option<String>,
    /// The provider's error, when the login failed there.
    error: Option<String>,
    /// Its description.
    error_description: Option<String>,
}

/// Finish an OpenID Connect login: sets the session cookies and redirects.
#[utoipa::path(
    get, path = "/auth/callback", tag = "auth", params(CallbackQuery),
    responses(
        (status = 302, description = "Logged in; to where the login began"),
        (status = 400, description = "The login expired, was used already, or the provider \
            refused it", body = schema::Problem),
        (status = 403, description = "The user is disabled", body = schema::Problem),
    ),
)]
pub(crate) async fn callback(
    State(state): State<ServerState>,
    Query(q): Query<CallbackQuery>,
) -> ApiResult<Response> {
    if let Some(error) = q.error {
        return Err(ApiError::bad_request(format!(
            "the OpenID provider refused the login: {error}{}; start again at /auth/login",
            q.error_description
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )));
    }
    let (Some(code), Some(login_state)) = (q.code, q.state) else {
        return Err(ApiError::bad_request(
            "the callback needs `code` and `state` from the OpenID provider; start again at \
             /auth/login",
        ));
    };
    let oidc = state
        .oidc()
        .ok_or_else(|| ApiError::not_found("no OpenID provider is configured (`auth.oidc`)"))?;
    let pending = maestro_app::take_login(state.store(), &login_state)
        .await?
        .ok_or_else(|| {
            ApiError::bad_request(
                "this login expired or was finished already; start again at /auth/login",
            )
        })?;
    let email = oidc
        .finish(&code, pending.verifier.expose(), &pending.nonce)
        .await
        .map_err(|e| {
            tracing::warn!("login: {e}");
            ApiError::bad_request(format!("{e}; start again at /auth/login"))
        })?;
    let user = maestro_app::login_user(state.store(), &email, &state.auth().admins).await?;
    let ttl = Duration::from_secs(state.auth().session_ttl_hours.saturating_mul(3600));
    let session = maestro_app::create_session(state.store(), &user.id, ttl).await?;
    maestro_app::record_audit(state.store(), &user.email, AuditAction::Login, None, None).await?;
    let max_age = ttl.as_secs();
    let mut response = Redirect::to(&local_path(pending.redirect_to)).into_response();
    let headers = response.headers_mut();
    for value in [
        format!(
            "{SESSION_COOKIE}={}; Path=/; Max-Age={max_age}; HttpOnly; Secure; SameSite=Lax",
            session.id.expose()
        ),
        format!(
            "{CSRF_COOKIE}={}; Path=/; Max-Age={max_age}; Secure; SameSite=Lax",
            session.csrf.expose()
        ),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.append(header::SET_COOKIE, v);
        }
    }
    Ok(response)
}

/// End the session.
#[utoipa::path(
    post, path = "/auth/logout", tag = "auth",
    responses(
        (status = 204, description = "Logged out; the cookies are cleared"),
        (status = 401, description = "No valid credentials", body = schema::Problem),
        (status = 403, description = "The CSRF check failed", body = schema::Problem),
    ),
)]
pub(crate) async fn logout(
    State(state): State<ServerState>,
    caller: Caller,
    headers: HeaderMap,
) -> ApiResult<Response> {
    if let Some(session) = cookie(&headers, SESSION_COOKIE) {
        maestro_app::end_session(state.store(), session).await?;
        maestro_app::record_audit(state.store(), &caller.name, AuditAction::Logout, None, None)
            .await?;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    for name in [SESSION_COOKIE, CSRF_COOKIE] {
        if let Ok(v) =
            HeaderValue::from_str(&format!("{name}=; Path=/; Max-Age=0; Secure; SameSite=Lax"))
        {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    Ok(response)
}

/// Every user.
#[utoipa::path(
    get, path = "/api/v1/admin/users", tag = "admin",
    responses(
        (status = 200, description = "The users", body = Vec<schema::User>),
        (status = 403, description = "Not an admin", body = schema::Problem),
    ),
)]
pub(crate) async fn users(
    State(state): State<ServerState>,
    _caller: Caller,
) -> ApiResult<Response> {
    Ok(Json(maestro_app::list_users(state.store()).await?).into_response())
}

/// `POST /admin/users`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewUserBody {
    /// The user's e-mail address: their name everywhere.
    email: String,
    /// `admin` or `user` (default).
    #[serde(default)]
    role: Option<String>,
}

/// Add a user.
#[utoipa::path(
    post, path = "/api/v1/admin/users", tag = "admin", request_body = NewUserBody,
    responses(
        (status = 201, description = "Added", body = schema::User),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 409, description = "The user exists", body = schema::Problem),
    ),
)]
pub(crate) async fn add_user(
    State(state): State<ServerState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewUserBody>,
) -> ApiResult<Response> {
    let role: Role = body.role.as_deref().unwrap_or("user").parse()?;
    let mut user = maestro_app::add_user_as(
        state.store(),
        &caller.name,
        &body.email,
        role == Role::Admin,
    )
    .await?;
    if role == Role::Disabled {
        user = maestro_app::set_role_as(state.store(), &caller.name, &user.email, role).await?;
    }
    Ok((StatusCode::CREATED, Json(user)).into_response())
}

/// `PUT /admin/users/{email}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RoleBody {
    /// `admin`, `user` or `disabled` (which ends the user's sessions and stops their tokens).
    role: String,
}

/// Change a user's role.
#[utoipa::path(
    put, path = "/api/v1/admin/users/{email}", tag = "admin", request_body = RoleBody,
    params(("email" = String, Path, description = "The user's e-mail address")),
    responses(
        (status = 200, description = "Changed", body = schema::User),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 404, description = "No such user", body = schema::Problem),
    ),
)]
pub(crate) async fn set_role(
    State(state): State<ServerState>,
    caller: Caller,
    Path(email): Path<String>,
    ApiJson(body): ApiJson<RoleBody>,
) -> ApiResult<Response> {
    let role: Role = body.role.parse()?;
    Ok(
        Json(maestro_app::set_role_as(state.store(), &caller.name, &email, role).await?)
            .into_response(),
    )
}

/// Every API token (never the token itself, only its first characters).
#[utoipa::path(
    get, path = "/api/v1/admin/tokens", tag = "admin",
    responses(
        (status = 200, description = "The tokens", body = Vec<schema::Token>),
        (status = 403, description = "Not an admin", body = schema::Problem),
    ),
)]
pub(crate) async fn tokens(
    State(state): State<ServerState>,
    _caller: Caller,
) -> ApiResult<Response> {
    Ok(Json(maestro_app::list_tokens(state.store(), None).await?).into_response())
}

/// An expiry in the body (`field`, in `unit`s, at most `max` of them: 100 years) out of range,
/// as 422 naming the field and the bound it crossed; another access error as it maps.
fn naming_expiry(
    field: &'static str,
    given: u64,
    unit: &'static str,
    max: u64,
) -> impl FnOnce(AccessError) -> ApiError {
    move |e| match e {
        AccessError::ExpiryOutOfRange => {
            let detail = if given == 0 {
                format!(
                    "`{field}` is 0: it must be at least 1 (a link or token that expires at once \
                     is of no use); give 1 to {max} {unit}, or leave it out for no expiry"
                )
            } else {
                format!(
                    "`{field}` {given} is too far: it must be at most {max} {unit} (100 years); \
                     give a smaller number, or leave it out for no expiry"
                )
            };
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, detail).with("field", field.into())
        }
        e => e.into(),
    }
}

/// `POST /admin/tokens`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTokenBody {
    /// The user the token acts as.
    user: String,
    /// Some of `read`, `write`, `admin`.
    scopes: Vec<String>,
    /// A name to recognise it by.
    #[serde(default)]
    name: Option<String>,
    /// Days until it expires (default: never).
    #[serde(default)]
    expires_days: Option<u64>,
}

/// Create an API token; the answer is the only time the token is shown.
#[utoipa::path(
    post, path = "/api/v1/admin/tokens", tag = "admin", request_body = NewTokenBody,
    responses(
        (status = 201, description = "Created: `token` is shown this once", body = schema::NewToken),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 404, description = "No such user", body = schema::Problem),
        (status = 422, description = "`expires_days` is zero or over 100 years", body = schema::Problem),
    ),
)]
pub(crate) async fn create_token(
    State(state): State<ServerState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewTokenBody>,
) -> ApiResult<Response> {
    let scopes = Scope::parse_list(&body.scopes.join(","))?;
    let (info, token) = maestro_app::create_token_as(
        state.store(),
        &caller.name,
        &body.user,
        &scopes,
        body.name,
        body.expires_days
            .map(|d| Duration::from_secs(d.saturating_mul(86_400))),
    )
    .await
    .map_err(naming_expiry(
        "expires_days",
        body.expires_days.unwrap_or_default(),
        "days",
        36_500,
    ))?;
    let mut value = serde_json::to_value(&info).unwrap_or_default();
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("token".into(), token.expose().into());
    }
    Ok((StatusCode::CREATED, Json(value)).into_response())
}

/// Revoke an API token.
#[utoipa::path(
    delete, path = "/api/v1/admin/tokens/{id}", tag = "admin",
    params(("id" = String, Path, description = "The token's id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 404, description = "No such token", body = schema::Problem),
    ),
)]
pub(crate) async fn revoke_token(
    State(state): State<ServerState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    maestro_app::revoke_token_as(state.store(), &caller.name, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The query of `/admin/audit`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    /// The `next_cursor` of the previous page.
    cursor: Option<i64>,
    /// Entries per page (1 to 1,000, default 100).
    limit: Option<i64>,
    /// `oldest` first (the default; `cursor` pages forward) or `newest` first (`cursor` pages
    /// back in time).
    order: Option<String>,
}

/// The audit log, a page at a time.
#[utoipa::path(
    get, path = "/api/v1/admin/audit", tag = "admin", params(AuditQuery),
    responses(
        (status = 200, description = "A page of the audit log", body = schema::AuditPage),
        (status = 400, description = "An unknown order", body = schema::Problem),
        (status = 403, description = "Not an admin", body = schema::Problem),
    ),
)]
pub(crate) async fn audit(
    State(state): State<ServerState>,
    _caller: Caller,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Response> {
    let limit = q.limit.unwrap_or(100).clamp(1, maestro_app::AUDIT_PAGE_MAX);
    let entries = match q.order.as_deref() {
        None | Some("oldest") => maestro_app::audit_log(state.store(), q.cursor, limit).await?,
        Some("newest") => maestro_app::audit_log_newest(state.store(), q.cursor, limit).await?,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "`order` `{}` is not an order; write `oldest` or `newest`",
                other.escape_debug()
            ))
            .with("field", "order".into()));
        }
    };
    let next_cursor = match entries.last() {
        Some(last) if entries.len() as i64 == limit => Some(last.id),
        _ => None,
    };
    Ok(Json(serde_json::json!({ "entries": entries, "next_cursor": next_cursor })).into_response())
}

/// `POST /jobs/{id}/share`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShareBody {
    /// Hours until the link stops working (default: until revoked).
    #[serde(default)]
    expires_in_hours: Option<u64>,
}

/// Share a job read-only: its result, events and output files, through an unguessable link.
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/share", tag = "jobs",
    request_body(content = Option<ShareBody>, description = "Optional: no body, or an empty one, is \
        `{}` (a link until revoked)"),
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 201, description = "The link: `token` is shown this once", body = schema::NewShare),
        (status = 404, description = "No such job (or not one of yours)", body = schema::Problem),
        (status = 422, description = "`expires_in_hours` is zero or over 100 years", body = schema::Problem),
    ),
)]
pub(crate) async fn share(
    State(state): State<ServerState>,
    caller: Caller,
    OptionalJson(body): OptionalJson<ShareBody>,
) -> ApiResult<Response> {
    let id = caller.job()?;
    let (info, token) = maestro_app::create_share(
        state.store(),
        id,
        &caller.name,
        body.expires_in_hours
            .map(|h| Duration::from_secs(h.saturating_mul(3600))),
    )
    .await
    .map_err(naming_expiry(
        "expires_in_hours",
        body.expires_in_hours.unwrap_or_default(),
        "hours",
        876_000,
    ))?;
    let url = format!(
        "{}/share/{}",
        state
            .auth()
            .public_url
            .as_deref()
            .unwrap_or("")
            .trim_end_matches('/'),
        token.expose()
    );
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({
            "url": url,
            "token": token.expose(),
            "id": info.id,
            "expires_at": info.expires_at
                .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok()),
        })),
    )
        .into_response())
}

/// A job's share links.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/shares", tag = "jobs",
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "Its links (never their tokens)", body = Vec<schema::Share>),
        (status = 404, description = "No such job (or not one of yours)", body = schema::Problem),
    ),
)]
pub(crate) async fn shares(
    State(state): State<ServerState>,
    caller: Caller,
) -> ApiResult<Response> {
    let id = caller.job()?;
    Ok(Json(maestro_app::list_shares(state.store(), id).await?).into_response())
}

/// Revoke a share link.
#[utoipa::path(
    delete, path = "/api/v1/jobs/{id}/shares/{share_id}", tag = "jobs",
    params(
        ("id" = String, Path, description = "The job's id"),
        ("share_id" = String, Path, description = "The link's id"),
    ),
    responses(
        (status = 204, description = "Revoked"),
        (status = 404, description = "No such job or link", body = schema::Problem),
    ),
)]
pub(crate) async fn revoke_share(
    State(state): State<ServerState>,
    caller: Caller,
    Path((_job, share_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let id = caller.job()?;
    let ours = maestro_app::list_shares(state.store(), id)
        .await?
        .into_iter()
        .any(|s| s.id == share_id);
    if !ours {
        return Err(ApiError::not_found(format!(
            "job {id} has no share link {share_id}"
        )));
    }
    maestro_app::revoke_share_as(state.store(), &caller.name, &share_id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
