//! The configuration changed at runtime. Each node's base is its own file configuration
//! (`~/.maestro/config.yaml`, `.maestro/config.yaml`, the environment, its flags); the store
//! holds a versioned JSON overlay written through the API ([`put_config`]), and the effective
//! configuration is the base with the newest overlay laid over it ([`effective_config`]). A
//! node without a store uses its file configuration alone.
//!
//! An overlay holds only what differs from the writer's base: a `PUT` of the document a `GET`
//! returned, with one value changed, stores that one value. Secrets read back as `***`; a `***`
//! sent back keeps the secret it stands for (the overlay's, else the base's).
//!
//! Workers hold a [`ConfigWatch`], which notices a new overlay version within
//! [`ConfigWatch::POLL`] of being asked and hands out the fresh configuration.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use maestro_config::{Config, Problem};
use maestro_llm::flight::Flight;
use maestro_store::{ConfigPut, Store, StoreError};
use serde_json::{Map, Value};

/// A strong entity tag of the effective configuration: the overlay's version and a hash of
/// the node's base configuration (as shown, secrets redacted). `Display` gives the quoted form
/// an `ETag` header carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ETag(String);

impl ETag {
    fn new(version: i64, base: &Config) -> ETag {
        let shown = base.redacted_value().to_string();
        // FNV-1a: the same in every process and build, unlike the standard library's hasher.
        let hash = shown.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        ETag(format!("v{version}-{hash:016x}"))
    }

    /// The tag without its quotes.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether an `If-Match` value names this tag: the tag quoted or bare, one of a
    /// comma-separated list, or `*`. A weak tag (`W/"…"`) never matches.
    pub fn matches(&self, if_match: &str) -> bool {
        if_match.split(',').map(str::trim).any(|candidate| {
            candidate == "*"
                || candidate.trim_matches('"') == self.0 && !candidate.starts_with("W/")
        })
    }

    /// The overlay version the tag names.
    pub fn version(&self) -> Option<i64> {
        self.0.strip_prefix('v')?.split('-').next()?.parse().ok()
    }
}

impl std::fmt::Display for ETag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", self.0)
    }
}

/// One problem with a configuration overlay: the dotted field, what is wrong, what would fix
/// it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigIssue {
    /// The dotted path of the field, e.g. `llm.retry.max_attempts`.
    pub field: String,
    /// What is wrong with the value.
    pub message: String,
    /// What would make it valid.
    pub fix: String,
}

impl From<Problem> for ConfigIssue {
    fn from(p: Problem) -> ConfigIssue {
        ConfigIssue {
            field: p.field,
            message: p.message,
            fix: p.fix,
        }
    }
}

fn issues(problems: Vec<Problem>) -> Vec<ConfigIssue> {
    problems.into_iter().map(ConfigIssue::from).collect()
}

/// Why the effective configuration could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The overlay could not be read from the store.
    #[error("cannot read the configuration overlay from the store")]
    Store(#[from] StoreError),
    /// The stored overlay does not make a valid configuration over this node's base (its file
    /// configuration changed since the overlay was written): write a corrected overlay, or fix
    /// the file.
    #[error(
        "the configuration overlay version {version} is not valid over this node's \
         configuration: {}",
        issues.iter().map(|i| format!("`{}`: {} (fix: {})", i.field, i.message, i.fix))
            .collect::<Vec<_>>().join("; ")
    )]
    Invalid {
        /// The overlay's version.
        version: i64,
        /// What is wrong.
        issues: Vec<ConfigIssue>,
    },
}

/// Why a configuration write was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigWriteError {
    /// No `If-Match` was given: a write must name the version it changes (read it with
    /// `GET /config`, whose `ETag` it is).
    #[error(
        "a configuration write must say which version it changes: send If-Match with the ETag \
         of GET /config"
    )]
    PreconditionRequired,
    /// The configuration changed since the writer read it; nothing was written.
    #[error(
        "the configuration changed since it was read (it is now {current}); read it again and \
         reapply the change"
    )]
    Stale {
        /// The current tag.
        current: ETag,
    },
    /// The document does not make a valid configuration; nothing was written.
    #[error(
        "the configuration is invalid: {}",
        .0.iter().map(|i| format!("`{}`: {} (fix: {})", i.field, i.message, i.fix))
            .collect::<Vec<_>>().join("; ")
    )]
    Invalid(Vec<ConfigIssue>),
    /// The store could not be read or written.
    #[error("the configuration overlay cannot be read or written")]
    Store(#[from] StoreError),
}

