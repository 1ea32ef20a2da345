//! The configuration as JSON and back: [`Config`] serialises to the redacted JSON of
//! [`Config::redacted_value`], and [`Config::with_overlay`] lays a JSON document in the file's
//! shape over a loaded configuration, with the same types and checks as a file and every `***`
//! kept as the secret it stands for.

use maestro_protocol::Secret;
use maestro_tools_mcp::McpServer;
use maestro_tools_ssh::{SecretSource, SshAuth};
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::Config;
use crate::display::REDACTED;
use crate::error::{ConfigError, Origin, Problem};
use crate::load::{absolutize, typed};

impl Serialize for Config {
    /// The configuration as [`Config::redacted_value`] shows it: every secret is `***`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.redacted_value().serialize(serializer)
    }
}

impl Config {
    /// This configuration with `overlay` laid over it: a JSON object in the configuration
    /// file's shape (any subset of its keys; maps merge key by key, anything else is replaced).
    /// The result is read with the same types and checked with the same cross-field checks as
    /// a file; a relative path is taken from the project root. A secret given as `***` keeps
    /// this configuration's secret at the same place (`llm.api_key`, an MCP server's `env` or
    /// `headers` value, an SSH connection's `password`); `***` where this configuration has no
    /// secret is a problem. Every problem found is returned, with its field and fix, from
    /// [`Origin::Overlay`].
    pub fn with_overlay(&self, overlay: &Value) -> Result<Config, Vec<Problem>> {
        let problem = |field: &str, message: String, fix: &str| Problem {
            origin: Origin::Overlay,
            field: field.to_string(),
            message,
            fix: fix.to_string(),
        };
        if !overlay.is_object() {
            return Err(vec![problem(
                "(top level)",
                format!("the overlay is {}, not an object", kind(overlay)),
                "send a JSON object in the configuration file's shape, e.g. \
                 {\"llm\": {\"model\": \"qwen3:8b\"}}",
            )]);
        }
        let mut merged = self.redacted_value();
        merge(&mut merged, overlay.clone(), &mut Vec::new());
        let mut config = typed_all(merged).map_err(|(mut found, other)| {
            found.extend(
                other.map(|other| problem("(top level)", other.to_string(), "correct the overlay")),
            );
            found
        })?;
        absolutize(&mut config, &self.root);
        config.root = self.root.clone();
        config.safety.apply(&mut config.tools);
        let mut problems = self.restore_secrets(&mut config);
        problems.extend(config.check().into_iter().map(|check| Problem {
            origin: Origin::Overlay,
            field: check.field.join("."),
            message: check.message,
            fix: check.fix,
        }));
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(problems)
        }
    }

    /// Puts this configuration's secrets back where `config` holds `***`; a `***` with no
    /// secret behind it is a problem.
    fn restore_secrets(&self, config: &mut Config) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut missing = |field: String| {
            problems.push(Problem {
                origin: Origin::Overlay,
                message: format!("is `{REDACTED}` but no secret is kept there"),
                field,
                fix: "give the secret itself (`***` only keeps a secret the configuration \
                      already has), or remove the field"
                    .into(),
            });
        };
        if is_redacted(config.llm.api_key.as_ref()) {
            config.llm.api_key = self.llm.api_key.clone();
            if config.llm.api_key.is_none() {
                missing("llm.api_key".into());
            }
        }
        // The store URL is shown with its password masked: the masked form keeps the URL.
        if let (Some(shown), Some(kept)) = (config.store.url.as_deref(), &self.store.url)
            && shown != kept
            && shown == maestro_protocol::mask_url_password(kept)
        {
            config.store.url = Some(kept.clone());
        }
        for (slug, server) in config.mcp.servers.iter_mut() {
            let base = self.mcp.servers.get(slug);
            let (values, base_values, key) = match server {
                McpServer::Stdio { env, .. } => (
                    env,
                    match base {
                        Some(McpServer::Stdio { env, .. }) => Some(env),
                        _ => None,
                    },
                    "env",
                ),
                McpServer::Http { headers, .. } => (
                    headers,
                    match base {
                        Some(McpServer::Http { headers, .. }) => Some(headers),
                        _ => None,
                    },
                    "headers",
                ),
            };
            for (name, value) in values.iter_mut() {
                if value.expose() != REDACTED {
                    continue;
                }
                match base_values.and_then(|b| b.get(name)) {
                    Some(kept) => *value = kept.clone(),
                    None => missing(format!("mcp.servers.{slug}.{key}.{name}")),
                }
            }
        }
        for (index, connection) in config.ssh.connections.iter_mut().enumerate() {
            let SshAuth::Password(SecretSource::Inline(password)) = &mut connection.auth else {
                continue;
            };
            if password.expose() != REDACTED {
                continue;
            }
            let kept = self
                .ssh
                .connections
                .iter()
                .find(|c| c.id == connection.id)
                .and_then(|c| match &c.auth {
                    SshAuth::Password(SecretSource::Inline(kept)) => Some(kept.clone()),
                    _ => None,
                });
            match kept {
                Some(kept) => *password = kept,
                None => missing(format!("ssh.connections.{index}.auth.password")),
            }
        }
        problems
    }
}

