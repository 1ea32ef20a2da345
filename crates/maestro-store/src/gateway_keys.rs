//! The gateway's virtual keys (`gateway_keys`): made, listed and revoked by
//! `maestro gateway keys`, looked up by their hash on every request. The key itself is never
//! stored, only its SHA-256 ([`maestro_gateway::key_hash`]).

use maestro_gateway::{GatewayKey, GatewayStoreError, StoreFuture};
use sqlx::Any;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::rows::col;
use crate::store::Store;

const KEY_COLUMNS: &str = "id, name, hash, prefix, models, budget_micro_usd, budget_tokens, \
    period, rpm, tpm, expires_at, created_at, created_by, revoked_at";

fn key_from_row(row: &AnyRow) -> StoreResult<GatewayKey> {
    let models: Option<String> = col(row, "models")?;
    let models =
        match models {
            Some(text) => Some(serde_json::from_str::<Vec<String>>(&text).map_err(|e| {
                StoreError::Corrupt {
                    what: format!("gateway_keys.models {text:?} is not a JSON list of names: {e}"),
                }
            })?),
            None => None,
        };
    Ok(GatewayKey {
        id: col(row, "id")?,
        name: col(row, "name")?,
        hash: col(row, "hash")?,
        prefix: col(row, "prefix")?,
        models,
        budget_micro_usd: col(row, "budget_micro_usd")?,
        budget_tokens: col(row, "budget_tokens")?,
        period: col(row, "period")?,
        rpm: col(row, "rpm")?,
        tpm: col(row, "tpm")?,
        expires_at_ms: col(row, "expires_at")?,
        created_at_ms: col(row, "created_at")?,
        created_by: col(row, "created_by")?,
        revoked_at_ms: col(row, "revoked_at")?,
    })
}

impl Store {
    /// Stores a new virtual key; its `id` and `created_at_ms` are the store's (a UUIDv7, now),
    /// whatever `key` holds. Returns the key as stored, or `Err` with the key that has its name
    /// already (revoked keys keep theirs): a name belongs to one key, since usage is summed by
    /// it. Creators racing for one name get one key between them, on either backend (the
    /// unique index `gateway_keys_name`).
    pub async fn insert_gateway_key(
        &self,
        key: &GatewayKey,
    ) -> StoreResult<Result<GatewayKey, GatewayKey>> {
        let id = Uuid::now_v7().to_string();
        let models = match &key.models {
            Some(models) => {
                Some(
                    serde_json::to_string(models).map_err(|e| StoreError::Corrupt {
                        what: format!("the key's model list cannot be written as JSON: {e}"),
                    })?,
                )
            }
            None => None,
        };
        let inserted = sqlx::query::<Any>(
            "INSERT INTO gateway_keys (id, name, hash, prefix, models, budget_micro_usd, \
             budget_tokens, period, rpm, tpm, expires_at, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(id.clone())
        .bind(key.name.clone())
        .bind(key.hash.clone())
        .bind(key.prefix.clone())
        .bind(models)
        .bind(key.budget_micro_usd)
        .bind(key.budget_tokens)
        .bind(key.period.clone())
        .bind(key.rpm)
        .bind(key.tpm)
        .bind(key.expires_at_ms)
        .bind(self.now_ms())
        .bind(key.created_by.clone())
        .execute(&self.pool)
        .await
        .map_err(StoreError::query("store a gateway key"))?;
        if inserted.rows_affected() == 0 {
            return match self.gateway_key_by_name(&key.name).await? {
                Some(existing) => Ok(Err(existing)),
                None => Err(StoreError::Corrupt {
                    what: format!(
                        "the gateway key name {:?} is taken, yet no key has it",
                        key.name
                    ),
                }),
            };
        }
        self.gateway_key(&id)
            .await?
            .map(Ok)
            .ok_or_else(|| StoreError::Corrupt {
                what: format!("the gateway key {id} just stored cannot be read back"),
            })
    }

    /// The virtual key named `name`, revoked or not.
    pub async fn gateway_key_by_name(&self, name: &str) -> StoreResult<Option<GatewayKey>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM gateway_keys WHERE name = $1");
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(name.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("look a gateway key up by name"))?;
        row.as_ref().map(key_from_row).transpose()
    }

    /// The virtual key with the id `id`.
    pub async fn gateway_key(&self, id: &str) -> StoreResult<Option<GatewayKey>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM gateway_keys WHERE id = $1");
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("read a gateway key"))?;
        row.as_ref().map(key_from_row).transpose()
    }

    /// The virtual key whose hash is `hash`, revoked or not.
    pub async fn gateway_key_by_hash(&self, hash: &str) -> StoreResult<Option<GatewayKey>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM gateway_keys WHERE hash = $1");
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(hash.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("look a gateway key up"))?;
        row.as_ref().map(key_from_row).transpose()
    }

    /// Every virtual key, oldest first, revoked and expired ones included.
    pub async fn gateway_keys(&self) -> StoreResult<Vec<GatewayKey>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM gateway_keys ORDER BY created_at, id");
        let rows = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list the gateway keys"))?;
        rows.iter().map(key_from_row).collect()
    }

    /// Whether a virtual key that is not revoked exists.
    pub async fn gateway_keys_exist(&self) -> StoreResult<bool> {
        let row =
            sqlx::query::<Any>("SELECT COUNT(*) AS n FROM gateway_keys WHERE revoked_at IS NULL")
                .fetch_one(&self.pool)
                .await
                .map_err(StoreError::query("count the gateway keys"))?;
        Ok(col::<i64>(&row, "n")? > 0)
    }

    /// Revokes the key `id` (from then on it is answered 401); false when there is no such key.
    /// Revoking a revoked key keeps its first revocation time.
    pub async fn revoke_gateway_key(&self, id: &str) -> StoreResult<bool> {
        let done = sqlx::query::<Any>(
            "UPDATE gateway_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2",
        )
        .bind(self.now_ms())
        .bind(id.to_string())
        .execute(&self.pool)
        .await
        .map_err(StoreError::query("revoke a gateway key"))?;
        Ok(done.rows_affected() > 0)
    }
}

fn store_error(store: &Store, what: &str, e: StoreError) -> GatewayStoreError {
    GatewayStoreError {
        message: format!("{what} in {}", store.url()),
        source: Some(Box::new(e)),
    }
}

/// The key lookups of [`maestro_gateway::GatewayStore`].
pub(crate) fn key_by_hash<'a>(
    store: &'a Store,
    hash: &'a str,
) -> StoreFuture<'a, Option<GatewayKey>> {
    Box::pin(async move {
        store
            .gateway_key_by_hash(hash)
            .await
            .map_err(|e| store_error(store, "looking a gateway key up", e))
    })
}

/// Whether keys exist, for [`maestro_gateway::GatewayStore`].
pub(crate) fn keys_exist(store: &Store) -> StoreFuture<'_, bool> {
    Box::pin(async move {
        store
            .gateway_keys_exist()
            .await
            .map_err(|e| store_error(store, "counting the gateway keys", e))
    })
}
