//! Who may use the gateway: as soon as one virtual key exists (not revoked), every request must
//! present a usable key as `Authorization: Bearer mk-…`; a key that names models may call only
//! those.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;

use crate::errors::error_response;
use crate::keys::{GatewayKey, key_hash};
use crate::usage::GatewayStore;

/// The store keys are looked up in, if any.
#[derive(Clone)]
pub(crate) struct KeyStore(pub(crate) Option<Arc<dyn GatewayStore>>);

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "KeyStore(some)"
        } else {
            "KeyStore(none)"
        })
    }
}

fn unauthorized(message: String) -> Response {
    let mut response = error_response(
        StatusCode::UNAUTHORIZED,
        "authentication_error",
        "invalid_api_key",
        message,
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer"),
    );
    response
}

/// The key the request presents, `None` when the gateway needs none, or the `401` (`503` when the
/// store cannot be read) to answer. The key itself is never part of an answer or a log line.
pub(crate) async fn authenticate(
    store: &KeyStore,
    headers: &HeaderMap,
    now_ms: i64,
) -> Result<Option<GatewayKey>, Response> {
    let Some(store) = &store.0 else {
        return Ok(None);
    };
    let unavailable = |e: crate::usage::GatewayStoreError| {
        tracing::warn!(error = %e, "the gateway could not read its keys from the store");
        error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "keys_unavailable",
            "the gateway could not read its keys from its store; try again, and if it persists \
             check the store the gateway was started with (its log names the cause)"
                .into(),
        )
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let Some(presented) = presented else {
        return if store.keys_exist().await.map_err(unavailable)? {
            Err(unauthorized(
                "this gateway requires a virtual key: send `Authorization: Bearer mk-…` (the \
                 OpenAI clients' api_key); `maestro gateway keys create --name NAME` makes one"
                    .into(),
            ))
        } else {
            Ok(None)
        };
    };
    let hash = key_hash(presented);
    match store.key_by_hash(&hash).await.map_err(unavailable)? {
        Some(key) if key.revoked_at_ms.is_some() => Err(unauthorized(format!(
            "the key {}… ({}) was revoked; ask for a new one (`maestro gateway keys create`)",
            key.prefix, key.name
        ))),
        Some(key) if !key.is_usable(now_ms) => Err(unauthorized(format!(
            "the key {}… ({}) has expired; ask for a new one (`maestro gateway keys create`)",
            key.prefix, key.name
        ))),
        Some(key) => Ok(Some(key)),
        None => {
            if store.keys_exist().await.map_err(unavailable)? {
                Err(unauthorized(
                    "the API key is not one of this gateway's virtual keys; use a key \
                     `maestro gateway keys create` printed"
                        .into(),
                ))
            } else {
                // No keys at all: the gateway is open, and a client's placeholder key is fine.
                Ok(None)
            }
        }
    }
}
