//! Request bodies read with errors a person can act on: JSON that names the field at fault and
//! what is accepted, and a body over the limit answered 413 with the limit.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::ServerState;

/// The media type of a request's `Content-Type`, lowercased and without its parameters
/// (`Application/JSON; charset=utf-8` is `application/json`): media types are
/// case-insensitive (RFC 9110).
pub(crate) fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next().unwrap_or_default().trim();
    (!essence.is_empty()).then(|| essence.to_ascii_lowercase())
}

fn not_json() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "send the body as JSON with `Content-Type: application/json`",
    )
}

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
        if media_type(req.headers()).as_deref() != Some("application/json") {
            return Err(not_json());
        }
        let bytes = body_bytes(req, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// A JSON body that may be left out: no body, an empty one or `null` is read as `{}` (whatever
/// the `Content-Type`); a body that is there must be JSON, as [`ApiJson`] reads it.
#[derive(Debug, Clone)]
pub(crate) struct OptionalJson<T>(pub T);

impl<T> FromRequest<ServerState> for OptionalJson<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &ServerState) -> Result<Self, Self::Rejection> {
        let kind = media_type(req.headers());
        let bytes = body_bytes(req, state).await?;
        let text = bytes.trim_ascii();
        if text.is_empty() || text == b"null" {
            return parse_json(b"{}").map(OptionalJson);
        }
        if kind.as_deref() != Some("application/json") {
            return Err(not_json());
        }
        parse_json(&bytes).map(OptionalJson)
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

/// Parses JSON, naming the field at fault: its path in `field` (a field that is missing too),
/// none when the body is not JSON at all (the detail says where it stops being JSON).
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::bad_request(format!(
                "the body is not JSON: {inner}; send one JSON object (`GET /api/v1/openapi.json` \
                 describes each route's)"
            ));
        }
        let message = inner.to_string();
        match field_at_fault(&path, &message) {
            Some(field) => ApiError::bad_request(format!(
                "the JSON body is not accepted at `{field}`: {}",
                with_hint(message, &field)
            ))
            .with("field", field.into()),
            None => ApiError::bad_request(format!("the JSON body is not accepted: {message}")),
        }
    })
}

/// Reads the fields of a multipart form (each part's value, as JSON) as `T`. A refusal names
/// the part, and the field inside it when the part holds JSON (`budget.max_usd`).
pub(crate) fn parse_form<T: DeserializeOwned>(
    fields: serde_json::Map<String, serde_json::Value>,
) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(serde_json::Value::Object(fields)).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        let Some(field) = field_at_fault(&path, &message) else {
            return ApiError::bad_request(format!("the multipart form is not accepted: {message}"));
        };
        let part = field
            .split(['.', '['])
            .next()
            .unwrap_or_default()
            .to_string();
        let detail = if message.starts_with("missing field") && part == field {
            format!(
                "the multipart form has no part `{part}` ({message}); send it as a text part, \
                 e.g. `-F {part}=…`"
            )
        } else if part == field {
            format!(
                "the form part `{part}` is not accepted: {}",
                with_hint(message, &field)
            )
        } else {
            format!(
                "the form part `{part}` is not accepted at `{field}`: {}",
                with_hint(message, &field)
            )
        };
        ApiError::bad_request(detail).with("field", field.into())
    })
}

/// The field a deserialisation error at `path` is about: the path itself, or for a missing
/// field the path of that field (`serde` reports it at the object that lacks it). `None` when
/// no field is known.
fn field_at_fault(path: &str, message: &str) -> Option<String> {
    let at = path
        .split('.')
        .filter(|segment| !segment.is_empty())
        .collect::<Vec<_>>();
    if at.contains(&"?") {
        return None;
    }
    let at = at.join(".");
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match missing {
        Some(name) if at.is_empty() => Some(name.to_string()),
        Some(name) => Some(format!("{at}.{name}")),
        None if at.is_empty() => None,
        None => Some(at),
    }
}

/// `message` with what to do instead, where there is more to say than serde does.
fn with_hint(mut message: String, field: &str) -> String {
    if field == "workspace" && message.contains("unknown field `workspace`") {
        message.push_str(
            "; the API never takes a host directory: upload the files the run needs as \
             multipart parts, and the run finds them in `input/`",
        );
    }
    message
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        task: String,
        #[serde(default)]
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        size: u32,
    }

    fn field(body: &str) -> Option<String> {
        let e = parse_json::<Body>(body.as_bytes()).unwrap_err();
        e.extra
            .get("field")
            .and_then(|f| f.as_str())
            .map(str::to_string)
    }

    #[test]
    fn each_refusal_names_its_field_or_none() {
        assert_eq!(field("{"), None);
        assert_eq!(field(r#"{"task": "#), None);
        assert_eq!(field(r#"{"task": "x" "inner": 1}"#), None);
        assert_eq!(field("{}").as_deref(), Some("task"));
        assert_eq!(field(r#"{"task": 1}"#).as_deref(), Some("task"));
        assert_eq!(
            field(r#"{"task": "x", "colour": 1}"#).as_deref(),
            Some("colour")
        );
        assert_eq!(
            field(r#"{"task": "x", "inner": {}}"#).as_deref(),
            Some("inner.size")
        );
        assert_eq!(
            field(r#"{"task": "x", "inner": {"size": -1}}"#).as_deref(),
            Some("inner.size")
        );
    }

    #[test]
    fn media_types_are_read_without_case_or_parameters() {
        let mut headers = HeaderMap::new();
        assert_eq!(media_type(&headers), None);
        for value in [
            "application/json",
            "APPLICATION/JSON",
            "Application/Json; Charset=UTF-8",
        ] {
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            assert_eq!(media_type(&headers).as_deref(), Some("application/json"));
        }
    }
}
