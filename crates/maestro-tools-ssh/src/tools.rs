//! `SshExec`, `SshUpload` and `SshDownload`: each call authorizes the connection against the
//! movement's `allowed_ssh_connections`, opens a session, does one thing and closes it.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::SshError;
use super::access::authorize;
use super::client::{SshSession, connect};
use super::registry::{SshConnection, SshRegistry};
use maestro_tools::workspace_file::{create_file, display, existing_file, writable_file};
use maestro_tools::{ToolContext, ToolOutput, TypedTool};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const DEFAULT_EXEC_TIMEOUT_SECS: u64 = 60;
const MAX_EXEC_TIMEOUT_SECS: u64 = 600;
/// Bytes kept of each of stdout and stderr.
const OUTPUT_CAP: usize = 32 * 1024;
/// Largest file moved by SshUpload or SshDownload.
const MAX_TRANSFER_BYTES: u64 = 256 * 1024 * 1024;

/// What the three SSH tools share: the registered connections and the run's owner.
pub(crate) struct SshAccess {
    registry: Arc<SshRegistry>,
    owner: Option<String>,
}

/// `SshExec`.
pub(crate) struct SshExec(pub(crate) Arc<SshAccess>);

/// `SshUpload`.
pub(crate) struct SshUpload(pub(crate) Arc<SshAccess>);

/// `SshDownload`.
pub(crate) struct SshDownload(pub(crate) Arc<SshAccess>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecInput {
    /// id of a registered SSH connection
    connection_id: String,
    /// command line run by the remote shell
    command: String,
    /// seconds before giving up (default 60)
    #[schemars(range(min = 1, max = MAX_EXEC_TIMEOUT_SECS))]
    timeout: Option<u64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UploadInput {
    /// id of a registered SSH connection
    connection_id: String,
    /// file inside the workspace
    local_path: String,
    /// destination path on the server
    remote_path: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DownloadInput {
    /// id of a registered SSH connection
    connection_id: String,
    /// file on the server
    remote_path: String,
    /// destination inside the workspace (default input/<file name>)
    local_path: Option<String>,
}

impl SshAccess {
    pub(crate) fn new(registry: Arc<SshRegistry>, owner: Option<String>) -> Self {
        SshAccess { registry, owner }
    }

    /// The connection `id`, if this movement and run may use it; the error carries its code.
    fn authorized(&self, ctx: &ToolContext, id: &str) -> Result<&SshConnection, SshError> {
        let allowed = ctx.allowed_ssh_connections.as_deref();
        Ok(authorize(
            &self.registry,
            allowed,
            self.owner.as_deref(),
            id,
        )?)
    }

    async fn open(&self, ctx: &ToolContext, conn: &SshConnection) -> Result<SshSession, SshError> {
        tokio::select! {
            s = connect(conn, CONNECT_TIMEOUT) => s,
            () = ctx.cancel.cancelled() => Err(SshError::Cancelled),
        }
    }

    async fn exec(&self, ctx: &ToolContext, input: ExecInput) -> Result<ToolOutput, SshError> {
        let conn = self.authorized(ctx, &input.connection_id)?;
        if input.command.trim().is_empty() {
            return Err(SshError::EmptyCommand);
        }
        let secs = input
            .timeout
            .unwrap_or(DEFAULT_EXEC_TIMEOUT_SECS)
            .clamp(1, MAX_EXEC_TIMEOUT_SECS);
        let session = self.open(ctx, conn).await?;
        let result = session
            .exec(
                &input.command,
                Duration::from_secs(secs),
                OUTPUT_CAP,
                &ctx.cancel,
            )
            .await;
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                let e = session.scrub_error(e);
                session.close().await;
                return Err(e);
            }
        };
        let status = match (&result.exit_code, &result.signal, result.timed_out) {
            (_, _, true) => format!("timed out after {secs}s (the command may still be running)"),
            (Some(code), _, false) => format!("exit_code: {code}"),
            (None, Some(signal), false) => format!("killed by signal {signal}"),
            (None, None, false) => "ended without an exit status".to_string(),
        };
        let mut out = format!("{}\n{status}\n", describe(conn));
        for (label, bytes) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
            if !bytes.is_empty() {
                out.push_str(&format!(
                    "--- {label} ---\n{}\n",
                    String::from_utf8_lossy(bytes).trim_end()
                ));
            }
        }
        if result.truncated {
            out.push_str(&format!(
                "[truncated: each stream is cut at {OUTPUT_CAP} bytes]\n"
            ));
        }
        let output = session.scrub(&out);
        session.close().await;
        Ok(ToolOutput {
            ok: result.exit_code == Some(0),
            output,
            truncated: result.truncated,
        })
    }

    async fn upload(&self, ctx: &ToolContext, input: UploadInput) -> Result<ToolOutput, SshError> {
        let conn = self.authorized(ctx, &input.connection_id)?;
        let mut file = existing_file(&ctx.workspace, &input.local_path, "SshUpload").await?;
        let size = file
            .metadata()
            .await
            .map_err(|source| SshError::ReadLocal {
                path: input.local_path.clone(),
                source,
            })?
            .len();
        if size > MAX_TRANSFER_BYTES {
            return Err(SshError::TooLarge {
                path: input.local_path.clone(),
                size,
                limit: MAX_TRANSFER_BYTES,
            });
        }
        let session = self.open(ctx, conn).await?;
        let copied = async {
            let sftp = session.sftp().await?;
            let mut remote = sftp
                .create(input.remote_path.clone())
                .await
                .map_err(|source| SshError::RemoteCreate {
                    path: input.remote_path.clone(),
                    source,
                })?;
            let n = tokio::io::copy(&mut file, &mut remote)
                .await
                .map_err(|source| SshError::Upload {
                    path: input.remote_path.clone(),
                    source,
                })?;
            remote
                .shutdown()
                .await
                .map_err(|source| SshError::CloseRemote {
                    path: input.remote_path.clone(),
                    source,
                })?;
            let _ = sftp.close().await;
            Ok::<u64, SshError>(n)
        };
        let copied = tokio::select! {
            r = copied => r,
            () = ctx.cancel.cancelled() => Err(SshError::Cancelled),
        };
        let result = copied
            .map(|n| {
                ToolOutput::ok(format!(
                    "{}\nuploaded {} ({n} bytes) to {}",
                    describe(conn),
                    input.local_path,
                    input.remote_path
                ))
            })
            .map_err(|e| session.scrub_error(e));
        session.close().await;
        result
    }

    async fn download(
        &self,
        ctx: &ToolContext,
        input: DownloadInput,
    ) -> Result<ToolOutput, SshError> {
        let conn = self.authorized(ctx, &input.connection_id)?;
        let local_rel = match &input.local_path {
            Some(path) => path.clone(),
            None => {
                let base = input.remote_path.rsplit('/').next().unwrap_or("");
                format!(
                    "input/{}",
                    maestro_tools::workspace_file::sanitize_file_name(base)
                )
            }
        };
        let rel = maestro_tools::Workspace::open(&ctx.workspace)?
            .resolve(&local_rel)?
            .rel;
        if !ctx.edit && !rel.starts_with("input") {
            return Err(SshError::OutsideInput(local_rel));
        }
        let local = writable_file(&ctx.workspace, &local_rel)?;
        let session = self.open(ctx, conn).await?;
        let partial = local.with_file_name(format!(
            ".{}.part",
            local
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("download")
        ));
        let copied = async {
            let sftp = session.sftp().await?;
            let meta = sftp
                .metadata(input.remote_path.clone())
                .await
                .map_err(|source| SshError::RemoteStat {
                    path: input.remote_path.clone(),
                    source,
                })?;
            if meta.is_dir() {
                return Err(SshError::RemoteDirectory(input.remote_path.clone()));
            }
            if meta.len() > MAX_TRANSFER_BYTES {
                return Err(SshError::TooLarge {
                    path: input.remote_path.clone(),
                    size: meta.len(),
                    limit: MAX_TRANSFER_BYTES,
                });
            }
            let remote = sftp
                .open(input.remote_path.clone())
                .await
                .map_err(|source| SshError::RemoteOpen {
                    path: input.remote_path.clone(),
                    source,
                })?;
            let mut file = create_file(&ctx.workspace, &partial, "SshDownload").await?;
            let n = tokio::io::copy(&mut remote.take(MAX_TRANSFER_BYTES + 1), &mut file)
                .await
                .map_err(|source| SshError::Download {
                    path: input.remote_path.clone(),
                    source,
                })?;
            if n > MAX_TRANSFER_BYTES {
                return Err(SshError::GrewTooLarge {
                    path: input.remote_path.clone(),
                    limit: MAX_TRANSFER_BYTES,
                });
            }
            file.flush().await.map_err(|source| SshError::WriteLocal {
                path: local_rel.clone(),
                source,
            })?;
            let _ = sftp.close().await;
            Ok::<u64, SshError>(n)
        };
        let copied = tokio::select! {
            r = copied => r,
            () = ctx.cancel.cancelled() => Err(SshError::Cancelled),
        };
        let copied = match copied {
            Ok(n) => tokio::fs::rename(&partial, &local)
                .await
                .map(|()| n)
                .map_err(|source| SshError::WriteLocal {
                    path: local_rel.clone(),
                    source,
                }),
            Err(e) => Err(e),
        };
        if copied.is_err() {
            let _ = tokio::fs::remove_file(&partial).await;
        }
        let result = copied
            .map(|n| {
                let shown = display(&ctx.workspace, &local);
                ToolOutput::ok(format!(
                    "{}\ndownloaded {} ({n} bytes) to {shown}",
                    describe(conn),
                    input.remote_path
                ))
            })
            .map_err(|e| session.scrub_error(e));
        session.close().await;
        result
    }
}

