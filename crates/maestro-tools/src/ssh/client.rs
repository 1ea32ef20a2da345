//! Opening an SSH session to a registered connection (host key verified, then authenticated)
//! and the two things the tools do with it: run a command, and open SFTP.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use maestro_protocol::Secret;
use russh::ChannelMsg;
use russh::client::{self, Handle};
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use russh_sftp::client::SftpSession;
use tokio_util::sync::CancellationToken;

use super::registry::{SecretSource, SshAuth, SshConnection};

/// What the server's host key must be.
enum ExpectedHostKey {
    /// `insecure_accept_any_host_key: true`.
    Any,
    Fingerprint(String),
    Key(PublicKey),
    /// Nothing configured: refuse, and report what the server presented.
    Unknown,
}

struct HostKeyCheck {
    expected: ExpectedHostKey,
    /// The key the server presented (`ssh-ed25519 SHA256:...`), for the error message.
    seen: Arc<Mutex<Option<String>>>,
}

impl client::Handler for HostKeyCheck {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key,
            PublicKeyOrCertificate::Certificate(_) => {
                return Ok(matches!(self.expected, ExpectedHostKey::Any));
            }
        };
        let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
        if let Ok(mut seen) = self.seen.lock() {
            *seen = Some(format!("{} {fingerprint}", key.algorithm().as_str()));
        }
        Ok(match &self.expected {
            ExpectedHostKey::Any => true,
            ExpectedHostKey::Fingerprint(want) => {
                want.trim_end_matches('=') == fingerprint.trim_end_matches('=')
            }
            ExpectedHostKey::Key(want) => want.key_data() == key.key_data(),
            ExpectedHostKey::Unknown => false,
        })
    }
}

fn expected_host_key(conn: &SshConnection) -> Result<ExpectedHostKey, String> {
    if conn.insecure_accept_any_host_key {
        return Ok(ExpectedHostKey::Any);
    }
    let Some(known) = conn.known_host_key.as_deref().map(str::trim) else {
        return Ok(ExpectedHostKey::Unknown);
    };
    if known.starts_with("SHA256:") {
        return Ok(ExpectedHostKey::Fingerprint(known.to_string()));
    }
    PublicKey::from_openssh(known)
        .map(ExpectedHostKey::Key)
        .map_err(|e| {
            format!(
                "known_host_key of SSH connection {} is neither an OpenSSH public key line nor a \
             SHA256: fingerprint ({e})",
                conn.id
            )
        })
}

/// An authenticated session. Dropping it closes the connection.
pub(crate) struct SshSession {
    handle: Handle<HostKeyCheck>,
    /// Secrets used to log in, scrubbed from everything this session reports.
    secrets: Vec<Secret>,
}

/// What a remote command produced.
pub(crate) struct ExecResult {
    pub exit_code: Option<u32>,
    pub signal: Option<String>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
    pub timed_out: bool,
}

pub(crate) async fn connect(conn: &SshConnection, timeout: Duration) -> Result<SshSession, String> {
    let expected = expected_host_key(conn)?;
    let unknown = matches!(expected, ExpectedHostKey::Unknown);
    let seen = Arc::new(Mutex::new(None));
    let handler = HostKeyCheck {
        expected,
        seen: Arc::clone(&seen),
    };
    let config = Arc::new(client::Config {
        inactivity_timeout: Some(Duration::from_secs(600)),
        ..client::Config::default()
    });
    let target = format!("{}:{}", conn.host, conn.port);
    let connecting = client::connect(config, (conn.host.as_str(), conn.port), handler);
    let mut handle = match tokio::time::timeout(timeout, connecting).await {
        Err(_) => {
            return Err(format!(
                "connecting to {target} timed out after {}s",
                timeout.as_secs()
            ));
        }
        Ok(Ok(handle)) => handle,
        Ok(Err(e)) => {
            let presented = seen.lock().ok().and_then(|s| s.clone());
            return Err(match (presented, unknown) {
                (Some(key), true) => format!(
                    "SSH connection {} has no known_host_key, so {target} cannot be verified; \
                     the server presented {key}. After checking that fingerprint out of band, \
                     set known_host_key to it (or insecure_accept_any_host_key: true for a \
                     throwaway host)",
                    conn.id
                ),
                (Some(key), false) if matches!(e, russh::Error::UnknownKey) => format!(
                    "host key verification failed for {target}: the server presented {key}, \
                     which does not match known_host_key of connection {}; refusing to connect",
                    conn.id
                ),
                _ => format!("cannot connect to {target}: {e}"),
            });
        }
    };
    let mut secrets = Vec::new();
    let authenticated =
        match tokio::time::timeout(timeout, authenticate(&mut handle, conn, &mut secrets)).await {
            Err(_) => Err(format!("authentication at {target} timed out")),
            Ok(result) => result,
        };
    let scrub = |text: String| secrets.iter().fold(text, |t, s| s.redact(&t));
    match authenticated {
        Ok(true) => Ok(SshSession { handle, secrets }),
        Ok(false) => Err(format!(
            "authentication as {} at {target} was rejected",
            conn.user
        )),
        Err(e) => Err(scrub(e)),
    }
}

