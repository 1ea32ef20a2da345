//! Errors the gateway answers itself, in the shape OpenAI clients parse:
//! `{"error": {"message", "type", "code"}}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answer of the gateway's own.
pub(crate) fn error_response(
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    message: String,
) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "code": code}});
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The SSE event that ends a stream the upstream broke off: the OpenAI clients raise it as an
/// API error.
pub(crate) fn stream_error_event(message: &str) -> bytes::Bytes {
    let data =
        json!({"error": {"message": message, "type": "upstream_error", "code": "stream_cut"}});
    bytes::Bytes::from(format!("event: error\ndata: {data}\n\n"))
}