fn is_redacted(secret: Option<&Secret>) -> bool {
    secret.is_some_and(|s| s.expose() == REDACTED)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Reads `merged` as a configuration, finding every field whose value does not read, not only
/// the first: the field at fault is taken out and the rest read again (at most
/// [`MAX_PROBLEMS`] times). `Err` holds the problems found and, when reading stopped for
/// another reason, that error.
fn typed_all(mut merged: Value) -> Result<Config, (Vec<Problem>, Option<ConfigError>)> {
    let mut found: Vec<Problem> = Vec::new();
    loop {
        match typed(&merged, Origin::Overlay) {
            Ok(config) if found.is_empty() => return Ok(config),
            Ok(_) => return Err((found, None)),
            Err(ConfigError::Invalid(problem)) => {
                let again = found.len() + 1 < MAX_PROBLEMS
                    && !found.iter().any(|f| f.field == problem.field)
                    && remove_field(&mut merged, &problem.field);
                found.push(*problem);
                if !again {
                    return Err((found, None));
                }
            }
            Err(other) => return Err((found, Some(other))),
        }
    }
}

/// The most problems [`typed_all`] reports at once.
const MAX_PROBLEMS: usize = 50;

/// Takes the field at `path` (`engine.foo`, `workers[0].classes`; a key may hold dots itself,
/// as a model's name does) out of `value`; false when there is no such field.
fn remove_field(value: &mut Value, path: &str) -> bool {
    match value {
        Value::Object(map) => {
            if map.remove(path).is_some() {
                return true;
            }
            let keys: Vec<String> = map
                .keys()
                .filter(|key| {
                    path.strip_prefix(key.as_str())
                        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
                })
                .cloned()
                .collect();
            keys.into_iter().any(|key| {
                let rest = &path[key.len()..];
                let rest = rest.strip_prefix('.').unwrap_or(rest);
                map.get_mut(&key)
                    .is_some_and(|inner| remove_field(inner, rest))
            })
        }
        // Inside a list, only a field of an item is taken out: taking an item itself would
        // renumber the items after it, and their problems' fields with them.
        Value::Array(items) => path
            .strip_prefix('[')
            .and_then(|p| p.split_once(']'))
            .and_then(|(index, rest)| Some((index.parse::<usize>().ok()?, rest)))
            .filter(|(_, rest)| !rest.is_empty())
            .is_some_and(|(index, rest)| {
                let rest = rest.strip_prefix('.').unwrap_or(rest);
                items
                    .get_mut(index)
                    .is_some_and(|item| remove_field(item, rest))
            }),
        _ => false,
    }
}

/// Deep merge of JSON: objects merge key by key; anything else, lists included, is replaced.
/// An MCP server is replaced whole, as when files merge: mixing a `command` server with a `url`
/// one makes neither.
fn merge(base: &mut Value, over: Value, path: &mut Vec<String>) {
    let atomic = matches!(path.as_slice(), [a, b, _] if a == "mcp" && b == "servers");
    match (base, over) {
        (Value::Object(base), Value::Object(over)) if !atomic => {
            for (key, value) in over {
                path.push(key.clone());
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value, path),
                    None => {
                        base.insert(key, value);
                    }
                }
                path.pop();
            }
        }
        (base, over) => *base = over,
    }
}
