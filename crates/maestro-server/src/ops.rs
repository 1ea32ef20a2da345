//! Operations: `/healthz` (the process answers), `/readyz` (the store answers and its schema
//! is current) and `/metrics`.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use maestro_app::NotReady;

use crate::error::ApiError;
use crate::state::ServerState;

/// How long `/readyz`, or a request's check of the store, waits for the store to answer. The
/// store's pool waits longer for a connection (the worker rides out a restart of the
/// database); a load balancer and a client want to know sooner.
const STORE_CHECK: Duration = Duration::from_secs(2);

/// How long a request runs before the store is checked; then again as often while it runs.
const STORE_CHECK_AFTER: Duration = Duration::from_secs(3);

/// Why the store is not ready.
enum Unready {
    /// It answered that it is not ready (it failed, or its schema is another build's).
    Said(NotReady),
    /// It did not answer within [`STORE_CHECK`].
    Silent,
}

impl std::fmt::Display for Unready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unready::Said(e) => write!(f, "{e}"),
            Unready::Silent => write!(
                f,
                "the store does not answer: no answer within {} s",
                STORE_CHECK.as_secs()
            ),
        }
    }
}

/// [`maestro_app::check_ready`], waiting at most [`STORE_CHECK`].
async fn check_store(state: &ServerState) -> Result<(), Unready> {
    match tokio::time::timeout(STORE_CHECK, maestro_app::check_ready(state.store())).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Unready::Said(e)),
        Err(_) => Err(Unready::Silent),
    }
}

/// Answers 503 with `Retry-After` a request that waits on a store that does not answer: while a
/// request runs longer than [`STORE_CHECK_AFTER`], the store is checked (for up to
/// [`STORE_CHECK`]) and, when it does not answer, the request is ended there (it did nothing
/// the store kept: it waited for a connection). A request that runs long for another reason
/// (an upload, a fetch) goes on while the store answers. Without this, a request would wait
/// for the store's pool, which waits long so that the worker rides out a restart.
pub(crate) async fn store_outage(
    State(state): State<ServerState>,
    request: Request,
    next: Next,
) -> Response {
    let handler = next.run(request);
    tokio::pin!(handler);
    loop {
        tokio::select! {
            response = &mut handler => return response,
            () = tokio::time::sleep(STORE_CHECK_AFTER) => {}
        }
        tokio::select! {
            response = &mut handler => return response,
            checked = check_store(&state) => match checked {
                Err(Unready::Said(NotReady::Unreachable(cause))) if cause.is_unavailable() => {
                    tracing::warn!(
                        "a request waits on the store: {}",
                        maestro_app::error_chain(&cause)
                    );
                    return ApiError::store_unavailable("its connection failed").into_response();
                }
                Err(Unready::Silent) => {
                    tracing::warn!("a request waits on the store: {}", Unready::Silent);
                    let why = format!("no answer within {} s", STORE_CHECK.as_secs());
                    return ApiError::store_unavailable(&why).into_response();
                }
                // It answers: the request goes on.
                Ok(()) | Err(Unready::Said(_)) => {}
            },
        }
    }
}

/// The process is up.
#[utoipa::path(
    get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process answers", body = String)),
)]
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// The server can serve: its store answers and has the schema this build writes.
#[utoipa::path(
    get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = String),
        (status = 503, description = "The store does not answer, or its schema differs",
            body = crate::openapi::schema::Problem),
    ),
)]
pub(crate) async fn readyz(State(state): State<ServerState>) -> Response {
    match check_store(&state).await {
        Ok(()) => "ready\n".into_response(),
        Err(e) => {
            match &e {
                Unready::Said(e) => tracing::warn!("not ready: {}", maestro_app::error_chain(e)),
                Unready::Silent => tracing::warn!("not ready: {e}"),
            }
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response()
        }
    }
}

/// Metrics in the Prometheus text format.
#[utoipa::path(
    get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", body = String,
        content_type = "text/plain; version=0.0.4")),
)]
pub(crate) async fn metrics(State(state): State<ServerState>, headers: HeaderMap) -> Response {
    let counts = match maestro_app::job_counts(state.store()).await {
        Ok(counts) => counts,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let openmetrics = with_gateway(state.metrics().render(&counts), state.gateway());
    // A scraper that asks for OpenMetrics gets it as written; any other the 0.0.4 text.
    let wants_openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    if wants_openmetrics {
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            openmetrics,
        )
            .into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            crate::metrics::prometheus_text(&openmetrics),
        )
            .into_response()
    }
}

/// The server's metrics with the mounted gateway's before the closing `# EOF`.
fn with_gateway(mut text: String, gateway: Option<&maestro_app::Gateway>) -> String {
    let Some(gateway) = gateway else {
        return text;
    };
    let eof = text.rfind("# EOF").unwrap_or(text.len());
    let tail = text.split_off(eof);
    gateway.encode_metrics(&mut text);
    text.push_str(&tail);
    text
}
