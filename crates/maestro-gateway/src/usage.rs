//! Usage records and their way to the store: each request hands its record to a channel, and
//! one writer task commits whatever is queued in one batch, so no store write stands between a
//! request and its answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::budget::{BudgetDenied, BudgetLimits, Spend};
use crate::keys::GatewayKey;

/// At most this many records go into one write.
const MAX_BATCH: usize = 1024;
/// Records waiting for the writer; past this a request's record is dropped (and counted) rather
/// than holding the request up.
const QUEUE: usize = 65_536;

/// How a proxied request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageStatus {
    /// The upstream answered in full (a stream to its `[DONE]`).
    Ok,
    /// The upstream refused the request (a 4xx other than 429), passed on to the client.
    Rejected,
    /// Every upstream failed before the first byte reached the client.
    Unavailable,
    /// The stream broke off after bytes were sent: the client got an SSE `error` event.
    Cut,
    /// The client went away before the answer's end.
    Abandoned,
}

impl UsageStatus {
    /// The word stored and shown: `ok`, `rejected`, `unavailable`, `cut`, `abandoned`.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageStatus::Ok => "ok",
            UsageStatus::Rejected => "rejected",
            UsageStatus::Unavailable => "unavailable",
            UsageStatus::Cut => "cut",
            UsageStatus::Abandoned => "abandoned",
        }
    }
}

/// One request through the gateway, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// When the request arrived, Unix milliseconds.
    pub at_ms: i64,
    /// The id of the virtual key used, when there was one.
    pub key_id: Option<String>,
    /// The name of the virtual key used, when there was one.
    pub key_name: Option<String>,
    /// The endpoint: `chat` or `embeddings`.
    pub endpoint: String,
    /// The public model name the client asked for.
    pub model: String,
    /// The upstream that answered last (the one tried last when none did).
    pub upstream: Option<String>,
    /// The model name sent to that upstream.
    pub upstream_model: Option<String>,
    /// Prompt tokens the upstream reported; with `estimated`, those the key's budget was
    /// charged for (the prompt's estimate).
    pub prompt_tokens: u64,
    /// Answer tokens the upstream reported; with `estimated`, those the key's budget was charged
    /// for (the answer's cap times `n`).
    pub completion_tokens: u64,
    /// The cost in US dollars from `llm.models.<upstream model>.price`; unknown without a price.
    /// With `estimated`, the cost of the charged tokens (for a key with a dollar budget, what
    /// its budget was charged).
    pub cost_usd: Option<f64>,
    /// The answer reported no usage (a stream cut or abandoned before its usage chunk, a whole
    /// answer without a readable `usage`), and the request's key was charged its whole budget
    /// reservation: the tokens and cost are that reservation, not what the upstream counted.
    #[serde(default)]
    pub estimated: bool,
    /// From the request's arrival to the end of the answer, milliseconds.
    pub latency_ms: u64,
    /// How it ended.
    pub status: UsageStatus,
    /// The HTTP status the client got.
    pub http_status: u16,
    /// `X-Maestro-Job`, when a Maestro run was the caller.
    pub job: Option<String>,
    /// `X-Maestro-Movement`, when a Maestro run was the caller.
    pub movement: Option<String>,
}

/// What a [`GatewayStore`] failed with: its words, for the log.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct GatewayStoreError {
    /// What went wrong.
    pub message: String,
    /// The store's own error.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// A boxed future of a [`GatewayStore`] call.
pub type StoreFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, GatewayStoreError>> + Send + 'a>>;

