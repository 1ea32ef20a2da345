//! What the gateway's tests share: a gateway served on 127.0.0.1 over scripted upstreams, and a
//! store that keeps usage records in memory.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use maestro_gateway::{
    Gateway, GatewayConfig, GatewayStore, Price, Prices, StoreFuture, UsageRecord,
};
use serde_json::Value;

/// Usage records in memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryStore {
    pub(crate) records: Mutex<Vec<UsageRecord>>,
    pub(crate) batches: Mutex<Vec<usize>>,
}

impl GatewayStore for MemoryStore {
    fn record_usage<'a>(&'a self, records: &'a [UsageRecord]) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.batches.lock().unwrap().push(records.len());
            self.records.lock().unwrap().extend_from_slice(records);
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
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub(crate) mod python;
