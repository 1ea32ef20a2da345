//! What every handler shares: the store, the configuration, this node's worker (when it runs
//! one), the limits and the metrics.

use std::sync::Arc;
use std::time::Duration;

use maestro_app::{EventRecord, JobId, RunObserver, Store, Worker, WorkerOptions};
use maestro_config::Config;

use crate::metrics::Metrics;

/// The limits of requests and streams; going over one is answered with a clear 4xx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The largest JSON or YAML body, in bytes.
    pub max_body_bytes: usize,
    /// The largest multipart submission (the task and its uploaded files together), in bytes.
    pub max_upload_bytes: usize,
    /// Stream clients one job may have on this node at once; one more is answered 429.
    pub stream_clients_per_job: usize,
    /// How long a request other than a stream may take before it is answered 408.
    pub request_timeout: Duration,
    /// How long one event stream may stay open (`None`: until the job ends). A stream cut
    /// here ends cleanly, and its client resumes with `Last-Event-ID`; proxies and load
    /// balancers that cap a connection's age do the same.
    pub max_stream: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_body_bytes: 1024 * 1024,
            max_upload_bytes: 100 * 1024 * 1024,
            stream_clients_per_job: 2_000,
            request_timeout: Duration::from_secs(30),
            max_stream: None,
        }
    }
}

/// The server's shared state. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ServerState {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) store: Store,
    /// The configuration in effect: this node's own (its base) with the store's overlay, re-read within 2 s of a
    /// change; the worker's jobs use the same watch.
    pub(crate) watch: maestro_app::ConfigWatch,
    pub(crate) worker: Option<Worker>,
    pub(crate) limits: Limits,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) streams: crate::events::StreamCounts,
    /// The OpenID provider, when `auth.oidc` is set.
    pub(crate) oidc: Option<crate::oidc::Oidc>,
    /// Cancelled when the server stops: open streams end, so that it can.
    pub(crate) closing: tokio_util::sync::CancellationToken,
    /// The LLM gateway mounted at `/v1`, when `gateway.enabled` is set.
    pub(crate) gateway: std::sync::OnceLock<maestro_app::Gateway>,
}

impl ServerState {
    /// The state of a server over `store`; with `worker`, this node runs a worker too (start it
    /// with [`ServerState::worker`]), whose runs' text streams live to this node's clients and
    /// whose runs this node's metrics count.
    pub fn new(
        store: Store,
        config: Config,
        worker: Option<WorkerOptions>,
        limits: Limits,
    ) -> ServerState {
        let metrics = Arc::new(Metrics::new());
        let watch = maestro_app::ConfigWatch::new(store.clone(), config.clone());
        let worker = worker.map(|options| {
            let observer: Arc<dyn RunObserver> = Arc::new(MetricsObserver(Arc::clone(&metrics)));
            Worker::with_config_watch(store.clone(), watch.clone(), options, Some(observer))
        });
        let oidc = config.auth.oidc.as_ref().map(|o| {
            let redirect_url = o.redirect_url.clone().unwrap_or_else(|| {
                format!(
                    "{}/auth/callback",
                    config
                        .auth
                        .public_url
                        .as_deref()
                        .unwrap_or("")
                        .trim_end_matches('/')
                )
            });
            crate::oidc::Oidc::new(crate::oidc::OidcSettings {
                issuer: o.issuer.clone(),
                client_id: o.client_id.clone(),
                client_secret: std::env::var(&o.client_secret_env)
                    .ok()
                    .map(maestro_protocol::Secret::new),
                redirect_url,
                scopes: o.scopes.clone(),
            })
        });
        ServerState {
            inner: Arc::new(Inner {
                oidc,
                watch,
                store,
                worker,
                limits,
                metrics,
                streams: crate::events::StreamCounts::default(),
                closing: tokio_util::sync::CancellationToken::new(),
                gateway: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Mounts `gateway` at `/v1` in the router built afterwards ([`crate::router`]), and adds
    /// its metrics to `/api/v1/metrics`. A second gateway is ignored.
    pub fn set_gateway(&self, gateway: maestro_app::Gateway) {
        let _ = self.inner.gateway.set(gateway);
    }

    /// The gateway mounted at `/v1`, if there is one.
    pub fn gateway(&self) -> Option<&maestro_app::Gateway> {
        self.inner.gateway.get()
    }

    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    /// This node's own configuration (its files and flags), without the store's overlay.
    pub(crate) fn base_config(&self) -> &Config {
        self.inner.watch.base()
    }

    /// The configuration in effect now.
    pub(crate) async fn current_config(&self) -> Arc<Config> {
        self.inner.watch.current().await
    }

    /// The configuration as the store has it now (not up to a poll behind), and its tag.
    pub(crate) async fn fresh_config_tagged(&self) -> (Arc<Config>, maestro_app::ETag) {
        self.inner.watch.fresh_tagged().await
    }

    pub(crate) fn auth(&self) -> &maestro_config::AuthConfig {
        &self.inner.watch.base().auth
    }

    pub(crate) fn oidc(&self) -> Option<&crate::oidc::Oidc> {
        self.inner.oidc.as_ref()
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }
}

impl ServerState {
    /// A job was queued or answered here: this node's worker looks for it now.
    pub(crate) fn wake_worker(&self) {
        if let Some(worker) = &self.inner.worker {
            worker.wake();
        }
    }

    /// Ends every open stream: call it when the server stops, before waiting for requests in
    /// flight (a stream never ends on its own while its job goes on).
    pub fn close_streams(&self) {
        self.inner.closing.cancel();
    }

    /// This node's worker, when it runs one: run it with [`Worker::run`].
    pub fn worker(&self) -> Option<&Worker> {
        self.inner.worker.as_ref()
    }
}

/// Counts the runs of this node's worker into the metrics.
#[derive(Debug)]
struct MetricsObserver(Arc<Metrics>);

impl RunObserver for MetricsObserver {
    fn event(&self, job: JobId, record: &EventRecord) {
        self.0.event(job, record);
    }
}
