//! Virtual keys: the secrets clients present as `Authorization: Bearer mk-…`. A key is made
//! here ([`new_key`]), shown once, and kept only as its SHA-256 ([`key_hash`]); each request's
//! key is looked up by that hash through the [`GatewayStore`](crate::GatewayStore).

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// What every key starts with.
pub const KEY_PREFIX: &str = "mk-";

/// A virtual key as stored (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayKey {
    /// The key's id, which `maestro gateway keys revoke` takes.
    pub id: String,
    /// A name to tell keys apart (and the `key` label of the metrics).
    pub name: String,
    /// The SHA-256 of the key, lowercase hex ([`key_hash`]).
    pub hash: String,
    /// The key's first characters, shown in lists to recognise it.
    pub prefix: String,
    /// The public model names it may call; `None`: every model.
    pub models: Option<Vec<String>>,
    /// Its budget in micro-USD per period; `None`: no dollar budget.
    pub budget_micro_usd: Option<i64>,
    /// Its budget in tokens per period; `None`: no token budget.
    pub budget_tokens: Option<i64>,
    /// `day`, `week` or `month`; `None`: the budgets are totals.
    pub period: Option<String>,
    /// Requests per minute; `None`: no limit.
    pub rpm: Option<i64>,
    /// Tokens per minute; `None`: no limit.
    pub tpm: Option<i64>,
    /// When it stops working, Unix milliseconds; `None`: never.
    pub expires_at_ms: Option<i64>,
    /// When it was made, Unix milliseconds.
    pub created_at_ms: i64,
    /// Who made it.
    pub created_by: String,
    /// When it was revoked, Unix milliseconds.
    pub revoked_at_ms: Option<i64>,
}

impl GatewayKey {
    /// Whether it authenticates at `now_ms`: not revoked, not expired.
    pub fn is_usable(&self, now_ms: i64) -> bool {
        self.revoked_at_ms.is_none() && self.expires_at_ms.is_none_or(|at| now_ms < at)
    }

    /// Whether it may call the public model `model`.
    pub fn allows(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|models| models.iter().any(|m| m == model))
    }
}

/// The SHA-256 of `key` as lowercase hex: what the store keeps of a key.
pub fn key_hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new key: `mk-` and 32 bytes from a CSPRNG seeded by the operating system (`rand`'s
/// thread generator), in unpadded base64url. Returns
/// the key (to show once), its hash and its prefix (to keep).
pub fn new_key() -> (String, String, String) {
    let bytes: [u8; 32] = rand::random();
    let key = format!(
        "{KEY_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let hash = key_hash(&key);
    let prefix: String = key.chars().take(KEY_PREFIX.len() + 6).collect();
    (key, hash, prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_keys_are_distinct_and_hash_to_what_is_kept() {
        let (a, hash_a, prefix_a) = new_key();
        let (b, _, _) = new_key();
        assert_ne!(a, b);
        assert!(a.starts_with(KEY_PREFIX));
        assert_eq!(a.len(), KEY_PREFIX.len() + 43);
        assert_eq!(hash_a, key_hash(&a));
        assert!(a.starts_with(&prefix_a));
    }
}
