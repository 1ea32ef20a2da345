//! `maestro worker`: claim jobs from the store and run them until SIGTERM. The first SIGTERM (or
//! Ctrl-C) stops claiming and lets the runs in flight finish for `--drain-secs`; a second one, or
//! the end of the drain time, hands them back to the queue.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use maestro_app::{Profile, Shutdown, Worker, WorkerOptions, classes, store_url};
use maestro_store::Store;

use crate::jobs::StoreArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs run at once (with --classes or alone: one profile, `default`; without either, the
    /// `workers:` profiles of the configuration).
    #[arg(long)]
    concurrency: Option<u32>,
    /// The task classes to claim, comma-separated (default: every class).
    #[arg(long, value_delimiter = ',')]
    classes: Option<Vec<String>>,
    /// The worker's name in `maestro workers` (default: `worker-<pid>`).
    #[arg(long)]
    name: Option<String>,
    /// How long a claim holds without a heartbeat, in seconds; renewed every third of it.
    #[arg(long, default_value_t = WorkerOptions::LEASE.as_secs())]
    lease_secs: u64,
    /// After SIGTERM, how long runs in flight may go on before they are handed back.
    #[arg(long, default_value_t = WorkerOptions::DRAIN.as_secs())]
    drain_secs: u64,
    /// The OpenAI-compatible API root (also `MAESTRO_LLM_BASE_URL`, `llm.base_url`).
    #[arg(long)]
    llm_base_url: Option<String>,
    /// The model name to request. Without it: the piece's `model`, then `MAESTRO_MODEL`, then
    /// `llm.model`, then the endpoint's only model.
    #[arg(long)]
    model: Option<String>,
    /// Directories searched for pieces by name and by the classifier (default:
    /// `paths.pieces_dirs`).
    #[arg(long)]
    pieces_dir: Vec<PathBuf>,
    /// Where run records go (default: `paths.runs_dir`, `.maestro/runs`).
    #[arg(long)]
    runs_dir: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
}

/// Resolves once per SIGTERM or SIGINT.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    async fn next(&mut self) -> bool {
        tokio::select! {
            got = self.terminate.recv() => got.is_some(),
            got = self.interrupt.recv() => got.is_some(),
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    crate::jobs::block_on(async move {
        let mut config = args.store.configuration()?;
        if let Some(url) = &args.llm_base_url {
            config.llm.base_url = url.clone();
        }
        if let Some(model) = &args.model {
            config.llm.model = Some(model.clone());
        }
        if let Some(dir) = &args.runs_dir {
            config.paths.runs_dir = dir.clone();
        }
        if !args.pieces_dir.is_empty() {
            config.paths.pieces_dirs = args.pieces_dir.clone();
        }
        if args.lease_secs == 0 {
            return Err(anyhow!("--lease-secs must be at least 1"));
        }
        let profiles =
            if args.concurrency.is_none() && args.classes.is_none() && !config.workers.is_empty() {
                config.workers.iter().map(Profile::from_config).collect()
            } else {
                vec![Profile {
                    name: "default".to_string(),
                    concurrency: usize::try_from(args.concurrency.unwrap_or(1).max(1)).unwrap_or(1),
                    classes: classes(args.classes.as_deref().unwrap_or_default()),
                }]
            };
        let (url, origin) = store_url(args.store.db.as_deref(), &config)?;
        let store = Store::open(&url).await?;
        let name = args
            .name
            .clone()
            .unwrap_or_else(|| format!("worker-{}", std::process::id()));
        let described: Vec<String> = profiles
            .iter()
            .map(|p| format!("{} ×{}", p.name, p.concurrency))
            .collect();
        let options = WorkerOptions {
            name: name.clone(),
            profiles,
            lease: Duration::from_secs(args.lease_secs),
            drain: Duration::from_secs(args.drain_secs),
            idle_poll: Duration::from_millis(200),
            model_from_flag: args.model.is_some(),
        };
        let mut signals = Signals::install()?;
        let shutdown = Shutdown::new();
        let worker = Worker::new(store, config, options);
        eprintln!(
            "worker {name}: profiles {}; store {url} ({origin})",
            described.join(", ")
        );
        let signalled = shutdown.clone();
        tokio::spawn(async move {
            if signals.next().await {
                eprintln!(
                    "worker: stopping; runs in flight may finish (signal again to hand them back now)"
                );
                signalled.stop_claiming();
            }
            if signals.next().await {
                eprintln!("worker: handing the runs in flight back");
                signalled.hand_back();
            }
        });
        let stats = worker.run(shutdown).await?;
        eprintln!(
            "worker {name} stopped: {} finished, {} failed, {} lost or cancelled, {} handed back",
            stats.finished, stats.failed, stats.fenced, stats.handed_back
        );
        Ok(0)
    })
}
