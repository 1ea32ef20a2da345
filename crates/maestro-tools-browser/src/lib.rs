//! `BrowseWeb`: a real headless Chromium (Debian's `chromium`), driven over the Chrome DevTools
//! Protocol with `chromiumoxide`, for pages that need scripts, clicks and forms.
//!
//! Each run gets its own browser, started on the first call with a fresh profile (a temporary
//! directory, removed with the browser when the run's tools are dropped). The page stays open
//! for the run: a call without `url` goes on where the last one ended.
//!
//! Every request the page makes (navigation, subresources, redirects, fetch and XHR,
//! WebSocket) goes through a proxy on 127.0.0.1 ([`proxy`]) that applies the SSRF guard of
//! `maestro-tools-web` with its own resolver; Chromium is started so that it has no network of
//! its own besides that proxy (see `docs/security.md`).

mod error;
mod proxy;
mod session;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

pub use error::BrowseError;
use maestro_tools::catalog::{ToolCatalog, available};
use maestro_tools::workspace_file::{create_file, display, sanitize_file_name, writable_file};
use maestro_tools::{Tool, ToolContext, ToolOutput, TypedTool};
use maestro_tools_web::{BrowserSettings, HostLookup, HostPolicy, SystemLookup, WebConfig};
use proxy::{ProxyPolicy, Refusal};
use session::Session;
use tokio::io::AsyncWriteExt;

/// The tool's name.
pub const TOOLS: &[&str] = &["BrowseWeb"];

/// Adds `BrowseWeb` to the piece validator's `catalog`.
pub fn add_to_catalog(catalog: &mut ToolCatalog) {
    available(catalog, TOOLS);
}

/// A `BrowseWeb` with its own browser (started on its first call), resolving names with the
/// system resolver. Build one per run: the page it keeps belongs to that run.
pub fn browse_web(config: &WebConfig) -> Arc<dyn Tool> {
    browse_web_with_lookup(config, Arc::new(SystemLookup))
}

/// [`browse_web`] with a custom resolver (tests map names to chosen addresses with it).
pub fn browse_web_with_lookup(config: &WebConfig, lookup: Arc<dyn HostLookup>) -> Arc<dyn Tool> {
    Arc::new(BrowseWeb::new(config, lookup))
}

/// The tool; see the crate documentation.
pub struct BrowseWeb {
    settings: BrowserSettings,
    policy: ProxyPolicy,
    max_output_chars: usize,
    session: tokio::sync::Mutex<Option<Session>>,
}

impl std::fmt::Debug for BrowseWeb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowseWeb")
            .field("settings", &self.settings)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// BrowseWeb's input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowseWebInput {
    /// http or https URL to open; leave it out to go on with the page the last call ended on
    url: Option<String>,
    /// actions done in order on the page, after opening `url`
    #[serde(default)]
    actions: Vec<Action>,
}

/// One thing to do on the page.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// click the first element matching this CSS selector
    Click(String),
    /// type text into the first element matching the selector
    Type(TypeAction),
    /// wait until an element matches this CSS selector
    WaitFor(String),
    /// scroll by most of a screen
    Scroll(Direction),
    /// save a PNG of the visible page under input/ with this file name (ReadImage can show it)
    Screenshot(String),
    /// go back one page in the history (`true`)
    Back(bool),
}

/// `{type: {selector, text}}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TypeAction {
    /// CSS selector of the field
    selector: String,
    /// text to type
    text: String,
}

/// Which way to scroll.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// towards the top
    Up,
    /// towards the bottom
    Down,
}

