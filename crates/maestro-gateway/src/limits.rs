//! Rate limits per virtual key: requests (RPM) and tokens (TPM) per minute.
//!
//! On one node they are `governor` limiters, one pair per key (GCRA: a key may use its whole
//! minute's allowance at once, then it refills evenly). When the store is shared by several
//! gateways (PostgreSQL), each admitted request is also counted in the store's window of the
//! current minute, in one conditional write, so the limits hold across nodes too.
//!
//! Tokens are counted in two steps: the prompt's estimate when the request is admitted (a
//! request is admitted while the minute's tokens are below the limit), and the answer's tokens
//! once it ends.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use governor::{Quota, RateLimiter, clock::Clock as _, clock::DefaultClock};

use crate::errors::error_response;
use crate::keys::GatewayKey;
use crate::usage::{GatewayStore, RateLimit, RateTake};

type Direct = RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    DefaultClock,
    governor::middleware::NoOpMiddleware,
>;

/// One key's limiters on this node.
#[derive(Debug)]
struct KeyLimiters {
    rpm: Option<Direct>,
    tpm: Option<(Direct, NonZeroU32)>,
}

/// The limiters of every key seen, by key id.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    keys: Mutex<HashMap<String, Arc<KeyLimiters>>>,
}

/// A request's admission: what to count once its answer is known.
#[derive(Debug, Clone)]
pub(crate) struct Admitted {
    key_id: String,
    minute_ms: i64,
    limiters: Arc<KeyLimiters>,
    /// The tokens counted at admission.
    counted: u64,
    /// Whether the store counts this key too.
    shared: bool,
}

fn per_minute(limit: i64) -> Option<NonZeroU32> {
    NonZeroU32::new(u32::try_from(limit.max(0)).unwrap_or(u32::MAX))
}

impl Limits {
    fn limiters(&self, key: &GatewayKey) -> Arc<KeyLimiters> {
        let mut keys = match self.keys.lock() {
            Ok(keys) => keys,
            Err(poisoned) => poisoned.into_inner(),
        };
        keys.entry(key.id.clone())
            .or_insert_with(|| {
                Arc::new(KeyLimiters {
                    rpm: key
                        .rpm
                        .and_then(per_minute)
                        .map(|n| RateLimiter::direct(Quota::per_minute(n))),
                    tpm: key
                        .tpm
                        .and_then(per_minute)
                        .map(|n| (RateLimiter::direct(Quota::per_minute(n)), n)),
                })
            })
            .clone()
    }

    /// Admits a request of `key` whose prompt is estimated at `prompt_tokens`, or gives the
    /// `429` to answer. Keys without limits are admitted without a lookup.
    pub(crate) async fn admit(
        &self,
        key: &GatewayKey,
        prompt_tokens: u64,
        store: Option<&Arc<dyn GatewayStore>>,
        now_ms: i64,
    ) -> Result<Option<Admitted>, Response> {
        if key.rpm.is_none() && key.tpm.is_none() {
            return Ok(None);
        }
        let limiters = self.limiters(key);
        if let Some(rpm) = &limiters.rpm
            && let Err(not_until) = rpm.check()
        {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            return Err(limited(key, RateLimit::Rpm, wait.as_secs() + 1));
        }
        let counted = prompt_tokens.max(1);
        if let Some((tpm, limit)) = &limiters.tpm {
            let n = NonZeroU32::new(u32::try_from(counted).unwrap_or(u32::MAX))
                .unwrap_or(NonZeroU32::MIN);
            match tpm.check_n(n) {
                Ok(Ok(())) => {}
                Ok(Err(not_until)) => {
                    let wait = not_until.wait_time_from(DefaultClock::default().now());
                    return Err(limited(key, RateLimit::Tpm, wait.as_secs() + 1));
                }
                Err(_) => {
                    return Err(too_large(key, counted, u64::from(limit.get())));
                }
            }
        }
        let minute_ms = now_ms - now_ms.rem_euclid(60_000);
        let shared = store.is_some_and(|s| s.shared());
        if shared && let Some(store) = store {
            let take = RateTake {
                requests: 1,
                tokens: counted,
                rpm: key.rpm.and_then(|r| u64::try_from(r).ok()),
                tpm: key.tpm.and_then(|t| u64::try_from(t).ok()),
            };
            match store.rate_take(&key.id, minute_ms, take).await {
                Ok(Ok(())) => {}
                Ok(Err(limit)) => {
                    let wait = (minute_ms + 60_000 - now_ms).max(0) / 1000 + 1;
                    return Err(limited(key, limit, u64::try_from(wait).unwrap_or(60)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the gateway could not count a request against its key's rate limits in the store");
                    return Err(error_response(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "server_error",
                        "limits_unavailable",
                        "the gateway could not count the request against the key's rate limits in its store; try again".into(),
                    ));
                }
            }
        }
        Ok(Some(Admitted {
            key_id: key.id.clone(),
            minute_ms,
            limiters,
            counted,
            shared,
        }))
    }
}

impl Admitted {
    /// Counts the answer's tokens beyond those counted at admission (`total` prompt and
    /// completion tokens), as far as this node's allowance has room, and in the store.
    pub(crate) fn finish(self, total: u64, store: Option<Arc<dyn GatewayStore>>) {
        let extra = total.saturating_sub(self.counted);
        if extra == 0 {
            return;
        }
        if let Some((tpm, limit)) = &self.limiters.tpm {
            let n = u32::try_from(extra).unwrap_or(u32::MAX).min(limit.get());
            if let Some(n) = NonZeroU32::new(n) {
                let _ = tpm.check_n(n);
            }
        }
        if self.shared
            && let Some(store) = store
        {
            tokio::spawn(async move {
                if let Err(e) = store
                    .rate_add_tokens(&self.key_id, self.minute_ms, extra)
                    .await
                {
                    tracing::warn!(error = %e, "the gateway could not count an answer's tokens against its key's TPM in the store");
                }
            });
        }
    }
}

fn limited(key: &GatewayKey, limit: RateLimit, retry_after_secs: u64) -> Response {
    let (code, what, value) = match limit {
        RateLimit::Rpm => ("rpm_exceeded", "requests per minute", key.rpm),
        RateLimit::Tpm => ("tpm_exceeded", "tokens per minute", key.tpm),
    };
    let mut response = error_response(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        code,
        format!(
            "the key {}… ({}) is limited to {} {what}, and this minute's are used; retry in {retry_after_secs} s",
            key.prefix,
            key.name,
            value.unwrap_or_default()
        ),
    );
    if let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

fn too_large(key: &GatewayKey, tokens: u64, limit: u64) -> Response {
    error_response(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        "tpm_exceeded",
        format!(
            "the request's prompt (about {tokens} tokens) is larger than the {limit} tokens per minute the key {}… ({}) may use; shorten it, or ask for a key with a higher TPM",
            key.prefix, key.name
        ),
    )
}
