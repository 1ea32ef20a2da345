//! The LLM gateway from the configuration: `gateway:` for its upstreams and routes,
//! `llm.models.<name>.price` for what calls cost, the store for its usage records.

use std::sync::Arc;

use maestro_config::Config;
use maestro_gateway::{GatewayConfig, GatewayStore, Price, Prices};
use maestro_store::Store;

pub use maestro_gateway::{Gateway, GatewayError, GatewayKey, KEY_PREFIX, key_hash, new_key};
pub use maestro_store::{UsageGroup, UsageTotal};

/// The gateway `config` describes, writing its usage records to `store`. Must be called inside
/// the tokio runtime that serves it (its usage writer is a task).
pub fn gateway(config: &Config, store: Option<Store>) -> Result<Gateway, GatewayError> {
    let prices: Prices = config
        .llm
        .models
        .iter()
        .filter_map(|(name, overrides)| {
            overrides.price.map(|p| {
                (
                    name.clone(),
                    Price {
                        input_per_mtok: p.input_per_mtok,
                        output_per_mtok: p.output_per_mtok,
                        cached_input_per_mtok: p.cached_input_per_mtok,
                    },
                )
            })
        })
        .collect();
    let store = store.map(|s| Arc::new(s) as Arc<dyn GatewayStore>);
    Gateway::new(&config.gateway, prices, store)
}

/// A virtual key to make: what `maestro gateway keys create` and `POST /api/v1/gateway/keys`
/// take.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewGatewayKey {
    /// A name to tell the key apart (lists, usage, metrics).
    pub name: String,
    /// The public model names it may call; empty: every model.
    #[serde(default)]
    pub models: Vec<String>,
    /// Its budget in US dollars, per `period` or in all.
    #[serde(default)]
    pub budget_usd: Option<f64>,
    /// Its budget in tokens, per `period` or in all.
    #[serde(default)]
    pub budget_tokens: Option<u64>,
    /// `day`, `week` or `month`; none: the budgets are totals.
    #[serde(default)]
    pub period: Option<String>,
    /// Requests per minute.
    #[serde(default)]
    pub rpm: Option<u64>,
    /// Tokens per minute.
    #[serde(default)]
    pub tpm: Option<u64>,
    /// When it stops working, RFC 3339.
    #[serde(default)]
    pub expires: Option<String>,
}

/// Why a key could not be made or revoked.
#[derive(Debug, thiserror::Error)]
pub enum GatewayKeyError {
    /// A field has a value that cannot be used; the text names the field and the fix.
    #[error("{field}: {message}")]
    Invalid {
        /// The field (`name`, `budget_usd`, …).
        field: &'static str,
        /// What is wrong and what to write instead.
        message: String,
    },
    /// Another key has the name already (a revoked one keeps its name): usage is summed by
    /// name, so two keys of one name would share it.
    #[error("{}", name_taken(.0))]
    NameTaken(Box<GatewayKey>),
    /// No key has the id.
    #[error(
        "no gateway key has the id {0:?}; `maestro gateway keys list` (or GET /api/v1/gateway/keys) shows the ids"
    )]
    NotFound(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] maestro_store::StoreError),
}

fn positive(value: Option<u64>, field: &'static str) -> Result<Option<i64>, GatewayKeyError> {
    match value {
        None => Ok(None),
        Some(0) => Err(GatewayKeyError::Invalid {
            field,
            message: "0 would allow nothing; give a positive number, or leave it out for no limit"
                .into(),
        }),
        Some(n) => i64::try_from(n)
            .map(Some)
            .map_err(|_| GatewayKeyError::Invalid {
                field,
                message: format!("{n} is too large"),
            }),
    }
}

fn name_taken(existing: &GatewayKey) -> String {
    format!(
        "a key named {:?} exists already (id {}, prefix {}…, {}); usage is summed by name, so \
         give this key another name, e.g. {:?}",
        existing.name,
        existing.id,
        existing.prefix,
        key_state(existing, now_ms()),
        format!("{}-2", existing.name)
    )
}

fn now_ms() -> i64 {
    i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000)
        .unwrap_or(i64::MAX)
}

