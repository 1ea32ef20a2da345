//! The registry of SSH connections an operator has declared: where each one goes, how it
//! authenticates (secrets stay wrapped in [`Secret`]) and how its host key is verified.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use maestro_protocol::Secret;
use serde::{Deserialize, Deserializer};
use uuid::Uuid;

/// One declared connection. `Debug` never shows a password or key contents.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshConnection {
    /// The id pieces list in `allowed_ssh_connections`.
    pub id: Uuid,
    /// A short human name shown in tool output.
    pub name: String,
    /// The server's host name or address.
    pub host: String,
    /// The server's port (default 22).
    #[serde(default = "default_port")]
    pub port: u16,
    /// The user to log in as.
    pub user: String,
    /// How to log in: `key` (with an optional `key_passphrase_env`), `password` or
    /// `password_env`.
    pub auth: SshAuth,
    /// The user who owns this connection. When both it and the run's owner are set they must
    /// match, even under `allowed_ssh_connections: ['*']`.
    #[serde(default)]
    pub owner: Option<String>,
    /// The server's host key: an OpenSSH public key line (`ssh-ed25519 AAAA...`) or its SHA-256
    /// fingerprint (`SHA256:...`). Without it the connection is refused (and the error shows the
    /// fingerprint the server presented) unless `insecure_accept_any_host_key` is true.
    #[serde(default)]
    pub known_host_key: Option<String>,
    /// Skip host key verification. Exposes the connection to a man in the middle; meant for
    /// throwaway lab hosts only.
    #[serde(default)]
    pub insecure_accept_any_host_key: bool,
}

fn default_port() -> u16 {
    22
}

/// How a connection authenticates.
#[derive(Debug, Clone, PartialEq)]
pub enum SshAuth {
    /// A private key file (OpenSSH format), optionally protected by a passphrase.
    Key {
        /// The private key file (`auth.key`).
        path: PathBuf,
        /// Where its passphrase comes from (`auth.key_passphrase_env`); `None` for a key
        /// without one.
        passphrase: Option<SecretSource>,
    },
    /// A password.
    Password(SecretSource),
}

/// Where a secret comes from: written in the configuration, or read from an environment
/// variable when the connection is opened.
#[derive(Debug, Clone, PartialEq)]
pub enum SecretSource {
    /// Written in the configuration (`auth.password`).
    Inline(Secret),
    /// Read from this environment variable when the connection is opened
    /// (`auth.password_env`, `auth.key_passphrase_env`).
    Env(String),
}

impl SecretSource {
    /// The secret, reading the environment variable if that is where it lives.
    pub fn resolve(&self) -> Result<Secret, MissingSecret> {
        match self {
            SecretSource::Inline(secret) => Ok(secret.clone()),
            SecretSource::Env(var) => {
                std::env::var(var)
                    .map(Secret::new)
                    .map_err(|source| MissingSecret {
                        var: var.clone(),
                        source,
                    })
            }
        }
    }
}

/// The environment variable that should hold a secret is not set (or not Unicode).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the environment variable {var} holding the secret is not set")]
pub struct MissingSecret {
    /// The variable's name; set it in Maestro's environment.
    pub var: String,
    /// Whether it is missing or not Unicode.
    #[source]
    pub source: std::env::VarError,
}

/// Why the declared SSH connections cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SshRegistryError {
    /// Two connections share an id.
    #[error("SSH connection id {0} is declared twice")]
    DuplicateId(Uuid),
    /// The connections file cannot be read.
    #[error("cannot read SSH connections from {}: {source}", path.display())]
    Read {
        /// The connections file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The connections file is not the expected JSON.
    #[error("{}:{}:{}: {source}", path.display(), source.line(), source.column())]
    Parse {
        /// The connections file.
        path: PathBuf,
        /// What is wrong, with its line and column.
        #[source]
        source: serde_json::Error,
    },
    /// The connections file declares something the registry refuses.
    #[error("{}: {source}", path.display())]
    InFile {
        /// The connections file.
        path: PathBuf,
        /// What it declares wrongly.
        #[source]
        source: Box<SshRegistryError>,
    },
}

/// The configuration form of [`SshAuth`]: exactly one of `key`, `password`, `password_env`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthFields {
    key: Option<PathBuf>,
    key_passphrase_env: Option<String>,
    password: Option<String>,
    password_env: Option<String>,
}