async fn authenticate(
    handle: &mut Handle<HostKeyCheck>,
    conn: &SshConnection,
    secrets: &mut Vec<Secret>,
) -> Result<bool, String> {
    let result = match &conn.auth {
        SshAuth::Key { path, passphrase } => {
            let passphrase = passphrase
                .as_ref()
                .map(SecretSource::resolve)
                .transpose()
                .map_err(|e| e.to_string())?;
            if let Some(p) = &passphrase {
                secrets.push(p.clone());
            }
            let key =
                russh::keys::load_secret_key(path, passphrase.as_ref().map(Secret::expose))
                    .map_err(|e| format!("cannot load the private key {}: {e}", path.display()))?;
            let hash = handle
                .best_supported_rsa_hash()
                .await
                .map_err(|e| format!("key exchange failed: {e}"))?
                .flatten();
            handle
                .authenticate_publickey(&conn.user, PrivateKeyWithHashAlg::new(Arc::new(key), hash))
                .await
        }
        SshAuth::Password(source) => {
            let password = source.resolve().map_err(|e| e.to_string())?;
            secrets.push(password.clone());
            handle
                .authenticate_password(&conn.user, password.expose())
                .await
        }
    };
    result
        .map(|r| r.success())
        .map_err(|e| format!("authentication failed: {e}"))
}

impl SshSession {
    /// Removes every login secret from `text`.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.secrets
            .iter()
            .fold(text.to_string(), |t, s| s.redact(&t))
    }

    /// Runs `command`, keeping at most `cap` bytes of each stream.
    pub(crate) async fn exec(
        &self,
        command: &str,
        timeout: Duration,
        cap: usize,
        cancel: &CancellationToken,
    ) -> Result<ExecResult, String> {
        let mut channel = self
            .handle
            .channel_open_session()
            .await
            .map_err(|e| format!("cannot open a channel: {e}"))?;
        channel
            .exec(true, command)
            .await
            .map_err(|e| format!("cannot start the command: {e}"))?;
        let mut result = ExecResult {
            exit_code: None,
            signal: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            truncated: false,
            timed_out: false,
        };
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            let msg = tokio::select! {
                msg = channel.wait() => msg,
                () = &mut deadline => { result.timed_out = true; break; }
                () = cancel.cancelled() => {
                    let _ = channel.close().await;
                    return Err("cancelled".to_string());
                }
            };
            match msg {
                None => break,
                Some(ChannelMsg::Data { data }) => {
                    append(&mut result.stdout, &data, cap, &mut result.truncated)
                }
                Some(ChannelMsg::ExtendedData { data, ext: 1 }) => {
                    append(&mut result.stderr, &data, cap, &mut result.truncated);
                }
                Some(ChannelMsg::ExitStatus { exit_status }) => {
                    result.exit_code = Some(exit_status)
                }
                Some(ChannelMsg::ExitSignal { signal_name, .. }) => {
                    result.signal = Some(format!("{signal_name:?}"));
                }
                Some(_) => {}
            }
        }
        let _ = channel.close().await;
        Ok(result)
    }

    /// Opens the SFTP subsystem.
    pub(crate) async fn sftp(&self) -> Result<SftpSession, String> {
        let channel = self
            .handle
            .channel_open_session()
            .await
            .map_err(|e| format!("cannot open a channel: {e}"))?;
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(|e| format!("the server refused the sftp subsystem: {e}"))?;
        SftpSession::new(channel.into_stream())
            .await
            .map_err(|e| format!("cannot start SFTP: {e}"))
    }

    pub(crate) async fn close(self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }
}

fn append(buf: &mut Vec<u8>, data: &[u8], cap: usize, truncated: &mut bool) {
    let room = cap.saturating_sub(buf.len());
    if data.len() > room {
        *truncated = true;
    }
    buf.extend_from_slice(&data[..data.len().min(room)]);
}
