//! The LLM gateway's records: one row per proxied request (`gateway_usage`), written in batches
//! by the gateway's writer through [`GatewayStore`], and read back summed per key, model or
//! job.

use std::time::Duration;

use maestro_gateway::{
    BudgetDenied, Cap, GatewayStore, GatewayStoreError, RateLimit, RateTake, Spend, StoreFuture,
    UsageRecord,
};
use sqlx::Any;

use crate::budgets::{BudgetCap, BudgetLimits, Charge, ReservationId, amount};
use crate::error::{StoreError, StoreResult};
use crate::rows::col;
use crate::store::{Backend, Marks, Store};

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
                 http_status, job, movement, estimated) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
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
            .bind(i64::from(r.estimated))
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

    fn budget_reserve<'a>(
        &'a self,
        budget: &'a str,
        limits: maestro_gateway::BudgetLimits,
        charge: Spend,
        ttl: Duration,
    ) -> StoreFuture<'a, Result<String, BudgetDenied>> {
        Box::pin(async move {
            let limits = BudgetLimits {
                max_tokens: limits.max_tokens,
                max_micro_usd: limits.max_micro_usd,
            };
            let charge = Charge {
                tokens: charge.tokens,
                micro_usd: charge.micro_usd,
            };
            match self
                .budget_reserve(budget, limits, charge, ttl)
                .await
                .map_err(|e| gateway_error("reserve from a key's budget", self, e))?
            {
                Ok(id) => Ok(Ok(id.to_string())),
                Err(refusal) => Ok(Err(BudgetDenied {
                    cap: match refusal.cap {
                        BudgetCap::Tokens => Cap::Tokens,
                        BudgetCap::Usd => Cap::Usd,
                    },
                    limit: refusal.limit,
                    spent: refusal.spent,
                    reserved: refusal.reserved,
                })),
            }
        })
    }

    fn budget_settle<'a>(&'a self, reservation: &'a str, actual: Spend) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let Ok(id) = reservation.parse::<ReservationId>() else {
                return Ok(());
            };
            let actual = Charge {
                tokens: actual.tokens,
                micro_usd: actual.micro_usd,
            };
            self.budget_settle(id, actual)
                .await
                .map_err(|e| gateway_error("settle a key's budget reservation", self, e))
        })
    }

    fn budget_release<'a>(&'a self, reservation: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let Ok(id) = reservation.parse::<ReservationId>() else {
                return Ok(());
            };
            self.budget_release(id)
                .await
                .map_err(|e| gateway_error("release a key's budget reservation", self, e))
        })
    }

    fn budget_sweep(&self) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let released = self
                .budget_sweep()
                .await
                .map_err(|e| gateway_error("sweep expired budget reservations", self, e))?;
            self.forget_rate_windows()
                .await
                .map_err(|e| gateway_error("forget old rate-limit minutes", self, e))?;
            Ok(released)
        })
    }

    fn shared(&self) -> bool {
        self.backend == Backend::Postgres
    }

    fn rate_take<'a>(
        &'a self,
        key_id: &'a str,
        minute_ms: i64,
        take: RateTake,
    ) -> StoreFuture<'a, Result<(), RateLimit>> {
        Box::pin(async move {
            self.gateway_rate_take(key_id, minute_ms, take)
                .await
                .map_err(|e| gateway_error("count a request against a key's rate limits", self, e))
        })
    }

    fn rate_add_tokens<'a>(
        &'a self,
        key_id: &'a str,
        minute_ms: i64,
        tokens: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.gateway_rate_add_tokens(key_id, minute_ms, tokens)
                .await
                .map_err(|e| gateway_error("count an answer's tokens against a key's TPM", self, e))
        })
    }
}

fn gateway_error(what: &str, store: &Store, e: StoreError) -> GatewayStoreError {
    GatewayStoreError {
        message: format!("could not {what} in {}", store.url()),
        source: Some(Box::new(e)),
    }
}

