//! Who may do what, below HTTP: users and their roles, API tokens and their scopes, browser
//! sessions with their CSRF token, OIDC logins in flight, share links to one job, and the audit
//! log. The server authenticates a request with [`authenticate_token`] or
//! [`session_principal`] and authorises it with [`Principal::can`]; `maestro users` and
//! `maestro tokens` manage users and tokens from the command line.
//!
//! Every secret (a token, a session id, a CSRF token, a share token) is a [`Secret`]: it is
//! handed out once, the store keeps only its SHA-256, and no error or log line carries it.
//! See `docs/auth.md`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use maestro_protocol::Secret;
use maestro_store::{
    AuditAction, AuditEntry, JobId, JobQueue, JobStatus, NewToken, Store, StoreError, StoredLogin,
    StoredShare, StoredToken, StoredUser, secret_hash,
};
use serde::Serialize;
use time::OffsetDateTime;

use crate::jobs::{JobError, JobSummary};

/// What every API token starts with, so that it is recognised (by people and by secret
/// scanners) and told from other credentials.
pub const TOKEN_PREFIX: &str = "mst_";

/// What every share link's token starts with.
pub const SHARE_PREFIX: &str = "mss_";

/// How many characters of a token lists show (the `mst_` prefix and four more).
pub const SHOWN_PREFIX_LEN: usize = 8;

/// The actor the audit log records for the functions that take none (`add_user`,
/// `set_role`, `create_token`, `revoke_token`, `revoke_share`): the operator at the machine.
/// The `*_as` variants take the actor (the CLI passes the OS user, the server the signed-in
/// user's email).
pub const LOCAL_ACTOR: &str = "local";

/// The most entries one page of [`audit_log`] returns.
pub const AUDIT_PAGE_MAX: i64 = 1_000;

/// A user's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// May do everything: manage users and tokens, see and act on every job.
    Admin,
    /// May submit jobs and act on their own.
    User,
    /// May do nothing: neither their tokens nor their sessions authenticate, and they cannot
    /// sign in.
    Disabled,
}

impl Role {
    /// The name stored and shown: `admin`, `user`, `disabled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
            Role::Disabled => "disabled",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = AccessError;
    fn from_str(s: &str) -> Result<Role, AccessError> {
        match s.trim() {
            "admin" => Ok(Role::Admin),
            "user" => Ok(Role::User),
            "disabled" => Ok(Role::Disabled),
            other => Err(AccessError::BadRole {
                given: other.to_string(),
            }),
        }
    }
}

/// What a token (or a session) may do. They are ordered: `admin` covers `write`, which covers
/// `read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Look at jobs, their events, pieces and schedules.
    Read,
    /// Also submit, cancel and answer jobs, and change schedules.
    Write,
    /// Also manage users, tokens and the configuration (only for a user whose role is admin).
    Admin,
}

impl Scope {
    /// The name parsed and shown: `read`, `write`, `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }

    /// Parses a comma-separated list (`read,write`), each scope once, in order.
    pub fn parse_list(text: &str) -> Result<Vec<Scope>, AccessError> {
        let mut scopes = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let scope: Scope = part.parse()?;
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        scopes.sort();
        Ok(scopes)
    }

    fn join(scopes: &[Scope]) -> String {
        scopes
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = AccessError;
    fn from_str(s: &str) -> Result<Scope, AccessError> {
        match s.trim() {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            "admin" => Ok(Scope::Admin),
            other => Err(AccessError::BadScope {
                given: other.to_string(),
            }),
        }
    }
}

/// A person who may use the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    /// The user's id (a UUIDv7).
    pub id: String,
    /// The user's email, lowercased.
    pub email: String,
    /// What the user may do.
    pub role: Role,
    /// When the user was added.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// How a request was authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthVia {
    /// With an API token.
    Token {
        /// The token's id (never the token).
        id: String,
    },
    /// With a browser session.
    Session,
}

