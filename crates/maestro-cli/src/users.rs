//! `maestro users …` and `maestro tokens …`: the people who may use the server and their API
//! tokens, kept in the job store. A token is printed once, when it is created; lists show only
//! its first characters.

use std::time::Duration;

use maestro_app::{Role, Scope, TokenInfo, User};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::common::{actor, block_on};
use crate::flags::StoreArgs;
use crate::term::printable;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum UsersCommand {
    /// Add a user (role `user`, or `admin` with --admin); an existing email is refused.
    Add {
        /// The user's email (stored lowercased).
        email: String,
        /// Make the user an admin.
        #[arg(long)]
        admin: bool,
        /// Print the user as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List the users: email, role, when added.
    List {
        /// One JSON object per user per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Change a user's role: `admin`, `user`, or `disabled` (their tokens and sessions stop
    /// at once).
    SetRole {
        /// The user's email.
        email: String,
        /// `admin`, `user` or `disabled`.
        role: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TokensCommand {
    /// Create an API token for a user and print it, once.
    Create {
        /// The user the token acts as.
        #[arg(long)]
        user: String,
        /// What it may do, comma-separated: `read`, `write`, `admin` (admin only for an admin
        /// user).
        #[arg(long)]
        scopes: String,
        /// A name to tell the token apart in lists.
        #[arg(long)]
        name: Option<String>,
        /// Days until the token stops working (default: never).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        expires_days: Option<u32>,
        /// Print `{"token": …, "id": …}`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List the API tokens (never the tokens themselves: their first characters).
    List {
        /// Only this user's tokens.
        #[arg(long)]
        user: Option<String>,
        /// One JSON object per token per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke an API token at once (its id from `maestro tokens list`).
    Revoke {
        /// The token's id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

const DAY: Duration = Duration::from_secs(86_400);

fn when(at: Option<OffsetDateTime>) -> String {
    at.and_then(|at| at.format(&Rfc3339).ok())
        .unwrap_or_else(|| "-".to_string())
}

/// Rows as a table, each column as wide as its widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (cell, width) in cells.iter().zip(&widths) {
            text.push_str(&format!("{cell:<width$}  "));
        }
        text.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn user_row(user: &User) -> Vec<String> {
    vec![
        printable(&user.email).into_owned(),
        user.role.to_string(),
        when(Some(user.created_at)),
    ]
}

fn token_row(token: &TokenInfo, now: OffsetDateTime) -> Vec<String> {
    let state = if token.revoked {
        "revoked"
    } else if token.expires_at.is_some_and(|at| at <= now) {
        "expired"
    } else {
        "active"
    };
    let scopes: Vec<&str> = token.scopes.iter().map(|s| s.as_str()).collect();
    vec![
        token.id.clone(),
        printable(&token.user_email).into_owned(),
        printable(token.name.as_deref().unwrap_or("-")).into_owned(),
        format!("{}…", token.prefix),
        scopes.join(","),
        when(token.expires_at),
        when(token.last_used_at),
        state.to_string(),
    ]
}

pub(crate) fn users(command: UsersCommand) -> anyhow::Result<u8> {
    block_on(async move {
        match command {
            UsersCommand::Add {
                email,
                admin,
                json,
                store,
            } => {
                let config = store.configuration()?;
                let store = store.open(&config).await?;
                let user = maestro_app::add_user_as(&store, &actor(), &email, admin).await?;
                if json {
                    println!("{}", serde_json::to_string(&user)?);
                } else {
                    println!("added {} ({})", printable(&user.email), user.role);
                }
                Ok(0)
            }
            UsersCommand::List { json, store } => {
                let config = store.configuration()?;
                let store = store.open_existing(&config).await?;
                let users = maestro_app::list_users(&store).await?;
                if json {
                    for user in &users {
                        println!("{}", serde_json::to_string(user)?);
                    }
                } else if !users.is_empty() {
                    let rows: Vec<Vec<String>> = users.iter().map(user_row).collect();
                    print!("{}", table(&["EMAIL", "ROLE", "ADDED"], &rows));
                }
                Ok(0)
            }
            UsersCommand::SetRole { email, role, store } => {
                let role: Role = role.parse()?;
                let config = store.configuration()?;
                let store = store.open(&config).await?;
                let user = maestro_app::set_role_as(&store, &actor(), &email, role).await?;
                println!("{} is now {}", printable(&user.email), user.role);
                Ok(0)
            }
        }
    })
}

pub(crate) fn tokens(command: TokensCommand) -> anyhow::Result<u8> {
    block_on(async move {
        match command {
            TokensCommand::Create {
                user,
                scopes,
                name,
                expires_days,
                json,
                store,
            } => {
                let scopes = Scope::parse_list(&scopes)?;
                let config = store.configuration()?;
                let store = store.open(&config).await?;
                let (info, token) = maestro_app::create_token_as(
                    &store,
                    &actor(),
                    &user,
                    &scopes,
                    name,
                    expires_days.map(|d| DAY.saturating_mul(d)),
                )
                .await?;
                if json {
                    let shown = serde_json::json!({"token": token.expose(), "id": info.id});
                    println!("{shown}");
                } else {
                    let scopes: Vec<&str> = info.scopes.iter().map(|s| s.as_str()).collect();
                    println!("{}", token.expose());
                    println!(
                        "token {} for {} ({}), expires {}",
                        info.id,
                        printable(&info.user_email),
                        scopes.join(","),
                        info.expires_at
                            .and_then(|at| at.format(&Rfc3339).ok())
                            .unwrap_or_else(|| "never".to_string())
                    );
                    println!(
                        "It will not be shown again: store it now. Send it as \
                         `Authorization: Bearer <token>`."
                    );
                }
                Ok(0)
            }
            TokensCommand::List { user, json, store } => {
                let config = store.configuration()?;
                let store = store.open_existing(&config).await?;
                let tokens = maestro_app::list_tokens(&store, user.as_deref()).await?;
                if json {
                    for token in &tokens {
                        println!("{}", serde_json::to_string(token)?);
                    }
                } else if !tokens.is_empty() {
                    let now = store.now();
                    let rows: Vec<Vec<String>> = tokens.iter().map(|t| token_row(t, now)).collect();
                    print!(
                        "{}",
                        table(
                            &[
                                "ID",
                                "USER",
                                "NAME",
                                "PREFIX",
                                "SCOPES",
                                "EXPIRES",
                                "LAST USED",
                                "STATE"
                            ],
                            &rows
                        )
                    );
                }
                Ok(0)
            }
            TokensCommand::Revoke { id, store } => {
                let config = store.configuration()?;
                let store = store.open(&config).await?;
                maestro_app::revoke_token_as(&store, &actor(), &id).await?;
                println!("revoked token {}", printable(&id));
                Ok(0)
            }
        }
    })
}
