//! `/api/v1/pieces` and `/api/v1/config`: the pieces every node's runs can use (the pieces
//! directories, and the versions written here, which the store keeps), and the configuration
//! changed at runtime with optimistic locking (`ETag` / `If-Match`).

use axum::Json;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maestro_app::{
    AuditAction, ConfigWriteError, PieceDiagnostic, PieceLookupError, PieceWriteError,
};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::body_bytes;
use crate::openapi::schema;
use crate::state::ServerState;

/// 422 with each error of a piece: `path`, `line` and `column` (1-based; left out when the
/// error has no position) and `message`. `yaml`, when given, is the text the errors are about.
fn invalid(errors: &[PieceDiagnostic], yaml: Option<&str>) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!(
            "the piece is invalid ({} error{}); fix each at its line and column",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        ),
    )
    .with(
        "errors",
        serde_json::Value::Array(errors.iter().map(|e| diagnostic(e, yaml)).collect()),
    )
}

/// One error as the API gives it. An error about the top-level `name` without a position (the
/// name differs from the one in the URL) points at the field's value in `yaml`.
fn diagnostic(error: &PieceDiagnostic, yaml: Option<&str>) -> serde_json::Value {
    let position = match (error.line, error.column) {
        (Some(line), column) if line > 0 => Some((line, column.filter(|c| *c > 0))),
        _ if error.path == "name" => yaml
            .and_then(name_position)
            .map(|(line, column)| (line, Some(column))),
        _ => None,
    };
    let mut out = serde_json::Map::new();
    out.insert("path".into(), error.path.clone().into());
    if let Some((line, column)) = position {
        out.insert("line".into(), line.into());
        if let Some(column) = column {
            out.insert("column".into(), column.into());
        }
    }
    out.insert("message".into(), error.message.clone().into());
    serde_json::Value::Object(out)
}

/// The 1-based line and column of the value of the top-level `name` field of a piece written
/// in block style (the key at the start of a line), or of the key when its value is on a line
/// of its own; `None` when the text has no such line (flow style: the position is left out).
fn name_position(yaml: &str) -> Option<(u32, u32)> {
    yaml.lines().enumerate().find_map(|(index, line)| {
        let rest = ["name", "\"name\"", "'name'"]
            .iter()
            .find_map(|key| line.strip_prefix(key))?;
        let after_colon = rest.trim_start_matches([' ', '\t']).strip_prefix(':')?;
        if !(after_colon.is_empty() || after_colon.starts_with([' ', '\t'])) {
            return None;
        }
        let value = after_colon.trim_start_matches([' ', '\t']);
        let column = if value.is_empty() || value.starts_with('#') {
            1
        } else {
            line.chars().count() - value.chars().count() + 1
        };
        Some((u32::try_from(index + 1).ok()?, u32::try_from(column).ok()?))
    })
}

impl From<PieceWriteError> for ApiError {
    fn from(e: PieceWriteError) -> ApiError {
        match e {
            PieceWriteError::Invalid(errors) => invalid(&errors, None),
            e @ PieceWriteError::BadName(_) => ApiError::bad_request(e.to_string()),
            e @ PieceWriteError::ReadOnly { .. } => ApiError::conflict(e.to_string()),
            PieceWriteError::Store(e) => e.into(),
        }
    }
}

async fn yaml_body(state: &ServerState, request: Request) -> Result<String, ApiError> {
    let bytes = body_bytes(request, state).await?;
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ApiError::bad_request("the piece must be UTF-8 text (YAML)"))
}

/// Every piece a run can use: the pieces directories' and the store's.
#[utoipa::path(
    get, path = "/api/v1/pieces", tag = "pieces",
    responses((status = 200, description = "By name", body = Vec<schema::PieceListing>)),
)]
pub(crate) async fn list(State(state): State<ServerState>, _caller: Caller) -> ApiResult<Response> {
    let config = state.current_config().await;
    Ok(Json(maestro_app::list_pieces(state.store(), &config).await?).into_response())
}

