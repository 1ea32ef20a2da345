//! A real browser for tests: Debian's `/usr/bin/chromium`, headless, driven over WebDriver by
//! `/usr/bin/chromedriver` (started here on a free loopback port) through the `fantoccini`
//! client.
//!
//! # Prerequisites
//!
//! `apt-get install chromium chromium-driver` (or `scripts/prerequisites.sh`, which also
//! installs axe-core for [`Browser::axe`] with `npm ci` in `crates/maestro-testkit/axe`).
//! Without them [`Browser::start`] returns [`BrowserError::Unavailable`], and a crate whose
//! build script calls `maestro_buildcheck::check_chromium()` is built with the `no_chromium`
//! cfg, so its browser tests show as ignored:
//!
//! ```ignore
//! // build.rs: fn main() { maestro_buildcheck::check_chromium(); }
//! #[tokio::test(flavor = "multi_thread")]
//! #[cfg_attr(no_chromium, ignore = "needs chromium and chromium-driver: scripts/prerequisites.sh")]
//! async fn the_page_loads() {
//!     let browser = Browser::start("the_page_loads", Viewport::Desktop).await.unwrap();
//!     browser.goto("http://127.0.0.1:8080/").await.unwrap();
//!     browser.wait_for("#title", WAIT).await.unwrap();
//!     browser.screenshot("loaded").await.unwrap();
//!     browser.close().await;
//! }
//! ```
//!
//! # What it does
//!
//! - Chromium runs headless with a fresh profile in a temporary directory, without the
//!   background connections it makes by default (sync, component updates, QUIC probes): the
//!   tests' machines reach nothing outside, and Chromium waits on those.
//! - Downloads go to a temporary directory without asking ([`Browser::download`]).
//! - A dialog the page opens (`alert()`, `confirm()`) stays open, so that
//!   [`Browser::alert_present`] can tell that a script ran.
//! - Screenshots are PNG files under `target/web-screenshots/<test>/<step>.png`.
//! - Waiting polls (every 50 ms) up to a timeout; nothing here measures how fast a page is.
//! - chromedriver and Chromium run in their own process group, killed when the [`Browser`]
//!   drops (after the WebDriver session is ended, when [`Browser::close`] is called).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::error::CmdError;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// Debian's Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Debian's chromedriver (package `chromium-driver`), of the same version as [`CHROMIUM`].
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long chromedriver may take to listen, and Chromium to start a session.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(50);

/// The flags Chromium runs with: headless, no sandbox (tests may run as root in a container),
/// a profile of its own, and none of the background connections it would otherwise make.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--password-store=basic",
];

/// The window's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Viewport {
    /// 1280 × 900.
    Desktop,
    /// 390 × 844, a phone held upright.
    Phone,
}

impl Viewport {
    /// Width and height in CSS pixels.
    pub fn size(self) -> (u32, u32) {
        match self {
            Viewport::Desktop => (1280, 900),
            Viewport::Phone => (390, 844),
        }
    }

    /// `desktop` or `phone`, for file names.
    pub fn name(self) -> &'static str {
        match self {
            Viewport::Desktop => "desktop",
            Viewport::Phone => "phone",
        }
    }
}

/// Why the browser could not be started or a step failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// Chromium or chromedriver is not installed: the test cannot run here. Tests built with
    /// the `no_chromium` cfg are ignored instead.
    #[error("the test browser cannot run here: {reason}")]
    Unavailable {
        /// What is missing and how to install it.
        reason: String,
    },
    /// chromedriver did not start, or did not start a Chromium session.
    #[error("chromedriver ({CHROMEDRIVER}) did not start a Chromium session: {reason}\n{log}")]
    Start {
        /// What went wrong.
        reason: String,
        /// What chromedriver wrote.
        log: String,
    },
    /// A WebDriver command failed.
    #[error("browser: {what} failed")]
    WebDriver {
        /// The step, with its selector or URL.
        what: String,
        /// The WebDriver client's error.
        #[source]
        source: Box<CmdError>,
    },
    /// What a test waited for did not happen in time.
    #[error("browser: waited {waited:?} for {what}; the page is at {url}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        waited: Duration,
        /// The page's URL then.
        url: String,
    },
    /// A file of the test (screenshot, download, axe-core's script) could not be written or
    /// read.
    #[error("browser: {path}: {what}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was done with it.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A script's answer was not what the step expects.
    #[error("browser: {what}: unexpected answer {answer}")]
    Answer {
        /// The step.
        what: String,
        /// The script's answer.
        answer: Value,
    },
}