/// The effective configuration: `base` with the store's newest overlay laid over it, and its
/// tag. Without an overlay it is `base`, tagged version 0.
pub async fn effective_config(store: &Store, base: &Config) -> Result<(Config, ETag), ConfigError> {
    let Some(overlay) = store.config_overlay().await? else {
        return Ok((base.clone(), ETag::new(0, base)));
    };
    let config = base
        .with_overlay(&overlay.doc)
        .map_err(|problems| ConfigError::Invalid {
            version: overlay.version,
            issues: issues(problems),
        })?;
    Ok((config, ETag::new(overlay.version, base)))
}

/// The configuration as JSON, every secret shown as `***`: what `GET /config` and
/// `maestro config show --json` give.
pub fn config_json(config: &Config) -> Value {
    config.redacted_value()
}

/// Writes `body` (a JSON object in the configuration file's shape: the whole document or some
/// keys of it) as the next overlay, if the configuration is still the one `if_match` names.
/// What equals `base` is not stored; a `***` keeps the secret it stands for. The check and the
/// write are one compare-and-set in the store, so of two writers with the same `If-Match`
/// exactly one succeeds. Returns the new tag (the caller records the write in the audit log:
/// who, and the new version, [`ETag::version`]).
pub async fn put_config(
    store: &Store,
    base: &Config,
    body: Value,
    if_match: Option<&str>,
    by: &str,
) -> Result<ETag, ConfigWriteError> {
    let Some(if_match) = if_match else {
        return Err(ConfigWriteError::PreconditionRequired);
    };
    let previous = store.config_overlay().await?;
    let version = previous.as_ref().map_or(0, |p| p.version);
    let current = ETag::new(version, base);
    if !current.matches(if_match) {
        return Err(ConfigWriteError::Stale { current });
    }
    if !body.is_object() {
        return Err(ConfigWriteError::Invalid(vec![ConfigIssue {
            field: "(top level)".into(),
            message: "the configuration is not a JSON object".into(),
            fix: "send an object in the configuration file's shape, e.g. \
                  {\"llm\": {\"model\": \"qwen3:8b\"}}"
                .into(),
        }]));
    }
    let mut body = body;
    if let Some(previous) = &previous {
        keep_secrets(&mut body, &previous.doc);
    }
    let overlay = changed(&body, &base.redacted_value(), &mut Vec::new())
        .unwrap_or_else(|| Value::Object(Map::new()));
    base.with_overlay(&overlay)
        .map_err(|problems| ConfigWriteError::Invalid(issues(problems)))?;
    match store.put_config_overlay(version, &overlay, by).await? {
        ConfigPut::Written(version) => Ok(ETag::new(version, base)),
        ConfigPut::Stale { current } => Err(ConfigWriteError::Stale {
            current: ETag::new(current, base),
        }),
    }
}

/// Replaces each `***` in `body` with the previous overlay's value at the same place, when it
/// holds one there.
fn keep_secrets(body: &mut Value, previous: &Value) {
    match body {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if let Some(kept) = previous.get(key) {
                    keep_secrets(value, kept);
                }
            }
        }
        Value::String(text) if text == maestro_config::REDACTED => {
            if let Value::String(kept) = previous
                && kept != maestro_config::REDACTED
            {
                *text = kept.clone();
            }
        }
        _ => {}
    }
}