/// One piece's YAML and where it comes from.
#[utoipa::path(
    get, path = "/api/v1/pieces/{name}", tag = "pieces",
    params(("name" = String, Path, description = "The piece's name")),
    responses(
        (status = 200, description = "The piece", body = schema::Piece),
        (status = 404, description = "No piece of that name", body = schema::Problem),
    ),
)]
pub(crate) async fn show(
    State(state): State<ServerState>,
    _caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let config = state.current_config().await;
    let piece = maestro_app::get_piece(state.store(), &config, &name)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no piece `{}`; `GET /api/v1/pieces` lists them",
                name.escape_debug()
            ))
        })?;
    Ok(Json(serde_json::json!({
        "name": piece.name,
        "yaml": piece.yaml,
        "origin": piece.origin,
    }))
    .into_response())
}

/// Write a piece (its YAML as the body): a new version in the store, which every node's runs
/// use from their next job. An invalid piece is not written.
#[utoipa::path(
    put, path = "/api/v1/pieces/{name}", tag = "pieces",
    params(("name" = String, Path, description = "The piece's name")),
    request_body(content = String, content_type = "application/yaml", description = "The piece"),
    responses(
        (status = 200, description = "Written", body = schema::PieceVersion),
        (status = 400, description = "Not a piece name", body = schema::Problem),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 422, description = "Invalid: `errors` has each with its path, line and column",
            body = schema::PieceProblem),
    ),
)]
pub(crate) async fn put(
    State(state): State<ServerState>,
    caller: Caller,
    Path(name): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    caller.require_piece_change()?;
    let yaml = yaml_body(&state, request).await?;
    let config = state.current_config().await;
    let stored = maestro_app::put_piece(state.store(), &config, &name, &yaml, &caller.name)
        .await
        .map_err(|e| match e {
            PieceWriteError::Invalid(errors) => invalid(&errors, Some(&yaml)),
            e => e.into(),
        })?;
    maestro_app::record_audit(
        state.store(),
        &caller.name,
        AuditAction::PieceChanged,
        None,
        Some(format!("put {} v{}", stored.name, stored.version)),
    )
    .await?;
    Ok(Json(piece_version(&stored)).into_response())
}

fn piece_version(stored: &maestro_app::StoredPiece) -> serde_json::Value {
    serde_json::json!({
        "name": stored.name,
        "version": stored.version,
        "created_by": stored.created_by,
        "created_at": stored.created_at.format(&time::format_description::well_known::Rfc3339).ok(),
    })
}

/// The query of `POST /pieces/validate`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidateQuery {
    /// The name it would be stored under (default: its own `name`).
    name: Option<String>,
}

/// Check a piece (its YAML as the body) without writing it; a valid piece's answer has its
/// graph, as `GET /pieces/{name}/graph` gives it.
#[utoipa::path(
    post, path = "/api/v1/pieces/validate", tag = "pieces", params(ValidateQuery),
    request_body(content = String, content_type = "application/yaml", description = "The piece"),
    responses(
        (status = 200, description = "Valid", body = schema::Valid),
        (status = 422, description = "Invalid: `errors` has each with its path, line and column",
            body = schema::PieceProblem),
    ),
)]
pub(crate) async fn validate(
    State(state): State<ServerState>,
    _caller: Caller,
    Query(q): Query<ValidateQuery>,
    request: Request,
) -> ApiResult<Response> {
    let yaml = yaml_body(&state, request).await?;
    let config = state.current_config().await;
    let name = q.name.unwrap_or_default();
    match maestro_app::check_piece_text(&config, &name, &yaml) {
        Ok(piece) => Ok(Json(serde_json::json!({
            "valid": true,
            "graph": maestro_app::piece_graph(&piece),
        }))
        .into_response()),
        Err(errors) => Err(invalid(&errors, Some(&yaml))),
    }
}

fn no_piece(name: &str) -> ApiError {
    ApiError::not_found(format!(
        "no piece `{}`; `GET /api/v1/pieces` lists them",
        name.escape_debug()
    ))
}