/// One axe-core rule a page breaks (`serious` and `critical` are what the tests refuse).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct AxeViolation {
    /// The rule, e.g. `color-contrast`.
    pub id: String,
    /// `minor`, `moderate`, `serious` or `critical`.
    #[serde(default)]
    pub impact: Option<String>,
    /// What the rule asks for.
    pub help: String,
    /// Where it is explained.
    #[serde(rename = "helpUrl", default)]
    pub help_url: String,
    /// The elements that break it.
    #[serde(default)]
    pub nodes: Vec<AxeNode>,
}

/// An element that breaks an axe-core rule.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct AxeNode {
    /// CSS selectors of the element (more than one inside frames).
    #[serde(default)]
    pub target: Vec<Value>,
    /// Its HTML, shortened by axe-core.
    #[serde(default)]
    pub html: String,
    /// What is wrong with it, and how to fix it.
    #[serde(rename = "failureSummary", default)]
    pub failure_summary: Option<String>,
}

impl AxeViolation {
    /// True for the impacts the tests refuse: `serious` and `critical`.
    pub fn is_serious(&self) -> bool {
        matches!(self.impact.as_deref(), Some("serious" | "critical"))
    }
}

impl std::fmt::Display for AxeViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "[{}] {}: {} ({})",
            self.impact.as_deref().unwrap_or("?"),
            self.id,
            self.help,
            self.help_url
        )?;
        for node in &self.nodes {
            let target: Vec<String> = node
                .target
                .iter()
                .map(|t| t.as_str().map_or_else(|| t.to_string(), str::to_string))
                .collect();
            writeln!(f, "    at {}: {}", target.join(" > "), node.html)?;
            if let Some(summary) = &node.failure_summary {
                for line in summary.lines() {
                    writeln!(f, "       {line}")?;
                }
            }
        }
        Ok(())
    }
}

/// A headless Chromium driven over WebDriver; see the [module](self) documentation.
#[derive(Debug)]
pub struct Browser {
    client: Client,
    driver: Child,
    driver_log: Arc<Mutex<String>>,
    port: u16,
    profile: tempfile::TempDir,
    downloads: tempfile::TempDir,
    shots: PathBuf,
    viewport: Mutex<Viewport>,
}

impl Browser {
    /// Starts chromedriver and a Chromium session at `viewport`; screenshots go to
    /// `target/web-screenshots/<test>/`.
    pub async fn start(test: &str, viewport: Viewport) -> Result<Browser, BrowserError> {
        Browser::start_with(test, viewport, &[]).await
    }

