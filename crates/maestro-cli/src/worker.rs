//! `maestro worker`: claim jobs from the store and run them until SIGTERM. The first SIGTERM (or
//! Ctrl-C) stops claiming and lets the runs in flight finish for `--drain-secs`; a second one, or
//! the end of the drain time, hands them back to the queue.

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use maestro_app::{PoolSize, Profile, Shutdown, Worker, WorkerOptions, classes, store_url};

use crate::flags::{ConfigFlag, ModelFlags, PiecesFlag, RunsFlag, StoreFlag, settings};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) worker: WorkerFlags,
    #[command(flatten)]
    pub(crate) model: ModelFlags,
    #[command(flatten)]
    pub(crate) pieces: PiecesFlag,
    #[command(flatten)]
    pub(crate) runs: RunsFlag,
    #[command(flatten)]
    pub(crate) store: StoreFlag,
    #[command(flatten)]
    pub(crate) config: ConfigFlag,
}

/// How a worker runs: `maestro worker`'s flags, which `maestro serve` shares.
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerFlags {
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
}

impl WorkerFlags {
    /// The worker's options: its profiles from the flags, or else from `workers:`.
    pub(crate) fn options(
        &self,
        config: &maestro_config::Config,
        model_from_flag: bool,
    ) -> anyhow::Result<WorkerOptions> {
        if self.lease_secs == 0 {
            return Err(anyhow!("--lease-secs must be at least 1"));
        }
        let profiles =
            if self.concurrency.is_none() && self.classes.is_none() && !config.workers.is_empty() {
                config.workers.iter().map(Profile::from_config).collect()
            } else {
                vec![Profile {
                    name: "default".to_string(),
                    concurrency: usize::try_from(self.concurrency.unwrap_or(1).max(1)).unwrap_or(1),
                    classes: classes(self.classes.as_deref().unwrap_or_default()),
                }]
            };
        Ok(WorkerOptions {
            name: self
                .name
                .clone()
                .unwrap_or_else(|| format!("worker-{}", std::process::id())),
            profiles,
            lease: Duration::from_secs(self.lease_secs),
            drain: Duration::from_secs(self.drain_secs),
            idle_poll: Duration::from_millis(200),
            model_from_flag,
        })
    }
}

/// How the profiles read in the startup line: `default ×4, docs ×1`.
pub(crate) fn described(options: &WorkerOptions) -> String {
    options
        .profiles
        .iter()
        .map(|p| format!("{} ×{}", p.name, p.concurrency))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resolves once per SIGTERM or SIGINT.
pub(crate) struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> anyhow::Result<Signals> {
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

    /// The first signal stops claiming (runs in flight may finish), the second hands them back.
    pub(crate) fn drive(mut self, shutdown: Shutdown, who: &'static str) {
        tokio::spawn(async move {
            if self.next().await {
                eprintln!(
                    "{who}: stopping; runs in flight may finish (signal again to hand them back now)"
                );
                shutdown.stop_claiming();
            }
            if self.next().await {
                eprintln!("{who}: handing the runs in flight back");
                shutdown.hand_back();
            }
        });
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    crate::common::block_on(async move {
        let config = settings(&args.config, &[&args.model, &args.pieces, &args.runs])?;
        let options = args.worker.options(&config, args.model.model.is_some())?;
        let (url, origin) = store_url(args.store.db.as_deref(), &config)?;
        let store = args.store.open(&config, PoolSize::Shared).await?;
        let name = options.name.clone();
        let signals = Signals::install()?;
        let shutdown = Shutdown::new();
        eprintln!(
            "worker {name}: profiles {}; store {url} ({origin})",
            described(&options)
        );
        let worker = Worker::new(store, config, options);
        signals.drive(shutdown.clone(), "worker");
        let stats = worker.run(shutdown).await?;
        eprintln!(
            "worker {name} stopped: {} finished, {} failed, {} lost or cancelled, {} handed back",
            stats.finished, stats.failed, stats.fenced, stats.handed_back
        );
        Ok(0)
    })
}
