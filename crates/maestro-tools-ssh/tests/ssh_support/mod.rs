//! SSH tool test support: connections to the shared test server (`maestro_testkit::Sshd`) and
//! a small harness that calls the SSH tools directly.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test binary uses part of it

use std::path::Path;
use std::sync::Arc;

use maestro_tools::{Tool, ToolContext, ToolOutput};
use maestro_tools_ssh::{SecretSource, SshAuth, SshConnection, SshRegistry};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub(crate) const CONN: &str = "6f9619ff-8b86-d011-b42d-00c04fc964ff";

pub(crate) use maestro_testkit::Sshd;

/// What the SSH tool tests need on top of the shared server.
pub(crate) trait SshdExt {
    fn connection(&self, id: &str) -> SshConnection;
}

impl SshdExt for Sshd {
    /// A connection to this server as the current user, with the user key and the real host key.
    fn connection(&self, id: &str) -> SshConnection {
        SshConnection {
            id: Uuid::parse_str(id).unwrap(),
            name: "test-sshd".into(),
            host: "127.0.0.1".into(),
            port: self.port,
            user: current_user(),
            auth: SshAuth::Key {
                path: self.path("user_key"),
                passphrase: None,
            },
            owner: None,
            known_host_key: Some(self.host_key_line()),
            insecure_accept_any_host_key: false,
        }
    }
}

pub(crate) fn current_user() -> String {
    Sshd::user()
}

pub(crate) fn password(secret: &str) -> SshAuth {
    SshAuth::Password(SecretSource::Inline(maestro_protocol::Secret::new(secret)))
}

pub(crate) struct Tools {
    pub tools: Vec<Arc<dyn Tool>>,
}

impl Tools {
    pub(crate) fn new(connections: Vec<SshConnection>, owner: Option<&str>) -> Tools {
        let registry = Arc::new(SshRegistry::new(connections).unwrap());
        Tools {
            tools: maestro_tools_ssh::tools(registry, owner.map(str::to_string)),
        }
    }

    pub(crate) async fn call(
        &self,
        name: &str,
        workspace: &Path,
        allowed: Option<&[&str]>,
        edit: bool,
        input: serde_json::Value,
    ) -> ToolOutput {
        let tool = self.tools.iter().find(|t| t.spec().name == name).unwrap();
        let ctx = ToolContext {
            workspace: workspace.to_path_buf(),
            workspace_kind: maestro_tools::WorkspaceKind::Job,
            edit,
            allowed_commands: None,
            allowed_ssh_connections: allowed.map(|l| l.iter().map(|s| s.to_string()).collect()),
            cancel: CancellationToken::new(),
            scratch: Default::default(),
        };
        tool.call(&ctx, input).await
    }
}
