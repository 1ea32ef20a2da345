//! `maestro gateway`: the LLM gateway alone (its OpenAI-compatible `/v1`, `/metrics` and
//! `/healthz`), and `maestro gateway usage`, the usage it recorded.

use std::net::SocketAddr;

use anyhow::{Context as _, anyhow};
use maestro_app::{PoolSize, UsageGroup};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::flags::{ConfigFlag, StoreArgs, StoreFlag, settings};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// The usage the gateway recorded, summed per key, model or job.
    Usage(UsageArgs),
    /// The virtual keys clients present (`Authorization: Bearer mk-…`): create, list, revoke.
    Keys(crate::gateway_keys::KeysArgs),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The address to listen on. Without virtual keys only a loopback address is accepted.
    #[arg(long, default_value = "127.0.0.1:8090")]
    bind: SocketAddr,
    /// Listen on a non-loopback address although the gateway answers anyone who reaches it
    /// (a proxy in front authenticates).
    #[arg(long)]
    insecure_no_auth: bool,
    #[command(flatten)]
    store: StoreFlag,
    #[command(flatten)]
    config: ConfigFlag,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum By {
    Key,
    Model,
    Job,
}

#[derive(Debug, clap::Args)]
struct UsageArgs {
    /// What to sum by.
    #[arg(long, value_enum, default_value = "model")]
    by: By,
    /// From this time on (RFC 3339, e.g. 2026-11-01T00:00:00Z); default: the beginning.
    #[arg(long)]
    from: Option<String>,
    /// Up to this time, exclusive (RFC 3339); default: now.
    #[arg(long)]
    to: Option<String>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

impl Args {
    /// `maestro gateway usage` and `keys list`: they only read and print.
    pub(crate) fn only_reads(&self) -> bool {
        match &self.command {
            Some(Command::Usage(_)) => true,
            Some(Command::Keys(keys)) => keys.only_reads(),
            None => false,
        }
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    match args.command {
        Some(Command::Usage(usage)) => crate::common::block_on(show_usage(usage)),
        Some(Command::Keys(keys)) => crate::common::block_on(crate::gateway_keys::run(keys)),
        None => serve(args.serve),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let config = settings(&args.config, &[])?;
        if !args.bind.ip().is_loopback() && !args.insecure_no_auth {
            return Err(anyhow!(
                "refusing to listen on {}: the gateway answers anyone who reaches it, with the \
                 upstreams' keys. Listen on a loopback address (the default, 127.0.0.1:8090), or \
                 pass --insecure-no-auth if a proxy in front authenticates",
                args.bind
            ));
        }
        if config.gateway.models.is_empty() {
            return Err(anyhow!(
                "the configuration routes no model: add gateway.upstreams and gateway.models \
                 (see docs/gateway.md) to the configuration file"
            ));
        }
        let (url, origin) = maestro_app::store_url(args.store.db.as_deref(), &config)?;
        let store = args.store.open(&config, PoolSize::Shared).await?;
        let gateway = maestro_app::gateway(&config, Some(store))?;
        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .with_context(|| format!("listening on {}", args.bind))?;
        let local = listener.local_addr().context("reading the bound address")?;
        let stop = CancellationToken::new();
        let http = tokio::spawn(maestro_server::serve(
            listener,
            gateway.standalone_router(),
            stop.clone(),
        ));
        let routes: Vec<&str> = config.gateway.models.keys().map(String::as_str).collect();
        eprintln!(
            "gateway: models {}; store {url} ({origin})",
            routes.join(", ")
        );
        eprintln!(
            "gateway: listening on http://{local} (API at http://{local}/v1, metrics at /metrics)"
        );
        let mut signals = Signals::install()?;
        signals.next().await;
        eprintln!("gateway: stopping; requests in flight may finish");
        stop.cancel();
        match http.await {
            Ok(result) => result.context("serving HTTP")?,
            Err(e) => return Err(anyhow!("the HTTP server stopped: {e}")),
        }
        gateway.close().await;
        eprintln!("gateway stopped");
        Ok(0)
    })
}

/// Resolves on SIGTERM or SIGINT.
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

    async fn next(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

pub(crate) fn parse_time(text: &str, flag: &str) -> anyhow::Result<i64> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .with_context(|| {
            format!("{flag} {text:?} is not an RFC 3339 time; write e.g. 2026-11-01T00:00:00Z")
        })?;
    Ok(i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX))
}

async fn show_usage(args: UsageArgs) -> anyhow::Result<u8> {
    let config = crate::gateway_keys::configuration(&args.store)?;
    let store = args.store.open_existing(&config).await?;
    let from = match &args.from {
        Some(text) => parse_time(text, "--from")?,
        None => 0,
    };
    let to = match &args.to {
        Some(text) => parse_time(text, "--to")?,
        None => i64::MAX,
    };
    let by = match args.by {
        By::Key => UsageGroup::Key,
        By::Model => UsageGroup::Model,
        By::Job => UsageGroup::Job,
    };
    let totals = store.gateway_usage(by, from, to).await?;
    if args.json {
        for t in &totals {
            println!(
                "{}",
                json!({
                    "key": t.key, "model": t.model, "job": t.job, "requests": t.requests,
                    "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens,
                    "cost_usd": t.cost_usd,
                })
            );
        }
        return Ok(0);
    }
    let label = match args.by {
        By::Key => "KEY",
        By::Model => "MODEL",
        By::Job => "JOB",
    };
    println!(
        "{label:<32} {:>9} {:>14} {:>14} {:>12}",
        "REQUESTS", "PROMPT", "COMPLETION", "COST_USD"
    );
    for t in &totals {
        let name = t
            .key
            .as_deref()
            .or(t.model.as_deref())
            .or(t.job.as_deref())
            .unwrap_or("-");
        println!(
            "{:<32} {:>9} {:>14} {:>14} {:>12.6}",
            crate::term::printable(name),
            t.requests,
            t.prompt_tokens,
            t.completion_tokens,
            t.cost_usd
        );
    }
    Ok(0)
}
