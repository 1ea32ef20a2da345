//! The routes, their layers, and serving them.

use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;
use crate::openapi::ApiDoc;
use crate::state::ServerState;
use crate::{
    access, events, files, gateway, jobs, knowledge, ops, pieces, schedules, share, system,
};

fn api() -> OpenApiRouter<ServerState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(jobs::submit, jobs::list))
        .routes(routes!(jobs::show))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::children))
        .routes(routes!(jobs::comments, jobs::comment))
        .routes(routes!(events::events))
        .routes(routes!(files::list))
        .routes(routes!(files::download))
        .routes(routes!(schedules::list, schedules::add))
        .routes(routes!(
            schedules::show,
            schedules::update,
            schedules::delete
        ))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(knowledge::list, knowledge::ingest))
        .routes(routes!(knowledge::search))
        .routes(routes!(knowledge::delete))
        .routes(routes!(pieces::list))
        .routes(routes!(pieces::validate))
        .routes(routes!(pieces::graph))
        .routes(routes!(pieces::prompt, pieces::prompt_text))
        .routes(routes!(pieces::show, pieces::put, pieces::delete))
        .routes(routes!(
            pieces::get_config,
            pieces::put_config,
            pieces::patch_config
        ))
        .routes(routes!(system::tools))
        .routes(routes!(system::workers))
        .routes(routes!(access::share))
        .routes(routes!(access::shares))
        .routes(routes!(access::revoke_share))
        .routes(routes!(share::job))
        .routes(routes!(share::events))
        .routes(routes!(share::files))
        .routes(routes!(share::file))
        .routes(routes!(access::me))
        .routes(routes!(access::login))
        .routes(routes!(access::callback))
        .routes(routes!(access::logout))
        .routes(routes!(access::users, access::add_user))
        .routes(routes!(access::set_role))
        .routes(routes!(access::tokens, access::create_token))
        .routes(routes!(access::revoke_token))
        .routes(routes!(access::audit))
        .routes(routes!(gateway::keys, gateway::create_key))
        .routes(routes!(gateway::revoke_key))
        .routes(routes!(gateway::usage))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .routes(routes!(openapi_json))
}

/// This document.
#[utoipa::path(
    get, path = "/api/v1/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object)),
)]
async fn openapi_json() -> Response {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let json = DOC.get_or_init(|| openapi_document().to_pretty_json().unwrap_or_default());
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json.clone(),
    )
        .into_response()
}

/// The OpenAPI document of every route, as `/api/v1/openapi.json` serves it.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    let (_, doc) = api().split_for_parts();
    crate::openapi::finish(doc)
}

/// The server's routes with their limits and metrics, and the LLM gateway at `/v1` when one
/// was set ([`ServerState::set_gateway`]).
pub fn router(state: ServerState) -> Router {
    let (routes, _) = api().split_for_parts();
    let limits = state.limits().clone();
    let gateway = state.gateway().cloned();
    let router = routes
        .merge(maestro_web::router())
        .fallback(not_found)
        .layer(middleware::from_fn(crate::error::problems))
        .layer(DefaultBodyLimit::max(limits.max_upload_bytes))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::ops::store_outage,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state);
    // The gateway's routes keep their own limits and metrics: an answer that is not streamed
    // may take longer than the API's request timeout.
    match gateway {
        Some(gateway) => router.nest("/v1", gateway.router()),
        None => router,
    }
}

async fn not_found(request: Request) -> Response {
    let path = request.uri().path();
    if !path.starts_with("/api/") && maestro_web::wants_html(request.headers()) {
        return maestro_web::not_found_page();
    }
    ApiError::not_found(format!(
        "no route {} {}; `GET /api/v1/openapi.json` lists every route",
        request.method(),
        request.uri().path()
    ))
    .into_response()
}

/// Counts each request by route template and status, and ends a request that takes longer
/// than the limit (streams excepted: their handler answers at once, and the body follows).
async fn observe(State(state): State<ServerState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().to_string();
    let started = Instant::now();
    let timeout = state.limits().request_timeout;
    let response = match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request took longer than {} s (`maestro serve --request-timeout-secs`); try again, \
                 or ask for less at once",
                timeout.as_secs()
            ),
        )
        .into_response(),
    };
    state.metrics().request(
        &route,
        &method,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// Serves `router` on `listener` until `shutdown`, then lets requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
