//! Who is asking. Every handler takes a [`Caller`], asks it for the scope it needs, and asks it
//! for the jobs it may see.
//!
//! - Without `auth.enabled`, the server listens on loopback only and every request is the
//!   machine's own user, `local`, who may do everything.
//! - With it, a request carries an API token (`Authorization: Bearer mst_…`) or a session
//!   cookie (`maestro_session`, set by the OIDC login). A cookie-authenticated write must also
//!   send `X-CSRF-Token` with the value of the `maestro_csrf` cookie. No credentials: 401; too
//!   small a scope: 403; another user's job: 404, so that ids do not leak.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, MatchedPath, Path};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use maestro_app::{AccessError, JobId, JobQueue, Principal, Role, Scope};

use crate::error::ApiError;
use crate::jobs::parse_job_id;
use crate::state::ServerState;

/// The session cookie: `HttpOnly; Secure; SameSite=Lax`.
pub(crate) const SESSION_COOKIE: &str = "maestro_session";
/// The CSRF cookie, readable by the page, whose value cookie-authenticated writes send back in
/// [`CSRF_HEADER`].
pub(crate) const CSRF_COOKIE: &str = "maestro_csrf";
/// The header a cookie-authenticated write carries.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// The person or token behind a request.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The name the audit log and comments record: the user's e-mail, or `local`.
    pub(crate) name: String,
    /// Sees and acts on every job.
    pub(crate) admin: bool,
    /// The owner of the jobs and schedules this caller makes, and whose jobs it sees; `None`
    /// without auth.
    pub(crate) owner: Option<String>,
    /// What it authenticated as; `None` without auth.
    pub(crate) principal: Option<Principal>,
    /// The job the route names (`/api/v1/jobs/{id}…`), once the caller is known to see it.
    job: Option<JobId>,
}

impl From<AccessError> for ApiError {
    fn from(e: AccessError) -> ApiError {
        match e {
            AccessError::Store(e) => e.into(),
            e @ (AccessError::NoSuchUser { .. }
            | AccessError::NoSuchToken { .. }
            | AccessError::NoSuchShare { .. }
            | AccessError::NoSuchUserId { .. }
            | AccessError::NoSuchJob(_)) => ApiError::not_found(e.to_string()),
            e @ AccessError::UserExists { .. } => ApiError::conflict(e.to_string()),
            e @ AccessError::Disabled { .. } => ApiError::new(StatusCode::FORBIDDEN, e.to_string()),
            e @ AccessError::ExpiryOutOfRange => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
            }
            e => ApiError::bad_request(e.to_string()),
        }
    }
}

/// The realm of the `WWW-Authenticate` challenge.
const REALM: &str = "maestro";

/// 401 with a `WWW-Authenticate: Bearer` challenge (RFC 6750): `error="invalid_token"` when a
/// bearer token was given and is not one.
fn unauthorized(detail: String, bad_token: bool) -> ApiError {
    let challenge = if bad_token {
        format!("Bearer realm=\"{REALM}\", error=\"invalid_token\"")
    } else {
        format!("Bearer realm=\"{REALM}\"")
    };
    let error = ApiError::new(StatusCode::UNAUTHORIZED, detail);
    match HeaderValue::from_str(&challenge) {
        Ok(value) => error.with_header(header::WWW_AUTHENTICATE, value),
        Err(_) => error,
    }
}

/// How to get credentials: a token, and the login when an OpenID provider is configured.
fn how_to_sign_in(state: &ServerState) -> &'static str {
    if state.oidc().is_some() {
        "send `Authorization: Bearer <token>` (from `maestro tokens create`), or log in at \
         /auth/login"
    } else {
        "send `Authorization: Bearer <token>` (from `maestro tokens create`)"
    }
}

/// The value of cookie `name`, if the request has it.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

impl FromRequestParts<ServerState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ServerState,
    ) -> Result<Self, Self::Rejection> {
        let mut caller = if state.auth().enabled {
            authenticated(parts, state).await?
        } else {
            Caller {
                name: maestro_app::LOCAL_ACTOR.to_string(),
                admin: true,
                owner: None,
                principal: None,
                job: None,
            }
        };
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        // The scope a route needs, checked before its body is read: reads need `read`, writes
        // `write`, and everything under /api/v1/admin, the gateway's keys and its usage `admin`.
        let needed = if route.starts_with("/api/v1/admin")
            || route.starts_with("/api/v1/gateway/")
            || route == "/api/v1/usage"
        {
            Scope::Admin
        } else if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
            Scope::Read
        } else {
            Scope::Write
        };
        caller.require(needed)?;
        // The job a route names must exist and be the caller's (404 otherwise, whatever else is
        // wrong with the request); the handler takes it from `Caller::job`.
        if route.starts_with("/api/v1/jobs/{id}") {
            let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::bad_request(e.body_text()))?;
            let id = params.get("id").map(String::as_str).unwrap_or_default();
            caller.job = Some(caller.visible_job(state, id).await?);
        }
        Ok(caller)
    }
}