/// Who a request is from, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user's id.
    pub user_id: String,
    /// The user's email (the owner of the jobs they submit, and the audit log's actor).
    pub email: String,
    /// The user's role now.
    pub role: Role,
    /// What the credential grants: a token's scopes, or every scope the role allows for a
    /// session.
    pub scopes: Vec<Scope>,
    /// The credential used.
    pub via: AuthVia,
}

impl Principal {
    /// Whether the request may do what `scope` covers: the credential must grant it (a scope
    /// covers the ones below it) and the user's role must allow it. A disabled user may do
    /// nothing; only an admin may do what `admin` covers, whatever a token says.
    pub fn can(&self, scope: Scope) -> bool {
        let role_allows = match self.role {
            Role::Disabled => false,
            Role::User => scope != Scope::Admin,
            Role::Admin => true,
        };
        role_allows && self.scopes.iter().any(|granted| *granted >= scope)
    }
}

/// The scopes a session grants: everything the role allows.
fn session_scopes(role: Role) -> Vec<Scope> {
    match role {
        Role::Admin => vec![Scope::Read, Scope::Write, Scope::Admin],
        Role::User => vec![Scope::Read, Scope::Write],
        Role::Disabled => Vec::new(),
    }
}

/// An API token as lists show it: never the token, only its first characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    /// The token's id, which `maestro tokens revoke` takes.
    pub id: String,
    /// The user the token acts as.
    pub user_email: String,
    /// Its name, if it was given one.
    pub name: Option<String>,
    /// Its first characters (`mst_` and four more), to recognise it.
    pub prefix: String,
    /// What it may do (within its user's role).
    pub scopes: Vec<Scope>,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it last authenticated a request (noted at most once a minute).
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_used_at: Option<OffsetDateTime>,
    /// When it stops authenticating; `None`: never.
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires_at: Option<OffsetDateTime>,
    /// Whether it was revoked.
    pub revoked: bool,
}

impl TokenInfo {
    fn from_stored(token: StoredToken) -> TokenInfo {
        TokenInfo {
            scopes: stored_scopes(&token.scopes),
            id: token.id,
            user_email: token.user_email,
            name: token.name,
            prefix: token.prefix,
            created_at: token.created_at,
            last_used_at: token.last_used_at,
            expires_at: token.expires_at,
            revoked: token.revoked_at.is_some(),
        }
    }
}

/// A stored scope list; a name this build does not know grants nothing.
fn stored_scopes(text: &str) -> Vec<Scope> {
    text.split(',').filter_map(|s| s.parse().ok()).collect()
}

/// A new browser session: the id goes in the session cookie, the CSRF token in the page (each
/// request that changes something must send it back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// The session id (the cookie's value); the store keeps its SHA-256 only.
    pub id: Secret,
    /// The session's CSRF token; the store keeps its SHA-256 only.
    pub csrf: Secret,
    /// When the session stops authenticating.
    pub expires_at: OffsetDateTime,
}

/// What a session's CSRF token is checked against: its SHA-256.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionCsrf {
    hash: String,
}

impl SessionCsrf {
    /// Whether `presented` is the session's CSRF token. The hashes are compared in constant
    /// time.
    pub fn verify(&self, presented: &str) -> bool {
        let given = secret_hash(presented);
        let (a, b) = (given.as_bytes(), self.hash.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl fmt::Debug for SessionCsrf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionCsrf(***)")
    }
}

/// An OIDC login taken back to finish it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingLogin {
    /// The PKCE code verifier the login began with (sent with the code to the token endpoint).
    pub verifier: Secret,
    /// The nonce the ID token must carry.
    pub nonce: String,
    /// Where to send the browser once signed in.
    pub redirect_to: Option<String>,
}

/// A share link as lists show it: never its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShareInfo {
    /// The link's id, which revoking takes.
    pub id: String,
    /// The job it shows.
    pub job_id: JobId,
    /// Who created it.
    pub created_by: String,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it stops working; `None`: never.
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires_at: Option<OffsetDateTime>,
    /// Whether it was revoked.
    pub revoked: bool,
}

impl From<StoredShare> for ShareInfo {
    fn from(share: StoredShare) -> ShareInfo {
        ShareInfo {
            id: share.id,
            job_id: share.job_id,
            created_by: share.created_by,
            created_at: share.created_at,
            expires_at: share.expires_at,
            revoked: share.revoked_at.is_some(),
        }
    }
}

