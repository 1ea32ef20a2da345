//! `maestro gateway keys create|list|revoke`: the gateway's virtual keys. A key is printed once,
//! when it is made; the store keeps only its SHA-256.

use anyhow::bail;
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

impl KeysArgs {
    /// `keys list`: it only reads and prints.
    pub(crate) fn only_reads(&self) -> bool {
        matches!(self.command, KeysCommand::List(_))
    }
}

/// The configuration for a command that never calls a model: the model servers' keys (the
/// variables `gateway.upstreams.*.api_key_env` and `llm.api_key_env` name) are not read, so
/// managing keys does not need them set.
pub(crate) fn configuration(args: &StoreArgs) -> anyhow::Result<maestro_config::Config> {
    let from = maestro_config::LoadFrom::current(args.config.config.clone())?;
    let (config, _files) = maestro_config::Config::load_without_model_keys(from)
        .map_err(|e| anyhow::anyhow!(maestro_app::error_chain(&e)))?;
    Ok(config)
}

pub(crate) async fn run(args: KeysArgs) -> anyhow::Result<u8> {
    match args.command {
        KeysCommand::Create(create) => create_key(create).await,
        KeysCommand::List(list) => list_keys(list).await,
        KeysCommand::Revoke(revoke) => revoke_key(revoke).await,
    }
}

async fn create_key(args: CreateArgs) -> anyhow::Result<u8> {
    let new = maestro_app::NewGatewayKey {
        name: args.name,
        models: args.models,
        budget_usd: args.budget_usd,
        budget_tokens: args.budget_tokens,
        period: args.period.map(|p| {
            match p {
                Period::Day => "day",
                Period::Week => "week",
                Period::Month => "month",
            }
            .to_string()
        }),
        rpm: args.rpm,
        tpm: args.tpm,
        expires: args.expires,
    };
    let config = configuration(&args.store)?;
    let store = args.store.open(&config).await?;
    let made =
        maestro_app::create_gateway_key_as(&store, &crate::common::actor(), &config.gateway, new)
            .await;
    let (secret, stored) = match made {
        Ok(made) => made,
        Err(maestro_app::GatewayKeyError::Invalid { field, message }) => {
            bail!("--{} {message}", field.replace('_', "-"))
        }
        Err(e @ maestro_app::GatewayKeyError::NameTaken(_)) => {
            bail!("--name: {e} (in {})", store.url())
        }
        Err(e) => return Err(e.into()),
    };
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

async fn list_keys(args: ListArgs) -> anyhow::Result<u8> {
    let config = configuration(&args.store)?;
    let store = args.store.open_existing(&config).await?;
    let keys = store.gateway_keys().await?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
    if args.json {
        for k in &keys {
            println!("{}", maestro_app::gateway_key_view(k, now));
        }
        return Ok(0);
    }
    println!(
        "{:<36} {:<20} {:<10} {:<24} STATE",
        "ID", "NAME", "PREFIX", "MODELS"
    );
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
    let config = configuration(&args.store)?;
    let store = args.store.open_existing(&config).await?;
    match maestro_app::revoke_gateway_key_as(&store, &crate::common::actor(), &args.id).await {
        Ok(()) => {}
        Err(e @ maestro_app::GatewayKeyError::NotFound(_)) => {
            bail!("{e} (in {})", store.url())
        }
        Err(e) => return Err(e.into()),
    }
    eprintln!("key {} revoked", args.id);
    Ok(0)
}