/// Where the gateway keeps what must outlive it. `maestro-store` implements it on SQLite and
/// PostgreSQL.
pub trait GatewayStore: Send + Sync + 'static {
    /// Writes the records in one transaction.
    fn record_usage<'a>(&'a self, records: &'a [UsageRecord]) -> StoreFuture<'a, ()>;

    /// The key whose hash ([`key_hash`](crate::key_hash)) is `hash`, revoked or not; `None`
    /// when no key has it. A store without keys finds none.
    fn key_by_hash<'a>(&'a self, hash: &'a str) -> StoreFuture<'a, Option<GatewayKey>> {
        let _ = hash;
        Box::pin(async { Ok(None) })
    }

    /// Whether a key that is not revoked exists: then every request must present one.
    fn keys_exist(&self) -> StoreFuture<'_, bool> {
        Box::pin(async { Ok(false) })
    }

    /// One atomic operation on the budget ledger: creates the budget `budget` if missing, then
    /// reserves `charge` from it only if spent + reserved + charge fits every cap of `limits`.
    /// `Ok(Ok(id))` names the reservation; `Ok(Err(_))` says which cap did not fit, and nothing
    /// was reserved. A reservation neither settled nor released within `ttl` goes back to the
    /// budget at the next [`GatewayStore::budget_sweep`]. A store without a ledger fails.
    fn budget_reserve<'a>(
        &'a self,
        budget: &'a str,
        limits: BudgetLimits,
        charge: Spend,
        ttl: Duration,
    ) -> StoreFuture<'a, Result<String, BudgetDenied>> {
        let _ = (budget, limits, charge, ttl);
        Box::pin(async { Err(no_ledger()) })
    }

    /// Closes the reservation as spent: `actual` is added to its budget's spent amounts.
    /// Idempotent.
    fn budget_settle<'a>(&'a self, reservation: &'a str, actual: Spend) -> StoreFuture<'a, ()> {
        let _ = (reservation, actual);
        Box::pin(async { Err(no_ledger()) })
    }

    /// Closes the reservation without spending. Idempotent.
    fn budget_release<'a>(&'a self, reservation: &'a str) -> StoreFuture<'a, ()> {
        let _ = reservation;
        Box::pin(async { Err(no_ledger()) })
    }

    /// Gives back reservations past their time to live; returns how many.
    fn budget_sweep(&self) -> StoreFuture<'_, u64> {
        Box::pin(async { Ok(0) })
    }

    /// Whether several gateways may share this store (PostgreSQL): then rate limits are also
    /// counted in the store, across nodes.
    fn shared(&self) -> bool {
        false
    }

    /// Counts `requests` and `tokens` for the key `key_id` in the minute starting at
    /// `minute_ms`, in one atomic operation, only if the minute's requests stay within `rpm`
    /// and its tokens so far are below `tpm`; otherwise counts nothing and says which limit
    /// refused. A store that counts nothing admits everything.
    fn rate_take<'a>(
        &'a self,
        key_id: &'a str,
        minute_ms: i64,
        take: RateTake,
    ) -> StoreFuture<'a, Result<(), RateLimit>> {
        let _ = (key_id, minute_ms, take);
        Box::pin(async { Ok(Ok(())) })
    }

    /// Adds `tokens` to the key's count of the minute starting at `minute_ms` (an answer's
    /// tokens, once known), whatever the limit.
    fn rate_add_tokens<'a>(
        &'a self,
        key_id: &'a str,
        minute_ms: i64,
        tokens: u64,
    ) -> StoreFuture<'a, ()> {
        let _ = (key_id, minute_ms, tokens);
        Box::pin(async { Ok(()) })
    }
}

/// What [`GatewayStore::rate_take`] counts and the limits it keeps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateTake {
    /// Requests to count (1).
    pub requests: u64,
    /// Tokens to count now (the prompt's estimate).
    pub tokens: u64,
    /// Requests per minute, if limited.
    pub rpm: Option<u64>,
    /// Tokens per minute, if limited.
    pub tpm: Option<u64>,
}

/// Which rate limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimit {
    /// Requests per minute.
    Rpm,
    /// Tokens per minute.
    Tpm,
}

fn no_ledger() -> GatewayStoreError {
    GatewayStoreError {
        message: "this store keeps no budget ledger, so a key's budget cannot be enforced".into(),
        source: None,
    }
}

/// The sending end of the usage writer, cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct UsageSender {
    tx: Option<mpsc::Sender<UsageRecord>>,
}

impl UsageSender {
    /// A sender whose records go nowhere (a gateway without a store).
    pub(crate) fn none() -> UsageSender {
        UsageSender { tx: None }
    }

    /// Queues `record`; false when the queue is full (the record is dropped).
    pub(crate) fn send(&self, record: UsageRecord) -> bool {
        match &self.tx {
            Some(tx) => tx.try_send(record).is_ok(),
            None => true,
        }
    }
}

/// Starts the writer task over `store`. When `stop` fires (or its sender is dropped) it takes
/// no more records, writes those queued, and ends.
pub(crate) fn start_writer(
    store: Arc<dyn GatewayStore>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> (UsageSender, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<UsageRecord>(QUEUE);
    let task = tokio::spawn(async move {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut stopping = false;
        loop {
            let received = if stopping {
                rx.recv_many(&mut batch, MAX_BATCH).await
            } else {
                tokio::select! {
                    n = rx.recv_many(&mut batch, MAX_BATCH) => n,
                    _ = &mut stop => {
                        stopping = true;
                        rx.close();
                        continue;
                    }
                }
            };
            if received == 0 {
                break;
            }
            if let Err(e) = store.record_usage(&batch).await {
                tracing::warn!(
                    error = %e,
                    records = batch.len(),
                    "the gateway's usage records could not be written to the store; they are lost"
                );
            }
            batch.clear();
        }
    });
    (UsageSender { tx: Some(tx) }, task)
}