/// How long a rate-limit minute is kept after it ended.
const KEEP_RATE_MINUTES_MS: i64 = 10 * 60_000;

impl Store {
    /// Counts `take` in the key's minute only if the minute stays within its limits (one
    /// conditional upsert); otherwise says which limit refused.
    pub async fn gateway_rate_take(
        &self,
        key_id: &str,
        minute_ms: i64,
        take: RateTake,
    ) -> StoreResult<Result<(), RateLimit>> {
        let mut marks = Marks::new(self.backend);
        let mut sql = format!(
            "INSERT INTO gateway_rate_windows (key_id, minute, requests, tokens) VALUES ({}) \
             ON CONFLICT (key_id, minute) DO UPDATE SET \
             requests = gateway_rate_windows.requests + excluded.requests, \
             tokens = gateway_rate_windows.tokens + excluded.tokens WHERE 1 = 1",
            marks.list(4)
        );
        let rpm = take.rpm.map(amount);
        let tpm = take.tpm.map(amount);
        if rpm.is_some() {
            sql.push_str(&format!(
                " AND gateway_rate_windows.requests + excluded.requests <= {}",
                marks.mark()
            ));
        }
        if tpm.is_some() {
            sql.push_str(&format!(
                " AND gateway_rate_windows.tokens < {}",
                marks.mark()
            ));
        }
        sql.push_str(" RETURNING requests");
        let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(key_id)
            .bind(minute_ms)
            .bind(amount(take.requests))
            .bind(amount(take.tokens));
        if let Some(rpm) = rpm {
            query = query.bind(rpm);
        }
        if let Some(tpm) = tpm {
            query = query.bind(tpm);
        }
        let mut tx = self.begin_write().await?;
        let counted = query
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::query("count a request in its key's minute"))?;
        if counted.is_some() {
            tx.commit().await.map_err(StoreError::query(
                "commit a request's count in its key's minute",
            ))?;
            return Ok(Ok(()));
        }
        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "SELECT requests, tokens FROM gateway_rate_windows WHERE key_id = {} AND minute = {}",
            marks.mark(),
            marks.mark()
        );
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(key_id)
            .bind(minute_ms)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::query("read a key's minute"))?;
        tx.rollback()
            .await
            .map_err(StoreError::query("end a refused rate count"))?;
        let requests: i64 = match &row {
            Some(row) => col(row, "requests")?,
            None => 0,
        };
        Ok(Err(match rpm {
            Some(rpm) if requests.saturating_add(amount(take.requests)) > rpm => RateLimit::Rpm,
            _ => RateLimit::Tpm,
        }))
    }

    /// Adds `tokens` to the key's minute, whatever its limits.
    pub async fn gateway_rate_add_tokens(
        &self,
        key_id: &str,
        minute_ms: i64,
        tokens: u64,
    ) -> StoreResult<()> {
        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "UPDATE gateway_rate_windows SET tokens = tokens + {} WHERE key_id = {} AND minute = {}",
            marks.mark(),
            marks.mark(),
            marks.mark()
        );
        let mut tx = self.begin_write().await?;
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(amount(tokens))
            .bind(key_id)
            .bind(minute_ms)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query(
                "count an answer's tokens in its key's minute",
            ))?;
        tx.commit().await.map_err(StoreError::query(
            "commit an answer's tokens in its key's minute",
        ))
    }

    /// Forgets rate-limit minutes that ended more than ten minutes ago.
    async fn forget_rate_windows(&self) -> StoreResult<()> {
        let mut marks = Marks::new(self.backend);
        let sql = format!(
            "DELETE FROM gateway_rate_windows WHERE minute < {}",
            marks.mark()
        );
        let mut tx = self.begin_write().await?;
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(self.now_ms().saturating_sub(KEEP_RATE_MINUTES_MS))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("forget old rate-limit minutes"))?;
        tx.commit().await.map_err(StoreError::query(
            "commit forgetting old rate-limit minutes",
        ))
    }
}