/// What of `body` differs from `base`: objects key by key (an MCP server whole, as files
/// merge them), anything else whole. `None` when nothing differs.
fn changed(body: &Value, base: &Value, path: &mut Vec<String>) -> Option<Value> {
    let whole = matches!(path.as_slice(), [a, b, _] if a == "mcp" && b == "servers");
    match (body, base) {
        (Value::Object(body), Value::Object(base)) if !whole => {
            let mut out = Map::new();
            for (key, value) in body {
                path.push(key.clone());
                if let Some(differs) = changed(value, base.get(key).unwrap_or(&Value::Null), path) {
                    out.insert(key.clone(), differs);
                }
                path.pop();
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (body, base) if body == base => None,
        (body, _) => Some(body.clone()),
    }
}

/// The effective configuration as a long-lived process (a worker, a server) holds it: asked
/// for the configuration, it checks the store's overlay version (one cheap query) when
/// [`ConfigWatch::POLL`] has passed since the last check, and rebuilds the configuration when
/// the version moved. A check that fails, or an overlay that is not valid over this node's
/// base, keeps the last good configuration (and says so in the log).
#[derive(Debug, Clone)]
pub struct ConfigWatch {
    inner: Arc<WatchInner>,
}

#[derive(Debug)]
struct WatchInner {
    store: Store,
    base: Arc<Config>,
    /// Held while the store is checked; callers that find a check under way wait for it
    /// together ([`Flight`]).
    state: Flight<Watched>,
    /// A copy of the newest configuration, for readers that cannot wait.
    latest: Mutex<(Arc<Config>, ETag)>,
}

#[derive(Debug)]
struct Watched {
    version: i64,
    checked: Option<Instant>,
}

impl ConfigWatch {
    /// How long a checked version is trusted before the store is asked again.
    pub const POLL: Duration = Duration::from_secs(1);

    /// A watch over `store` for a node whose file configuration is `base`. Nothing is read
    /// until the first [`ConfigWatch::current`].
    pub fn new(store: Store, base: Config) -> ConfigWatch {
        let tag = ETag::new(0, &base);
        let base = Arc::new(base);
        ConfigWatch {
            inner: Arc::new(WatchInner {
                store,
                latest: Mutex::new((Arc::clone(&base), tag)),
                base,
                state: Flight::new(Watched {
                    version: 0,
                    checked: None,
                }),
            }),
        }
    }

    /// The node's file configuration.
    pub fn base(&self) -> &Arc<Config> {
        &self.inner.base
    }

    /// The effective configuration now: at most [`ConfigWatch::POLL`] behind the store.
    pub async fn current(&self) -> Arc<Config> {
        self.current_tagged().await.0
    }

    /// [`ConfigWatch::current`] with its tag.
    pub async fn current_tagged(&self) -> (Arc<Config>, ETag) {
        self.checked(false).await
    }

    /// The effective configuration as the store has it now, with its tag: asks the store
    /// whatever the time since the last check. For a reader that shows the configuration to
    /// someone about to change it (`GET /config`): the tag it gets is the one a write checks, so
    /// a read just after someone else's write is not refused as stale again.
    pub async fn fresh_tagged(&self) -> (Arc<Config>, ETag) {
        self.checked(true).await
    }

    async fn checked(&self, now: bool) -> (Arc<Config>, ETag) {
        let inner = &self.inner;
        let recent = |state: &Watched| state.checked.is_some_and(|at| at.elapsed() < Self::POLL);
        let mut state = if now {
            inner.state.lock().await
        } else {
            // A check under way is waited for with every other caller, and a recent one is
            // taken as it is: a thousand runs starting at once neither queue for the lock one
            // wake-up at a time nor each check the store.
            match inner.state.lead(|state| state.is_some_and(recent)).await {
                Some(state) => state,
                None => return self.latest(),
            }
        };
        if now || !recent(&state) {
            state.checked = Some(Instant::now());
            match inner.store.config_version().await {
                Ok(version) if version != state.version => {
                    match effective_config(&inner.store, &inner.base).await {
                        Ok((config, tag)) => {
                            state.version = tag.version().unwrap_or(version);
                            tracing::info!(version = state.version, "configuration changed");
                            *self.latest_lock() = (Arc::new(config), tag);
                        }
                        Err(e) => {
                            // Not taken again until the version moves on.
                            state.version = version;
                            tracing::warn!("keeping the configuration in use: {e}");
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("checking the configuration overlay failed: {e}"),
            }
        }
        drop(state);
        self.latest()
    }

    /// The configuration last seen, without asking the store.
    pub fn latest(&self) -> (Arc<Config>, ETag) {
        let latest = self.latest_lock();
        (Arc::clone(&latest.0), latest.1.clone())
    }

    fn latest_lock(&self) -> std::sync::MutexGuard<'_, (Arc<Config>, ETag)> {
        self.inner.latest.lock().unwrap_or_else(|p| p.into_inner())
    }
}
