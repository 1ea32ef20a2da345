//! The LLM gateway's records: one row per proxied request (`gateway_usage`), written in batches
//! by the gateway's writer through [`GatewayStore`], and read back summed per key, model or
//! job.

use maestro_gateway::{GatewayStore, GatewayStoreError, StoreFuture, UsageRecord};
use sqlx::Any;

use crate::error::{StoreError, StoreResult};
use crate::rows::col;
use crate::store::Store;

/// What usage is summed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageGroup {
    /// The virtual key's name (requests without a key are one group with no name).
    Key,
    /// The public model name.
    Model,
    /// The Maestro job named by `X-Maestro-Job` (requests without one are one group).
    Job,
}

/// The usage of one group over a time range.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageTotal {
    /// The key's name, when grouped by key.
    pub key: Option<String>,
    /// The public model name, when grouped by model.
    pub model: Option<String>,
    /// The job, when grouped by job.
    pub job: Option<String>,
    /// Requests recorded.
    pub requests: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Answer tokens.
    pub completion_tokens: u64,
    /// The cost in US dollars of the priced requests.
    pub cost_usd: f64,
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl Store {
    /// Writes gateway usage records in one transaction.
    pub async fn record_gateway_usage(&self, records: &[UsageRecord]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        for r in records {
            sqlx::query::<Any>(
                "INSERT INTO gateway_usage (at, key_id, key_name, endpoint, model, upstream, \
                 upstream_model, prompt_tokens, completion_tokens, cost_usd, latency_ms, status, \
                 http_status, job, movement) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
            )
            .bind(r.at_ms)
            .bind(r.key_id.clone())
            .bind(r.key_name.clone())
            .bind(r.endpoint.clone())
            .bind(r.model.clone())
            .bind(r.upstream.clone())
            .bind(r.upstream_model.clone())
            .bind(int(r.prompt_tokens))
            .bind(int(r.completion_tokens))
            .bind(r.cost_usd)
            .bind(int(r.latency_ms))
            .bind(r.status.as_str().to_string())
            .bind(i64::from(r.http_status))
            .bind(r.job.clone())
            .bind(r.movement.clone())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("write the gateway's usage records"))?;
        }
        tx.commit()
            .await
            .map_err(StoreError::query("commit the gateway's usage records"))
    }

    /// The gateway's usage between `from_ms` (inclusive) and `to_ms` (exclusive), Unix
    /// milliseconds, summed per `by`, largest cost first.
    pub async fn gateway_usage(
        &self,
        by: UsageGroup,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<Vec<UsageTotal>> {
        let column = match by {
            UsageGroup::Key => "key_name",
            UsageGroup::Model => "model",
            UsageGroup::Job => "job",
        };
        let sql = format!(
            "SELECT {column} AS grp, COUNT(*) AS requests, \
             CAST(COALESCE(SUM(prompt_tokens), 0) AS BIGINT) AS prompt_tokens, \
             CAST(COALESCE(SUM(completion_tokens), 0) AS BIGINT) AS completion_tokens, \
             COALESCE(SUM(cost_usd), 0.0) AS cost_usd \
             FROM gateway_usage WHERE at >= $1 AND at < $2 \
             GROUP BY {column} ORDER BY cost_usd DESC, requests DESC"
        );
        // `column` is one of three fixed names, never the caller's text.
        let rows = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(from_ms)
            .bind(to_ms)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("read the gateway's usage"))?;
        rows.iter()
            .map(|row| {
                let group: Option<String> = col(row, "grp")?;
                let count = |name: &str| -> StoreResult<u64> {
                    Ok(u64::try_from(col::<i64>(row, name)?).unwrap_or(0))
                };
                Ok(UsageTotal {
                    key: if by == UsageGroup::Key {
                        group.clone()
                    } else {
                        None
                    },
                    model: if by == UsageGroup::Model {
                        group.clone()
                    } else {
                        None
                    },
                    job: if by == UsageGroup::Job { group } else { None },
                    requests: count("requests")?,
                    prompt_tokens: count("prompt_tokens")?,
                    completion_tokens: count("completion_tokens")?,
                    cost_usd: col(row, "cost_usd")?,
                })
            })
            .collect()
    }
}

impl GatewayStore for Store {
    fn record_usage<'a>(&'a self, records: &'a [UsageRecord]) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.record_gateway_usage(records)
                .await
                .map_err(|e| GatewayStoreError {
                    message: format!("writing {} usage records to {}", records.len(), self.url()),
                    source: Some(Box::new(e)),
                })
        })
    }

    fn key_by_hash<'a>(
        &'a self,
        hash: &'a str,
    ) -> StoreFuture<'a, Option<maestro_gateway::GatewayKey>> {
        crate::gateway_keys::key_by_hash(self, hash)
    }

    fn keys_exist(&self) -> StoreFuture<'_, bool> {
        crate::gateway_keys::keys_exist(self)
    }
}