impl BrowseWeb {
    fn new(config: &WebConfig, lookup: Arc<dyn HostLookup>) -> Self {
        let mut names = Vec::new();
        let mut ports = Vec::new();
        for entry in &config.allow_hosts {
            match proxy::host_port(entry) {
                Some(pair) => ports.push(pair),
                None => names.push(entry.clone()),
            }
        }
        BrowseWeb {
            settings: config.browser.clone(),
            policy: ProxyPolicy {
                policy: Arc::new(HostPolicy::new(config.allow_private, &names)),
                lookup,
                ports,
            },
            max_output_chars: config.max_output_chars,
            session: tokio::sync::Mutex::new(None),
        }
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.settings.timeout_secs.max(1))
    }

    /// Checks `url` before the browser opens it, so that a refused address gets a plain answer.
    async fn check_url(&self, url: &str) -> Result<(), BrowseError> {
        let parsed = url::Url::parse(url)
            .map_err(|e| BrowseError::Url(format!("invalid URL {url:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(BrowseError::Url(format!(
                "unsupported URL scheme {:?} in {url}: only http and https pages are opened",
                parsed.scheme()
            )));
        }
        let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
            return Err(BrowseError::Url(format!("URL {url} has no host")));
        };
        self.policy
            .resolve(host, port)
            .await
            .map(|_| ())
            .map_err(BrowseError::Url)
    }

    async fn browse(
        &self,
        ctx: &ToolContext,
        input: BrowseWebInput,
    ) -> Result<ToolOutput, BrowseError> {
        if let Some(url) = &input.url {
            self.check_url(url).await?;
        }
        let mut guard = self.session.lock().await;
        if guard.as_mut().is_some_and(|s| !s.alive()) {
            tracing::warn!("BrowseWeb: Chromium exited; the next call with `url` starts it again");
            *guard = None;
        }
        let has_page = guard.as_ref().is_some_and(|s| s.page.is_some());
        if input.url.is_none() && !has_page {
            return Err(BrowseError::Url(
                "no page is open in this run: a run's first BrowseWeb call must pass `url`, and a \
                 run resumed on another worker or after a restart has lost the page it had; pass \
                 `url` to open the page again (a browser that crashed has lost it too)"
                    .to_string(),
            ));
        }
        let session = match &mut *guard {
            Some(session) => session,
            empty => empty.insert(Session::launch(&self.settings, self.policy.clone()).await?),
        };
        session.take_refusals();
        session.take_dialogs();
        let downloads = downloads_dir(&ctx.workspace)?;
        let before = list(&downloads);
        session.download_to(&downloads).await?;
        let page = session.page().await?;
        let mut notes = Vec::new();
        let mut screenshots = Vec::new();
        if let Some(url) = &input.url {
            session::goto(&page, url).await?;
        }
        for action in &input.actions {
            match action {
                Action::Click(selector) => session::click(&page, selector).await?,
                Action::Type(TypeAction { selector, text }) => {
                    session::type_text(&page, selector, text).await?;
                }
                Action::WaitFor(selector) => session::wait_for(&page, selector).await,
                Action::Scroll(direction) => {
                    session::scroll(&page, matches!(direction, Direction::Down)).await?;
                }
                Action::Screenshot(name) => {
                    let png = session::screenshot(&page).await?;
                    let path = screenshot_path(&ctx.workspace, name)?;
                    let shown = display(&ctx.workspace, &path);
                    let mut file = create_file(&ctx.workspace, &path, "BrowseWeb").await?;
                    let written = async {
                        file.write_all(&png).await?;
                        file.flush().await
                    }
                    .await;
                    written.map_err(|source| BrowseError::Write {
                        path: shown.clone(),
                        source,
                    })?;
                    notes.push(format!(
                        "Screenshot saved to {shown} ({} bytes, PNG); ReadImage can show it.",
                        png.len()
                    ));
                    screenshots.push(path);
                }
                Action::Back(true) => session::back(&page).await?,
                Action::Back(false) => {}
            }
        }
        let closed = session.cap_pages(self.settings.max_pages.max(1)).await?;
        if closed > 0 {
            notes.push(format!(
                "Closed {closed} extra page(s) the site opened: at most {} pages stay open \
                 (web.browser.max_pages).",
                self.settings.max_pages.max(1)
            ));
        }
        let (url, title, html) = session::snapshot(&page).await?;
        let after = list(&downloads);
        let new_files = after
            .difference(&before)
            .filter(|f| !screenshots.iter().any(|s| s.file_name() == f.file_name()));
        for file in new_files {
            let shown = display(&ctx.workspace, file);
            if shown.ends_with(".crdownload") {
                notes.push(format!("A download is still in progress: {shown}."));
            } else {
                notes.push(format!("Downloaded {shown}."));
            }
        }
        for message in session.take_dialogs() {
            notes.push(format!("The page showed a dialog, accepted: {message:?}."));
        }
        let refusals = session.take_refusals();
        drop(guard);
        let markdown =
            tokio::task::spawn_blocking(move || maestro_tools_web::html_to_markdown(&html))
                .await
                .map_err(|e| BrowseError::Config(format!("the text conversion stopped: {e}")))?
                .map_err(BrowseError::Text)?;
        Ok(self.answer(&url, &title, &markdown, &notes, &refusals))
    }

    fn answer(
        &self,
        url: &str,
        title: &str,
        markdown: &str,
        notes: &[String],
        refusals: &[Refusal],
    ) -> ToolOutput {
        let mut out = format!("URL: {url}\n");
        if !title.is_empty() {
            out.push_str(&format!("Title: {title}\n"));
        }
        for note in notes {
            out.push_str(note);
            out.push('\n');
        }
        if !refusals.is_empty() {
            out.push_str("The SSRF guard refused these requests of the page:\n");
            for refusal in refusals.iter().take(20) {
                out.push_str(&format!("- {}: {}\n", refusal.target, refusal.reason));
            }
            if refusals.len() > 20 {
                out.push_str(&format!("- and {} more\n", refusals.len() - 20));
            }
        }
        out.push('\n');
        let chars = markdown.chars().count();
        let truncated = chars > self.max_output_chars;
        if truncated {
            out.extend(markdown.chars().take(self.max_output_chars));
            out.push_str(&format!(
                "\n\n[truncated: showing {} of {chars} characters; scroll or click to reach \
                 other parts, or take a screenshot]",
                self.max_output_chars
            ));
        } else {
            out.push_str(markdown.trim_end());
        }
        ToolOutput {
            ok: true,
            output: out,
            truncated,
        }
    }
}

