//! A real OpenSSH server for the SSH tool tests: throwaway host and user keys, a config that
//! listens on a free loopback port, and a guard that stops the server when the test ends.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test binary uses part of it

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use maestro_tools::ssh::{self, SecretSource, SshAuth, SshConnection, SshRegistry};
use maestro_tools::{Tool, ToolContext, ToolOutput};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub const CONN: &str = "6f9619ff-8b86-d011-b42d-00c04fc964ff";

pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "maestro-test", "-f"])
        .arg(path)
        .status()
        .expect("ssh-keygen (package openssh-client) is needed for the SSH tests");
    assert!(status.success());
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Sshd {
    pub fn start() -> Sshd {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(
            sshd.exists(),
            "/usr/sbin/sshd is missing: apt-get install openssh-server"
        );
        std::fs::create_dir_all("/run/sshd").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("user_key"));
        keygen(&d.join("other_key"));
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        let port = free_port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\nPermitRootLogin yes\n\
             PasswordAuthentication yes\nKbdInteractiveAuthentication no\n\
             Subsystem sftp internal-sftp\nLogLevel ERROR\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let server = Sshd { dir, port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd did not listen on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn host_key_line(&self) -> String {
        std::fs::read_to_string(self.path("host_key.pub"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// `SHA256:...` as ssh-keygen prints it.
    pub fn host_fingerprint(&self) -> String {
        let out = Command::new("ssh-keygen")
            .args(["-l", "-E", "sha256", "-f"])
            .arg(self.path("host_key.pub"))
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        text.split_whitespace().nth(1).unwrap().to_string()
    }

    /// A connection to this server as the current user, with the user key and the real host key.
    pub fn connection(&self, id: &str) -> SshConnection {
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

pub fn current_user() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

pub fn password(secret: &str) -> SshAuth {
    SshAuth::Password(SecretSource::Inline(maestro_protocol::Secret::new(secret)))
}

pub struct Tools {
    pub tools: Vec<Arc<dyn Tool>>,
}

impl Tools {
    pub fn new(connections: Vec<SshConnection>, owner: Option<&str>) -> Tools {
        let registry = Arc::new(SshRegistry::new(connections).unwrap());
        Tools {
            tools: ssh::tools(registry, owner.map(str::to_string)),
        }
    }

    pub async fn call(
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
            edit,
            allowed_commands: None,
            allowed_ssh_connections: allowed.map(|l| l.iter().map(|s| s.to_string()).collect()),
            cancel: CancellationToken::new(),
            scratch: Default::default(),
        };
        tool.call(&ctx, input).await
    }
}
