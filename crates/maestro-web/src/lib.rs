//! Maestro's web UI. The server sends each page as a small HTML shell (rendered here with maud);
//! the page's own script, an ES module embedded in the binary with the styles, then builds it
//! from the public API alone (`/api/v1`, the event stream, share links). Nothing here reads the
//! store, so everything the UI shows is also there for scripts.
//!
//! Safety: every page is served with a strict Content-Security-Policy (scripts from this origin
//! only, no inline script or style, no plugins, no framing), the scripts build the DOM from
//! text, never from HTML, and the one piece of HTML a job contributes, its result rendered
//! from Markdown, is sanitised on the server by [`markdown_html`] before it is sent.

mod assets;
mod markdown;
mod pages;

use axum::Router;
use axum::extract::{Path, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

pub use markdown::markdown_html;
pub use pages::Page;

/// The Content-Security-Policy of every page: scripts, styles, images and connections from this
/// origin only; `data:`/`blob:` images for previews; frames of this origin (PDF preview).
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data: blob:; connect-src 'self'; frame-src 'self'; font-src 'self'; \
    manifest-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The UI's routes: the pages and `/ui/…`, their scripts and styles. The server merges them
/// with the API's; `/share/{token}` is the API's too, and the server answers it with
/// [`share_page`] when a browser asks for HTML.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Page::Submit.render() }))
        .route("/jobs", get(|| async { Page::Jobs.render() }))
        .route("/jobs/{id}", get(|| async { Page::Job.render() }))
        .route("/pieces", get(|| async { Page::Pieces.render() }))
        .route("/pieces/{name}", get(|| async { Page::Piece.render() }))
        .route("/schedules", get(|| async { Page::Schedules.render() }))
        .route("/config", get(|| async { Page::Config.render() }))
        .route("/admin", get(|| async { Page::Admin.render() }))
        .route("/login", get(|| async { Page::Login.render() }))
        .route("/ui/{file}", get(asset))
        .layer(middleware::from_fn(secure))
}

/// The read-only job page of a share link, for someone who is not logged in.
pub fn share_page() -> Response {
    with_security_headers(Page::Share.render())
}

/// A page for a path nothing serves, for a browser that asked for HTML.
pub fn not_found_page() -> Response {
    let mut response = with_security_headers(Page::NotFound.render());
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// True when the request's `Accept` prefers HTML, as a browser's navigation does (a script's
/// `fetch` or `curl` asks for anything, or JSON).
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.split(',').next().unwrap_or("").trim() == "text/html")
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let Some(asset) = assets::get(&file) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    let etag = asset.etag();
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag)
    {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let mut response = asset.body.into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    response
}

async fn secure(request: Request, next: Next) -> Response {
    with_security_headers(next.run(request).await)
}

fn with_security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // A share link's token is in its URL: never send it on to another site.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