/// `input/`, created if needed: where downloads and screenshots go.
fn downloads_dir(workspace: &Path) -> Result<PathBuf, BrowseError> {
    let probe = writable_file(workspace, "input/download")?;
    Ok(probe
        .parent()
        .map_or_else(|| workspace.join("input"), Path::to_path_buf))
}

fn list(dir: &Path) -> std::collections::BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

/// `input/<name>.png` for a screenshot named `name` (`input/` in front is accepted), with a
/// number added when the name is taken, as DownloadFile does.
fn screenshot_path(workspace: &Path, name: &str) -> Result<PathBuf, BrowseError> {
    let bare = name.strip_prefix("input/").unwrap_or(name);
    if bare.contains('/') || bare.contains('\\') {
        return Err(BrowseError::Url(format!(
            "screenshot {name:?}: screenshots are saved into input/; pass a file name such as \
             \"page.png\""
        )));
    }
    let mut clean = sanitize_file_name(bare);
    if !clean.to_ascii_lowercase().ends_with(".png") {
        clean.push_str(".png");
    }
    let stem = clean
        .trim_end_matches(".png")
        .trim_end_matches(".PNG")
        .to_string();
    for n in 0..1000 {
        let candidate = if n == 0 {
            clean.clone()
        } else {
            format!("{stem}-{n}.png")
        };
        let path = writable_file(workspace, &format!("input/{candidate}"))?;
        if !path.exists() {
            return Ok(path);
        }
    }
    Err(BrowseError::Url(format!(
        "screenshot {name:?}: input/ already holds 1000 files of that name; pick another name"
    )))
}

impl TypedTool for BrowseWeb {
    type Input = BrowseWebInput;
    const NAME: &'static str = "BrowseWeb";
    const DESCRIPTION: &'static str = "Open a web page in a headless browser, click, type, scroll \
        or take screenshots on it, and read its text as markdown; the page stays open for later \
        calls.";

    async fn run(&self, ctx: &ToolContext, input: BrowseWebInput) -> ToolOutput {
        let what = input
            .url
            .clone()
            .unwrap_or_else(|| "(the open page)".to_string());
        let limit = self.timeout();
        tokio::select! {
            result = tokio::time::timeout(limit, self.browse(ctx, input)) => match result {
                Ok(Ok(output)) => output,
                Ok(Err(e)) => ToolOutput::error(format!("BrowseWeb {what}: {e}")),
                Err(_) => ToolOutput::error(format!(
                    "BrowseWeb {what}: stopped after {}s (web.browser.timeout_secs); the page \
                     stays open, so a call without `url` can look at where it got to",
                    limit.as_secs()
                )),
            },
            () = ctx.cancel.cancelled() => ToolOutput::error("BrowseWeb: cancelled"),
        }
    }

    fn time_limit(&self) -> Option<Duration> {
        // Launching Chromium comes on top of the call's own limit.
        Some(self.timeout() + Duration::from_secs(45))
    }
}