/// The piece `name` loaded as a run would find it (the store's version first).
async fn loaded(state: &ServerState, name: &str) -> Result<maestro_app::Piece, ApiError> {
    let config = state.current_config().await;
    match maestro_app::loaded_piece(state.store(), &config, name).await {
        Ok(Some(piece)) => Ok(piece),
        Ok(None) => Err(no_piece(name)),
        Err(PieceLookupError::Invalid { name, errors }) => Err(invalid(&errors, None).with(
            "detail",
            serde_json::Value::String(format!(
                "the piece `{name}` in the store does not load under the current configuration \
                 ({} error{}); fix each at its line and column and write it again",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            )),
        )),
        Err(PieceLookupError::Store(e)) => Err(e.into()),
    }
}

/// A piece's graph as loaded: its movements (parallel sub-movements with their `parent`), the
/// initial movement, and every transition with what chooses it; the special targets
/// (`COMPLETE`, `ABORT`, `ASK`, `WAIT_SUBTASKS`) appear as an edge's `to`.
#[utoipa::path(
    get, path = "/api/v1/pieces/{name}/graph", tag = "pieces",
    params(("name" = String, Path, description = "The piece's name")),
    responses(
        (status = 200, description = "The graph", body = schema::PieceGraph),
        (status = 404, description = "No piece of that name", body = schema::Problem),
        (status = 422, description = "The stored piece no longer loads: `errors` has each",
            body = schema::PieceProblem),
    ),
)]
pub(crate) async fn graph(
    State(state): State<ServerState>,
    _caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let piece = loaded(&state, &name).await?;
    Ok(Json(maestro_app::piece_graph(&piece)).into_response())
}

/// The query of the prompt routes.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct PromptQuery {
    /// The movement (or parallel sub-movement).
    movement: String,
    /// The task text, as a user would give it (default `TASK`).
    task: Option<String>,
}

fn prompt_answer(
    piece: &maestro_app::Piece,
    movement: &str,
    task: Option<String>,
) -> ApiResult<Response> {
    let task = task.unwrap_or_else(|| "TASK".to_string());
    let prompt = maestro_app::movement_prompt(piece, movement, &task).map_err(|e| {
        ApiError::not_found(e.to_string()).with("known", serde_json::json!(e.known))
    })?;
    Ok(Json(serde_json::json!({
        "piece": piece.name,
        "movement": movement,
        "task": task,
        "system": prompt.system,
        "user": prompt.user,
    }))
    .into_response())
}

/// The system prompt and first user message a run sends when it starts a movement, exactly
/// as `maestro prompt` prints them.
#[utoipa::path(
    get, path = "/api/v1/pieces/{name}/prompt", tag = "pieces",
    params(("name" = String, Path, description = "The piece's name"), PromptQuery),
    responses(
        (status = 200, description = "The prompts", body = schema::MovementPrompt),
        (status = 404, description = "No piece, or no movement, of that name (`known` lists \
            the movements)", body = schema::Problem),
        (status = 422, description = "The stored piece no longer loads: `errors` has each",
            body = schema::PieceProblem),
    ),
)]
pub(crate) async fn prompt(
    State(state): State<ServerState>,
    _caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<PromptQuery>,
) -> ApiResult<Response> {
    let piece = loaded(&state, &name).await?;
    prompt_answer(&piece, &q.movement, q.task)
}

/// The prompts of a movement of the piece `name` as the body's YAML has it (an edit not saved
/// yet, or a piece not written yet), as `GET` gives them for the saved one.
#[utoipa::path(
    post, path = "/api/v1/pieces/{name}/prompt", tag = "pieces",
    params(("name" = String, Path, description = "The piece's name (the YAML's `name`)"), PromptQuery),
    request_body(content = String, content_type = "application/yaml", description = "The piece"),
    responses(
        (status = 200, description = "The prompts", body = schema::MovementPrompt),
        (status = 404, description = "No movement of that name (`known` lists them)",
            body = schema::Problem),
        (status = 422, description = "Invalid: `errors` has each with its path, line and column",
            body = schema::PieceProblem),
    ),
)]
pub(crate) async fn prompt_text(
    State(state): State<ServerState>,
    _caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<PromptQuery>,
    request: Request,
) -> ApiResult<Response> {
    let yaml = yaml_body(&state, request).await?;
    let config = state.current_config().await;
    let piece = maestro_app::check_piece_text(&config, &name, &yaml)
        .map_err(|errors| invalid(&errors, Some(&yaml)))?;
    prompt_answer(&piece, &q.movement, q.task)
}

