//! A job's files: `GET /api/v1/jobs/{id}/files` lists them with their sizes, and
//! `GET /api/v1/jobs/{id}/files/{path}` downloads one. The bytes come from the store, so any
//! node serves them, also after the worker that ran the job is gone. Paths are confined to the
//! job: no traversal, no absolute path, nothing a link points at.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maestro_app::{FileError, FileKind, JobId};

use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::openapi::schema;
use crate::state::ServerState;

impl From<FileError> for ApiError {
    fn from(e: FileError) -> ApiError {
        match e {
            e @ (FileError::NoSuchJob(_) | FileError::NoSuchFile { .. }) => {
                ApiError::not_found(e.to_string())
            }
            e @ (FileError::TooLarge { .. } | FileError::TotalTooLarge { .. }) => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
            }
            FileError::Store(e) => e.into(),
            e => ApiError::bad_request(e.to_string()),
        }
    }
}

/// A job's files: its inputs and the outputs its run left.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/files", tag = "jobs",
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "Its files", body = Vec<schema::JobFile>),
        (status = 404, description = "No such job (or not one of yours)", body = schema::Problem),
    ),
)]
pub(crate) async fn list(State(state): State<ServerState>, caller: Caller) -> ApiResult<Response> {
    let id = caller.job()?;
    Ok(Json(maestro_app::job_files(state.store(), id).await?).into_response())
}

/// Download one of a job's files (its output of that path, else its input).
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/files/{*path}", tag = "jobs",
    params(
        ("id" = String, Path, description = "The job's id"),
        ("path" = String, Path, description = "The file's path, e.g. `report.md` or `data/a.csv`"),
        FileQuery,
    ),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = String),
        (status = 400, description = "A path that leaves the job's files", body = schema::Problem),
        (status = 404, description = "No such job or file", body = schema::Problem),
    ),
)]
pub(crate) async fn download(
    State(state): State<ServerState>,
    caller: Caller,
    Path((_job, path)): Path<(String, String)>,
    Query(q): Query<FileQuery>,
) -> ApiResult<Response> {
    let id = caller.job()?;
    serve_file(&state, id, &path, None, q.inline()).await
}

/// The query of a file download.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileQuery {
    /// `1`: to show in a page (text, images, PDF) rather than download; other types still
    /// download.
    inline: Option<String>,
}

impl FileQuery {
    pub(crate) fn inline(&self) -> bool {
        matches!(self.inline.as_deref(), Some("1" | "true"))
    }
}

/// The file's bytes, as a download.
pub(crate) async fn serve_file(
    state: &ServerState,
    id: JobId,
    path: &str,
    only: Option<FileKind>,
    inline: bool,
) -> ApiResult<Response> {
    maestro_app::JobPath::parse(path)?;
    let (file, bytes) = maestro_app::read_job_file(state.store(), id, path).await?;
    if only.is_some_and(|kind| kind != file.kind) {
        return Err(ApiError::not_found(format!(
            "job {id} has no output \"{}\"",
            path.escape_debug()
        )));
    }
    let name = file
        .path
        .rsplit('/')
        .next()
        .unwrap_or("file")
        .replace('"', "");
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&file.path)),
    );
    headers.insert(
        header::HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    let kind = content_type(&file.path);
    let disposition = if inline && kind != "application/octet-stream" {
        "inline"
    } else {
        "attachment"
    };
    if let Ok(v) = HeaderValue::from_str(&content_disposition(disposition, &name)) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    // Shown in a page or opened on its own, a file can run nothing and load nothing (a PDF
    // keeps the browser's viewer, which a sandbox would block).
    if kind != "application/pdf" {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; img-src 'self'; sandbox"),
        );
    }
    Ok(response)
}

/// `Content-Disposition` for a file called `name` (RFC 6266): `filename` as plain ASCII for
/// every client, and `filename*` with the name as it is, in UTF-8, when it is not plain ASCII.
fn content_disposition(disposition: &str, name: &str) -> String {
    let plain = |c: char| c.is_ascii_graphic() || c == ' ';
    let fallback: String = name
        .chars()
        .map(|c| {
            if plain(c) && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.chars().all(|c| plain(c) && c != '"' && c != '\\') {
        return format!("{disposition}; filename=\"{fallback}\"");
    }
    let mut encoded = String::with_capacity(name.len() * 3);
    for byte in name.bytes() {
        let keep = byte.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&byte);
        if keep {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
}

/// A plain type for text a browser may show; anything else downloads as bytes (never HTML, so
/// a run's output cannot script the API's origin).
fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "txt" | "md" | "csv" | "log" | "yaml" | "yml" | "toml" | "rs" | "py" | "js" | "ts" => {
            "text/plain; charset=utf-8"
        }
        "json" => "application/json",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "pdf" => "application/pdf",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod disposition_tests {
    use super::content_disposition;

    #[test]
    fn a_name_that_is_not_plain_ascii_is_also_given_in_utf8() {
        assert_eq!(
            content_disposition("attachment", "report 1.txt"),
            "attachment; filename=\"report 1.txt\""
        );
        assert_eq!(
            content_disposition("inline", "ünï cødé.txt"),
            "inline; filename=\"_n_ c_d_.txt\"; filename*=UTF-8''%C3%BCn%C3%AF%20c%C3%B8d%C3%A9.txt"
        );
    }
}
