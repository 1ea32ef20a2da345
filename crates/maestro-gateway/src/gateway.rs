//! [`Gateway`]: the upstreams, routes and prices from the configuration, the HTTP client, the
//! metrics and the usage writer, and the axum routes over them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::config::{GatewayConfig, UpstreamKind};
use crate::metrics::Metrics;
use crate::route::{Route, Target, Upstream};
use crate::usage::{GatewayStore, UsageSender, start_writer};

/// The largest request body the gateway reads, in bytes (2 MiB); a larger one is answered
/// `413` in OpenAI's error shape.
pub(crate) const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// What one model's tokens cost, US dollars per million.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Dollars per million prompt tokens.
    pub input_per_mtok: f64,
    /// Dollars per million answer tokens.
    pub output_per_mtok: f64,
    /// Dollars per million prompt tokens read from the upstream's cache; `None` prices them
    /// as `input_per_mtok`.
    pub cached_input_per_mtok: Option<f64>,
}

impl Price {
    /// The cost of `prompt` tokens (`cached` of them read from the upstream's cache) and
    /// `completion` tokens.
    pub fn cost_usd(&self, prompt: u64, cached: u64, completion: u64) -> f64 {
        let cached = cached.min(prompt);
        ((prompt - cached) as f64 * self.input_per_mtok
            + cached as f64 * self.cached_input_per_mtok.unwrap_or(self.input_per_mtok)
            + completion as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// Prices by model name (`llm.models.<name>.price`): an upstream model's name is looked up
/// first, then the public name.
pub type Prices = BTreeMap<String, Price>;

/// Why a gateway could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The configuration has a problem (see [`GatewayConfig::check`]).
    #[error("gateway.{field}: {message}; fix: {fix}")]
    Config {
        /// The dotted field below `gateway.`.
        field: String,
        /// What is wrong.
        message: String,
        /// What to do.
        fix: String,
    },
    /// The HTTP client could not be built (the TLS roots could not be loaded).
    #[error("building the gateway's HTTP client failed")]
    Client(#[source] reqwest::Error),
}

/// The gateway: cheap to clone, shared by every request.
#[derive(Debug, Clone)]
pub struct Gateway {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub client: reqwest::Client,
    pub upstreams: Vec<Upstream>,
    pub routes: HashMap<String, Route>,
    /// The public names, sorted, as `/v1/models` lists them.
    pub public_names: Vec<String>,
    pub prices: Prices,
    pub metrics: Metrics,
    pub usage: UsageSender,
    /// Where keys are looked up; `None`: no keys, every request is served.
    pub store: crate::auth::KeyStore,
    pub writer: Mutex<
        Option<(
            tokio::sync::oneshot::Sender<()>,
            tokio::task::JoinHandle<()>,
        )>,
    >,
    pub cooldown: Duration,
    pub first_byte_timeout: Duration,
    /// The longest a stream may go without a chunk after its first.
    pub stream_idle_timeout: Duration,
    pub epoch: Instant,
    /// The answer cap written into a budgeted request without one.
    pub default_max_tokens: u64,
    /// Each key's rate limiters on this node.
    pub limits: crate::limits::Limits,
    /// Gives back the budget reservations of requests that never finished.
    pub sweeper: Mutex<Option<Sweeper>>,
}

/// The task that sweeps expired budget reservations every minute; stopped when the gateway is
/// dropped.
#[derive(Debug)]
pub(crate) struct Sweeper(tokio::task::JoinHandle<()>);

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn start_sweeper(store: Arc<dyn GatewayStore>) -> Sweeper {
    Sweeper(tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(60));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            match store.budget_sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    reservations = n,
                    "gave back budget reservations whose requests never finished"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "the gateway could not sweep expired budget reservations")
                }
            }
        }
    }))
}

