//! Why an SSH tool call failed. Every message is a sentence the model can act on; none carries a
//! login secret.

use std::path::PathBuf;

use super::access::AccessError;
use super::registry::MissingSecret;
use maestro_tools::WorkspaceError;
use maestro_tools::workspace_file::FileError;

type SftpError = russh_sftp::client::error::Error;

/// Why connecting, running a command or moving a file over SSH failed.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error(transparent)]
    Access(#[from] AccessError),
    #[error(
        "known_host_key of SSH connection {id} is neither an OpenSSH public key line nor a SHA256: fingerprint ({source})"
    )]
    InvalidKnownHostKey {
        id: String,
        #[source]
        source: russh::keys::ssh_key::Error,
    },
    #[error("connecting to {target} timed out after {secs}s")]
    ConnectTimeout { target: String, secs: u64 },
    #[error(
        "SSH connection {id} has no known_host_key, so {target} cannot be verified; the server presented {key}. After checking that fingerprint out of band, set known_host_key to it (or insecure_accept_any_host_key: true for a throwaway host)"
    )]
    HostKeyUnknown {
        id: String,
        target: String,
        key: String,
    },
    #[error(
        "host key verification failed for {target}: the server presented {key}, which does not match known_host_key of connection {id}; refusing to connect"
    )]
    HostKeyMismatch {
        id: String,
        target: String,
        key: String,
    },
    #[error("cannot connect to {target}: {source}")]
    Connect {
        target: String,
        #[source]
        source: russh::Error,
    },
    #[error("authentication at {0} timed out")]
    AuthTimeout(String),
    #[error("authentication as {user} at {target} was rejected")]
    AuthRejected { user: String, target: String },
    #[error(transparent)]
    Secret(#[from] MissingSecret),
    #[error("cannot load the private key {}: {source}", path.display())]
    LoadKey {
        path: PathBuf,
        #[source]
        source: russh::keys::Error,
    },
    #[error("key exchange failed: {0}")]
    KeyExchange(#[source] russh::Error),
    #[error("authentication failed: {0}")]
    Auth(#[source] russh::Error),
    #[error("cannot open a channel: {0}")]
    Channel(#[source] russh::Error),
    #[error("cannot start the command: {0}")]
    Start(#[source] russh::Error),
    #[error("the server refused the sftp subsystem: {0}")]
    Subsystem(#[source] russh::Error),
    #[error("cannot start SFTP: {0}")]
    Sftp(#[source] SftpError),
    #[error("cancelled")]
    Cancelled,
    /// An error's text with the login secrets removed; its source is dropped with them.
    #[error("{0}")]
    Scrubbed(String),
    #[error("the command is empty")]
    EmptyCommand,
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    File(#[from] FileError),
    #[error("cannot read {path}: {source}")]
    ReadLocal {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    WriteLocal {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is {size} bytes; the limit is {limit}")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{path} grew past the {limit}-byte limit")]
    GrewTooLarge { path: String, limit: u64 },
    #[error("cannot create {path} on the server: {source}")]
    RemoteCreate {
        path: String,
        #[source]
        source: SftpError,
    },
    #[error("cannot stat {path} on the server: {source}")]
    RemoteStat {
        path: String,
        #[source]
        source: SftpError,
    },
    #[error("cannot open {path} on the server: {source}")]
    RemoteOpen {
        path: String,
        #[source]
        source: SftpError,
    },
    #[error("{0} is a directory; SshDownload moves one file")]
    RemoteDirectory(String),
    #[error("uploading to {path} failed: {source}")]
    Upload {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("closing {path} failed: {source}")]
    CloseRemote {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("downloading {path} failed: {source}")]
    Download {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{0} is outside input/; this movement has edit: false, so SshDownload may only write under input/"
    )]
    OutsideInput(String),
}
