//! The web tools: `WebFetch` (a page as readable markdown), `DownloadFile` (a file into
//! `input/`) and `WebSearch` (through a configured SearXNG instance).
//!
//! Every request goes through one [`WebClient`], whose resolver and redirect policy enforce the
//! SSRF guard in [`guard`]: loopback, private, link-local (cloud metadata) and similar addresses
//! are refused after DNS resolution and on every redirect, unless the operator lists an
//! exception in [`WebConfig::allow_hosts`] or sets [`WebConfig::allow_private`].

mod client;
mod download;
mod error;
mod fetch;
pub mod guard;
mod install_skill;
mod search;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use client::{FetchedBytes, WebClient};
pub use error::WebError;
pub use guard::{HostLookup, HostPolicy, SystemLookup};
pub use install_skill::InstallSkillWithUrls;
use maestro_tools::Tool;
use maestro_tools::catalog::{ToolCatalog, available, unavailable};

/// `web:` in the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebConfig {
    /// Reach private, loopback and link-local addresses too. Off by default; turn on only on a
    /// machine whose network holds nothing an agent must not touch.
    pub allow_private: bool,
    /// Exceptions to the guard: host names (`wiki.lan`), addresses (`127.0.0.1`) or networks
    /// (`10.1.0.0/16`) that may be reached although they are private.
    pub allow_hosts: Vec<String>,
    /// Largest response body read (WebFetch cuts there; DownloadFile refuses larger files).
    pub max_bytes: u64,
    /// Largest text WebFetch hands back to the model, in characters.
    pub max_output_chars: usize,
    /// Whole-request time limit (connect, redirects and body), in seconds.
    pub timeout_secs: u64,
    /// The search provider; without one WebSearch answers that it is not configured.
    pub search: Option<SearchProvider>,
    /// `BrowseWeb`'s headless Chromium (`web.browser`); the guard above applies to it too.
    pub browser: BrowserSettings,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            allow_private: false,
            allow_hosts: Vec::new(),
            max_bytes: 10 * 1024 * 1024,
            max_output_chars: 60_000,
            timeout_secs: 30,
            search: None,
            browser: BrowserSettings::default(),
        }
    }
}

impl WebConfig {
    /// The whole-request time limit, `timeout_secs` (at least one second).
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs.max(1))
    }
}

/// `web.search:` in the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchProvider {
    /// Base URL of a SearXNG instance with the JSON format enabled, e.g. `http://searx.lan:8080`.
    /// Its host is trusted by WebSearch (the operator chose it), not by the other web tools.
    pub searxng_url: String,
}

/// `web.browser:` in the configuration: `BrowseWeb`'s headless Chromium and its limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrowserSettings {
    /// The Chromium program (Debian's `chromium` package installs `/usr/bin/chromium`).
    pub chromium: String,
    /// Time limit of one BrowseWeb call (navigation and every action), in seconds.
    pub timeout_secs: u64,
    /// Pages (tabs and pop-ups) a run's browser may keep open; newer ones are closed.
    pub max_pages: usize,
    /// JavaScript heap limit of each page, in MiB (V8's `--max-old-space-size`).
    pub max_heap_mb: u64,
}

impl Default for BrowserSettings {
    fn default() -> Self {
        BrowserSettings {
            chromium: "/usr/bin/chromium".to_string(),
            timeout_secs: 60,
            max_pages: 4,
            max_heap_mb: 512,
        }
    }
}

/// Turns an HTML page into readable markdown, as `WebFetch` does (scripts, styles and the head
/// left out, runs of blank lines folded).
pub fn html_to_markdown(html: &str) -> Result<String, WebError> {
    fetch::html_to_markdown(html)
}

/// The three web tools, resolving names with the system resolver.
pub fn tools(config: WebConfig) -> Vec<Arc<dyn Tool>> {
    tools_with_lookup(config, Arc::new(SystemLookup))
}

/// The three web tools with a custom resolver (tests map names to loopback with it).
pub fn tools_with_lookup(config: WebConfig, lookup: Arc<dyn HostLookup>) -> Vec<Arc<dyn Tool>> {
    let client = WebClient::new(&config, Arc::clone(&lookup));
    let search = search::WebSearch::new(&config, lookup);
    vec![
        Arc::new(fetch::WebFetch::new(
            client.clone(),
            config.max_output_chars,
        )),
        Arc::new(download::DownloadFile::new(client)),
        Arc::new(search),
    ]
}

/// The web tools that need no configuration.
pub const TOOLS: &[&str] = &["WebFetch", "DownloadFile"];

/// Adds the web tools to the piece validator's `catalog`: `WebSearch` only with a search
/// provider.
pub fn add_to_catalog(catalog: &mut ToolCatalog, config: &WebConfig) {
    available(catalog, TOOLS);
    if config.search.is_some() {
        available(catalog, &["WebSearch"]);
    } else {
        unavailable(
            catalog,
            &["WebSearch"],
            "no search provider is configured; set `web.search.searxng_url` in .maestro/config.yaml",
        );
    }
}

/// `InstallSkill` over `tools` (`tools.skills_install_dir`) that also takes `http(s)://` URLs,
/// fetched through the guard under `config`'s limits; register it over the workspace-only one.
pub fn install_skill_tool(
    config: &WebConfig,
    tools: Arc<maestro_tools::ToolsConfig>,
) -> Arc<dyn Tool> {
    install_skill_tool_with_lookup(config, tools, Arc::new(SystemLookup))
}

/// [`install_skill_tool`] with a custom resolver (tests map names to loopback with it).
pub fn install_skill_tool_with_lookup(
    config: &WebConfig,
    tools: Arc<maestro_tools::ToolsConfig>,
    lookup: Arc<dyn HostLookup>,
) -> Arc<dyn Tool> {
    Arc::new(InstallSkillWithUrls::new(
        tools,
        WebClient::new(config, lookup),
    ))
}