impl<'de> Deserialize<'de> for SshAuth {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let f = AuthFields::deserialize(deserializer)?;
        let passphrase = f.key_passphrase_env.map(SecretSource::Env);
        match (f.key, f.password, f.password_env) {
            (Some(path), None, None) => Ok(SshAuth::Key { path, passphrase }),
            (None, Some(pw), None) if passphrase.is_none() => {
                Ok(SshAuth::Password(SecretSource::Inline(Secret::new(pw))))
            }
            (None, None, Some(var)) if passphrase.is_none() => {
                Ok(SshAuth::Password(SecretSource::Env(var)))
            }
            _ => Err(serde::de::Error::custom(
                "auth needs exactly one of `key: <private key path>` (with optional \
                 `key_passphrase_env`), `password: <password>` or `password_env: <VARIABLE>`",
            )),
        }
    }
}

/// All declared connections, by id.
#[derive(Debug, Clone, Default)]
pub struct SshRegistry {
    connections: BTreeMap<Uuid, SshConnection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistryFile {
    connections: Vec<SshConnection>,
}

impl SshRegistry {
    /// Builds the registry, refusing duplicate ids.
    pub fn new(connections: Vec<SshConnection>) -> Result<Self, SshRegistryError> {
        let mut map = BTreeMap::new();
        for c in connections {
            let id = c.id;
            if map.insert(id, c).is_some() {
                return Err(SshRegistryError::DuplicateId(id));
            }
        }
        Ok(SshRegistry { connections: map })
    }

    /// Reads `{"connections": [...]}` from a JSON file.
    pub fn load(path: &Path) -> Result<Self, SshRegistryError> {
        let text = std::fs::read_to_string(path).map_err(|source| SshRegistryError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file: RegistryFile =
            serde_json::from_str(&text).map_err(|source| SshRegistryError::Parse {
                path: path.to_path_buf(),
                source,
            })?;
        Self::new(file.connections).map_err(|e| SshRegistryError::InFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    }

    /// The connection with this id, if one is declared.
    pub fn get(&self, id: &Uuid) -> Option<&SshConnection> {
        self.connections.get(id)
    }

    /// Every declared connection, in id order.
    pub fn iter(&self) -> impl Iterator<Item = &SshConnection> {
        self.connections.values()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn parses_auth_forms_and_hides_secrets() {
        let json = r#"{"connections": [
            {"id": "6f9619ff-8b86-d011-b42d-00c04fc964ff", "name": "a", "host": "h", "user": "u",
             "auth": {"password": "hunter2-secret"}},
            {"id": "7a8b9cde-1234-4567-89ab-cdef12345678", "name": "b", "host": "h", "port": 2222,
             "user": "u", "auth": {"key": "/k", "key_passphrase_env": "PP"}, "owner": "alice"}
        ]}"#;
        let file: RegistryFile = serde_json::from_str(json).unwrap();
        let reg = SshRegistry::new(file.connections).unwrap();
        let all: Vec<_> = reg.iter().collect();
        assert_eq!(all[0].port, 22);
        assert_eq!(
            all[1].auth,
            SshAuth::Key {
                path: "/k".into(),
                passphrase: Some(SecretSource::Env("PP".into()))
            }
        );
        assert!(!format!("{:?}", all[0]).contains("hunter2"));
        let bad = r#"{"id": "6f9619ff-8b86-d011-b42d-00c04fc964ff", "name": "a", "host": "h",
                      "user": "u", "auth": {"password": "x", "key": "/k"}}"#;
        let err = serde_json::from_str::<SshConnection>(bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("exactly one of"), "{err}");
    }

    #[test]
    fn a_duplicate_id_in_a_file_names_the_file_and_keeps_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ssh.json");
        let one = r#"{"id": "6f9619ff-8b86-d011-b42d-00c04fc964ff", "name": "a", "host": "h",
                      "user": "u", "auth": {"password": "x"}}"#;
        std::fs::write(&path, format!(r#"{{"connections": [{one}, {one}]}}"#)).unwrap();
        let error = SshRegistry::load(&path).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{}: SSH connection id 6f9619ff-8b86-d011-b42d-00c04fc964ff is declared twice",
                path.display()
            )
        );
        let cause = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(
            cause.as_deref(),
            Some("SSH connection id 6f9619ff-8b86-d011-b42d-00c04fc964ff is declared twice")
        );
    }
}
