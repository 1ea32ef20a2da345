//! A real OpenSSH server for tests: throwaway host and user keys (plus a spare key, `other_key`,
//! for "wrong key" cases), a config listening on a free loopback port with password and key
//! authentication and SFTP, and a guard that stops the server when the test ends.
//!
//! Needs `/usr/sbin/sshd` and `ssh-keygen` (Debian `openssh-server`). Tests that start it carry
//! `#[cfg_attr(no_sshd, ignore = "…")]` (set by `maestro_buildcheck::check_sshd`), so on a
//! machine without them they show as ignored, and where they are installed they run; a server
//! that then fails to start is a test failure that names the cause, never a silent skip.

// Test support: a failure to set up the server should stop the test with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `sshd`; killed on drop.
#[derive(Debug)]
pub struct Sshd {
    dir: tempfile::TempDir,
    /// The loopback port the server listens on (`127.0.0.1`).
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

impl Sshd {
    /// Starts the server and waits (up to 10 s) until it listens.
    pub fn start() -> Sshd {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(
            sshd.exists(),
            "/usr/sbin/sshd is missing: apt-get install openssh-server"
        );
        std::fs::create_dir_all("/run/sshd").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for key in ["host_key", "user_key", "other_key"] {
            keygen(&d.join(key));
        }
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
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
        // Built before waiting, so that a server that never listens is still stopped.
        let server = Sshd { dir, port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// A path in the server's private directory: its keys (`user_key`, `host_key.pub`, …) and
    /// the "remote" side of SFTP tests.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The host's public key line (`ssh-ed25519 AAAA… maestro-test`).
    pub fn host_key_line(&self) -> String {
        std::fs::read_to_string(self.path("host_key.pub"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// The host key's `SHA256:…` fingerprint as ssh-keygen prints it.
    pub fn host_fingerprint(&self) -> String {
        let out = Command::new("ssh-keygen")
            .args(["-l", "-E", "sha256", "-f"])
            .arg(self.path("host_key.pub"))
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        text.split_whitespace().nth(1).unwrap().to_string()
    }

    /// The user the tests log in as (whoever runs them).
    pub fn user() -> String {
        let out = Command::new("id").arg("-un").output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }
}
