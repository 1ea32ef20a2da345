//! A string that must never be printed, logged, serialised into events or sent to a model.

use std::fmt;

/// A secret value (API key, password, private key). `Debug` and `Display` print `***`, and it
/// deliberately does not implement `Serialize`, so it cannot end up in an event or a log line by
/// accident. Read it with [`Secret::expose`] at the one place that needs it (an HTTP header,
/// an SSH handshake).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value read from the configuration or the environment as a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself. Call only where the value leaves the process for its intended peer.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the secret is the empty string (nothing was configured).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Replaces every occurrence of this secret in `text` with `***`. Used on provider error
    /// messages and tool output before they are stored or shown.
    pub fn redact(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_string();
        }
        text.replace(&self.0, "***")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// `url` with the password it carries shown as `***`: the one in its user info
/// (`postgres://user:***@host/db`) and a `password=` query parameter
/// (`postgres://host/db?password=***`). Everything else is kept, so the URL still says where
/// it points. A URL without a password comes back as it is.
///
/// ```
/// use maestro_protocol::mask_url_password;
/// assert_eq!(mask_url_password("postgres://me:pw@db:5432/jobs"), "postgres://me:***@db:5432/jobs");
/// assert_eq!(mask_url_password("postgres://db/jobs?user=me&password=pw"), "postgres://db/jobs?user=me&password=***");
/// ```
pub fn mask_url_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // The user info ends at the last `@` before the path: a password with an unescaped `@`
    // in it is still masked whole.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                    _ => param.to_string(),
                })
                .collect();
            format!("{path}?{}", params.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_print() {
        let s = Secret::new("sk-live-abcdef");
        assert_eq!(format!("{s} {s:?}"), "*** Secret(***)");
        assert_eq!(s.expose(), "sk-live-abcdef");
        assert_eq!(
            s.redact("bad key sk-live-abcdef given"),
            "bad key *** given"
        );
    }

    #[test]
    fn a_url_shows_where_it_points_but_not_its_password() {
        for (url, shown) in [
            (
                "postgres://me:pw@db:5432/jobs",
                "postgres://me:***@db:5432/jobs",
            ),
            ("postgres://me:p@ss@db/jobs", "postgres://me:***@db/jobs"),
            ("postgres://me@db/jobs", "postgres://me@db/jobs"),
            (
                "postgres://db/jobs?sslmode=require&password=pw",
                "postgres://db/jobs?sslmode=require&password=***",
            ),
            ("sqlite:///srv/maestro.db", "sqlite:///srv/maestro.db"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(mask_url_password(url), shown, "{url}");
        }
    }
}
