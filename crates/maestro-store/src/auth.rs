//! Who may do what: users, their API tokens, browser sessions, OIDC logins in flight, and
//! share links to one job. Every secret (a token, a session id, a CSRF token, a share token) is
//! stored as its SHA-256 only ([`secret_hash`]): the caller hashes what it is shown and looks the
//! hash up; the store never sees the secret itself. The rules (roles, scopes, expiry) are
//! `maestro-app`'s; this module keeps the rows.

use sha2::{Digest, Sha256};
use sqlx::Any;
use sqlx::any::AnyRow;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::clock::{from_ms, to_ms};
use crate::error::{StoreError, StoreResult};
use crate::model::{AuditAction, JobId};
use crate::rows::{col, parse_id};
use crate::store::Store;

/// The SHA-256 of `secret` as lowercase hex: what the store keeps of a token, a session id, a
/// CSRF token or a share token.
pub fn secret_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A user as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredUser {
    /// The user's id (a UUIDv7).
    pub id: String,
    /// The user's email, lowercased.
    pub email: String,
    /// `admin`, `user` or `disabled`, as the app wrote it.
    pub role: String,
    /// When the user was added.
    pub created_at: OffsetDateTime,
    /// When the user's role last changed (or when it was added).
    pub updated_at: OffsetDateTime,
}

/// An API token to store: its hash only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// The user the token acts as.
    pub user_id: String,
    /// A name to tell tokens apart in lists.
    pub name: Option<String>,
    /// The SHA-256 of the token ([`secret_hash`]).
    pub hash: String,
    /// The token's first characters, shown in lists to recognise it.
    pub prefix: String,
    /// The scopes, comma-separated (`read,write`).
    pub scopes: String,
    /// When it stops authenticating; `None`: never.
    pub expires_at: Option<OffsetDateTime>,
}

/// An API token as stored (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    /// The token's id (a UUIDv7), which `maestro tokens revoke` takes.
    pub id: String,
    /// The user it acts as.
    pub user_id: String,
    /// That user's email.
    pub user_email: String,
    /// Its name, if it was given one.
    pub name: Option<String>,
    /// Its first characters.
    pub prefix: String,
    /// Its scopes, comma-separated.
    pub scopes: String,
    /// When it was created.
    pub created_at: OffsetDateTime,
    /// When it last authenticated a request (updated at most once a minute).
    pub last_used_at: Option<OffsetDateTime>,
    /// When it stops authenticating; `None`: never.
    pub expires_at: Option<OffsetDateTime>,
    /// When it was revoked; a revoked token never authenticates again.
    pub revoked_at: Option<OffsetDateTime>,
}

/// A session as stored: the hashes of its id and CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// The SHA-256 of the session id (the cookie's value).
    pub id_hash: String,
    /// The user signed in.
    pub user_id: String,
    /// The SHA-256 of the session's CSRF token.
    pub csrf_hash: String,
    /// When it began.
    pub created_at: OffsetDateTime,
    /// When it stops authenticating.
    pub expires_at: OffsetDateTime,
}

/// An OIDC authorization-code login in flight, as stored until it is taken or expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLogin {
    /// The PKCE code verifier the login began with.
    pub pkce_verifier: String,
    /// The nonce the ID token must carry.
    pub nonce: String,
    /// Where to send the browser once signed in.
    pub redirect_to: Option<String>,
    /// When it stops being accepted.
    pub expires_at: OffsetDateTime,
}

/// A share link as stored (never its token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredShare {
    /// The link's id (a UUIDv7), which revoking takes.
    pub id: String,
    /// The job it shows.
    pub job_id: JobId,
    /// Who created it.
    pub created_by: String,
    /// When it was created.
    pub created_at: OffsetDateTime,
    /// When it stops working; `None`: never.
    pub expires_at: Option<OffsetDateTime>,
    /// When it was revoked.
    pub revoked_at: Option<OffsetDateTime>,
}

