//! `DownloadFile`: saves one URL into the workspace's `input/` folder, within the size limit.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use super::WebError;
use super::client::WebClient;
use maestro_tools::workspace_file::{create_file, display, sanitize_file_name, writable_file};
use maestro_tools::{ToolContext, ToolOutput, TypedTool};

pub(crate) struct DownloadFile {
    client: WebClient,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DownloadFileInput {
    /// http or https URL of the file
    url: String,
    /// file name to save as inside input/ (default: taken from the URL)
    filename: Option<String>,
}

impl DownloadFile {
    pub(crate) fn new(client: WebClient) -> Self {
        DownloadFile { client }
    }

    async fn download(
        &self,
        ctx: &ToolContext,
        input: DownloadFileInput,
    ) -> Result<String, WebError> {
        if let Some(name) = &input.filename
            && (name.contains('/') || name.contains('\\') || name == "." || name == "..")
        {
            return Err(WebError::FileNameWithFolders(name.clone()));
        }
        let fetched = self.client.get(&input.url, &ctx.cancel).await?;
        let limit = self.client.max_bytes;
        if let Some(length) = fetched.response.content_length()
            && length > limit
        {
            return Err(WebError::TooLarge { length, limit });
        }
        let wanted = match &input.filename {
            Some(name) => sanitize_file_name(name),
            None => sanitize_file_name(&name_from_url(&fetched.final_url)),
        };
        let target = unique_target(&ctx.workspace, &wanted)?;
        let partial = target.with_file_name(format!(
            ".{}.part",
            target
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("download")
        ));
        let written = save(&self.client, fetched.response, &partial, limit, ctx).await;
        let written = match written {
            Ok(n) => n,
            Err(e) => {
                let _ = tokio::fs::remove_file(&partial).await;
                return Err(e);
            }
        };
        tokio::fs::rename(&partial, &target)
            .await
            .map_err(WebError::Rename)?;
        Ok(format!(
            "Saved {written} bytes from {} to {} ({})",
            fetched.final_url,
            display(&ctx.workspace, &target),
            fetched.content_type.as_deref().unwrap_or("no content type")
        ))
    }
}

async fn save(
    client: &WebClient,
    mut response: reqwest::Response,
    path: &Path,
    limit: u64,
    ctx: &ToolContext,
) -> Result<u64, WebError> {
    let mut file = create_file(&ctx.workspace, path, "DownloadFile").await?;
    let mut written: u64 = 0;
    loop {
        let chunk = tokio::select! {
            c = response.chunk() => c.map_err(|e| client.request_error(e))?,
            () = ctx.cancel.cancelled() => return Err(WebError::Cancelled),
        };
        let Some(chunk) = chunk else { break };
        written += chunk.len() as u64;
        if written > limit {
            return Err(WebError::GrewTooLarge(limit));
        }
        file.write_all(&chunk).await.map_err(WebError::Write)?;
    }
    file.flush().await.map_err(WebError::Write)?;
    Ok(written)
}

fn name_from_url(url: &str) -> String {
    url::Url::parse(url)
        .ok()
        .and_then(|u| {
            u.path_segments()
                .and_then(|mut s| s.next_back().map(str::to_string))
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "download".to_string())
}

/// `input/<name>`, or `input/<stem>-N.<ext>` when that name is taken.
fn unique_target(workspace: &Path, name: &str) -> Result<PathBuf, WebError> {
    let (stem, ext) = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem, Some(ext)),
        _ => (name, None),
    };
    for n in 0..1000 {
        let candidate = match (n, ext) {
            (0, _) => name.to_string(),
            (n, Some(ext)) => format!("{stem}-{n}.{ext}"),
            (n, None) => format!("{stem}-{n}"),
        };
        let path = writable_file(workspace, &format!("input/{candidate}"))?;
        if !path.exists() {
            return Ok(path);
        }
    }
    Err(WebError::NoFreeName(name.to_string()))
}

impl TypedTool for DownloadFile {
    type Input = DownloadFileInput;
    const NAME: &'static str = "DownloadFile";
    const DESCRIPTION: &'static str =
        "Download a file from a public URL into the workspace's input/ folder.";

    async fn run(&self, ctx: &ToolContext, input: DownloadFileInput) -> ToolOutput {
        let url = input.url.clone();
        match self.download(ctx, input).await {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::error(format!("DownloadFile {url}: {e}")),
        }
    }
}
