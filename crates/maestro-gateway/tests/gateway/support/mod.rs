//! What the gateway's tests share: a gateway served on 127.0.0.1 over scripted upstreams, and a
//! store that keeps usage records in memory.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::collections::HashMap;

use maestro_gateway::{
    BudgetDenied, BudgetLimits, Cap, Gateway, GatewayConfig, GatewayKey, GatewayStore, Price,
    Prices, Spend, StoreFuture, UsageRecord, key_hash,
};
use serde_json::Value;

/// Usage records, virtual keys and a budget ledger in memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryStore {
    pub(crate) records: Mutex<Vec<UsageRecord>>,
    pub(crate) batches: Mutex<Vec<usize>>,
    pub(crate) keys: Mutex<Vec<GatewayKey>>,
    /// Each budget's spent tokens.
    pub(crate) spent: Mutex<HashMap<String, u64>>,
    /// Open reservations: id to (budget, charge).
    pub(crate) open: Mutex<HashMap<String, (String, Spend)>>,
    /// Every charge reserved, in order.
    pub(crate) reserved: Mutex<Vec<Spend>>,
}

/// A key named `name` for `secret`, allowed `models` (`None`: all), with a token budget.
pub(crate) fn key(
    secret: &str,
    name: &str,
    models: Option<&[&str]>,
    budget_tokens: Option<i64>,
) -> GatewayKey {
    GatewayKey {
        id: format!("id-{name}"),
        name: name.into(),
        hash: key_hash(secret),
        prefix: secret.chars().take(8).collect(),
        models: models.map(|m| m.iter().map(|s| s.to_string()).collect()),
        budget_micro_usd: None,
        budget_tokens,
        period: None,
        rpm: None,
        tpm: None,
        expires_at_ms: None,
        created_at_ms: 0,
        created_by: "test".into(),
        revoked_at_ms: None,
    }
}

impl GatewayStore for MemoryStore {
    fn record_usage<'a>(&'a self, records: &'a [UsageRecord]) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.batches.lock().unwrap().push(records.len());
            self.records.lock().unwrap().extend_from_slice(records);
            Ok(())
        })
    }

    fn key_by_hash<'a>(&'a self, hash: &'a str) -> StoreFuture<'a, Option<GatewayKey>> {
        let key = self
            .keys
            .lock()
            .unwrap()
            .iter()
            .find(|k| k.hash == hash)
            .cloned();
        Box::pin(async move { Ok(key) })
    }

    fn keys_exist(&self) -> StoreFuture<'_, bool> {
        let exist = self
            .keys
            .lock()
            .unwrap()
            .iter()
            .any(|k| k.revoked_at_ms.is_none());
        Box::pin(async move { Ok(exist) })
    }

    fn budget_reserve<'a>(
        &'a self,
        budget: &'a str,
        limits: BudgetLimits,
        charge: Spend,
        _ttl: Duration,
    ) -> StoreFuture<'a, Result<String, BudgetDenied>> {
        Box::pin(async move {
            let spent = *self.spent.lock().unwrap().get(budget).unwrap_or(&0);
            let mut open = self.open.lock().unwrap();
            let held: u64 = open
                .values()
                .filter(|(b, _)| b == budget)
                .map(|(_, s)| s.tokens)
                .sum();
            if let Some(limit) = limits.max_tokens
                && spent + held + charge.tokens > limit
            {
                return Ok(Err(BudgetDenied {
                    cap: Cap::Tokens,
                    limit,
                    spent,
                    reserved: held,
                }));
            }
            self.reserved.lock().unwrap().push(charge);
            let id = format!("r{}", self.reserved.lock().unwrap().len());
            open.insert(id.clone(), (budget.to_string(), charge));
            Ok(Ok(id))
        })
    }

    fn budget_settle<'a>(&'a self, reservation: &'a str, actual: Spend) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if let Some((budget, _)) = self.open.lock().unwrap().remove(reservation) {
                *self.spent.lock().unwrap().entry(budget).or_default() += actual.tokens;
            }
            Ok(())
        })
    }

    fn budget_release<'a>(&'a self, reservation: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.open.lock().unwrap().remove(reservation);
            Ok(())
        })
    }
}

/// A gateway listening on 127.0.0.1.
pub(crate) struct Served {
    pub(crate) gateway: Gateway,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// `http://127.0.0.1:PORT/v1`.
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The usage records written so far, after the writer caught up.
    pub(crate) async fn records(&self) -> Vec<UsageRecord> {
        self.gateway.close().await;
        self.store.records.lock().unwrap().clone()
    }

    /// `GET /metrics`.
    pub(crate) async fn metrics(&self) -> String {
        reqwest::get(format!("http://{}/metrics", self.addr))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A gateway over `config` (the `gateway:` section as JSON), pricing `priced` models at $1 per
/// million prompt tokens and $2 per million answer tokens.
pub(crate) async fn serve(config: Value, priced: &[&str]) -> Served {
    serve_config(serde_json::from_value(config).unwrap(), priced).await
}

/// [`serve`] for a configuration already read (its keys read, say).
pub(crate) async fn serve_config(config: GatewayConfig, priced: &[&str]) -> Served {
    serve_keyed(config, priced, Vec::new()).await
}

/// [`serve_config`] with `keys` in its store.
pub(crate) async fn serve_keyed(
    config: GatewayConfig,
    priced: &[&str],
    keys: Vec<GatewayKey>,
) -> Served {
    let prices: Prices = priced
        .iter()
        .map(|m| {
            (
                m.to_string(),
                Price {
                    input_per_mtok: 1.0,
                    output_per_mtok: 2.0,
                    cached_input_per_mtok: Some(0.5),
                },
            )
        })
        .collect();
    let store = Arc::new(MemoryStore::default());
    *store.keys.lock().unwrap() = keys;
    let gateway = Gateway::new(&config, prices, Some(store.clone())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = gateway.standalone_router();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Served {
        gateway,
        store,
        addr,
        task,
    }
}

/// A loopback address nothing listens on.
pub(crate) fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// The HTTP client of the tests.
/// Reads an SSE body into its `data:` payloads and the names of its `event:` lines.
pub(crate) fn sse(body: &str) -> (Vec<String>, Vec<String>) {
    let mut data = Vec::new();
    let mut events = Vec::new();
    for line in body.lines() {
        if let Some(d) = line.strip_prefix("data: ") {
            data.push(d.to_string());
        } else if let Some(e) = line.strip_prefix("event: ") {
            events.push(e.to_string());
        }
    }
    (data, events)
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub(crate) mod python;