const USER_COLUMNS: &str = "id, email, role, created_at, updated_at";

const TOKEN_COLUMNS: &str = "t.id, t.user_id, u.email, t.name, t.prefix, t.scopes, t.created_at, \
    t.last_used_at, t.expires_at, t.revoked_at";

const SHARE_COLUMNS: &str = "id, job_id, created_by, created_at, expires_at, revoked_at";

/// A token's `last_used_at` is written again only when it is older than this (ms): one write a
/// minute per token rather than one per request.
const TOUCH_EVERY_MS: i64 = 60_000;

fn user_from_row(row: &AnyRow) -> StoreResult<StoredUser> {
    Ok(StoredUser {
        id: col(row, "id")?,
        email: col(row, "email")?,
        role: col(row, "role")?,
        created_at: from_ms(col(row, "created_at")?),
        updated_at: from_ms(col(row, "updated_at")?),
    })
}

fn token_from_row(row: &AnyRow) -> StoreResult<StoredToken> {
    Ok(StoredToken {
        id: col(row, "id")?,
        user_id: col(row, "user_id")?,
        user_email: col(row, "email")?,
        name: col(row, "name")?,
        prefix: col(row, "prefix")?,
        scopes: col(row, "scopes")?,
        created_at: from_ms(col(row, "created_at")?),
        last_used_at: col::<Option<i64>>(row, "last_used_at")?.map(from_ms),
        expires_at: col::<Option<i64>>(row, "expires_at")?.map(from_ms),
        revoked_at: col::<Option<i64>>(row, "revoked_at")?.map(from_ms),
    })
}

fn share_from_row(row: &AnyRow) -> StoreResult<StoredShare> {
    Ok(StoredShare {
        id: col(row, "id")?,
        job_id: parse_id(&col::<String>(row, "job_id")?)?,
        created_by: col(row, "created_by")?,
        created_at: from_ms(col(row, "created_at")?),
        expires_at: col::<Option<i64>>(row, "expires_at")?.map(from_ms),
        revoked_at: col::<Option<i64>>(row, "revoked_at")?.map(from_ms),
    })
}

