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
    /// The movement may not use the connection it named.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// The connection's `known_host_key` is neither a public key line nor a fingerprint.
    #[error(
        "known_host_key of SSH connection {id} is neither an OpenSSH public key line nor a SHA256: fingerprint ({source})"
    )]
    InvalidKnownHostKey {
        /// The connection's id.
        id: String,
        /// Why it does not parse as a key.
        #[source]
        source: russh::keys::ssh_key::Error,
    },
    /// The server did not complete the connection and key exchange in time.
    #[error("connecting to {target} timed out after {secs}s")]
    ConnectTimeout {
        /// The server, as `host:port`.
        target: String,
        /// The time limit, in seconds.
        secs: u64,
    },
    /// The connection has no `known_host_key` and does not accept any host key.
    #[error(
        "SSH connection {id} has no known_host_key, so {target} cannot be verified; the server presented {key}. After checking that fingerprint out of band, set known_host_key to it (or insecure_accept_any_host_key: true for a throwaway host)"
    )]
    HostKeyUnknown {
        /// The connection's id.
        id: String,
        /// The server, as `host:port`.
        target: String,
        /// The key the server presented: its algorithm and SHA-256 fingerprint.
        key: String,
    },
    /// The server presented a host key other than `known_host_key`.
    #[error(
        "host key verification failed for {target}: the server presented {key}, which does not match known_host_key of connection {id}; refusing to connect"
    )]
    HostKeyMismatch {
        /// The connection's id.
        id: String,
        /// The server, as `host:port`.
        target: String,
        /// The key the server presented: its algorithm and SHA-256 fingerprint.
        key: String,
    },
    /// The connection failed (refused, unreachable, no common algorithm, ...).
    #[error("cannot connect to {target}: {source}")]
    Connect {
        /// The server, as `host:port`.
        target: String,
        /// The SSH library's error.
        #[source]
        source: russh::Error,
    },
    /// Logging in took longer than the time limit; holds the server as `host:port`.
    #[error("authentication at {0} timed out")]
    AuthTimeout(String),
    /// The server refused the key or the password.
    #[error("authentication as {user} at {target} was rejected")]
    AuthRejected {
        /// The user logged in as.
        user: String,
        /// The server, as `host:port`.
        target: String,
    },
    /// The environment variable holding the password or passphrase is not set.
    #[error(transparent)]
    Secret(#[from] MissingSecret),
    /// The private key file cannot be read or decrypted (a wrong passphrase included).
    #[error("cannot load the private key {}: {source}", path.display())]
    LoadKey {
        /// The key file (`auth.key`).
        path: PathBuf,
        /// Why it cannot be loaded.
        #[source]
        source: russh::keys::Error,
    },
    /// Asking the server which RSA signature hashes it supports failed.
    #[error("key exchange failed: {0}")]
    KeyExchange(#[source] russh::Error),
    /// The login exchange itself failed (not a rejection: the connection broke).
    #[error("authentication failed: {0}")]
    Auth(#[source] russh::Error),
    /// The server did not open a session channel.
    #[error("cannot open a channel: {0}")]
    Channel(#[source] russh::Error),
    /// The server did not start the command.
    #[error("cannot start the command: {0}")]
    Start(#[source] russh::Error),
    /// The server does not offer SFTP (or refused it).
    #[error("the server refused the sftp subsystem: {0}")]
    Subsystem(#[source] russh::Error),
    /// The SFTP session could not be set up.
    #[error("cannot start SFTP: {0}")]
    Sftp(#[source] SftpError),
    /// The run was cancelled while the command or the transfer was under way.
    #[error("cancelled")]
    Cancelled,
    /// An error's text with the login secrets removed; its source is dropped with them.
    #[error("{0}")]
    Scrubbed(String),
    /// SshExec was called with an empty or blank command.
    #[error("the command is empty")]
    EmptyCommand,
    /// The workspace cannot be opened, or a local path does not resolve inside it.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The local file cannot be read from or written into the workspace.
    #[error(transparent)]
    File(#[from] FileError),
    /// The local file to upload cannot be read.
    #[error("cannot read {path}: {source}")]
    ReadLocal {
        /// The local path, relative to the workspace.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The downloaded file cannot be written or moved into place.
    #[error("cannot write {path}: {source}")]
    WriteLocal {
        /// The local path, relative to the workspace.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file to move is larger than the transfer limit (256 MiB); nothing was moved.
    #[error("{path} is {size} bytes; the limit is {limit}")]
    TooLarge {
        /// The file (local for an upload, remote for a download).
        path: String,
        /// Its size, in bytes.
        size: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The remote file grew past the transfer limit while downloading; nothing was kept.
    #[error("{path} grew past the {limit}-byte limit")]
    GrewTooLarge {
        /// The remote file.
        path: String,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The server refused to create the upload's target file.
    #[error("cannot create {path} on the server: {source}")]
    RemoteCreate {
        /// The remote path.
        path: String,
        /// The SFTP error.
        #[source]
        source: SftpError,
    },
    /// The remote file to download cannot be looked up (missing, or not permitted).
    #[error("cannot stat {path} on the server: {source}")]
    RemoteStat {
        /// The remote path.
        path: String,
        /// The SFTP error.
        #[source]
        source: SftpError,
    },
    /// The remote file to download cannot be opened.
    #[error("cannot open {path} on the server: {source}")]
    RemoteOpen {
        /// The remote path.
        path: String,
        /// The SFTP error.
        #[source]
        source: SftpError,
    },
    /// The remote path to download is a directory; holds the path.
    #[error("{0} is a directory; SshDownload moves one file")]
    RemoteDirectory(String),
    /// Writing the upload to the server failed part-way.
    #[error("uploading to {path} failed: {source}")]
    Upload {
        /// The remote path.
        path: String,
        /// The error of the transfer.
        #[source]
        source: std::io::Error,
    },
    /// Closing the uploaded file on the server failed, so it may be incomplete.
    #[error("closing {path} failed: {source}")]
    CloseRemote {
        /// The remote path.
        path: String,
        /// The error of the close.
        #[source]
        source: std::io::Error,
    },
    /// Reading the remote file failed part-way; nothing was kept.
    #[error("downloading {path} failed: {source}")]
    Download {
        /// The remote path.
        path: String,
        /// The error of the transfer.
        #[source]
        source: std::io::Error,
    },
    /// A movement without `edit: true` asked SshDownload to write outside `input/`; holds the
    /// local path.
    #[error(
        "{0} is outside input/; this movement has edit: false, so SshDownload may only write under input/"
    )]
    OutsideInput(String),
}
