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
}
