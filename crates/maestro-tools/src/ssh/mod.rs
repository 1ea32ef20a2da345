//! SSH: the registry of connections an operator declared, and the `SshExec`, `SshUpload` and
//! `SshDownload` tools, which enforce the movement's `allowed_ssh_connections`.
//!
//! Host keys are verified on every connection: against `known_host_key` (a public key line or
//! a `SHA256:` fingerprint) when set. When it is not set the connection is refused and the
//! error shows the fingerprint the server presented, so an operator can pin it after checking
//! it; only `insecure_accept_any_host_key: true` skips the check, never silently.

mod access;
mod client;
mod error;
mod registry;
mod tools;

use std::sync::Arc;

pub use access::{AccessError, authorize};
pub use error::SshError;
pub use registry::{
    MissingSecret, SecretSource, SshAuth, SshConnection, SshRegistry, SshRegistryError,
};

use crate::Tool;
use tools::{SshAccess, SshDownload, SshExec, SshUpload};

/// The three SSH tools over `registry`, for runs owned by `owner` (a connection with an owner
/// is usable only by runs of that owner).
pub fn tools(registry: Arc<SshRegistry>, owner: Option<String>) -> Vec<Arc<dyn Tool>> {
    let access = Arc::new(SshAccess::new(registry, owner));
    vec![
        Arc::new(SshExec(Arc::clone(&access))),
        Arc::new(SshUpload(Arc::clone(&access))),
        Arc::new(SshDownload(access)),
    ]
}
