//! `/metrics` in the Prometheus text format. Every name starts `maestro_`, and labels are
//! bounded: routes as templates (`/api/v1/jobs/{id}`), statuses, tool names from the
//! configuration; never an id or a key.
//!
//! The job counts are read from the store at each scrape, so every node reports the same
//! queue. The run, model and tool figures count the runs of this node's workers.

use std::collections::HashMap;
use std::sync::Mutex;

use maestro_app::{EventRecord, JobId, JobStatus, RunEvent};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    method: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    kind: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency() -> Histogram {
    // 0.5 ms to about 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

fn long() -> Histogram {
    // 50 ms to about 14 h.
    Histogram::new(exponential_buckets(0.05, 2.5, 16))
}

/// The server's metrics.
pub(crate) struct Metrics {
    registry: Registry,
    http_requests: Family<HttpLabels, Counter>,
    http_duration: Histograms<RouteLabels>,
    stream_clients: Gauge,
    jobs: Family<StatusLabels, Gauge>,
    queue_depth: Gauge,
    runs: Family<StatusLabels, Counter>,
    run_duration: Histograms<StatusLabels>,
    movement_duration: Histogram,
    model_calls: Counter,
    tokens: Family<TokenLabels, Counter>,
    tool_calls: Family<ToolLabels, Counter>,
    tool_errors: Family<ToolLabels, Counter>,
    /// When each run of this node started, and its movement in flight.
    started: Mutex<HashMap<JobId, Timing>>,
}

#[derive(Debug, Default)]
struct Timing {
    run: Option<time::OffsetDateTime>,
    movement: Option<time::OffsetDateTime>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("maestro");
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route template, method and status",
            http_requests.clone(),
        );
        let http_duration = Histograms::<RouteLabels>::new_with_constructor(latency as fn() -> _);
        registry.register(
            "http_request_duration_seconds",
            "Time to answer an HTTP request (to the start of a stream's body), by route template",
            http_duration.clone(),
        );
        let stream_clients = Gauge::default();
        registry.register(
            "stream_clients",
            "Clients following a job's event stream on this node now",
            stream_clients.clone(),
        );
        let jobs = Family::<StatusLabels, Gauge>::default();
        registry.register("jobs", "Jobs in the store, by status", jobs.clone());
        let queue_depth = Gauge::default();
        registry.register(
            "queue_depth",
            "Jobs queued and waiting for a worker",
            queue_depth.clone(),
        );
        let runs = Family::<StatusLabels, Counter>::default();
        registry.register(
            "runs",
            "Runs of this node's workers that ended or parked, by how",
            runs.clone(),
        );
        let run_duration = Histograms::<StatusLabels>::new_with_constructor(long as fn() -> _);
        registry.register(
            "run_duration_seconds",
            "From a run's start (or resumption) to its end or park, by how it ended",
            run_duration.clone(),
        );
        let movement_duration = latency();
        registry.register(
            "movement_duration_seconds",
            "Time of one movement visit",
            movement_duration.clone(),
        );
        let model_calls = Counter::default();
        registry.register(
            "model_calls",
            "Model calls answered for this node's runs",
            model_calls.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "model_tokens",
            "Tokens of those calls, by kind (prompt, completion)",
            tokens.clone(),
        );
        let tool_calls = Family::<ToolLabels, Counter>::default();
        registry.register("tool_calls", "Tool calls run, by tool", tool_calls.clone());
        let tool_errors = Family::<ToolLabels, Counter>::default();
        registry.register(
            "tool_errors",
            "Tool calls that failed, by tool",
            tool_errors.clone(),
        );
        Metrics {
            registry,
            http_requests,
            http_duration,
            stream_clients,
            jobs,
            queue_depth,
            runs,
            run_duration,
            movement_duration,
            model_calls,
            tokens,
            tool_calls,
            tool_errors,
            started: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.http_requests
            .get_or_create(&HttpLabels {
                route: route.to_string(),
                method: method.to_string(),
                status,
            })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabels {
                route: route.to_string(),
            })
            .observe(seconds);
    }

    pub(crate) fn stream_opened(&self) {
        self.stream_clients.inc();
    }

    pub(crate) fn stream_closed(&self) {
        self.stream_clients.dec();
    }

    /// Counts one committed event of a run of this node.
    pub(crate) fn event(&self, job: JobId, record: &EventRecord) {
        let at =
            time::OffsetDateTime::parse(&record.ts, &time::format_description::well_known::Rfc3339)
                .ok();
        match &record.event {
            RunEvent::RunStarted { .. } => {
                self.timing(job, |t| t.run = at);
            }
            RunEvent::MovementStarted { .. } => {
                self.timing(job, |t| t.movement = at);
            }
            RunEvent::MovementFinished { .. } => {
                if let (Some(start), Some(end)) =
                    (self.timing(job, |t| t.movement.take()).flatten(), at)
                {
                    self.movement_duration
                        .observe((end - start).as_seconds_f64().max(0.0));
                }
            }
            RunEvent::RunFinished { status, .. } => {
                let labels = StatusLabels {
                    status: status.to_string(),
                };
                self.runs.get_or_create(&labels).inc();
                let start = self
                    .started
                    .lock()
                    .ok()
                    .and_then(|mut s| s.remove(&job))
                    .and_then(|t| t.run);
                if let (Some(start), Some(end)) = (start, at) {
                    self.run_duration
                        .get_or_create(&labels)
                        .observe((end - start).as_seconds_f64().max(0.0));
                }
            }
            RunEvent::LlmResponse { usage, .. } => {
                self.model_calls.inc();
                self.tokens
                    .get_or_create(&TokenLabels { kind: "prompt" })
                    .inc_by(usage.prompt_tokens);
                self.tokens
                    .get_or_create(&TokenLabels { kind: "completion" })
                    .inc_by(usage.completion_tokens);
            }
            RunEvent::ToolResult { tool, ok, .. } => {
                let labels = ToolLabels { tool: tool.clone() };
                self.tool_calls.get_or_create(&labels).inc();
                if !ok {
                    self.tool_errors.get_or_create(&labels).inc();
                }
            }
            _ => {}
        }
    }

    fn timing<T>(&self, job: JobId, f: impl FnOnce(&mut Timing) -> T) -> Option<T> {
        let mut started = self.started.lock().ok()?;
        Some(f(started.entry(job).or_default()))
    }

    /// The text exposition, with the job counts as of `counts`.
    pub(crate) fn render(&self, counts: &[(JobStatus, i64)]) -> String {
        self.jobs.clear();
        let mut queued = 0;
        for (status, n) in counts {
            self.jobs
                .get_or_create(&StatusLabels {
                    status: status.to_string(),
                })
                .set(*n);
            if *status == JobStatus::Queued {
                queued = *n;
            }
        }
        self.queue_depth.set(queued);
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            tracing::error!("encoding the metrics failed");
        }
        out
    }
}