impl Store {
    /// Adds a user with `email` (stored lowercased) and `role`, recorded in the audit log as
    /// `user_added` by `actor`. `None` when a user with this email exists already (nothing
    /// changes).
    pub async fn insert_user(
        &self,
        email: &str,
        role: &str,
        actor: &str,
    ) -> StoreResult<Option<StoredUser>> {
        let email = email.trim().to_lowercase();
        let id = Uuid::now_v7().to_string();
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        let inserted = sqlx::query::<Any>(
            "INSERT INTO users (id, email, role, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $4) ON CONFLICT (email) DO NOTHING",
        )
        .bind(id.clone())
        .bind(email.clone())
        .bind(role.to_string())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("add a user"))?;
        if inserted.rows_affected() == 0 {
            return Ok(None);
        }
        self.audit_in(
            &mut tx,
            actor,
            AuditAction::UserAdded,
            None,
            None,
            Some(&format!("{email} ({role})")),
        )
        .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a new user"))?;
        Ok(Some(StoredUser {
            id,
            email,
            role: role.to_string(),
            created_at: from_ms(now),
            updated_at: from_ms(now),
        }))
    }

    /// The user with this email (compared lowercased).
    pub async fn user_by_email(&self, email: &str) -> StoreResult<Option<StoredUser>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(email.trim().to_lowercase())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("find a user"))?
            .as_ref()
            .map(user_from_row)
            .transpose()
    }

    /// The user with this id.
    pub async fn user_by_id(&self, id: &str) -> StoreResult<Option<StoredUser>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("find a user"))?
            .as_ref()
            .map(user_from_row)
            .transpose()
    }

    /// Every user, by email.
    pub async fn users(&self) -> StoreResult<Vec<StoredUser>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users ORDER BY email");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list users"))?
            .iter()
            .map(user_from_row)
            .collect()
    }

    /// Sets the role of the user with `email`, recorded in the audit log as
    /// `user_role_changed` by `actor`; `None` when there is no such user.
    pub async fn set_user_role(
        &self,
        email: &str,
        role: &str,
        actor: &str,
    ) -> StoreResult<Option<StoredUser>> {
        let email = email.trim().to_lowercase();
        let mut tx = self.begin_write().await?;
        let changed =
            sqlx::query::<Any>("UPDATE users SET role = $1, updated_at = $2 WHERE email = $3")
                .bind(role.to_string())
                .bind(self.now_ms())
                .bind(email.clone())
                .execute(&mut *tx)
                .await
                .map_err(StoreError::query("change a user's role"))?;
        if changed.rows_affected() == 0 {
            return Ok(None);
        }
        self.audit_in(
            &mut tx,
            actor,
            AuditAction::UserRoleChanged,
            None,
            None,
            Some(&format!("{email} -> {role}")),
        )
        .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a role change"))?;
        self.user_by_email(&email).await
    }

    /// Stores a new API token (its hash) and records `token_created` by `actor` in the audit
    /// log; returns the stored row.
    pub async fn insert_token(&self, token: &NewToken, actor: &str) -> StoreResult<StoredToken> {
        let id = Uuid::now_v7().to_string();
        let mut tx = self.begin_write().await?;
        sqlx::query::<Any>(
            "INSERT INTO api_tokens (id, user_id, name, hash, prefix, scopes, created_at, \
             expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(id.clone())
        .bind(token.user_id.clone())
        .bind(token.name.clone())
        .bind(token.hash.clone())
        .bind(token.prefix.clone())
        .bind(token.scopes.clone())
        .bind(self.now_ms())
        .bind(token.expires_at.map(to_ms))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("store an API token"))?;
        self.audit_in(
            &mut tx,
            actor,
            AuditAction::TokenCreated,
            None,
            None,
            Some(&format!("token {id} ({})", token.scopes)),
        )
        .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit an API token"))?;
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens t JOIN users u ON u.id = t.user_id \
             WHERE t.id = $1"
        );
        let row = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::query("read a new API token"))?;
        token_from_row(&row)
    }

    /// The API tokens, oldest first; only those of the user `user_id` when given. Revoked and
    /// expired ones are listed too.
    pub async fn tokens(&self, user_id: Option<&str>) -> StoreResult<Vec<StoredToken>> {
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens t JOIN users u ON u.id = t.user_id \
             WHERE ($1 = '' OR t.user_id = $1) ORDER BY t.id"
        );
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(user_id.unwrap_or("").to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list API tokens"))?
            .iter()
            .map(token_from_row)
            .collect()
    }

    /// The token whose hash is `hash`, revoked or not, with its user.
    pub async fn token_by_hash(
        &self,
        hash: &str,
    ) -> StoreResult<Option<(StoredToken, StoredUser)>> {
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens t JOIN users u ON u.id = t.user_id \
             WHERE t.hash = $1"
        );
        let Some(row) = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(hash.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("look an API token up"))?
        else {
            return Ok(None);
        };
        let token = token_from_row(&row)?;
        let user = self
            .user_by_id(&token.user_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                what: format!("API token {} names no user", token.id),
            })?;
        Ok(Some((token, user)))
    }

    /// Notes that the token `id` was used now, unless that was noted less than a minute ago.
    pub async fn touch_token(&self, id: &str) -> StoreResult<()> {
        let now = self.now_ms();
        sqlx::query::<Any>(
            "UPDATE api_tokens SET last_used_at = $1 WHERE id = $2 \
             AND (last_used_at IS NULL OR last_used_at <= $3)",
        )
        .bind(now)
        .bind(id.to_string())
        .bind(now.saturating_sub(TOUCH_EVERY_MS))
        .execute(&self.pool)
        .await
        .map_err(StoreError::query("note an API token's use"))?;
        Ok(())
    }

    /// Revokes the token `id` and records `token_revoked` by `actor` in the audit log. `false`
    /// when no token has this id; revoking a revoked token again keeps its first revocation.
    pub async fn revoke_token(&self, id: &str, actor: &str) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let found = sqlx::query::<Any>(
            "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2",
        )
        .bind(self.now_ms())
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("revoke an API token"))?;
        if found.rows_affected() == 0 {
            return Ok(false);
        }
        self.audit_in(
            &mut tx,
            actor,
            AuditAction::TokenRevoked,
            None,
            None,
            Some(&format!("token {id}")),
        )
        .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a token revocation"))?;
        Ok(true)
    }

    /// Stores a session (the hashes of its id and CSRF token) for `user_id` until
    /// `expires_at`, and removes the sessions that have expired.
    pub async fn insert_session(
        &self,
        id_hash: &str,
        user_id: &str,
        csrf_hash: &str,
        expires_at: OffsetDateTime,
    ) -> StoreResult<()> {
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        sqlx::query::<Any>("DELETE FROM sessions WHERE expires_at <= $1")
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("remove expired sessions"))?;
        sqlx::query::<Any>(
            "INSERT INTO sessions (id_hash, user_id, csrf_hash, created_at, expires_at, \
             last_seen_at) VALUES ($1, $2, $3, $4, $5, $4)",
        )
        .bind(id_hash.to_string())
        .bind(user_id.to_string())
        .bind(csrf_hash.to_string())
        .bind(now)
        .bind(to_ms(expires_at))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("store a session"))?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a session"))
    }

    /// The session whose id hashes to `id_hash`, unless it has expired.
    pub async fn session_by_hash(&self, id_hash: &str) -> StoreResult<Option<StoredSession>> {
        let row = sqlx::query::<Any>(
            "SELECT id_hash, user_id, csrf_hash, created_at, expires_at FROM sessions \
             WHERE id_hash = $1 AND expires_at > $2",
        )
        .bind(id_hash.to_string())
        .bind(self.now_ms())
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::query("look a session up"))?;
        row.as_ref()
            .map(|row| {
                Ok(StoredSession {
                    id_hash: col(row, "id_hash")?,
                    user_id: col(row, "user_id")?,
                    csrf_hash: col(row, "csrf_hash")?,
                    created_at: from_ms(col(row, "created_at")?),
                    expires_at: from_ms(col(row, "expires_at")?),
                })
            })
            .transpose()
    }

    /// Ends the session whose id hashes to `id_hash`; `false` when there was none.
    pub async fn delete_session(&self, id_hash: &str) -> StoreResult<bool> {
        let done = sqlx::query::<Any>("DELETE FROM sessions WHERE id_hash = $1")
            .bind(id_hash.to_string())
            .execute(&self.pool)
            .await
            .map_err(StoreError::query("end a session"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Stores an OIDC login in flight under the hash of its `state` until `expires_at`, and
    /// removes the ones that have expired.
    pub async fn insert_login(&self, state_hash: &str, login: &StoredLogin) -> StoreResult<()> {
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        sqlx::query::<Any>("DELETE FROM oidc_logins WHERE expires_at <= $1")
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::query("remove expired logins"))?;
        sqlx::query::<Any>(
            "INSERT INTO oidc_logins (state_hash, pkce_verifier, nonce, redirect_to, created_at, \
             expires_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(state_hash.to_string())
        .bind(login.pkce_verifier.clone())
        .bind(login.nonce.clone())
        .bind(login.redirect_to.clone())
        .bind(now)
        .bind(to_ms(login.expires_at))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("store a login in flight"))?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a login in flight"))
    }

    /// Takes the login stored under `state_hash`: the row is deleted in the same statement, so
    /// of two callers with the same state one gets it. `None` when there is none or it has
    /// expired (an expired row is deleted too).
    pub async fn take_login(&self, state_hash: &str) -> StoreResult<Option<StoredLogin>> {
        let row = sqlx::query::<Any>(
            "DELETE FROM oidc_logins WHERE state_hash = $1 \
             RETURNING pkce_verifier, nonce, redirect_to, expires_at",
        )
        .bind(state_hash.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::query("take a login in flight"))?;
        let Some(row) = row else { return Ok(None) };
        let login = StoredLogin {
            pkce_verifier: col(&row, "pkce_verifier")?,
            nonce: col(&row, "nonce")?,
            redirect_to: col(&row, "redirect_to")?,
            expires_at: from_ms(col(&row, "expires_at")?),
        };
        Ok((to_ms(login.expires_at) > self.now_ms()).then_some(login))
    }

    /// Stores a share link to `job` (its token's hash) and records `share_created` by
    /// `created_by` in the audit log.
    pub async fn insert_share(
        &self,
        job: JobId,
        token_hash: &str,
        created_by: &str,
        expires_at: Option<OffsetDateTime>,
    ) -> StoreResult<StoredShare> {
        let id = Uuid::now_v7().to_string();
        let now = self.now_ms();
        let mut tx = self.begin_write().await?;
        sqlx::query::<Any>(
            "INSERT INTO share_links (id, job_id, token_hash, created_by, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id.clone())
        .bind(job.to_string())
        .bind(token_hash.to_string())
        .bind(created_by.to_string())
        .bind(now)
        .bind(expires_at.map(to_ms))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::query("store a share link"))?;
        self.audit_in(
            &mut tx,
            created_by,
            AuditAction::ShareCreated,
            Some(job),
            None,
            Some(&format!("share {id}")),
        )
        .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a share link"))?;
        Ok(StoredShare {
            id,
            job_id: job,
            created_by: created_by.to_string(),
            created_at: from_ms(now),
            expires_at: expires_at.map(|at| from_ms(to_ms(at))),
            revoked_at: None,
        })
    }

    /// A job's share links, oldest first, revoked and expired ones included.
    pub async fn shares(&self, job: JobId) -> StoreResult<Vec<StoredShare>> {
        let sql = format!("SELECT {SHARE_COLUMNS} FROM share_links WHERE job_id = $1 ORDER BY id");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(job.to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::query("list share links"))?
            .iter()
            .map(share_from_row)
            .collect()
    }

    /// The share link whose token hashes to `token_hash`, revoked or not.
    pub async fn share_by_hash(&self, token_hash: &str) -> StoreResult<Option<StoredShare>> {
        let sql = format!("SELECT {SHARE_COLUMNS} FROM share_links WHERE token_hash = $1");
        sqlx::query::<Any>(sqlx::AssertSqlSafe(sql))
            .bind(token_hash.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::query("look a share link up"))?
            .as_ref()
            .map(share_from_row)
            .transpose()
    }

    /// Revokes the share link `id` and records `share_revoked` by `actor` in the audit log;
    /// `false` when no link has this id. A link revoked already stays as it was (`true`, and
    /// nothing more in the audit log).
    pub async fn revoke_share(&self, id: &str, actor: &str) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query::<Any>(
            "UPDATE share_links SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL \
             RETURNING job_id",
        )
        .bind(self.now_ms())
        .bind(id.to_string())
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::query("revoke a share link"))?;
        let Some(row) = row else {
            // Revoked already (nothing changes, nothing more is audited), or no such link.
            let known = sqlx::query::<Any>("SELECT 1 FROM share_links WHERE id = $1")
                .bind(id.to_string())
                .fetch_optional(&mut *tx)
                .await
                .map_err(StoreError::query("look up a share link"))?;
            return Ok(known.is_some());
        };
        let job = parse_id(&col::<String>(&row, "job_id")?)?;
        self.audit_in(
            &mut tx,
            actor,
            AuditAction::ShareRevoked,
            Some(job),
            None,
            Some(&format!("share {id}")),
        )
        .await?;
        tx.commit()
            .await
            .map_err(StoreError::query("commit a share revocation"))?;
        Ok(true)
    }
}
