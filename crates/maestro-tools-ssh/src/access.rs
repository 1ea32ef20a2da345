//! Which connection a movement may use: `allowed_ssh_connections` exactly as the piece schema
//! defines it, plus the ownership check that even `'*'` does not skip.

use std::fmt;

use uuid::Uuid;

use super::registry::{SshConnection, SshRegistry};

/// Why a connection was refused. `code()` is the stable identifier the piece schema names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessError {
    /// `allowed_ssh_connections` is omitted or `[]`.
    NoAllowedConnectionsDeclared,
    /// The id is not in the movement's list.
    ConnectionNotAllowed {
        /// The connection id the model asked for.
        id: String,
    },
    /// The id is allowed but no such connection is registered.
    UnknownConnection {
        /// The connection id the model asked for.
        id: String,
    },
    /// The connection belongs to another user than the run's owner.
    ConnectionNotOwned {
        /// The connection id the model asked for.
        id: String,
    },
}

impl AccessError {
    /// The stable identifier of the refusal (`connection_not_allowed`, ...), which starts the
    /// message the model reads.
    pub fn code(&self) -> &'static str {
        match self {
            AccessError::NoAllowedConnectionsDeclared => "no_allowed_connections_declared",
            AccessError::ConnectionNotAllowed { .. } => "connection_not_allowed",
            AccessError::UnknownConnection { .. } => "unknown_connection",
            AccessError::ConnectionNotOwned { .. } => "connection_not_owned",
        }
    }
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            AccessError::NoAllowedConnectionsDeclared => write!(
                f,
                "{code}: this movement declares no allowed_ssh_connections, so SSH tools may not \
                 be used here"
            ),
            AccessError::ConnectionNotAllowed { id } => write!(
                f,
                "{code}: connection {id} is not in this movement's allowed_ssh_connections"
            ),
            AccessError::UnknownConnection { id } => {
                write!(f, "{code}: no SSH connection with id {id} is registered")
            }
            AccessError::ConnectionNotOwned { id } => {
                write!(f, "{code}: connection {id} belongs to another user")
            }
        }
    }
}

impl std::error::Error for AccessError {}

/// Picks the connection `requested` if the movement's list and the owner allow it.
///
/// Order matters: an id outside the list is `connection_not_allowed` whether or not it exists,
/// so a movement cannot probe which connections are registered.
pub fn authorize<'r>(
    registry: &'r SshRegistry,
    allowed: Option<&[String]>,
    run_owner: Option<&str>,
    requested: &str,
) -> Result<&'r SshConnection, AccessError> {
    let allowed = match allowed {
        None | Some([]) => return Err(AccessError::NoAllowedConnectionsDeclared),
        Some(list) => list,
    };
    let requested = requested.trim().to_ascii_lowercase();
    let listed = allowed.iter().any(|entry| {
        let entry = entry.trim();
        entry == "*" || entry.eq_ignore_ascii_case(&requested)
    });
    if !listed {
        return Err(AccessError::ConnectionNotAllowed { id: requested });
    }
    let connection = Uuid::parse_str(&requested)
        .ok()
        .and_then(|id| registry.get(&id))
        .ok_or_else(|| AccessError::UnknownConnection {
            id: requested.clone(),
        })?;
    if let (Some(owner), Some(run_owner)) = (&connection.owner, run_owner)
        && owner != run_owner
    {
        return Err(AccessError::ConnectionNotOwned { id: requested });
    }
    Ok(connection)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::registry::{SecretSource, SshAuth};
    use maestro_protocol::Secret;

    const A: &str = "6f9619ff-8b86-d011-b42d-00c04fc964ff";
    const B: &str = "7a8b9cde-1234-4567-89ab-cdef12345678";
    const UNREGISTERED: &str = "11111111-2222-4333-8444-555555555555";

    fn registry() -> SshRegistry {
        let conn = |id: &str, owner: Option<&str>| SshConnection {
            id: Uuid::parse_str(id).unwrap(),
            name: id[..4].to_string(),
            host: "127.0.0.1".into(),
            port: 22,
            user: "u".into(),
            auth: SshAuth::Password(SecretSource::Inline(Secret::new("pw"))),
            owner: owner.map(str::to_string),
            known_host_key: None,
            insecure_accept_any_host_key: false,
        };
        SshRegistry::new(vec![conn(A, None), conn(B, Some("alice"))]).unwrap()
    }

    /// The id of the connection granted, or the code of the refusal.
    fn check(
        allowed: Option<&[&str]>,
        owner: Option<&str>,
        id: &str,
    ) -> Result<String, &'static str> {
        let list: Option<Vec<String>> = allowed.map(|l| l.iter().map(|s| s.to_string()).collect());
        authorize(&registry(), list.as_deref(), owner, id)
            .map(|c| c.id.to_string())
            .map_err(|e| e.code())
    }

    #[test]
    fn allowlist_rules() {
        let denied = Err("no_allowed_connections_declared");
        assert_eq!(check(None, None, A), denied);
        assert_eq!(check(Some(&[]), None, A), denied);
        assert_eq!(check(Some(&[A]), None, A), Ok(A.to_string()));
        assert_eq!(
            check(Some(&[A]), None, &A.to_uppercase()),
            Ok(A.to_string())
        );
        assert_eq!(check(Some(&[A]), None, B), Err("connection_not_allowed"));
        assert_eq!(
            check(Some(&[A]), None, UNREGISTERED),
            Err("connection_not_allowed")
        );
        assert_eq!(
            check(Some(&[UNREGISTERED]), None, UNREGISTERED),
            Err("unknown_connection")
        );
        assert_eq!(check(Some(&["*"]), None, B), Ok(B.to_string()));
        assert_eq!(
            check(Some(&["*"]), None, UNREGISTERED),
            Err("unknown_connection")
        );
        assert_eq!(check(Some(&["*"]), Some("alice"), B), Ok(B.to_string()));
        assert_eq!(
            check(Some(&["*"]), Some("bob"), B),
            Err("connection_not_owned")
        );
        assert_eq!(
            check(Some(&[B]), Some("bob"), B),
            Err("connection_not_owned")
        );
        assert_eq!(check(Some(&["*"]), Some("bob"), A), Ok(A.to_string()));
    }
}