/// Why an access use case failed. No variant carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// No user has this email.
    #[error("no user {email}; add one with `maestro users add {email}`")]
    NoSuchUser {
        /// The email looked for.
        email: String,
    },
    /// A user with this email exists already (`add_user` changes nothing).
    #[error(
        "the user {email} exists already (role {role}); change the role with \
         `maestro users set-role {email} admin|user|disabled`"
    )]
    UserExists {
        /// The email.
        email: String,
        /// The existing user's role.
        role: Role,
    },
    /// The text given as an email is not one.
    #[error("`{email}` is not an email address; give the user's email, e.g. ana@example.com")]
    BadEmail {
        /// The text given.
        email: String,
    },
    /// A role name is not known.
    #[error("unknown role `{given}`; the roles are admin, user and disabled")]
    BadRole {
        /// The name given.
        given: String,
    },
    /// A scope name is not known.
    #[error(
        "unknown scope `{given}`; the scopes are read, write and admin (e.g. `--scopes read,write`)"
    )]
    BadScope {
        /// The name given.
        given: String,
    },
    /// A token was asked for with no scope.
    #[error("a token needs at least one scope; give e.g. `--scopes read` or `--scopes read,write`")]
    NoScopes,
    /// The user is disabled: refused sign-in and new tokens.
    #[error(
        "the user {email} is disabled; an admin can enable them with \
         `maestro users set-role {email} user`"
    )]
    Disabled {
        /// The user's email.
        email: String,
    },
    /// No API token has this id.
    #[error("no API token with id {id}; `maestro tokens list` shows the ids")]
    NoSuchToken {
        /// The id given.
        id: String,
    },
    /// No share link has this id.
    #[error("no share link with id {id}; the job's share links list their ids")]
    NoSuchShare {
        /// The id given.
        id: String,
    },
    /// No user has the id a session or login named.
    #[error("no user with id {id}")]
    NoSuchUserId {
        /// The id given.
        id: String,
    },
    /// No job has this id.
    #[error("no job with id {0}")]
    NoSuchJob(JobId),
    /// An expiry (of a token, a share link, a session) that is zero, or more than 100 years
    /// away.
    #[error(
        "an expiry must be at least 1 (day or hour) and at most 100 years (36500 days, 876000 \
         hours); give one in that range, or none for no expiry"
    )]
    ExpiryOutOfRange,
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading a job for a list failed.
    #[error(transparent)]
    Job(Box<JobError>),
}

fn user_from_stored(user: StoredUser) -> User {
    User {
        role: user.role.parse().unwrap_or(Role::Disabled),
        id: user.id,
        email: user.email,
        created_at: user.created_at,
    }
}

fn check_email(email: &str) -> Result<String, AccessError> {
    let email = email.trim().to_lowercase();
    let valid = email
        .split_once('@')
        .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty())
        && !email.contains(char::is_whitespace);
    if valid {
        Ok(email)
    } else {
        Err(AccessError::BadEmail { email })
    }
}

/// A fresh secret: `prefix` and 32 random bytes in lowercase hex.
fn new_secret(prefix: &str) -> Secret {
    let bytes: [u8; 32] = rand::random();
    Secret::new(format!("{prefix}{}", hex::encode(bytes)))
}

/// The furthest an expiry may be: 100 years.
const MAX_EXPIRY: Duration = Duration::from_secs(36_500 * 86_400);

/// The time `after` from now; [`AccessError::ExpiryOutOfRange`] when `after` is zero (a thing
/// expired when made) or over [`MAX_EXPIRY`] (which also keeps the sum a date).
fn later(store: &Store, after: Duration) -> Result<OffsetDateTime, AccessError> {
    if after.is_zero() || after > MAX_EXPIRY {
        return Err(AccessError::ExpiryOutOfRange);
    }
    store
        .now()
        .checked_add(time::Duration::try_from(after).map_err(|_| AccessError::ExpiryOutOfRange)?)
        .ok_or(AccessError::ExpiryOutOfRange)
}

