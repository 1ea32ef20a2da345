//! `/api/v1/knowledge`: list, ingest (a URL, or a document's text with its file name), search
//! and delete documents of the knowledge base, as the caller (their collections and the shared
//! ones).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maestro_app::{
    DocumentSource, IngestRequest, Knowledge, KnowledgeError, LOCAL_ACTOR, SHARED_OWNER,
};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::ApiJson;
use crate::state::ServerState;

impl From<KnowledgeError> for ApiError {
    fn from(e: KnowledgeError) -> ApiError {
        match e {
            KnowledgeError::Store(e) => e.into(),
            e @ KnowledgeError::NotFound(_) => ApiError::not_found(e.to_string()),
            e @ KnowledgeError::Forbidden(_) => ApiError::new(StatusCode::FORBIDDEN, e.to_string()),
            // A URL that is not one to fetch (not http or https, no host, or one the SSRF
            // guard refuses) is the request's fault, not the far side's.
            e @ KnowledgeError::Web { .. } if e.is_refused_url() => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                maestro_app::error_chain(&e),
            )
            .with("field", "url".into()),
            e @ (KnowledgeError::Web { .. }
            | KnowledgeError::Embeddings { .. }
            | KnowledgeError::Client(_)) => {
                ApiError::new(StatusCode::BAD_GATEWAY, maestro_app::error_chain(&e))
            }
            e @ KnowledgeError::TooLarge { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
            }
            e => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                maestro_app::error_chain(&e),
            ),
        }
    }
}

/// Whom the caller reads and writes for: their e-mail, or `local` without auth.
fn reader(caller: &Caller) -> String {
    caller
        .owner
        .clone()
        .unwrap_or_else(|| LOCAL_ACTOR.to_string())
}

async fn knowledge(state: &ServerState) -> Result<Knowledge, ApiError> {
    let config = state.current_config().await;
    Ok(Knowledge::new(state.store().clone(), &config, None)?)
}

/// `?collection=`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(crate) struct ListQuery {
    /// Only this collection.
    collection: Option<String>,
}

/// The documents the caller can read.
#[utoipa::path(
    get, path = "/api/v1/knowledge", tag = "knowledge", params(ListQuery),
    responses((status = 200, description = "By collection, then age: id, title, source, collection, shared, chunk_count, hash, created_by")),
)]
pub(crate) async fn list(
    State(state): State<ServerState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> ApiResult<Response> {
    let documents = knowledge(&state)
        .await?
        .list(&reader(&caller), query.collection.as_deref())
        .await?;
    Ok(Json(documents).into_response())
}

/// A document to ingest: `url`, or `name` and `content`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct IngestBody {
    /// An `http(s)://` URL to fetch (through the SSRF guard).
    #[serde(default)]
    url: Option<String>,
    /// The document's file name; its extension (`.md`, `.txt`, `.html`) says the format.
    #[serde(default)]
    name: Option<String>,
    /// The document's text.
    #[serde(default)]
    content: Option<String>,
    /// The collection (default `default`).
    #[serde(default)]
    collection: Option<String>,
    /// The title (default: the document's own, else its name).
    #[serde(default)]
    title: Option<String>,
    /// Put it in a shared collection, readable by everyone.
    #[serde(default)]
    shared: bool,
}

/// Ingest a document; the same content in the same collection again changes nothing (200).
#[utoipa::path(
    post, path = "/api/v1/knowledge", tag = "knowledge", request_body = IngestBody,
    responses(
        (status = 201, description = "Stored: {document, created: true}"),
        (status = 200, description = "Already there: {document, created: false}"),
        (status = 400, description = "Neither `url` nor `name` and `content`"),
        (status = 422, description = "A format the knowledge base does not read"),
        (status = 502, description = "The URL or the embedding model failed"),
    ),
)]
pub(crate) async fn ingest(
    State(state): State<ServerState>,
    caller: Caller,
    ApiJson(body): ApiJson<IngestBody>,
) -> ApiResult<Response> {
    let source = match (body.url, body.name, body.content) {
        (Some(url), None, None) => DocumentSource::Url(url),
        (None, Some(name), Some(content)) => DocumentSource::Bytes {
            name,
            bytes: content.into_bytes(),
        },
        _ => {
            return Err(ApiError::bad_request(
                "give either `url`, or `name` (with its extension: .md, .txt, .html) and `content`",
            ));
        }
    };
    let me = reader(&caller);
    let outcome = knowledge(&state)
        .await?
        .ingest(
            IngestRequest {
                source,
                collection: body.collection,
                title: body.title,
                owner: if body.shared {
                    SHARED_OWNER.to_string()
                } else {
                    me.clone()
                },
                created_by: me,
            },
            &CancellationToken::new(),
        )
        .await?;
    let status = if outcome.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(outcome)).into_response())
}

/// `?q=&collection=&k=`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(crate) struct SearchQuery {
    /// What to look for.
    q: String,
    /// Only this collection.
    collection: Option<String>,
    /// How many results (default 5, at most 50).
    k: Option<usize>,
}

/// Search the documents the caller can read.
#[utoipa::path(
    get, path = "/api/v1/knowledge/search", tag = "knowledge", params(SearchQuery),
    responses(
        (status = 200, description = "Best first: document_id, title, source, collection, location, text, score"),
        (status = 422, description = "An empty query"),
    ),
)]
pub(crate) async fn search(
    State(state): State<ServerState>,
    caller: Caller,
    Query(query): Query<SearchQuery>,
) -> ApiResult<Response> {
    let hits = knowledge(&state)
        .await?
        .search(
            &reader(&caller),
            &query.q,
            query.collection.as_deref(),
            query.k,
        )
        .await?;
    Ok(Json(hits).into_response())
}

/// Delete a document: the caller's own, or a shared one they ingested (admins: any).
#[utoipa::path(
    delete, path = "/api/v1/knowledge/{id}", tag = "knowledge",
    params(("id" = String, Path, description = "The document's id")),
    responses(
        (status = 200, description = "Deleted: the document"),
        (status = 403, description = "A shared document someone else ingested"),
        (status = 404, description = "No such document the caller can read"),
    ),
)]
pub(crate) async fn delete(
    State(state): State<ServerState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let admin = caller.admin || caller.principal.is_none();
    let deleted = knowledge(&state)
        .await?
        .delete(&reader(&caller), admin, &id)
        .await?;
    Ok(Json(deleted).into_response())
}