/// Makes a key and records it in the audit log as made by `actor` (its name and prefix, never
/// the key). Returns the key, to show this once, and what the store keeps of it.
///
/// Refused, with the field and the fix: a model no route of `gateway` (the `gateway:` section
/// of the configuration in effect) serves, a `period` without a budget to reset, an `expires`
/// that has passed, and a name another key has (revoked keys keep theirs; creators racing for
/// one name get one key between them).
pub async fn create_gateway_key_as(
    store: &Store,
    actor: &str,
    gateway: &GatewayConfig,
    new: NewGatewayKey,
) -> Result<(String, GatewayKey), GatewayKeyError> {
    let name = new.name.trim().to_string();
    if name.is_empty() {
        return Err(GatewayKeyError::Invalid {
            field: "name",
            message: "is empty; give the key a name to tell it apart, e.g. ci".into(),
        });
    }
    let models: Vec<String> = new
        .models
        .iter()
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect();
    if let Some(unserved) = models.iter().find(|m| !gateway.models.contains_key(*m)) {
        let served: Vec<&str> = gateway.models.keys().map(String::as_str).collect();
        return Err(GatewayKeyError::Invalid {
            field: "models",
            message: if served.is_empty() {
                format!(
                    "{unserved:?} is not served: the configuration routes no model \
                     (gateway.models is empty); add the route to gateway.models, or leave the \
                     models out for every model"
                )
            } else {
                format!(
                    "{unserved:?} is not served by any route of gateway.models; name served \
                     models ({}), or add the route to gateway.models first",
                    served.join(", ")
                )
            },
        });
    }
    let budget_micro_usd = match new.budget_usd {
        None => None,
        Some(usd) if usd.is_finite() && usd > 0.0 && usd < 9.0e12 => {
            Some((usd * 1_000_000.0).round() as i64)
        }
        Some(usd) => {
            return Err(GatewayKeyError::Invalid {
                field: "budget_usd",
                message: format!("{usd} is not a positive amount of dollars; give e.g. 25"),
            });
        }
    };
    let period = match new.period.as_deref() {
        None => None,
        Some(p @ ("day" | "week" | "month")) => Some(p.to_string()),
        Some(other) => {
            return Err(GatewayKeyError::Invalid {
                field: "period",
                message: format!(
                    "{other:?} is not a period; write day, week or month (or leave it out for totals)"
                ),
            });
        }
    };
    if let Some(period) = &period
        && new.budget_usd.is_none()
        && new.budget_tokens.is_none()
    {
        return Err(GatewayKeyError::Invalid {
            field: "period",
            message: format!(
                "{period:?} is when a budget starts again, and the key has no budget; add a \
                 dollar or token budget for each {period}, or leave the period out"
            ),
        });
    }
    let expires_at_ms = match &new.expires {
        None => None,
        Some(text) => {
            let at =
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                    .map_err(|_| GatewayKeyError::Invalid {
                    field: "expires",
                    message: format!(
                        "{text:?} is not an RFC 3339 time; write e.g. 2027-01-01T00:00:00Z"
                    ),
                })?;
            let at_ms = i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX);
            if at_ms <= now_ms() {
                return Err(GatewayKeyError::Invalid {
                    field: "expires",
                    message: format!(
                        "{text:?} has passed, so the key would never work; give a time in the \
                         future, or leave it out for a key that does not expire"
                    ),
                });
            }
            Some(at_ms)
        }
    };
    let (secret, hash, prefix) = new_key();
    let key = GatewayKey {
        id: String::new(),
        name,
        hash,
        prefix,
        models: (!models.is_empty()).then_some(models),
        budget_micro_usd,
        budget_tokens: positive(new.budget_tokens, "budget_tokens")?,
        period,
        rpm: positive(new.rpm, "rpm")?,
        tpm: positive(new.tpm, "tpm")?,
        expires_at_ms,
        created_at_ms: 0,
        created_by: actor.to_string(),
        revoked_at_ms: None,
    };
    let stored = store
        .insert_gateway_key(&key)
        .await?
        .map_err(|existing| GatewayKeyError::NameTaken(Box::new(existing)))?;
    store
        .record_audit(
            actor,
            maestro_store::AuditAction::GatewayKeyCreated,
            None,
            Some(&format!(
                "{} ({}…, id {})",
                stored.name, stored.prefix, stored.id
            )),
        )
        .await?;
    Ok((secret, stored))
}

/// Revokes the key `id` (from then on the gateway answers it 401), recorded in the audit log as
/// done by `actor`.
pub async fn revoke_gateway_key_as(
    store: &Store,
    actor: &str,
    id: &str,
) -> Result<(), GatewayKeyError> {
    if !store.revoke_gateway_key(id).await? {
        return Err(GatewayKeyError::NotFound(id.to_string()));
    }
    store
        .record_audit(
            actor,
            maestro_store::AuditAction::GatewayKeyRevoked,
            None,
            Some(&format!("id {id}")),
        )
        .await?;
    Ok(())
}

/// A key as lists show it (never the key itself): `id`, `name`, `prefix`, `models`,
/// `budget_usd`, `budget_tokens`, `period`, `rpm`, `tpm`, `expires_at`, `created_at`,
/// `created_by`, `revoked_at`, and `state` (`active`, `expired` or `revoked`).
pub fn gateway_key_view(key: &GatewayKey, now_ms: i64) -> serde_json::Value {
    let state = key_state(key, now_ms);
    serde_json::json!({
        "id": key.id, "name": key.name, "prefix": key.prefix, "models": key.models,
        "budget_usd": key.budget_micro_usd.map(|m| m as f64 / 1_000_000.0),
        "budget_tokens": key.budget_tokens, "period": key.period, "rpm": key.rpm,
        "tpm": key.tpm, "expires_at": rfc3339(key.expires_at_ms),
        "created_at": rfc3339(Some(key.created_at_ms)), "created_by": key.created_by,
        "revoked_at": rfc3339(key.revoked_at_ms), "state": state,
    })
}

/// A key's state at `now_ms`: `active`, `expired` or `revoked`.
fn key_state(key: &GatewayKey, now_ms: i64) -> &'static str {
    if key.revoked_at_ms.is_some() {
        "revoked"
    } else if !key.is_usable(now_ms) {
        "expired"
    } else {
        "active"
    }
}

/// Unix milliseconds as RFC 3339.
pub fn rfc3339(ms: Option<i64>) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms?) * 1_000_000).ok()?;
    at.format(&time::format_description::well_known::Rfc3339)
        .ok()
}
