//! The gateway's Prometheus metrics. Every label value comes from the configuration or a small
//! fixed set: upstream names, public model names (a model no route names is counted as
//! `(unknown)`), key names, outcome words. Nothing a client sends becomes a label by itself.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The label of a model no route names.
pub(crate) const UNKNOWN_MODEL: &str = "(unknown)";
/// The key label of a request made without a virtual key.
pub(crate) const NO_KEY: &str = "";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub upstream: String,
    pub model: String,
    pub key: String,
    pub status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TokenLabels {
    pub upstream: String,
    pub model: String,
    pub key: String,
    pub kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CostLabels {
    pub upstream: String,
    pub model: String,
    pub key: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LatencyLabels {
    pub upstream: String,
    pub model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailureLabels {
    pub upstream: String,
    pub reason: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The gateway's metrics.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub tokens: Family<TokenLabels, Counter>,
    pub cost: Family<CostLabels, Counter<f64, AtomicU64>>,
    pub duration: Histograms<LatencyLabels>,
    pub first_byte: Histograms<LatencyLabels>,
    pub upstream_failures: Family<FailureLabels, Counter>,
    pub usage_dropped: Counter,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("maestro_gateway");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests by upstream, public model, key name and outcome (ok, rejected, unavailable, cut, refused)",
            requests.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "tokens",
            "Tokens the upstreams reported, by kind (prompt, completion)",
            tokens.clone(),
        );
        let cost = Family::<CostLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "cost_usd",
            "Cost in US dollars from llm.models.<model>.price",
            cost.clone(),
        );
        let duration: Histograms<LatencyLabels> = Family::new_with_constructor(latency);
        registry.register(
            "request_duration_seconds",
            "From a request's arrival to the end of its answer",
            duration.clone(),
        );
        let first_byte: Histograms<LatencyLabels> = Family::new_with_constructor(latency);
        registry.register(
            "first_byte_seconds",
            "From a request's arrival to the upstream's first byte",
            first_byte.clone(),
        );
        let upstream_failures = Family::<FailureLabels, Counter>::default();
        registry.register(
            "upstream_failures",
            "Upstream attempts that failed over to the next one, by reason (connect, timeout, status_429, status_5xx, empty)",
            upstream_failures.clone(),
        );
        let usage_dropped = Counter::default();
        registry.register(
            "usage_records_dropped",
            "Usage records dropped because the store writer fell behind",
            usage_dropped.clone(),
        );
        Metrics {
            registry,
            requests,
            tokens,
            cost,
            duration,
            first_byte,
            upstream_failures,
            usage_dropped,
        }
    }

    /// The metrics in the Prometheus text format, appended to `out`.
    pub(crate) fn encode(&self, out: &mut String) {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode_registry(&mut text, &self.registry).is_ok() {
            out.push_str(&text);
        }
    }
}