fn describe(conn: &SshConnection) -> String {
    format!(
        "connection: {} ({}) {}@{}:{}",
        conn.name, conn.id, conn.user, conn.host, conn.port
    )
}

/// A tool's answer: its output, or its error prefixed with the tool's name.
fn answer(tool: &str, result: Result<ToolOutput, SshError>) -> ToolOutput {
    result.unwrap_or_else(|e| ToolOutput::error(format!("{tool}: {e}")))
}

impl TypedTool for SshExec {
    type Input = ExecInput;
    const NAME: &'static str = "SshExec";
    const DESCRIPTION: &'static str =
        "Run a shell command on a registered SSH connection and return its exit code and output.";

    async fn run(&self, ctx: &ToolContext, input: ExecInput) -> ToolOutput {
        answer(Self::NAME, self.0.exec(ctx, input).await)
    }
}

impl TypedTool for SshUpload {
    type Input = UploadInput;
    const NAME: &'static str = "SshUpload";
    const DESCRIPTION: &'static str =
        "Copy a workspace file to a path on a registered SSH connection over SFTP.";

    async fn run(&self, ctx: &ToolContext, input: UploadInput) -> ToolOutput {
        answer(Self::NAME, self.0.upload(ctx, input).await)
    }
}

impl TypedTool for SshDownload {
    type Input = DownloadInput;
    const NAME: &'static str = "SshDownload";
    const DESCRIPTION: &'static str =
        "Copy a file from a registered SSH connection into the workspace over SFTP.";

    async fn run(&self, ctx: &ToolContext, input: DownloadInput) -> ToolOutput {
        answer(Self::NAME, self.0.download(ctx, input).await)
    }
}