/// Adds a user; admin when `admin`. An email that is already a user's is refused with
/// [`AccessError::UserExists`] (nothing changes; [`set_role`] changes a role). The email is
/// stored lowercased. Recorded in the audit log as `user_added` by [`LOCAL_ACTOR`].
pub async fn add_user(store: &Store, email: &str, admin: bool) -> Result<User, AccessError> {
    add_user_as(store, LOCAL_ACTOR, email, admin).await
}

/// [`add_user`], recorded in the audit log as done by `actor`.
pub async fn add_user_as(
    store: &Store,
    actor: &str,
    email: &str,
    admin: bool,
) -> Result<User, AccessError> {
    let email = check_email(email)?;
    let role = if admin { Role::Admin } else { Role::User };
    match store.insert_user(&email, role.as_str(), actor).await? {
        Some(user) => Ok(user_from_stored(user)),
        None => {
            let existing = find_user(store, &email)
                .await?
                .ok_or(AccessError::NoSuchUser {
                    email: email.clone(),
                })?;
            Err(AccessError::UserExists {
                email,
                role: existing.role,
            })
        }
    }
}

/// Every user, by email.
pub async fn list_users(store: &Store) -> Result<Vec<User>, AccessError> {
    Ok(store
        .users()
        .await?
        .into_iter()
        .map(user_from_stored)
        .collect())
}

/// The user with this email (any case), if there is one.
pub async fn find_user(store: &Store, email: &str) -> Result<Option<User>, AccessError> {
    Ok(store.user_by_email(email).await?.map(user_from_stored))
}

/// Sets a user's role (recorded as `user_role_changed` by [`LOCAL_ACTOR`]). Disabling a user
/// stops their tokens and sessions at once: both are checked against the role on every request.
pub async fn set_role(store: &Store, email: &str, role: Role) -> Result<User, AccessError> {
    set_role_as(store, LOCAL_ACTOR, email, role).await
}

/// [`set_role`], recorded in the audit log as done by `actor`.
pub async fn set_role_as(
    store: &Store,
    actor: &str,
    email: &str,
    role: Role,
) -> Result<User, AccessError> {
    store
        .set_user_role(email, role.as_str(), actor)
        .await?
        .map(user_from_stored)
        .ok_or_else(|| AccessError::NoSuchUser {
            email: email.trim().to_lowercase(),
        })
}

async fn require_user(store: &Store, email: &str) -> Result<User, AccessError> {
    find_user(store, email)
        .await?
        .ok_or_else(|| AccessError::NoSuchUser {
            email: email.trim().to_lowercase(),
        })
}

/// Creates an API token for the user `email` with `scopes`, expiring after `expires_in` (never
/// when `None`). Returns what lists show and the token itself, which is shown this once: the
/// store keeps its SHA-256 only. The token is `mst_` and 64 hex digits (32 random bytes). A
/// token may name `admin` for a user who is not an admin; it does not grant it unless the user
/// becomes one. Recorded as `token_created` by [`LOCAL_ACTOR`].
pub async fn create_token(
    store: &Store,
    email: &str,
    scopes: &[Scope],
    name: Option<String>,
    expires_in: Option<Duration>,
) -> Result<(TokenInfo, Secret), AccessError> {
    create_token_as(store, LOCAL_ACTOR, email, scopes, name, expires_in).await
}

/// [`create_token`], recorded in the audit log as done by `actor`.
pub async fn create_token_as(
    store: &Store,
    actor: &str,
    email: &str,
    scopes: &[Scope],
    name: Option<String>,
    expires_in: Option<Duration>,
) -> Result<(TokenInfo, Secret), AccessError> {
    let user = require_user(store, email).await?;
    if user.role == Role::Disabled {
        return Err(AccessError::Disabled { email: user.email });
    }
    let mut scopes = scopes.to_vec();
    scopes.sort();
    scopes.dedup();
    if scopes.is_empty() {
        return Err(AccessError::NoScopes);
    }
    let token = new_secret(TOKEN_PREFIX);
    let stored = store
        .insert_token(
            &NewToken {
                user_id: user.id,
                name: name.filter(|n| !n.trim().is_empty()),
                hash: secret_hash(token.expose()),
                prefix: token.expose().chars().take(SHOWN_PREFIX_LEN).collect(),
                scopes: Scope::join(&scopes),
                expires_at: expires_in.map(|d| later(store, d)).transpose()?,
            },
            actor,
        )
        .await?;
    Ok((TokenInfo::from_stored(stored), token))
}