/// The Prometheus text format 0.0.4 of an OpenMetrics exposition (what `prometheus_client`
/// writes). The two differ in one point that matters here: OpenMetrics names a counter's
/// family without `_total` (`# TYPE maestro_runs counter`) and its samples with it, while
/// 0.0.4 wants the `HELP` and `TYPE` lines to carry the samples' name. `# EOF` (and `# UNIT`)
/// stay: to a 0.0.4 reader they are comments.
pub(crate) fn prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.split_inclusive('\n') {
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| Some((prefix, line.strip_prefix(prefix)?)));
        match descriptor.and_then(|(prefix, rest)| Some((prefix, rest.split_once(' ')?))) {
            Some((prefix, (name, tail)))
                if counters.contains(name) && !name.ends_with("_total") =>
            {
                for part in [prefix, name, "_total ", tail] {
                    out.push_str(part);
                }
            }
            _ => out.push_str(line),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::prometheus_text;

    #[test]
    fn a_counter_s_help_and_type_name_its_samples() {
        let openmetrics = "# HELP maestro_runs Runs, by how.\n\
                           # TYPE maestro_runs counter\n\
                           maestro_runs_total{status=\"completed\"} 1\n\
                           # HELP maestro_queue_depth Jobs queued.\n\
                           # TYPE maestro_queue_depth gauge\n\
                           maestro_queue_depth 0\n\
                           # EOF\n";
        assert_eq!(
            prometheus_text(openmetrics),
            "# HELP maestro_runs_total Runs, by how.\n\
             # TYPE maestro_runs_total counter\n\
             maestro_runs_total{status=\"completed\"} 1\n\
             # HELP maestro_queue_depth Jobs queued.\n\
             # TYPE maestro_queue_depth gauge\n\
             maestro_queue_depth 0\n\
             # EOF\n"
        );
    }
}
