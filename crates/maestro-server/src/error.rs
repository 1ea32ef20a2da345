//! Errors as `application/problem+json` (RFC 9457): a status, a title, and a detail a person
//! can act on. Server faults are logged with their cause and answered without it.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use maestro_app::{JobError, StoreError};
use serde::Serialize;

/// The seconds a client is told to wait (`Retry-After`) when the store does not answer.
pub(crate) const RETRY_AFTER_SECS: u64 = 5;

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong and what to do about it.
    pub detail: String,
    /// Fields added to the problem document (`errors`, `fields`, …).
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Headers the answer carries (`WWW-Authenticate`, `Retry-After`); boxed, as most answers
    /// have none and errors travel by value.
    pub(crate) headers: Option<Box<HeaderMap>>,
}

#[derive(Serialize)]
struct Problem<'a> {
    r#type: &'static str,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(flatten)]
    extra: &'a serde_json::Map<String, serde_json::Value>,
}

impl ApiError {
    /// An error with this status and detail.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            detail: detail.into(),
            extra: serde_json::Map::new(),
            headers: None,
        }
    }

    /// 503 with `Retry-After`: the store did not answer (`why`); the request may be sent again
    /// in a few seconds.
    pub(crate) fn store_unavailable(why: &str) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the store does not answer ({why}); nothing was done, send the request again in \
                 {RETRY_AFTER_SECS} s (`/readyz` says when the server is ready again)"
            ),
        )
        .with_header(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS))
    }

    /// 400: the request itself is wrong.
    pub fn bad_request(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, detail)
    }

    /// 404: no such thing, or not one the caller may see.
    pub fn not_found(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, detail)
    }

    /// 409: the thing is not in a state that allows this.
    pub fn conflict(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, detail)
    }

    /// 500, logged with its cause; the answer says only that the server failed. A cause that
    /// is the store not answering (a connection that cannot be had or broke) is 503 instead.
    pub fn internal(what: &str, cause: &(dyn std::error::Error + 'static)) -> ApiError {
        if store_unavailable(cause) {
            tracing::warn!("{what}: {}", maestro_app::error_chain(cause));
            return ApiError::store_unavailable("its connection failed");
        }
        tracing::error!("{what}: {}", maestro_app::error_chain(cause));
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the server failed to {what}; its log says why, try again later"),
        )
    }

    /// Adds a field to the problem document.
    pub fn with(mut self, key: &str, value: serde_json::Value) -> ApiError {
        self.extra.insert(key.to_string(), value);
        self
    }

    /// Adds a header to the answer.
    pub(crate) fn with_header(mut self, name: HeaderName, value: HeaderValue) -> ApiError {
        self.headers.get_or_insert_default().insert(name, value);
        self
    }
}

/// Whether `cause`, or an error it was caused by, is the store not answering.
fn store_unavailable(cause: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(cause);
    while let Some(e) = next {
        if e.downcast_ref::<StoreError>()
            .is_some_and(StoreError::is_unavailable)
        {
            return true;
        }
        next = e.source();
    }
    false
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let body = serde_json::to_vec(&Problem {
            r#type: "about:blank",
            title,
            status: self.status.as_u16(),
            detail: &self.detail,
            extra: &self.extra,
        })
        .unwrap_or_default();
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        if let Some(extra) = self.headers {
            headers.extend(*extra);
        }
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

impl From<JobError> for ApiError {
    fn from(e: JobError) -> ApiError {
        match e {
            JobError::NoSuchJob(id) => ApiError::not_found(format!("no job with id {id}")),
            JobError::Store(e) => e.into(),
            JobError::Files(e) => e.into(),
            JobError::Piece(e) => piece_problem(e),
            // The app's texts speak the CLI's flags; a client of the API gets its own fields.
            JobError::EmptyTask => ApiError::new(
                StatusCode::BAD_REQUEST,
                "the task is empty; say what the job should do in `task`, e.g. \
                 \"make the failing tests pass\"",
            )
            .with("field", "task".into()),
            JobError::MaxAttempts(n) => ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "`max_attempts` {n} is not allowed: a job needs at least 1 attempt; give 1 for \
                     no retry, or leave it out for the default"
                ),
            )
            .with("field", "max_attempts".into()),
            JobError::EmptyAnswer(id) => ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "the answer to job {id} is empty; write the answer to its question \
                     (`GET /api/v1/jobs/{id}` shows it)"
                ),
            )
            .with("field", "answer".into()),
            JobError::EmptyComment(id) => ApiError::bad_request(format!(
                "the comment on job {id} is empty; write what you want to say in `body`"
            ))
            .with("field", "body".into()),
            e @ JobError::NoSuchQuestion { .. } => {
                ApiError::bad_request(e.to_string()).with("field", "in_reply_to".into())
            }
            e @ JobError::NotAJob(_) => ApiError::bad_request(e.to_string()),
            e => ApiError::internal("handle the job", &e),
        }
    }
}

