//! `maestro serve`: the HTTP API, a worker (unless `--no-worker`) and the scheduler tick in one
//! process. SIGTERM drains as `maestro worker` does: the API stops taking requests, runs in
//! flight may finish for `--drain-secs`, and a second signal hands them back.

use std::net::SocketAddr;

use anyhow::{Context as _, anyhow};
use maestro_app::{PoolSize, Shutdown, store_url};
use maestro_server::{Limits, ServerState};
use tokio_util::sync::CancellationToken;

use crate::flags::{ConfigFlag, ModelFlags, PiecesFlag, RunsFlag, StoreFlag, settings};
use crate::worker::{Signals, WorkerFlags, described};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The address to listen on. Without auth only a loopback address is accepted.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// Serve the API and tick the scheduler, but run no jobs here.
    #[arg(long)]
    no_worker: bool,
    /// Listen on a non-loopback address without auth: anyone who reaches the port can run jobs.
    #[arg(long)]
    insecure_no_auth: bool,
    /// The largest JSON or YAML request body, in KiB.
    #[arg(long, default_value_t = 1024)]
    max_body_kb: usize,
    /// The largest multipart submission (the task and its files together), in MiB.
    #[arg(long, default_value_t = 100)]
    max_upload_mb: usize,
    /// Clients one job's event stream may have on this node at once.
    #[arg(long, default_value_t = 2000)]
    stream_clients_per_job: usize,
    /// How long a request other than a stream may take, in seconds.
    #[arg(long, default_value_t = 30)]
    request_timeout_secs: u64,
    /// End each event stream after this many seconds (clients resume with Last-Event-ID), as a
    /// proxy that limits a connection's age would; by default a stream lasts until its job ends.
    #[arg(long, value_name = "SECS")]
    max_stream_secs: Option<u64>,
    #[command(flatten)]
    worker: WorkerFlags,
    #[command(flatten)]
    model: ModelFlags,
    #[command(flatten)]
    pieces: PiecesFlag,
    #[command(flatten)]
    runs: RunsFlag,
    #[command(flatten)]
    store: StoreFlag,
    #[command(flatten)]
    config: ConfigFlag,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    crate::common::block_on(async move {
        let config = settings(&args.config, &[&args.model, &args.pieces, &args.runs])?;
        if !args.bind.ip().is_loopback() && !config.auth.enabled && !args.insecure_no_auth {
            return Err(anyhow!(
                "refusing to listen on {} without auth: anyone who reaches it could run jobs on \
                 this machine. Listen on a loopback address (the default, 127.0.0.1:8080), turn \
                 on `auth.enabled` in the configuration, or pass --insecure-no-auth if a proxy \
                 in front authenticates",
                args.bind
            ));
        }
        let options = if args.no_worker {
            None
        } else {
            Some(args.worker.options(&config, args.model.model.is_some())?)
        };
        let (url, origin) = store_url(args.store.db.as_deref(), &config)?;
        let store = args.store.open(&config, PoolSize::Shared).await?;
        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .with_context(|| format!("listening on {}", args.bind))?;
        let local = listener.local_addr().context("reading the bound address")?;
        let worker_line = options.as_ref().map_or_else(
            || "no worker".to_string(),
            |o| format!("worker {}: profiles {}", o.name, described(o)),
        );
        let limits = Limits {
            max_body_bytes: args.max_body_kb.saturating_mul(1024).max(1024),
            max_upload_bytes: args.max_upload_mb.saturating_mul(1024 * 1024).max(1024),
            stream_clients_per_job: args.stream_clients_per_job.max(1),
            request_timeout: std::time::Duration::from_secs(args.request_timeout_secs.max(1)),
            max_stream: args
                .max_stream_secs
                .map(|secs| std::time::Duration::from_secs(secs.max(1))),
        };
        let gateway = if config.gateway.enabled {
            if !args.bind.ip().is_loopback() && !args.insecure_no_auth {
                return Err(anyhow!(
                    "refusing to mount the LLM gateway (gateway.enabled) on {}: it answers anyone \
                     who reaches it, with the upstreams' keys. Listen on a loopback address, turn \
                     gateway.enabled off, or pass --insecure-no-auth if a proxy in front \
                     authenticates",
                    args.bind
                ));
            }
            Some(maestro_app::gateway(&config, Some(store.clone()))?)
        } else {
            None
        };
        let state = ServerState::new(store.clone(), config, options, limits);
        if let Some(gateway) = gateway.clone() {
            state.set_gateway(gateway);
        }
        let shutdown = Shutdown::new();
        Signals::install()?.drive(shutdown.clone(), "serve");
        let stop_http = CancellationToken::new();
        let stop_ticks = CancellationToken::new();
        let ticker = match state.worker() {
            // A worker ticks the scheduler itself.
            Some(_) => None,
            None => Some(tokio::spawn(maestro_app::scheduler_ticks(
                store.clone(),
                stop_ticks.clone(),
            ))),
        };
        let router = maestro_server::router(state.clone());
        let http = tokio::spawn(maestro_server::serve(listener, router, stop_http.clone()));
        // The address line is the last of the startup lines: scripts wait for it.
        eprintln!("serve: {worker_line}; store {url} ({origin})");
        eprintln!("serve: web UI at http://{local}/, API at http://{local}/api/v1");
        if gateway.is_some() {
            eprintln!("serve: LLM gateway at http://{local}/v1");
        }
        eprintln!("serve: listening on http://{local}");
        let stats = match state.worker() {
            Some(worker) => Some(worker.run(shutdown.clone()).await?),
            None => {
                shutdown.begun().await;
                None
            }
        };
        stop_ticks.cancel();
        state.close_streams();
        stop_http.cancel();
        if let Some(ticker) = ticker {
            let _ = ticker.await;
        }
        match http.await {
            Ok(result) => result.context("serving HTTP")?,
            Err(e) => return Err(anyhow!("the HTTP server stopped: {e}")),
        }
        if let Some(gateway) = &gateway {
            gateway.close().await;
        }
        if let Some(stats) = stats {
            eprintln!(
                "serve stopped: {} finished, {} failed, {} lost or cancelled, {} handed back",
                stats.finished, stats.failed, stats.fenced, stats.handed_back
            );
        } else {
            eprintln!("serve stopped");
        }
        Ok(0)
    })
}
