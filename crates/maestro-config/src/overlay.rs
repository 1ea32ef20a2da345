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
        let mut config = typed(&merged, Origin::Overlay).map_err(|e| match e {
            ConfigError::Invalid(problem) => vec![*problem],
            other => vec![problem(
                "(top level)",
                other.to_string(),
                "correct the overlay",
            )],
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