/// A piece that could not be found or loaded, as 422 naming the field `piece`. The server's
/// own paths (the directories searched, a piece file's place) stay in its log: a client gets
/// names.
pub(crate) fn piece_problem(e: maestro_app::PieceError) -> ApiError {
    use maestro_app::PieceError;
    let detail = match &e {
        PieceError::NotFound { given, known, .. } => format!(
            "no piece named `{}`; known pieces: {} (`GET /api/v1/pieces` lists them)",
            given.escape_debug(),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ),
        PieceError::Invalid { path, .. } => {
            tracing::warn!("{}", maestro_app::error_chain(&e));
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            format!(
                "the piece file `{}` on the server is not a valid piece; its errors are in the \
                 server's log, and `maestro validate` on the server shows them",
                name.escape_debug()
            )
        }
        _ => maestro_app::error_chain(&e),
    };
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, detail).with("field", "piece".into())
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::NoSuchJob(id) => ApiError::not_found(format!("no job with id {id}")),
            e @ StoreError::InvalidTransition { .. } => ApiError::conflict(e.to_string()),
            e => ApiError::internal("read or write the store", &e),
        }
    }
}

/// Every error answer as a problem document: an error the router or an extractor answered in
/// plain text (a query string that does not parse, a method a route does not take, a path
/// nothing serves) is rewritten here, so that no handler or extractor has to. Answers already
/// typed (problems, the UI's HTML pages) pass as they are.
pub(crate) async fn problems(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let status = response.status();
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.starts_with("text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // The router's and extractors' texts are short; a longer one is cut.
    let text = match axum::body::to_bytes(body, 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let (new_parts, body) = plain_problem(status, method.as_str(), &path, &text)
        .into_response()
        .into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in &new_parts.headers {
        parts.headers.insert(name.clone(), value.clone());
    }
    Response::from_parts(parts, body)
}

/// The problem for an error answered in plain `text`, saying what is wrong and what to do.
fn plain_problem(status: StatusCode, method: &str, path: &str, text: &str) -> ApiError {
    const ROUTES: &str = "`GET /api/v1/openapi.json` lists every route and its parameters";
    if let Some(rest) = text.strip_prefix("Failed to deserialize query string: ") {
        let field = rest
            .split_once(": ")
            .map(|(field, _)| field)
            .filter(|f| !f.is_empty() && f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        let problem = ApiError::new(
            status,
            format!("the query string of {method} {path} is not accepted: {rest}; {ROUTES}"),
        );
        return match field {
            Some(field) => problem.with("field", field.into()),
            None => problem,
        };
    }
    let detail = match status {
        // The router adds the `Allow` header after this layer has run.
        StatusCode::METHOD_NOT_ALLOWED => format!(
            "{path} does not take {method}; the `Allow` header of this answer lists the methods \
             it takes, and {ROUTES}"
        ),
        StatusCode::NOT_FOUND => format!(
            "nothing is at {method} {path} ({}); {ROUTES}",
            if text.is_empty() { "no route" } else { text }
        ),
        _ if text.is_empty() => format!(
            "{method} {path} was answered {}; {ROUTES}",
            status.canonical_reason().unwrap_or("with an error")
        ),
        _ => format!("{method} {path}: {text}; {ROUTES}"),
    };
    ApiError::new(status, detail)
}

/// The result of a handler.
pub(crate) type ApiResult<T> = Result<T, ApiError>;
