//! Request bodies read with errors a person can act on: JSON that names the field at fault and
//! what is accepted, and a body over the limit answered 413 with the limit.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::ServerState;

/// A JSON body. Unknown fields are refused by the types that use it (`deny_unknown_fields`),
/// and the error names the field.
#[derive(Debug, Clone)]
pub(crate) struct ApiJson<T>(pub T);

impl<T> FromRequest<ServerState> for ApiJson<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &ServerState) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if !is_json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "send the body as JSON with `Content-Type: application/json`",
            ));
        }
        let bytes = body_bytes(req, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// The whole body, or 413 when it is over the limit of a JSON or YAML body
/// (`Limits::max_body_bytes`; uploads go as multipart parts, up to their own limit).
pub(crate) async fn body_bytes(req: Request, state: &ServerState) -> Result<Bytes, ApiError> {
    let limit = state.limits().max_body_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            too_large(limit)
        } else {
            ApiError::new(
                status,
                format!("the request body could not be read: {rejection}"),
            )
        }
    })?;
    if bytes.len() > limit {
        return Err(too_large(limit));
    }
    Ok(bytes)
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the request body is over the server's limit of {limit} bytes for JSON and YAML; \
             send less, or upload large files as multipart parts"
        ),
    )
}

/// Parses JSON, naming the field at fault.
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let mut message = inner.to_string();
        if message.contains("unknown field `workspace`") {
            message.push_str(
                "; the API never takes a host directory: upload the files the run needs as \
                 multipart parts, and the run finds them in `input/`",
            );
        }
        let detail = if path.is_empty() || path == "." {
            format!("the JSON body is not accepted: {message}")
        } else {
            format!("the JSON body is not accepted at `{path}`: {message}")
        };
        ApiError::bad_request(detail).with("field", serde_json::Value::String(path))
    })
}
