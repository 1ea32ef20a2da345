//! The configuration as a person may see it (`maestro config show`, the server's settings page):
//! every field, every secret replaced by `***`.

use maestro_tools_mcp::McpServer;
use maestro_tools_ssh::{SecretSource, SshAuth, SshConnection};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::Config;

/// What every secret is shown as.
pub const REDACTED: &str = "***";

impl Config {
    /// The configuration as JSON with secrets (API key, MCP `env`/`headers` values, SSH
    /// passwords, the store URL's password) shown as `***`.
    pub fn redacted_value(&self) -> Value {
        json!({
            "llm": to_value(&self.llm),
            "engine": to_value(&self.engine),
            "tools": to_value(&self.tools),
            "web": to_value(&self.web),
            "mcp": {
                "servers": self.mcp.servers.iter()
                    .map(|(slug, server)| (slug.clone(), mcp_server(server)))
                    .collect::<Map<String, Value>>(),
                "startup_timeout_secs": self.mcp.startup_timeout_secs,
                "call_timeout_secs": self.mcp.call_timeout_secs,
            },
            "ssh": {"connections": self.ssh.connections.iter().map(ssh_connection).collect::<Vec<_>>()},
            "paths": to_value(&self.paths),
            "safety": to_value(&self.safety),
            "store": {"url": self.store.url.as_deref().map(maestro_protocol::mask_url_password)},
            "workers": to_value(&self.workers),
            "subtasks": to_value(&self.subtasks),
            "auth": to_value(&self.auth),
            "files": to_value(&self.files),
            "gateway": to_value(&self.gateway),
            "knowledge": to_value(&self.knowledge),
        })
    }

    /// [`Config::redacted_value`] as YAML, in the configuration file's own shape.
    pub fn redacted_yaml(&self) -> String {
        let value = self.redacted_value();
        serde_saphyr::to_string(&value).unwrap_or_else(|_| format!("{value:#}"))
    }
}

fn to_value(section: &impl Serialize) -> Value {
    serde_json::to_value(section).unwrap_or(Value::Null)
}

fn redacted_map<'a>(keys: impl Iterator<Item = &'a String>) -> Map<String, Value> {
    keys.map(|k| (k.clone(), Value::from(REDACTED))).collect()
}

fn mcp_server(server: &McpServer) -> Value {
    match server {
        McpServer::Stdio {
            command,
            args,
            env,
            cwd,
        } => json!({
            "command": command, "args": args, "env": redacted_map(env.keys()), "cwd": cwd,
        }),
        McpServer::Http { url, headers } => {
            json!({"url": url, "headers": redacted_map(headers.keys())})
        }
    }
}

fn ssh_connection(c: &SshConnection) -> Value {
    let auth = match &c.auth {
        SshAuth::Key { path, passphrase } => match passphrase {
            None => json!({"key": path}),
            Some(SecretSource::Env(var)) => json!({"key": path, "key_passphrase_env": var}),
            Some(SecretSource::Inline(_)) => json!({"key": path, "key_passphrase": REDACTED}),
        },
        SshAuth::Password(SecretSource::Inline(_)) => json!({"password": REDACTED}),
        SshAuth::Password(SecretSource::Env(var)) => json!({"password_env": var}),
    };
    json!({
        "id": c.id.to_string(), "name": c.name, "host": c.host, "port": c.port, "user": c.user,
        "auth": auth, "owner": c.owner, "known_host_key": c.known_host_key,
        "insecure_accept_any_host_key": c.insecure_accept_any_host_key,
    })
}
