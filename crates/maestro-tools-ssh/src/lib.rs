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

use maestro_tools::Tool;
use maestro_tools::catalog::{ToolCatalog, available, unavailable};
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

/// The SSH tools' names.
pub const TOOLS: &[&str] = &["SshExec", "SshUpload", "SshDownload"];

/// Adds the SSH tools to the piece validator's `catalog`: available when `connections` (the
/// number of `ssh.connections`) is not zero.
pub fn add_to_catalog(catalog: &mut ToolCatalog, connections: usize) {
    if connections == 0 {
        unavailable(
            catalog,
            TOOLS,
            "no SSH connections are configured; add them under `ssh.connections` in .maestro/config.yaml",
        );
    } else {
        available(catalog, TOOLS);
    }
}