/// The API tokens (revoked and expired ones too), oldest first; only the user `email`'s when
/// given (an unknown email is [`AccessError::NoSuchUser`]).
pub async fn list_tokens(
    store: &Store,
    email: Option<&str>,
) -> Result<Vec<TokenInfo>, AccessError> {
    let user_id = match email {
        Some(email) => Some(require_user(store, email).await?.id),
        None => None,
    };
    Ok(store
        .tokens(user_id.as_deref())
        .await?
        .into_iter()
        .map(TokenInfo::from_stored)
        .collect())
}

/// Revokes the token `id` at once (recorded as `token_revoked` by [`LOCAL_ACTOR`]); an
/// unknown id is [`AccessError::NoSuchToken`].
pub async fn revoke_token(store: &Store, id: &str) -> Result<(), AccessError> {
    revoke_token_as(store, LOCAL_ACTOR, id).await
}

/// [`revoke_token`], recorded in the audit log as done by `actor`.
pub async fn revoke_token_as(store: &Store, actor: &str, id: &str) -> Result<(), AccessError> {
    if store.revoke_token(id.trim(), actor).await? {
        Ok(())
    } else {
        Err(AccessError::NoSuchToken {
            id: id.trim().to_string(),
        })
    }
}

/// Who the API token `bearer` (the value after `Bearer `) is, or `None` when it is not a
/// token, unknown, revoked, expired, or its user is disabled. Notes the token's use (at most
/// once a minute).
pub async fn authenticate_token(
    store: &Store,
    bearer: &str,
) -> Result<Option<Principal>, AccessError> {
    let bearer = bearer.trim();
    if !bearer.starts_with(TOKEN_PREFIX) {
        return Ok(None);
    }
    let Some((token, user)) = store.token_by_hash(&secret_hash(bearer)).await? else {
        return Ok(None);
    };
    if token.revoked_at.is_some() || token.expires_at.is_some_and(|at| at <= store.now()) {
        return Ok(None);
    }
    let user = user_from_stored(user);
    if user.role == Role::Disabled {
        return Ok(None);
    }
    store.touch_token(&token.id).await?;
    Ok(Some(Principal {
        user_id: user.id,
        email: user.email,
        role: user.role,
        scopes: stored_scopes(&token.scopes),
        via: AuthVia::Token { id: token.id },
    }))
}

/// Starts a browser session for the user `user_id`, lasting `ttl`; recorded in the audit log
/// as `login` by the user. A disabled user is refused.
pub async fn create_session(
    store: &Store,
    user_id: &str,
    ttl: Duration,
) -> Result<NewSession, AccessError> {
    let user = store
        .user_by_id(user_id)
        .await?
        .map(user_from_stored)
        .ok_or_else(|| AccessError::NoSuchUserId {
            id: user_id.to_string(),
        })?;
    if user.role == Role::Disabled {
        return Err(AccessError::Disabled { email: user.email });
    }
    let id = new_secret("");
    let csrf = new_secret("");
    let expires_at = later(store, ttl)?;
    store
        .insert_session(
            &secret_hash(id.expose()),
            &user.id,
            &secret_hash(csrf.expose()),
            expires_at,
        )
        .await?;
    store
        .record_audit(&user.email, AuditAction::Login, None, None)
        .await?;
    Ok(NewSession {
        id,
        csrf,
        expires_at,
    })
}