/// Delete a piece from the store (a new version that says so). A piece file in a pieces
/// directory cannot be deleted here.
#[utoipa::path(
    delete, path = "/api/v1/pieces/{name}", tag = "pieces",
    params(("name" = String, Path, description = "The piece's name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 404, description = "No piece of that name in the store", body = schema::Problem),
        (status = 409, description = "The piece is a file in a pieces directory", body = schema::Problem),
    ),
)]
pub(crate) async fn delete(
    State(state): State<ServerState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    caller.require_piece_change()?;
    let config = state.current_config().await;
    match maestro_app::delete_piece(state.store(), &config, &name, &caller.name).await? {
        Some(stored) => {
            maestro_app::record_audit(
                state.store(),
                &caller.name,
                AuditAction::PieceChanged,
                None,
                Some(format!("delete {} v{}", stored.name, stored.version)),
            )
            .await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        None => Err(ApiError::not_found(format!(
            "no piece `{}` in the store",
            name.escape_debug()
        ))),
    }
}

fn with_etag(mut response: Response, etag: &maestro_app::ETag) -> Response {
    if let Ok(v) = HeaderValue::from_str(&etag.to_string()) {
        response.headers_mut().insert(header::ETAG, v);
    }
    response
}

/// The configuration in effect, secrets as `***`, with its `ETag`.
#[utoipa::path(
    get, path = "/api/v1/config", tag = "config",
    responses(
        (status = 200, description = "The configuration (its ETag in the header)", body = Object),
        (status = 403, description = "Not an admin", body = schema::Problem),
    ),
)]
pub(crate) async fn get_config(
    State(state): State<ServerState>,
    caller: Caller,
) -> ApiResult<Response> {
    caller.require_config()?;
    // Fresh, not up to a poll behind: someone who was just refused as stale reads again and
    // must get the tag a write now accepts.
    let (config, etag) = state.fresh_config_tagged().await;
    Ok(with_etag(
        Json(maestro_app::config_json(&config)).into_response(),
        &etag,
    ))
}

/// Replace the configuration. `If-Match` must carry the `ETag` it was read with; a `***` left
/// in place keeps the secret it stands for. Every node's next job runs with it (within 5 s).
/// What the body leaves out takes the node's own value: to change some keys and keep the
/// rest, `PATCH`.
#[utoipa::path(
    put, path = "/api/v1/config", tag = "config",
    params(("If-Match" = String, Header, description = "The ETag of `GET /config`")),
    request_body(content = Object, description = "The configuration, as `GET /config` gives it"),
    responses(
        (status = 200, description = "Written (the new ETag in the header)", body = Object),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 412, description = "Changed since it was read", body = schema::Problem),
        (status = 422, description = "Invalid: `errors` names each field and its fix", body = schema::Problem),
        (status = 428, description = "No If-Match", body = schema::Problem),
    ),
)]
pub(crate) async fn put_config(
    State(state): State<ServerState>,
    caller: Caller,
    headers: HeaderMap,
    request: Request,
) -> ApiResult<Response> {
    caller.require_config()?;
    let if_match = if_match(&headers);
    let bytes = body_bytes(request, &state).await?;
    let body: serde_json::Value = crate::extract::parse_json(&bytes)?;
    write_config(&state, &caller, body, if_match.as_deref()).await
}

