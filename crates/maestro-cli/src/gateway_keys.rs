//! `maestro gateway keys create|list|revoke`: the gateway's virtual keys. A key is printed once,
//! when it is made; the store keeps only its SHA-256.

use anyhow::{Context as _, bail};
use maestro_app::GatewayKey;
use serde_json::json;

use crate::flags::StoreArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, clap::Subcommand)]
enum KeysCommand {
    /// Make a key and print it (once; it cannot be shown again).
    Create(CreateArgs),
    /// The keys, revoked and expired ones included (never the keys themselves).
    List(ListArgs),
    /// Revoke a key by its id: from then on the gateway answers it 401.
    Revoke(RevokeArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Period {
    Day,
    Week,
    Month,
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// A name to tell the key apart (shown in lists, usage and metrics).
    #[arg(long)]
    name: String,
    /// The public model names it may call, comma-separated; default: every model.
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Its budget in US dollars (per --period, else in all): each request reserves its worst
    /// case first, so concurrent requests never pass it together.
    #[arg(long)]
    budget_usd: Option<f64>,
    /// Its budget in tokens (per --period, else in all), reserved like --budget-usd.
    #[arg(long)]
    budget_tokens: Option<u64>,
    /// The budgets' period; default: the budgets are totals.
    #[arg(long, value_enum)]
    period: Option<Period>,
    /// Requests per minute; past it a request gets 429 with Retry-After.
    #[arg(long)]
    rpm: Option<u64>,
    /// Tokens per minute (prompt and answer); past it a request gets 429 with Retry-After.
    #[arg(long)]
    tpm: Option<u64>,
    /// When it stops working (RFC 3339, e.g. 2027-01-01T00:00:00Z); default: never.
    #[arg(long)]
    expires: Option<String>,
    /// Print `{"key": …, "id": …}`.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, clap::Args)]
struct RevokeArgs {
    /// The key's id (`maestro gateway keys list` shows it).
    id: String,
    #[command(flatten)]
    store: StoreArgs,
}

pub(crate) async fn run(args: KeysArgs) -> anyhow::Result<u8> {
    match args.command {
        KeysCommand::Create(create) => create_key(create).await,
        KeysCommand::List(list) => list_keys(list).await,
        KeysCommand::Revoke(revoke) => revoke_key(revoke).await,
    }
}

fn positive(value: Option<u64>, flag: &str) -> anyhow::Result<Option<i64>> {
    match value {
        None => Ok(None),
        Some(0) => bail!(
            "{flag} 0 would allow nothing; give a positive number, or leave {flag} out for no limit"
        ),
        Some(n) => Ok(Some(
            i64::try_from(n).with_context(|| format!("{flag} {n} is too large"))?,
        )),
    }
}

async fn create_key(args: CreateArgs) -> anyhow::Result<u8> {
    let name = args.name.trim().to_string();
    if name.is_empty() {
        bail!("--name is empty; give the key a name to tell it apart, e.g. --name ci");
    }
    let models: Vec<String> = args
        .models
        .iter()
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect();
    let budget_micro_usd = match args.budget_usd {
        None => None,
        Some(usd) if usd.is_finite() && usd > 0.0 && usd < 9.0e12 => {
            Some((usd * 1_000_000.0).round() as i64)
        }
        Some(usd) => bail!(
            "--budget-usd {usd} is not a positive amount of dollars; give e.g. --budget-usd 25"
        ),
    };
    let expires_at_ms = match &args.expires {
        Some(text) => Some(crate::gateway::parse_time(text, "--expires")?),
        None => None,
    };
    let config = args.store.configuration()?;
    let store = args.store.open(&config).await?;
    let (secret, hash, prefix) = maestro_app::new_key();
    let key = GatewayKey {
        id: String::new(),
        name,
        hash,
        prefix,
        models: (!models.is_empty()).then_some(models),
        budget_micro_usd,
        budget_tokens: positive(args.budget_tokens, "--budget-tokens")?,
        period: args.period.map(|p| {
            match p {
                Period::Day => "day",
                Period::Week => "week",
                Period::Month => "month",
            }
            .to_string()
        }),
        rpm: positive(args.rpm, "--rpm")?,
        tpm: positive(args.tpm, "--tpm")?,
        expires_at_ms,
        created_at_ms: 0,
        created_by: crate::common::actor(),
        revoked_at_ms: None,
    };
    let stored = store.insert_gateway_key(&key).await?;
    if args.json {
        println!("{}", json!({"key": secret, "id": stored.id}));
    } else {
        println!("{secret}");
        eprintln!(
            "key {} ({}) created; it is shown only this once: keep it now",
            stored.id, stored.name
        );
    }
    Ok(0)
}

fn time_text(ms: Option<i64>) -> Option<String> {
    let ms = ms?;
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    at.format(&time::format_description::well_known::Rfc3339)
        .ok()
}

async fn list_keys(args: ListArgs) -> anyhow::Result<u8> {
    let config = args.store.configuration()?;
    let store = args.store.open_existing(&config).await?;
    let keys = store.gateway_keys().await?;
    if args.json {
        for k in &keys {
            println!(
                "{}",
                json!({
                    "id": k.id, "name": k.name, "prefix": k.prefix, "models": k.models,
                    "budget_usd": k.budget_micro_usd.map(|m| m as f64 / 1_000_000.0),
                    "budget_tokens": k.budget_tokens, "period": k.period, "rpm": k.rpm,
                    "tpm": k.tpm, "expires_at": time_text(k.expires_at_ms),
                    "created_at": time_text(Some(k.created_at_ms)), "created_by": k.created_by,
                    "revoked_at": time_text(k.revoked_at_ms),
                })
            );
        }
        return Ok(0);
    }
    println!(
        "{:<36} {:<20} {:<10} {:<24} STATE",
        "ID", "NAME", "PREFIX", "MODELS"
    );
    let now = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
    for k in &keys {
        let state = if k.revoked_at_ms.is_some() {
            "revoked"
        } else if !k.is_usable(now) {
            "expired"
        } else {
            "active"
        };
        let models = k.models.as_ref().map_or("*".to_string(), |m| m.join(","));
        println!(
            "{:<36} {:<20} {:<10} {:<24} {state}",
            k.id,
            crate::term::printable(&k.name),
            k.prefix,
            crate::term::printable(&models)
        );
    }
    Ok(0)
}

async fn revoke_key(args: RevokeArgs) -> anyhow::Result<u8> {
    let config = args.store.configuration()?;
    let store = args.store.open_existing(&config).await?;
    if !store.revoke_gateway_key(&args.id).await? {
        bail!(
            "no gateway key has the id {:?} in {}; `maestro gateway keys list` shows the ids",
            args.id,
            store.url()
        );
    }
    eprintln!("key {} revoked", args.id);
    Ok(0)
}