    /// As [`Browser::start`], with more Chromium flags.
    pub async fn start_with(
        test: &str,
        viewport: Viewport,
        extra_flags: &[&str],
    ) -> Result<Browser, BrowserError> {
        for (program, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            if !Path::new(program).exists() {
                return Err(BrowserError::Unavailable {
                    reason: format!(
                        "{program} is missing: apt-get install {package}, or \
                         scripts/prerequisites.sh"
                    ),
                });
            }
        }
        let port = free_port()?;
        let mut command = Command::new(CHROMEDRIVER);
        command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group, which Chromium joins: dropping the browser kills both.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut driver = command.spawn().map_err(|e| BrowserError::Start {
            reason: format!("cannot run {CHROMEDRIVER}: {e}"),
            log: String::new(),
        })?;
        let driver_log = Arc::new(Mutex::new(String::new()));
        for pipe in [
            driver
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
            driver
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let sink = Arc::clone(&driver_log);
            std::thread::spawn(move || drain(pipe, &sink));
        }
        let profile = temp_dir("maestro-chromium-profile-")?;
        let downloads = temp_dir("maestro-chromium-downloads-")?;
        let shots = screenshot_root().join(sanitize(test));
        let browser = Browser {
            // Replaced below once the session exists; `Browser` owns the process from here so
            // that an error kills it.
            client: match connect(
                port,
                &profile,
                &downloads,
                viewport,
                extra_flags,
                &driver_log,
            )
            .await
            {
                Ok(client) => client,
                Err(e) => {
                    kill_group(&mut driver);
                    return Err(e);
                }
            },
            driver,
            driver_log,
            port,
            profile,
            downloads,
            shots,
            viewport: Mutex::new(viewport),
        };
        browser.set_viewport(viewport).await?;
        // A script that takes longer than this is stuck (axe-core takes about a second).
        let timeouts = fantoccini::wd::TimeoutConfiguration::new(
            Some(Duration::from_secs(60)),
            Some(Duration::from_secs(60)),
            Some(Duration::ZERO),
        );
        browser
            .client
            .update_timeouts(timeouts)
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: "setting the timeouts".into(),
                source: Box::new(source),
            })?;
        Ok(browser)
    }

    /// The WebDriver client, for what the helpers here do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The directory downloads are saved in.
    pub fn downloads(&self) -> &Path {
        self.downloads.path()
    }

    /// The directory this test's screenshots are saved in.
    pub fn screenshot_dir(&self) -> &Path {
        &self.shots
    }

    /// The current viewport.
    pub fn viewport(&self) -> Viewport {
        *self
            .viewport
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// chromedriver's port on 127.0.0.1.
    pub fn webdriver_port(&self) -> u16 {
        self.port
    }

    /// The Chromium processes of this browser (the browser process and its children, the
    /// renderers among them): process id and command line.
    pub fn chromium_processes(&self) -> Vec<(u32, String)> {
        let group = self.driver.id();
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return found;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // The fields after the command's closing parenthesis: state, ppid, pgrp, ...
            let Some(after) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
                continue;
            };
            let pgrp = after
                .split_whitespace()
                .nth(2)
                .and_then(|s| s.parse::<u32>().ok());
            if pgrp != Some(group) || pid == group {
                continue;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline"))
                .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
                .unwrap_or_default();
            found.push((pid, cmdline));
        }
        found
    }

    /// Sets the window so that the page's viewport is the given size.
    pub async fn set_viewport(&self, viewport: Viewport) -> Result<(), BrowserError> {
        let (width, height) = viewport.size();
        let what = || format!("setting the window to {width}x{height}");
        self.client
            .set_window_size(width, height)
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: what(),
                source: Box::new(source),
            })?;
        // The window includes no browser chrome in headless mode, but make sure: grow it by the
        // difference between the window and the page's viewport.
        let inner = self
            .execute("return [window.innerWidth, window.innerHeight]", vec![])
            .await?;
        let (w, h) = (
            inner[0].as_u64().unwrap_or(u64::from(width)),
            inner[1].as_u64().unwrap_or(u64::from(height)),
        );
        if (w, h) != (u64::from(width), u64::from(height)) {
            let dw = u32::try_from(u64::from(width).saturating_sub(w)).unwrap_or(0);
            let dh = u32::try_from(u64::from(height).saturating_sub(h)).unwrap_or(0);
            self.client
                .set_window_size(width + dw, height + dh)
                .await
                .map_err(|source| BrowserError::WebDriver {
                    what: what(),
                    source: Box::new(source),
                })?;
        }
        *self
            .viewport
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = viewport;
        Ok(())
    }

    /// Opens `url` and waits for its `load` event.
    pub async fn goto(&self, url: &str) -> Result<(), BrowserError> {
        self.client
            .goto(url)
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("opening {url}"),
                source: Box::new(source),
            })
    }

    /// The page's URL.
    pub async fn url(&self) -> Result<String, BrowserError> {
        self.client
            .current_url()
            .await
            .map(|u| u.to_string())
            .map_err(|source| BrowserError::WebDriver {
                what: "reading the URL".into(),
                source: Box::new(source),
            })
    }

    /// The first element matching `css`, once there is one (at most `timeout`).
    pub async fn wait_for(&self, css: &str, timeout: Duration) -> Result<Element, BrowserError> {
        let started = Instant::now();
        loop {
            match self.client.find(Locator::Css(css)).await {
                Ok(element) => return Ok(element),
                Err(e) if e.is_no_such_element() => {}
                Err(source) => {
                    return Err(BrowserError::WebDriver {
                        what: format!("finding {css}"),
                        source: Box::new(source),
                    });
                }
            }
            if started.elapsed() > timeout {
                return Err(self.timeout(format!("an element {css}"), timeout).await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the JavaScript expression `condition` is truthy in the page (at most
    /// `timeout`); answers its last value. `what` names it in the error.
    pub async fn wait_until(
        &self,
        what: &str,
        condition: &str,
        timeout: Duration,
    ) -> Result<Value, BrowserError> {
        let started = Instant::now();
        let script = format!("return ({condition});");
        loop {
            // A navigation in progress makes a script fail now and then: look again.
            if let Ok(value) = self.client.execute(&script, vec![]).await
                && truthy(&value)
            {
                return Ok(value);
            }
            if started.elapsed() > timeout {
                return Err(self.timeout(what.to_string(), timeout).await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the page's URL satisfies `done` (at most `timeout`); answers it.
    pub async fn wait_for_url(
        &self,
        what: &str,
        done: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<String, BrowserError> {
        let started = Instant::now();
        loop {
            if let Ok(url) = self.url().await
                && done(&url)
            {
                return Ok(url);
            }
            if started.elapsed() > timeout {
                return Err(self.timeout(what.to_string(), timeout).await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether any element matches `css` now.
    pub async fn exists(&self, css: &str) -> Result<bool, BrowserError> {
        self.find_all(css).await.map(|all| !all.is_empty())
    }

    /// Every element matching `css` now.
    pub async fn find_all(&self, css: &str) -> Result<Vec<Element>, BrowserError> {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("finding {css}"),
                source: Box::new(source),
            })
    }

    /// Clicks the first element matching `css` (waiting for it, at most `timeout`).
    pub async fn click(&self, css: &str, timeout: Duration) -> Result<(), BrowserError> {
        let element = self.wait_for(css, timeout).await?;
        element
            .click()
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("clicking {css}"),
                source: Box::new(source),
            })
    }

    /// Types `text` into the first element matching `css` (waiting for it). For a file input,
    /// `text` is the path of the file to choose.
    pub async fn type_into(
        &self,
        css: &str,
        text: &str,
        timeout: Duration,
    ) -> Result<(), BrowserError> {
        let element = self.wait_for(css, timeout).await?;
        element
            .send_keys(text)
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("typing into {css}"),
                source: Box::new(source),
            })
    }

    /// The rendered text of the first element matching `css` (waiting for it).
    pub async fn text(&self, css: &str, timeout: Duration) -> Result<String, BrowserError> {
        let element = self.wait_for(css, timeout).await?;
        element
            .text()
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("reading the text of {css}"),
                source: Box::new(source),
            })
    }

    /// An attribute of the first element matching `css` (waiting for it).
    pub async fn attr(
        &self,
        css: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<String>, BrowserError> {
        let element = self.wait_for(css, timeout).await?;
        element
            .attr(name)
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("reading {name} of {css}"),
                source: Box::new(source),
            })
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the page and answers what
    /// it returns. WebDriver's scripts are not subject to the page's Content-Security-Policy.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value, BrowserError> {
        self.client
            .execute(script, args)
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("running a script: {}", first_line(script)),
                source: Box::new(source),
            })
    }

    /// Runs `script` in the page; it answers by calling `arguments[arguments.length - 1]`.
    pub async fn execute_async(
        &self,
        script: &str,
        args: Vec<Value>,
    ) -> Result<Value, BrowserError> {
        self.client
            .execute_async(script, args)
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("running a script: {}", first_line(script)),
                source: Box::new(source),
            })
    }

    /// Saves a screenshot of the viewport as `<screenshot_dir>/<step>.png`; answers its path.
    pub async fn screenshot(&self, step: &str) -> Result<PathBuf, BrowserError> {
        let png = self
            .client
            .screenshot()
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("taking the screenshot {step}"),
                source: Box::new(source),
            })?;
        let path = self.shots.join(format!("{}.png", sanitize(step)));
        let write = || {
            std::fs::create_dir_all(&self.shots)?;
            std::fs::write(&path, &png)
        };
        write().map_err(|source| BrowserError::File {
            path: path.clone(),
            what: "writing the screenshot".into(),
            source,
        })?;
        Ok(path)
    }

    /// The text of the dialog (`alert`, `confirm`, `prompt`) the page has open, if any: a
    /// dialog means a script of the page ran.
    pub async fn alert_present(&self) -> Result<Option<String>, BrowserError> {
        match self.client.get_alert_text().await {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.is_no_such_alert() => Ok(None),
            Err(source) => Err(BrowserError::WebDriver {
                what: "looking for a dialog".into(),
                source: Box::new(source),
            }),
        }
    }

    /// Waits until the download directory holds the complete file `name` (at most `timeout`)
    /// and answers its bytes.
    pub async fn download(&self, name: &str, timeout: Duration) -> Result<Vec<u8>, BrowserError> {
        let path = self.downloads().join(name);
        let partial = self.downloads().join(format!("{name}.crdownload"));
        let started = Instant::now();
        loop {
            if path.exists() && !partial.exists() {
                return std::fs::read(&path).map_err(|source| BrowserError::File {
                    path,
                    what: "reading the download".into(),
                    source,
                });
            }
            if started.elapsed() > timeout {
                let present: Vec<String> = std::fs::read_dir(self.downloads())
                    .map(|entries| {
                        entries
                            .flatten()
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                return Err(self
                    .timeout(
                        format!("the download {name} (the directory holds {present:?})"),
                        timeout,
                    )
                    .await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Runs axe-core (from `crates/maestro-testkit/axe`, injected through WebDriver, so the
    /// page's Content-Security-Policy does not stop it) on the page and answers the rules it
    /// breaks, of any impact.
    pub async fn axe(&self) -> Result<Vec<AxeViolation>, BrowserError> {
        let path = axe_script();
        let source = std::fs::read_to_string(&path).map_err(|source| BrowserError::File {
            path: path.clone(),
            what: "reading axe-core (npm ci in crates/maestro-testkit/axe, or \
                   scripts/prerequisites.sh)"
                .into(),
            source,
        })?;
        let loaded = self
            .execute(
                "if (!window.axe) { (0, eval)(arguments[0]); } return typeof window.axe;",
                vec![Value::String(source)],
            )
            .await?;
        if loaded != json!("object") {
            return Err(BrowserError::Answer {
                what: "loading axe-core".into(),
                answer: loaded,
            });
        }
        let answer = self
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 window.axe.run(document, { resultTypes: ['violations'] })
                   .then((r) => done({ ok: r.violations }))
                   .catch((e) => done({ error: String(e) }));",
                vec![],
            )
            .await?;
        match answer.get("ok") {
            Some(list) => serde_json::from_value(list.clone()).map_err(|_| BrowserError::Answer {
                what: "reading axe-core's violations".into(),
                answer: answer.clone(),
            }),
            None => Err(BrowserError::Answer {
                what: "running axe-core".into(),
                answer,
            }),
        }
    }

    /// Runs a method of Chromium's DevTools protocol (e.g. `Page.addScriptToEvaluateOnNewDocument`,
    /// to run a script in every page before the page's own) and answers its result.
    pub async fn cdp(&self, method: &str, params: Value) -> Result<Value, BrowserError> {
        self.client
            .issue_cmd(CdpCommand {
                cmd: method.to_string(),
                params,
            })
            .await
            .map_err(|source| BrowserError::WebDriver {
                what: format!("the DevTools method {method}"),
                source: Box::new(source),
            })
    }

    /// The peak resident set (`VmHWM`, in KiB) of each of this browser's renderer processes.
    pub fn renderer_peak_rss_kib(&self) -> Vec<u64> {
        self.chromium_processes()
            .into_iter()
            .filter(|(_, cmd)| cmd.contains("--type=renderer"))
            .filter_map(|(pid, _)| {
                std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .ok()?
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .collect()
    }

    /// Ends the WebDriver session (Chromium exits), then chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        kill_group(&mut self.driver);
    }

    async fn timeout(&self, what: String, waited: Duration) -> BrowserError {
        let url = self
            .url()
            .await
            .unwrap_or_else(|e| format!("(unknown: {e})"));
        let _ = self.screenshot("timeout").await;
        BrowserError::Timeout { what, waited, url }
    }

    /// What chromedriver wrote so far.
    pub fn driver_log(&self) -> String {
        self.driver_log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.driver);
        // The profile directory goes with `profile`; keep the field read.
        let _ = self.profile.path();
    }
}

/// The path of axe-core's script, installed by `npm ci` in `crates/maestro-testkit/axe`.
pub fn axe_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("axe/node_modules/axe-core/axe.min.js")
}

/// `target/web-screenshots`: under `$CARGO_TARGET_DIR` when set, else the target directory
/// the running test binary is in (`target/debug/deps/…`).
pub fn screenshot_root() -> PathBuf {
    target_dir().join("web-screenshots")
}

fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        return if dir.is_absolute() {
            dir
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(dir)
        };
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .find(|dir| dir.file_name().is_some_and(|n| n == "deps"))
                .and_then(|deps| deps.parent()?.parent().map(Path::to_path_buf))
        })
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

async fn connect(
    port: u16,
    profile: &tempfile::TempDir,
    downloads: &tempfile::TempDir,
    viewport: Viewport,
    extra_flags: &[&str],
    log: &Arc<Mutex<String>>,
) -> Result<Client, BrowserError> {
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let status = reqwest::Client::new();
    // chromedriver listens after a moment.
    loop {
        let ready = status
            .get(format!("{url}/status"))
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success());
        if ready.is_some() {
            break;
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(BrowserError::Start {
                reason: format!("nothing answered at {url}/status within {START_TIMEOUT:?}"),
                log: log_text(log),
            });
        }
        tokio::time::sleep(POLL).await;
    }
    let (width, height) = viewport.size();
    let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
    args.push(format!("--user-data-dir={}", profile.path().display()));
    args.push(format!("--window-size={width},{height}"));
    args.extend(extra_flags.iter().map(|s| s.to_string()));
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("browserName".into(), json!("chrome"));
    // A dialog stays open for `alert_present` to see.
    capabilities.insert("unhandledPromptBehavior".into(), json!("ignore"));
    capabilities.insert("pageLoadStrategy".into(), json!("normal"));
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": args,
            "prefs": {
                "download.default_directory": downloads.path(),
                "download.prompt_for_download": false,
                "download.directory_upgrade": true,
                "safebrowsing.enabled": false,
            },
        }),
    );
    let builder = ClientBuilder::rustls().map_err(|e| BrowserError::Start {
        reason: format!("cannot set up the WebDriver client: {e}"),
        log: String::new(),
    });
    let mut builder = builder?;
    builder.capabilities(capabilities);
    let client = tokio::time::timeout(START_TIMEOUT, builder.connect(&url))
        .await
        .map_err(|_| BrowserError::Start {
            reason: format!("no session within {START_TIMEOUT:?}"),
            log: log_text(log),
        })?
        .map_err(|e| BrowserError::Start {
            reason: format!("the new session was refused: {e}"),
            log: log_text(log),
        })?;
    // Headless Chromium saves downloads only when told where, through the DevTools protocol.
    let _ = client
        .issue_cmd(CdpCommand {
            cmd: "Browser.setDownloadBehavior".into(),
            params: json!({"behavior": "allow", "downloadPath": downloads.path()}),
        })
        .await;
    Ok(client)
}