impl Gateway {
    /// A gateway over `config`'s upstreams and routes, pricing calls with `prices`, writing
    /// usage to `store` when there is one (its writer task is spawned on the current tokio
    /// runtime). Fails on the first problem [`GatewayConfig::check`] finds.
    pub fn new(
        config: &GatewayConfig,
        prices: Prices,
        store: Option<Arc<dyn GatewayStore>>,
    ) -> Result<Gateway, GatewayError> {
        if let Some(check) = config.check().into_iter().next() {
            return Err(GatewayError::Config {
                field: check
                    .field
                    .iter()
                    .skip(1)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("."),
                message: check.message,
                fix: check.fix,
            });
        }
        let mut index = HashMap::new();
        let mut upstreams = Vec::new();
        for (name, upstream) in &config.upstreams {
            let authorization = match &upstream.api_key {
                Some(key) => {
                    let text = match upstream.kind {
                        UpstreamKind::Openai => format!("Bearer {}", key.expose()),
                        UpstreamKind::Anthropic => key.expose().to_string(),
                    };
                    let mut value =
                        HeaderValue::from_str(&text).map_err(|_| GatewayError::Config {
                            field: format!("upstreams.{name}.api_key_env"),
                            message: "the key holds characters an HTTP header cannot carry".into(),
                            fix:
                                "check the variable's value (no line breaks or control characters)"
                                    .into(),
                        })?;
                    value.set_sensitive(true);
                    Some(value)
                }
                None => None,
            };
            index.insert(name.clone(), upstreams.len());
            let built = Upstream::new(name.clone(), &upstream.base_url, authorization);
            upstreams.push(match upstream.kind {
                UpstreamKind::Openai => built,
                UpstreamKind::Anthropic => built.anthropic(upstream.max_tokens),
            });
        }
        let mut routes = HashMap::new();
        for (public, targets) in &config.models {
            let targets = targets
                .iter()
                .filter_map(|t| {
                    Some(Target {
                        upstream: *index.get(&t.upstream)?,
                        model: t.model.clone(),
                        weight: t.weight,
                    })
                })
                .collect();
            routes.insert(public.clone(), Route { targets });
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(config.connect_timeout_secs.max(1)))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(1024)
            .build()
            .map_err(GatewayError::Client)?;
        let (usage, writer) = match store.clone() {
            Some(store) => {
                let (stop, stopped) = tokio::sync::oneshot::channel();
                let (sender, task) = start_writer(store, stopped);
                (sender, Some((stop, task)))
            }
            None => (UsageSender::none(), None),
        };
        let mut public_names: Vec<String> = config.models.keys().cloned().collect();
        public_names.sort();
        Ok(Gateway {
            inner: Arc::new(Inner {
                client,
                upstreams,
                routes,
                public_names,
                prices,
                metrics: Metrics::new(),
                usage,
                store: crate::auth::KeyStore::new(store.clone()),
                writer: Mutex::new(writer),
                cooldown: Duration::from_secs(config.cooldown_secs),
                first_byte_timeout: Duration::from_secs(config.first_byte_timeout_secs.max(1)),
                stream_idle_timeout: Duration::from_secs(config.stream_idle_timeout_secs.max(1)),
                epoch: Instant::now(),
                default_max_tokens: config.default_max_tokens.max(1),
                limits: crate::limits::Limits::default(),
                sweeper: Mutex::new(store.clone().map(start_sweeper)),
            }),
        })
    }

    /// The OpenAI-compatible routes, to be nested at `/v1`: `/chat/completions`,
    /// `/embeddings`, `/models` and `/models/{id}`. Request bodies are read up to 2 MiB.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/chat/completions", post(crate::proxy::chat))
            .route("/embeddings", post(crate::proxy::embeddings))
            .route("/models", get(crate::proxy::models))
            // A public name may hold slashes (`org/model`), as OpenAI clients send it.
            .route("/models/{*id}", get(crate::proxy::model))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(self.clone())
    }

    /// The gateway alone, as `maestro gateway` serves it: [`Gateway::router`] at `/v1`, the
    /// metrics at `/metrics`, and `/healthz`.
    pub fn standalone_router(&self) -> Router {
        let metrics = self.clone();
        Router::new()
            .nest("/v1", self.router())
            .route(
                "/metrics",
                get(move || {
                    let gateway = metrics.clone();
                    async move { gateway.metrics_response() }
                }),
            )
            .route("/healthz", get(|| async { "ok" }))
    }

    /// The gateway's metrics in the Prometheus text format, appended to `out` without the
    /// closing `# EOF` line (a server that mounts the gateway adds them to its own `/metrics`).
    pub fn encode_metrics(&self, out: &mut String) {
        self.inner.metrics.encode(out);
    }

    fn metrics_response(&self) -> Response {
        let mut text = String::new();
        self.encode_metrics(&mut text);
        text.push_str("# EOF\n");
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            )],
            text,
        )
            .into_response()
    }

    /// Stops taking usage records, writes those queued, and waits for the writer. Requests
    /// still in flight afterwards are not recorded.
    pub async fn close(&self) {
        drop(self.inner.sweeper.lock().ok().and_then(|mut s| s.take()));
        let writer = self.inner.writer.lock().ok().and_then(|mut w| w.take());
        if let Some((stop, task)) = writer {
            let _ = stop.send(());
            let _ = task.await;
        }
    }
}