/// Who the session `id` (the cookie's value) is, with what its CSRF token is checked against;
/// `None` when the session is unknown, has ended or expired, or its user is disabled.
pub async fn session_principal(
    store: &Store,
    id: &str,
) -> Result<Option<(Principal, SessionCsrf)>, AccessError> {
    let Some(session) = store.session_by_hash(&secret_hash(id.trim())).await? else {
        return Ok(None);
    };
    let Some(user) = store.user_by_id(&session.user_id).await? else {
        return Ok(None);
    };
    let user = user_from_stored(user);
    if user.role == Role::Disabled {
        return Ok(None);
    }
    Ok(Some((
        Principal {
            scopes: session_scopes(user.role),
            user_id: user.id,
            email: user.email,
            role: user.role,
            via: AuthVia::Session,
        },
        SessionCsrf {
            hash: session.csrf_hash,
        },
    )))
}

/// Ends the session `id` (signing out); recorded in the audit log as `logout` by its user. An
/// unknown or expired session is already over: nothing happens.
pub async fn end_session(store: &Store, id: &str) -> Result<(), AccessError> {
    let hash = secret_hash(id.trim());
    let user = match store.session_by_hash(&hash).await? {
        Some(session) => store.user_by_id(&session.user_id).await?,
        None => None,
    };
    if store.delete_session(&hash).await?
        && let Some(user) = user
    {
        store
            .record_audit(&user.email, AuditAction::Logout, None, None)
            .await?;
    }
    Ok(())
}

/// Keeps an OIDC authorization-code login in flight under its `state` (stored hashed) for
/// `ttl`, so that whichever node the provider sends the browser back to can finish it. The PKCE
/// `verifier` is stored until the login is taken or expires.
pub async fn begin_login(
    store: &Store,
    state: &str,
    verifier: &str,
    nonce: &str,
    redirect_to: Option<String>,
    ttl: Duration,
) -> Result<(), AccessError> {
    store
        .insert_login(
            &secret_hash(state),
            &StoredLogin {
                pkce_verifier: verifier.to_string(),
                nonce: nonce.to_string(),
                redirect_to,
                expires_at: later(store, ttl)?,
            },
        )
        .await?;
    Ok(())
}

/// Takes the login begun with `state`, once: the row is deleted as it is read, so a second
/// call (a replayed callback) gets `None`, as does an unknown or expired state.
pub async fn take_login(store: &Store, state: &str) -> Result<Option<PendingLogin>, AccessError> {
    Ok(store
        .take_login(&secret_hash(state))
        .await?
        .map(|login| PendingLogin {
            verifier: Secret::new(login.pkce_verifier),
            nonce: login.nonce,
            redirect_to: login.redirect_to,
        }))
}

/// The user signing in with `email` (from a verified ID token): found, or added when new. Its
/// role is admin when the email is in `admins` (`auth.admins`; an existing user is raised to
/// admin), otherwise a new user is a `user`. A disabled user is refused with
/// [`AccessError::Disabled`], whatever `admins` says.
pub async fn login_user(
    store: &Store,
    email: &str,
    admins: &[String],
) -> Result<User, AccessError> {
    let email = check_email(email)?;
    let is_admin = admins.iter().any(|a| a.trim().eq_ignore_ascii_case(&email));
    let user = match find_user(store, &email).await? {
        Some(user) => user,
        None => match add_user_as(store, &email, &email, is_admin).await {
            Ok(user) => user,
            // Added meanwhile by another node: use that one.
            Err(AccessError::UserExists { .. }) => require_user(store, &email).await?,
            Err(e) => return Err(e),
        },
    };
    match user.role {
        Role::Disabled => Err(AccessError::Disabled { email: user.email }),
        Role::User if is_admin => set_role_as(store, "auth.admins", &email, Role::Admin).await,
        Role::User | Role::Admin => Ok(user),
    }
}

/// Creates a read-only link to `job`, expiring after `expires_in` (never when `None`);
/// recorded as `share_created` by `created_by`. Returns what lists show and the link's token
/// (`mss_` and 64 hex digits), shown this once: the store keeps its SHA-256 only.
pub async fn create_share(
    store: &Store,
    job: JobId,
    created_by: &str,
    expires_in: Option<Duration>,
) -> Result<(ShareInfo, Secret), AccessError> {
    if store.job(job).await?.is_none() {
        return Err(AccessError::NoSuchJob(job));
    }
    let token = new_secret(SHARE_PREFIX);
    let share = store
        .insert_share(
            job,
            &secret_hash(token.expose()),
            created_by,
            expires_in.map(|d| later(store, d)).transpose()?,
        )
        .await?;
    Ok((share.into(), token))
}

