//! Maestro's LLM gateway: an OpenAI-compatible proxy in front of model servers.
//!
//! Clients call `/v1/chat/completions` (streamed or not), `/v1/embeddings` and `/v1/models`
//! (and `/v1/models/{id}`) with a public model name; the gateway routes each request to one of
//! the upstream models that `gateway.models.<name>` lists (weighted), passes the body through
//! with only `model` rewritten (or, for a `kind: anthropic` upstream, translated to the
//! Messages API and its answer back), and fails over to the next upstream on a connect error, a
//! 429 or a 5xx as long as no byte has reached the client. A stream that breaks off after bytes
//! were sent ends with an SSE `error` event, never as a silent success. Every request is metered
//! (tokens, cost from the price table, latency) into Prometheus metrics and, through a batching
//! writer, into a [`GatewayStore`].
//!
//! ```no_run
//! # async fn demo(config: maestro_gateway::GatewayConfig) -> Result<(), Box<dyn std::error::Error>> {
//! use maestro_gateway::{Gateway, Prices};
//!
//! let gateway = Gateway::new(&config, Prices::default(), None)?;
//! let app = gateway.standalone_router(); // /v1/… and /metrics
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8090").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! See `docs/gateway.md`.

mod anthropic;
mod auth;
mod budget;
mod config;
mod errors;
mod gateway;
mod keys;
mod limits;
mod metrics;
mod proxy;
mod route;
mod stream;
mod usage;

pub use budget::{BudgetDenied, BudgetLimits, Cap, Spend};
pub use config::{ConfigCheck, GatewayConfig, RouteTarget, UpstreamConfig, UpstreamKind};
pub use gateway::{Gateway, GatewayError, Price, Prices};
pub use keys::{GatewayKey, KEY_PREFIX, key_hash, new_key};
pub use usage::{
    GatewayStore, GatewayStoreError, RateLimit, RateTake, StoreFuture, UsageRecord, UsageStatus,
};
