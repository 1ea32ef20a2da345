//! Who may use the gateway: as soon as one virtual key exists (not revoked), every request must
//! present a usable key as `Authorization: Bearer mk-…`; a key that names models may call only
//! those.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;

use crate::errors::error_response;
use crate::keys::{GatewayKey, key_hash};
use crate::usage::GatewayStore;

/// How long a key looked up in the store (or found missing), and whether any key exists, is
/// taken from memory: a revocation reaches every gateway within this time, and a busy gateway
/// reads the store once per key per interval rather than once per request.
const KEY_CACHE_TTL: Duration = Duration::from_secs(1);
/// The most keys kept in memory; past it the cache starts again empty (clients sending many
/// unknown keys cannot grow it).
const KEY_CACHE_MAX: usize = 10_000;

/// The store keys are looked up in, if any, with the lookups of the last second.
pub(crate) struct KeyStore(pub(crate) Option<Arc<dyn GatewayStore>>, KeyCache);

#[derive(Default)]
struct KeyCache {
    exist: Mutex<Option<(Instant, bool)>>,
    by_hash: Mutex<HashMap<String, (Instant, Option<GatewayKey>)>>,
}

impl KeyStore {
    pub(crate) fn new(store: Option<Arc<dyn GatewayStore>>) -> KeyStore {
        KeyStore(store, KeyCache::default())
    }

    async fn keys_exist(
        &self,
        store: &Arc<dyn GatewayStore>,
    ) -> Result<bool, crate::usage::GatewayStoreError> {
        if let Some((at, exist)) = *lock(&self.1.exist)
            && at.elapsed() < KEY_CACHE_TTL
        {
            return Ok(exist);
        }
        let exist = store.keys_exist().await?;
        *lock(&self.1.exist) = Some((Instant::now(), exist));
        Ok(exist)
    }

    async fn key_by_hash(
        &self,
        store: &Arc<dyn GatewayStore>,
        hash: &str,
    ) -> Result<Option<GatewayKey>, crate::usage::GatewayStoreError> {
        if let Some((at, key)) = lock(&self.1.by_hash).get(hash)
            && at.elapsed() < KEY_CACHE_TTL
        {
            return Ok(key.clone());
        }
        let key = store.key_by_hash(hash).await?;
        let mut cache = lock(&self.1.by_hash);
        if cache.len() >= KEY_CACHE_MAX {
            cache.clear();
        }
        cache.insert(hash.to_string(), (Instant::now(), key.clone()));
        Ok(key)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

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

/// A request the gateway does not serve for its key: the answer to send, and the key's name
/// when the store knows the key (revoked or expired), for the metrics' `key` label.
pub(crate) struct Unauthenticated {
    pub answer: Response,
    pub key_name: Option<String>,
}

impl Unauthenticated {
    fn unknown(answer: Response) -> Unauthenticated {
        Unauthenticated {
            answer,
            key_name: None,
        }
    }

    fn of(key: &GatewayKey, answer: Response) -> Unauthenticated {
        Unauthenticated {
            answer,
            key_name: Some(key.name.clone()),
        }
    }
}

/// The key the request presents, `None` when the gateway needs none, or the `401` (`503` when the
/// store cannot be read) to answer. The key itself is never part of an answer or a log line.
pub(crate) async fn authenticate(
    store: &KeyStore,
    headers: &HeaderMap,
    now_ms: i64,
) -> Result<Option<GatewayKey>, Unauthenticated> {
    let cache = store;
    let Some(store) = &store.0 else {
        return Ok(None);
    };
    let unavailable = |e: crate::usage::GatewayStoreError| {
        tracing::warn!(error = %e, "the gateway could not read its keys from the store");
        Unauthenticated::unknown(error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "keys_unavailable",
            "the gateway could not read its keys from its store; try again, and if it persists \
             check the store the gateway was started with (its log names the cause)"
                .into(),
        ))
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let Some(presented) = presented else {
        return if cache.keys_exist(store).await.map_err(unavailable)? {
            Err(Unauthenticated::unknown(unauthorized(
                "this gateway requires a virtual key: send `Authorization: Bearer mk-…` (the \
                 OpenAI clients' api_key); `maestro gateway keys create --name NAME` makes one"
                    .into(),
            )))
        } else {
            Ok(None)
        };
    };
    let hash = key_hash(presented);
    match cache.key_by_hash(store, &hash).await.map_err(unavailable)? {
        Some(key) if key.revoked_at_ms.is_some() => Err(Unauthenticated::of(
            &key,
            unauthorized(format!(
                "the key {}… ({}) was revoked; ask for a new one (`maestro gateway keys create`)",
                key.prefix, key.name
            )),
        )),
        Some(key) if !key.is_usable(now_ms) => Err(Unauthenticated::of(
            &key,
            unauthorized(format!(
                "the key {}… ({}) has expired; ask for a new one (`maestro gateway keys create`)",
                key.prefix, key.name
            )),
        )),
        Some(key) => Ok(Some(key)),
        None => {
            if cache.keys_exist(store).await.map_err(unavailable)? {
                Err(Unauthenticated::unknown(unauthorized(
                    "the API key is not one of this gateway's virtual keys; use a key \
                     `maestro gateway keys create` printed"
                        .into(),
                )))
            } else {
                // No keys at all: the gateway is open, and a client's placeholder key is fine.
                Ok(None)
            }
        }
    }
}