/// Change some of the configuration: a JSON merge patch (RFC 7396) laid over the configuration
/// in effect, as `GET /config` gives it. A key set to a value takes it, an object is merged key
/// by key, `null` takes a key back to the node's own value, and every key the patch leaves out
/// is kept as it is, secrets included. The same rules as `PUT`: `If-Match`, admins only, the
/// whole result checked, the write audited.
#[utoipa::path(
    patch, path = "/api/v1/config", tag = "config",
    params(("If-Match" = String, Header, description = "The ETag of `GET /config`")),
    request_body(content = Object, content_type = "application/merge-patch+json",
        description = "A JSON merge patch (RFC 7396) of the configuration; `application/json` is \
            taken too"),
    responses(
        (status = 200, description = "Written: the configuration now (the new ETag in the \
            header)", body = Object),
        (status = 403, description = "Not an admin", body = schema::Problem),
        (status = 412, description = "Changed since it was read", body = schema::Problem),
        (status = 415, description = "Not a JSON merge patch", body = schema::Problem),
        (status = 422, description = "The result is invalid: `errors` names each field and its \
            fix", body = schema::Problem),
        (status = 428, description = "No If-Match", body = schema::Problem),
    ),
)]
pub(crate) async fn patch_config(
    State(state): State<ServerState>,
    caller: Caller,
    headers: HeaderMap,
    request: Request,
) -> ApiResult<Response> {
    caller.require_config()?;
    let kind = crate::extract::media_type(&headers);
    if !matches!(
        kind.as_deref(),
        Some("application/merge-patch+json" | "application/json")
    ) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send a JSON merge patch (RFC 7396) with `Content-Type: application/merge-patch+json` \
             (or `application/json`)",
        ));
    }
    let Some(if_match) = if_match(&headers) else {
        return Err(config_problem(ConfigWriteError::PreconditionRequired));
    };
    let bytes = body_bytes(request, &state).await?;
    let patch: serde_json::Value = crate::extract::parse_json(&bytes)?;
    // The configuration the patch applies to must be the one `If-Match` names; the write
    // checks it again, in the same compare-and-set as `PUT`.
    let (config, etag) = state.fresh_config_tagged().await;
    if !etag.matches(&if_match) {
        return Err(config_problem(ConfigWriteError::Stale { current: etag }));
    }
    let mut body = maestro_app::config_json(&config);
    merge_patch(&mut body, patch);
    write_config(&state, &caller, body, Some(&if_match)).await
}

/// The `If-Match` header's value.
fn if_match(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Lays the JSON merge patch `patch` over `target` (RFC 7396).
fn merge_patch(target: &mut serde_json::Value, patch: serde_json::Value) {
    let serde_json::Value::Object(patch) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = serde_json::Value::Object(serde_json::Map::new());
    }
    if let serde_json::Value::Object(map) = target {
        for (key, value) in patch {
            if value.is_null() {
                map.remove(&key);
            } else {
                merge_patch(map.entry(key).or_insert(serde_json::Value::Null), value);
            }
        }
    }
}

/// The answer to a configuration write that was refused.
fn config_problem(e: ConfigWriteError) -> ApiError {
    match e {
        e @ ConfigWriteError::PreconditionRequired => {
            ApiError::new(StatusCode::PRECONDITION_REQUIRED, e.to_string())
        }
        e @ ConfigWriteError::Stale { .. } => {
            ApiError::new(StatusCode::PRECONDITION_FAILED, e.to_string())
        }
        ConfigWriteError::Invalid(issues) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "the configuration is invalid ({} field{} at fault: {}); nothing was written",
                issues.len(),
                if issues.len() == 1 { "" } else { "s" },
                issues
                    .iter()
                    .map(|i| format!("`{}`", i.field))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .with(
            "errors",
            serde_json::to_value(
                issues
                    .iter()
                    .map(|i| serde_json::json!({"field": i.field, "message": i.message, "fix": i.fix}))
                    .collect::<Vec<_>>(),
            )
            .unwrap_or_default(),
        ),
        ConfigWriteError::Store(e) => e.into(),
    }
}

/// Writes `body` as the configuration (as `PUT` takes it), records it in the audit log, and
/// answers the configuration now with its new tag.
async fn write_config(
    state: &ServerState,
    caller: &Caller,
    body: serde_json::Value,
    if_match: Option<&str>,
) -> ApiResult<Response> {
    let etag = maestro_app::put_config(
        state.store(),
        state.base_config(),
        body,
        if_match,
        &caller.name,
    )
    .await
    .map_err(config_problem)?;
    maestro_app::record_audit(
        state.store(),
        &caller.name,
        AuditAction::ConfigChanged,
        None,
        etag.version().map(|v| format!("version {v}")),
    )
    .await?;
    let (config, _) = maestro_app::effective_config(state.store(), state.base_config())
        .await
        .map_err(|e| ApiError::internal("read the configuration back", &e))?;
    Ok(with_etag(
        Json(maestro_app::config_json(&config)).into_response(),
        &etag,
    ))
}
