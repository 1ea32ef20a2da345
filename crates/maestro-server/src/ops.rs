//! Operations: `/healthz` (the process answers), `/readyz` (the store answers and its schema
//! is current) and `/metrics`.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::ServerState;

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
    match maestro_app::check_ready(state.store()).await {
        Ok(()) => "ready\n".into_response(),
        Err(e) => {
            tracing::warn!("not ready: {}", maestro_app::error_chain(&e));
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
