//! `InstallSkill` with URLs: a skill archive named by an `http(s)://` URL is fetched through the
//! SSRF guard (the same client as `DownloadFile`, `web.allow_private`, `web.allow_hosts`), kept
//! in a private temporary directory, and installed with the same checks as a workspace archive
//! (`maestro_tools::skills_install`). Other sources go to the workspace tool unchanged.

use std::sync::Arc;

use maestro_tools::skills_install::{
    INSTALL_OFF, InstallSkill, InstallSkillInput, MAX_BYTES, install,
};
use maestro_tools::{ToolContext, ToolOutput, ToolsConfig, TypedTool};

use crate::client::WebClient;

/// `InstallSkill` that also takes URLs; registered over the workspace-only one.
#[derive(Debug)]
pub struct InstallSkillWithUrls {
    /// The workspace tool, which does everything but fetching.
    pub inner: InstallSkill,
    /// The guarded client archives are fetched with.
    pub client: WebClient,
}

impl InstallSkillWithUrls {
    /// Over `config` (`tools.skills_install_dir`), fetching with `client`.
    pub fn new(config: Arc<ToolsConfig>, client: WebClient) -> InstallSkillWithUrls {
        InstallSkillWithUrls {
            inner: InstallSkill { config },
            client,
        }
    }

    async fn fetch_and_install(&self, ctx: &ToolContext, url: &str) -> Result<String, String> {
        let Some(install_dir) = self.inner.config.skills_install_dir.clone() else {
            return Err(INSTALL_OFF.to_string());
        };
        let fetched = self
            .client
            .get_bytes(url, MAX_BYTES, &ctx.cancel)
            .await
            .map_err(|e| e.to_string())?;
        let Some(body) = fetched.body else {
            return Err(format!(
                "the archive is larger than {} MiB, the most a skill may hold",
                MAX_BYTES / (1024 * 1024)
            ));
        };
        let path = url::Url::parse(&fetched.final_url)
            .map(|u| u.path().to_ascii_lowercase())
            .unwrap_or_default();
        let content_type = fetched.content_type.as_deref().unwrap_or("");
        let kind = if path.ends_with(".zip") || content_type.starts_with("application/zip") {
            "skill.zip"
        } else if path.ends_with(".tar.gz")
            || path.ends_with(".tgz")
            || content_type.starts_with("application/gzip")
            || content_type.starts_with("application/x-gzip")
            || content_type.starts_with("application/x-tar+gzip")
        {
            "skill.tar.gz"
        } else {
            return Err(format!(
                "{} is not a skill archive: give the URL of a .zip, .tar.gz or .tgz",
                fetched.final_url
            ));
        };
        let dir = tempfile::Builder::new()
            .prefix("maestro-skill-")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        let file = dir.path().join(kind);
        std::fs::write(&file, &body).map_err(|e| format!("cannot keep the archive: {e}"))?;
        let config = Arc::clone(&self.inner.config);
        let shown = fetched.final_url.clone();
        tokio::task::spawn_blocking(move || {
            let done = install(&file, &shown, &install_dir, &config).map_err(|e| e.to_string());
            drop(dir);
            done
        })
        .await
        .map_err(|e| format!("the tool failed internally: {e}"))?
    }
}

impl TypedTool for InstallSkillWithUrls {
    type Input = InstallSkillInput;
    const NAME: &'static str = InstallSkill::NAME;
    const DESCRIPTION: &'static str = "Install a skill (a folder with SKILL.md, or a .zip or \
         .tar.gz of one, from the workspace or an http(s) URL) so that ListSkills and ReadSkill \
         offer it to every later run.";

    async fn run(&self, ctx: &ToolContext, input: InstallSkillInput) -> ToolOutput {
        let url = input.source.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return self.inner.run(ctx, input).await;
        }
        match self.fetch_and_install(ctx, url).await {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::error(format!("InstallSkill {url}: {e}")),
        }
    }
}