/// The caller of a server with auth: an API token, or a session cookie (with the CSRF check on
/// writes); 401 without either.
async fn authenticated(parts: &Parts, state: &ServerState) -> Result<Caller, ApiError> {
    let principal = if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
        let token = value.to_str().ok().and_then(bearer_token).ok_or_else(|| {
            unauthorized(
                "the Authorization header must be `Bearer <token>`, with a token from \
                 `maestro tokens create`"
                    .to_string(),
                false,
            )
        })?;
        maestro_app::authenticate_token(state.store(), token)
            .await?
            .ok_or_else(|| {
                unauthorized(
                    "the API token is not valid: unknown, revoked or expired (or its user is \
                     disabled); create another with `maestro tokens create`"
                        .to_string(),
                    true,
                )
            })?
    } else if let Some(session) = cookie(&parts.headers, SESSION_COOKIE) {
        let (principal, csrf) = maestro_app::session_principal(state.store(), session)
            .await?
            .ok_or_else(|| {
                unauthorized(
                    format!(
                        "the session has ended or expired; {}",
                        how_to_sign_in(state)
                    ),
                    false,
                )
            })?;
        let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
        if !safe {
            let presented = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !csrf.verify(presented) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "the CSRF check failed: a write made with the session cookie must send \
                         the `X-CSRF-Token` header with the value of the `maestro_csrf` cookie",
                ));
            }
        }
        principal
    } else {
        return Err(unauthorized(
            format!("this server needs credentials: {}", how_to_sign_in(state)),
            false,
        ));
    };
    Ok(Caller {
        name: principal.email.clone(),
        admin: principal.role == Role::Admin,
        owner: Some(principal.email.clone()),
        principal: Some(principal),
        job: None,
    })
}

/// The token of an `Authorization` value of the `Bearer` scheme, whose name is
/// case-insensitive (RFC 7235): `Bearer mst_…`, `bearer mst_…`.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl Caller {
    fn require(&self, scope: Scope) -> Result<(), ApiError> {
        match &self.principal {
            None => Ok(()),
            Some(p) if p.can(scope) => Ok(()),
            Some(_) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "this needs the `{scope}` scope, which these credentials do not have; use a \
                     token created with `--scopes {scope}` (the `admin` scope also needs the \
                     admin role)"
                ),
            )),
        }
    }

    /// The configuration is the admins' (with auth; without it, the machine's user's).
    pub(crate) fn require_config(&self) -> Result<(), ApiError> {
        if self.principal.is_some() && !self.admin {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the configuration is read and changed by admins only",
            ));
        }
        Ok(())
    }

    /// Stored pieces are the admins' to change (with auth; without it, the machine's user's):
    /// every user's jobs run them, and a stored piece wins over a directory's of the same name.
    pub(crate) fn require_piece_change(&self) -> Result<(), ApiError> {
        if self.principal.is_some() && !self.admin {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "stored pieces are written and deleted by admins only, as every user's jobs run \
                 them; ask an admin to make the change (anyone who reads may check a piece with \
                 `POST /api/v1/pieces/validate` and preview its prompts)",
            ));
        }
        Ok(())
    }

    /// The owner a listing is narrowed to: none for an admin, the caller's own otherwise.
    pub(crate) fn listing_owner(&self) -> Option<String> {
        if self.admin { None } else { self.owner.clone() }
    }

    /// The job the route names, which the caller may see (checked when the caller was made).
    pub(crate) fn job(&self) -> Result<JobId, ApiError> {
        self.job
            .ok_or_else(|| ApiError::not_found("this route names no job"))
    }

    /// The job `id` when it exists and the caller may see it; 404 otherwise, so that ids of
    /// other people's jobs do not leak.
    async fn visible_job(&self, state: &ServerState, id: &str) -> Result<JobId, ApiError> {
        let id = parse_job_id(id)?;
        match state.store().job(id).await? {
            Some(job) if self.admin || (job.owner.is_some() && job.owner == self.owner) => Ok(id),
            _ => Err(ApiError::not_found(format!("no job with id {id}"))),
        }
    }
}