/// chromedriver's own command that runs a DevTools protocol method.
#[derive(Debug)]
struct CdpCommand {
    cmd: String,
    params: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for CdpCommand {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"cmd": self.cmd, "params": self.params}).to_string()),
        )
    }
}

fn log_text(log: &Arc<Mutex<String>>) -> String {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

fn drain(mut pipe: Box<dyn std::io::Read + Send>, sink: &Mutex<String>) {
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = pipe.read(&mut buf) {
        let mut log = sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Keep the start and a bounded amount: a long test must not grow it without end.
        if log.len() < 64 * 1024 {
            log.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
}

/// Kills chromedriver's process group (chromedriver and the Chromium it started), and reaps
/// chromedriver.
fn kill_group(driver: &mut Child) {
    if matches!(driver.try_wait(), Ok(Some(_))) {
        // chromedriver is gone; Chromium may not be.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", driver.id())])
            .stderr(Stdio::null())
            .status();
        return;
    }
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", driver.id())])
        .stderr(Stdio::null())
        .status();
    let _ = driver.kill();
    let _ = driver.wait();
}

fn free_port() -> Result<u16, BrowserError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| BrowserError::Start {
        reason: format!("no free port on 127.0.0.1: {e}"),
        log: String::new(),
    })?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| BrowserError::Start {
            reason: format!("no free port on 127.0.0.1: {e}"),
            log: String::new(),
        })
}

fn temp_dir(prefix: &str) -> Result<tempfile::TempDir, BrowserError> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|source| BrowserError::File {
            path: std::env::temp_dir(),
            what: "creating a temporary directory".into(),
            source,
        })
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// A file name made of the step's letters, digits, `-` and `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn first_line(script: &str) -> &str {
    script.trim().lines().next().unwrap_or_default()
}
