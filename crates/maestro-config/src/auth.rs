//! `auth:` — who may use `maestro serve`: the switch, the admins, sessions, and the OIDC
//! provider people sign in with. API tokens and users live in the store (`maestro users`,
//! `maestro tokens`), not here.

use maestro_protocol::Secret;
use serde::{Deserialize, Serialize};

use crate::config::Check;
use crate::error::{ConfigError, Origin, Problem};

/// `auth:` — authentication of the server's users. Off by default: a server without it serves
/// anyone who can reach it (bind it to loopback).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Whether the server asks every request who it is from (a token or a session).
    pub enabled: bool,
    /// Emails that are admins: a person signing in with one of them gets the admin role.
    pub admins: Vec<String>,
    /// How long a browser session lasts after sign-in, in hours (default 12).
    pub session_ttl_hours: u64,
    /// The OpenID Connect provider people sign in with in a browser; unset: API tokens only.
    pub oidc: Option<OidcConfig>,
    /// The URL people reach the server at (`https://maestro.example.com`), from which the
    /// server derives its OIDC redirect URL and share links; unset: the address it listens on.
    pub public_url: Option<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            enabled: false,
            admins: Vec::new(),
            session_ttl_hours: 12,
            oidc: None,
            public_url: None,
        }
    }
}

/// `auth.oidc:` — an OpenID Connect provider (authorization code flow with PKCE).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer URL; its `/.well-known/openid-configuration` describes the provider.
    pub issuer: String,
    /// The client id registered with the provider.
    pub client_id: String,
    /// The name of the environment variable that holds the client secret (the secret itself
    /// is never written in a file), e.g. `MAESTRO_OIDC_SECRET`.
    pub client_secret_env: String,
    /// The redirect URL registered with the provider; unset: `<public_url>/auth/callback`,
    /// derived by the server.
    #[serde(default)]
    pub redirect_url: Option<String>,
    /// The scopes asked for (default `openid`, `email`, `profile`); `openid` must be among them.
    #[serde(default = "OidcConfig::default_scopes")]
    pub scopes: Vec<String>,
}

impl OidcConfig {
    fn default_scopes() -> Vec<String> {
        ["openid", "email", "profile"]
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// The client secret, read from the variable [`OidcConfig::client_secret_env`] names
    /// through `env` (the process environment: `|name| std::env::var(name).ok()`). Fails, naming
    /// the variable and the fix, when it is unset or empty.
    pub fn client_secret(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Secret, ConfigError> {
        match env(&self.client_secret_env).filter(|v| !v.is_empty()) {
            Some(secret) => Ok(Secret::new(secret)),
            None => Err(Problem {
                origin: Origin::Env {
                    var: self.client_secret_env.clone(),
                },
                field: "auth.oidc.client_secret_env".into(),
                message: format!(
                    "names the environment variable {}, which is not set",
                    self.client_secret_env
                ),
                fix: format!(
                    "export {}=<the client secret the provider gave>, or name another variable",
                    self.client_secret_env
                ),
            }
            .into_error()),
        }
    }
}

fn is_http_url(text: &str) -> bool {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    rest.is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'))
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl AuthConfig {
    /// Problems no single field's type catches.
    pub(crate) fn check(&self) -> Vec<Check> {
        let mut found = Vec::new();
        let mut fail = |field: &[&str], message: String, fix: &str| {
            found.push(Check {
                field: field.iter().map(|s| s.to_string()).collect(),
                message,
                fix: fix.to_string(),
            });
        };
        for (index, admin) in self.admins.iter().enumerate() {
            let local_and_domain = admin.split_once('@');
            if !local_and_domain.is_some_and(|(l, d)| !l.is_empty() && !d.is_empty()) {
                fail(
                    &["auth", "admins", &index.to_string()],
                    format!("{admin:?} is not an email address"),
                    "list the admins' emails as the provider reports them, e.g. ana@example.com",
                );
            }
        }
        if self.session_ttl_hours == 0 {
            fail(
                &["auth", "session_ttl_hours"],
                "must be at least 1".into(),
                "give the hours a browser session lasts, e.g. 12",
            );
        }
        if let Some(url) = &self.public_url
            && !is_http_url(url)
        {
            fail(
                &["auth", "public_url"],
                format!("{url:?} is not an http(s) URL"),
                "give the URL people open, e.g. https://maestro.example.com",
            );
        }
        if let Some(oidc) = &self.oidc {
            if !is_http_url(&oidc.issuer) {
                fail(
                    &["auth", "oidc", "issuer"],
                    format!("{:?} is not an http(s) URL", oidc.issuer),
                    "give the provider's issuer, e.g. https://accounts.google.com",
                );
            }
            if oidc.client_id.trim().is_empty() {
                fail(
                    &["auth", "oidc", "client_id"],
                    "the client id is empty".into(),
                    "give the client id the provider registered for this server",
                );
            }
            if !is_env_name(&oidc.client_secret_env) {
                fail(
                    &["auth", "oidc", "client_secret_env"],
                    format!(
                        "{:?} is not an environment variable name",
                        oidc.client_secret_env
                    ),
                    "name the variable that holds the client secret, e.g. MAESTRO_OIDC_SECRET \
                     (never the secret itself)",
                );
            }
            if let Some(url) = &oidc.redirect_url
                && !is_http_url(url)
            {
                fail(
                    &["auth", "oidc", "redirect_url"],
                    format!("{url:?} is not an http(s) URL"),
                    "give the redirect URL registered with the provider, e.g. \
                     https://maestro.example.com/auth/callback, or remove it",
                );
            }
            if !oidc.scopes.iter().any(|s| s == "openid") {
                fail(
                    &["auth", "oidc", "scopes"],
                    format!("{:?} lacks `openid`", oidc.scopes),
                    "add openid to the scopes, e.g. [openid, email, profile]",
                );
            }
        }
        found
    }
}
