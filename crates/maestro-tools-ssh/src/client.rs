//! Opening an SSH session to a registered connection (host key verified, then authenticated)
//! and the two things the tools do with it: run a command, and open SFTP.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use maestro_protocol::Secret;
use maestro_tools::CancellationToken;
use russh::ChannelMsg;
use russh::client::{self, Handle};
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use russh_sftp::client::SftpSession;

use super::SshError;
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

fn expected_host_key(conn: &SshConnection) -> Result<ExpectedHostKey, SshError> {
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
        .map_err(|source| SshError::InvalidKnownHostKey {
            id: conn.id.to_string(),
            source,
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

pub(crate) async fn connect(
    conn: &SshConnection,
    timeout: Duration,
) -> Result<SshSession, SshError> {
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
            return Err(SshError::ConnectTimeout {
                target,
                secs: timeout.as_secs(),
            });
        }
        Ok(Ok(handle)) => handle,
        Ok(Err(e)) => {
            let presented = seen.lock().ok().and_then(|s| s.clone());
            let id = conn.id.to_string();
            return Err(match (presented, unknown) {
                (Some(key), true) => SshError::HostKeyUnknown { id, target, key },
                (Some(key), false) if matches!(e, russh::Error::UnknownKey) => {
                    SshError::HostKeyMismatch { id, target, key }
                }
                _ => SshError::Connect { target, source: e },
            });
        }
    };
    let mut secrets = Vec::new();
    let authenticated =
        match tokio::time::timeout(timeout, authenticate(&mut handle, conn, &mut secrets)).await {
            Err(_) => Err(SshError::AuthTimeout(target.clone())),
            Ok(result) => result,
        };
    match authenticated {
        Ok(true) => Ok(SshSession { handle, secrets }),
        Ok(false) => Err(SshError::AuthRejected {
            user: conn.user.clone(),
            target,
        }),
        Err(e) => Err(scrubbed(&secrets, e)),
    }
}

async fn authenticate(
    handle: &mut Handle<HostKeyCheck>,
    conn: &SshConnection,
    secrets: &mut Vec<Secret>,
) -> Result<bool, SshError> {
    let result = match &conn.auth {
        SshAuth::Key { path, passphrase } => {
            let passphrase = passphrase.as_ref().map(SecretSource::resolve).transpose()?;
            if let Some(p) = &passphrase {
                secrets.push(p.clone());
            }
            let key = russh::keys::load_secret_key(path, passphrase.as_ref().map(Secret::expose))
                .map_err(|source| SshError::LoadKey {
                path: path.clone(),
                source,
            })?;
            let hash = handle
                .best_supported_rsa_hash()
                .await
                .map_err(SshError::KeyExchange)?
                .flatten();
            handle
                .authenticate_publickey(&conn.user, PrivateKeyWithHashAlg::new(Arc::new(key), hash))
                .await
        }
        SshAuth::Password(source) => {
            let password = source.resolve()?;
            secrets.push(password.clone());
            handle
                .authenticate_password(&conn.user, password.expose())
                .await
        }
    };
    result.map(|r| r.success()).map_err(SshError::Auth)
}

/// `error` with every one of `secrets` removed from its text.
fn scrubbed(secrets: &[Secret], error: SshError) -> SshError {
    let text = error.to_string();
    let clean = secrets.iter().fold(text.clone(), |t, s| s.redact(&t));
    if clean == text {
        error
    } else {
        SshError::Scrubbed(clean)
    }
}

impl SshSession {
    /// Removes every login secret from `text`.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.secrets
            .iter()
            .fold(text.to_string(), |t, s| s.redact(&t))
    }

    /// `error`, with every login secret removed from its text.
    pub(crate) fn scrub_error(&self, error: SshError) -> SshError {
        scrubbed(&self.secrets, error)
    }

    /// Runs `command`, keeping at most `cap` bytes of each stream.
    pub(crate) async fn exec(
        &self,
        command: &str,
        timeout: Duration,
        cap: usize,
        cancel: &CancellationToken,
    ) -> Result<ExecResult, SshError> {
        let mut channel = self
            .handle
            .channel_open_session()
            .await
            .map_err(SshError::Channel)?;
        channel.exec(true, command).await.map_err(SshError::Start)?;
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
                    return Err(SshError::Cancelled);
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
    pub(crate) async fn sftp(&self) -> Result<SftpSession, SshError> {
        let channel = self
            .handle
            .channel_open_session()
            .await
            .map_err(SshError::Channel)?;
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(SshError::Subsystem)?;
        SftpSession::new(channel.into_stream())
            .await
            .map_err(SshError::Sftp)
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