/// A job's share links (revoked and expired ones too), oldest first.
pub async fn list_shares(store: &Store, job: JobId) -> Result<Vec<ShareInfo>, AccessError> {
    Ok(store
        .shares(job)
        .await?
        .into_iter()
        .map(ShareInfo::from)
        .collect())
}

/// Revokes the share link `share_id` at once (recorded as `share_revoked` by
/// [`LOCAL_ACTOR`]); an unknown id is [`AccessError::NoSuchShare`].
pub async fn revoke_share(store: &Store, share_id: &str) -> Result<(), AccessError> {
    revoke_share_as(store, LOCAL_ACTOR, share_id).await
}

/// [`revoke_share`], recorded in the audit log as done by `actor`.
pub async fn revoke_share_as(
    store: &Store,
    actor: &str,
    share_id: &str,
) -> Result<(), AccessError> {
    if store.revoke_share(share_id.trim(), actor).await? {
        Ok(())
    } else {
        Err(AccessError::NoSuchShare {
            id: share_id.trim().to_string(),
        })
    }
}

/// The job a share link's `token` shows; `None` when the token is unknown, revoked or expired.
pub async fn resolve_share(store: &Store, token: &str) -> Result<Option<JobId>, AccessError> {
    let token = token.trim();
    if !token.starts_with(SHARE_PREFIX) {
        return Ok(None);
    }
    let Some(share) = store.share_by_hash(&secret_hash(token)).await? else {
        return Ok(None);
    };
    let live = share.revoked_at.is_none() && share.expires_at.is_none_or(|at| at > store.now());
    Ok(live.then_some(share.job_id))
}

/// The jobs that belong to `owner` (an email), optionally in one status, oldest first: what a
/// user who is not an admin is shown. Jobs without an owner (submitted from the command line)
/// are in no user's list.
pub async fn list_jobs_of(
    store: &Store,
    owner: &str,
    status: Option<JobStatus>,
) -> Result<Vec<JobSummary>, AccessError> {
    let mut out = Vec::new();
    for job in store.jobs_of(&owner.trim().to_lowercase(), status).await? {
        out.push(
            crate::jobs::summary(store, job)
                .await
                .map_err(|e| match e {
                    JobError::Store(e) => AccessError::Store(e),
                    other => AccessError::Job(Box::new(other)),
                })?,
        );
    }
    Ok(out)
}

/// Appends to the audit log: `actor` did `action`, to `job` when given, with `detail` (which
/// must never hold a secret).
pub async fn record_audit(
    store: &Store,
    actor: &str,
    action: AuditAction,
    job: Option<JobId>,
    detail: Option<String>,
) -> Result<(), AccessError> {
    store
        .record_audit(actor, action, job, detail.as_deref())
        .await?;
    Ok(())
}

/// One page of the audit log, **newest first**: the entries before the id `before` (`None`:
/// from the newest), at most `limit` (capped at [`AUDIT_PAGE_MAX`]). Pass the last entry's id
/// to get the next (older) page.
pub async fn audit_log_newest(
    store: &Store,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditEntry>, AccessError> {
    Ok(store
        .audit_page_newest(before, limit.clamp(0, AUDIT_PAGE_MAX))
        .await?)
}

/// One page of the audit log, **oldest first**: the entries after the id `after` (`None`: from
/// the first), at most `limit` (capped at [`AUDIT_PAGE_MAX`]). Pass the last entry's id to get
/// the next page. An action this build does not know is shown as
/// [`AuditAction::Unknown`], never an error.
pub async fn audit_log(
    store: &Store,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditEntry>, AccessError> {
    Ok(store
        .audit_page(after, limit.clamp(0, AUDIT_PAGE_MAX))
        .await?)
}
