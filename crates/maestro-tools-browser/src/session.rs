//! One run's browser: Chromium with a fresh profile, every request through the guard proxy,
//! and the page the run is on.

use std::path::Path;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::browser::{
    SetDownloadBehaviorBehavior, SetDownloadBehaviorParams,
};
use chromiumoxide::cdp::browser_protocol::page::{
    CaptureScreenshotFormat, EventJavascriptDialogOpening, HandleJavaScriptDialogParams,
};
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, BrowserConfig, Page};
use futures::StreamExt;
use maestro_tools_web::BrowserSettings;

use crate::error::BrowseError;
use crate::proxy::{GuardProxy, ProxyPolicy, Refusal};

/// Width and height of the browser's window, in CSS pixels.
const WINDOW: (u32, u32) = (1280, 900);
/// How often a condition is polled while waiting.
const POLL: Duration = Duration::from_millis(100);
/// Longest wait for a page to finish loading after an action.
const SETTLE: Duration = Duration::from_secs(10);

/// Chromium's switches (without their leading `--`) besides the profile, the proxy and the heap limit: no network of its
/// own (no QUIC, no DNS prefetch, no background requests, WebRTC only through the proxy), no
/// first-run or component work.
const SWITCHES: &[&str] = &[
    "disable-gpu",
    "no-first-run",
    "no-default-browser-check",
    "disable-quic",
    "dns-prefetch-disable",
    "disable-background-networking",
    "disable-component-update",
    "disable-domain-reliability",
    "disable-sync",
    "disable-default-apps",
    "disable-extensions",
    "disable-breakpad",
    "disable-dev-shm-usage",
    "metrics-recording-only",
    "no-pings",
    "force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "disable-features=NetworkPrediction,HttpsUpgrades,HttpsFirstBalancedModeAutoEnable,\
     OptimizationHints,MediaRouter,DialMediaRouteProvider,Translate",
    // Chromium sends loopback requests directly unless told otherwise; they must meet the
    // guard too.
    "proxy-bypass-list=<-loopback>",
];

/// A launched browser. Dropping it kills Chromium and removes the profile.
pub(crate) struct Session {
    // Field order is drop order: the browser (which kills Chromium) before its profile.
    browser: Browser,
    handler: tokio::task::JoinHandle<()>,
    /// The page the run is on; `None` until the first navigation.
    pub(crate) page: Option<Page>,
    /// Accepts the page's `alert`, `confirm` and `prompt` dialogs, which would stall it.
    dialogs: Option<tokio::task::JoinHandle<()>>,
    /// The dialogs' messages since the last call.
    dialog_texts: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    proxy: GuardProxy,
    profile: tempfile::TempDir,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("proxy", &self.proxy)
            .field("profile", &self.profile.path())
            .finish_non_exhaustive()
    }
}

impl Drop for Session {
    /// Kills Chromium, waits (briefly) for it to exit, then removes the profile: a profile
    /// removed under a running browser would be written to again and left behind.
    fn drop(&mut self) {
        self.handler.abort();
        if let Some(dialogs) = &self.dialogs {
            dialogs.abort();
        }
        if let Some(child) = self.browser.get_mut_child() {
            let _ = child.inner.start_kill();
            for _ in 0..100 {
                if !matches!(child.inner.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for _ in 0..50 {
            match std::fs::remove_dir_all(self.profile.path()) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => break,
            }
        }
    }
}

/// Whether this process runs as root, where Chromium refuses to start with its own sandbox.
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

impl Session {
    /// Starts the proxy and Chromium with a fresh profile.
    pub(crate) async fn launch(
        settings: &BrowserSettings,
        policy: ProxyPolicy,
    ) -> Result<Session, BrowseError> {
        let chromium = Path::new(&settings.chromium);
        if !chromium.is_file() {
            return Err(BrowseError::NoChromium(settings.chromium.clone()));
        }
        let proxy = GuardProxy::start(policy)
            .await
            .map_err(BrowseError::Proxy)?;
        let profile = tempfile::Builder::new()
            .prefix("maestro-browser-")
            .tempdir()
            .map_err(BrowseError::Profile)?;
        let mut args: Vec<String> = SWITCHES.iter().map(|s| (*s).to_string()).collect();
        args.push(format!("proxy-server=http://{}", proxy.addr()));
        args.push(format!(
            "js-flags=--max-old-space-size={}",
            settings.max_heap_mb.max(16)
        ));
        args.push(format!(
            "renderer-process-limit={}",
            settings.max_pages.max(1)
        ));
        let mut config = BrowserConfig::builder();
        if running_as_root() {
            config = config.no_sandbox();
        }
        let config = config
            .chrome_executable(chromium)
            .user_data_dir(profile.path())
            .disable_default_args()
            .window_size(WINDOW.0, WINDOW.1)
            .viewport(None)
            .launch_timeout(Duration::from_secs(30))
            .args(args)
            .build()
            .map_err(BrowseError::Config)?;
        let (browser, mut handler) =
            Browser::launch(config)
                .await
                .map_err(|source| BrowseError::Launch {
                    chromium: settings.chromium.clone(),
                    source,
                })?;
        let handler = tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                if event.is_err() {
                    tracing::debug!("browser connection: {event:?}");
                }
            }
        });
        Ok(Session {
            browser,
            handler,
            page: None,
            dialogs: None,
            dialog_texts: std::sync::Arc::default(),
            proxy,
            profile,
        })
    }

    /// Whether Chromium is still running (it may have crashed or been killed).
    pub(crate) fn alive(&mut self) -> bool {
        self.browser
            .get_mut_child()
            .is_some_and(|child| matches!(child.inner.try_wait(), Ok(None)))
    }

    /// The guard's refusals since the last call.
    pub(crate) fn take_refusals(&self) -> Vec<Refusal> {
        self.proxy.take_refusals()
    }

    /// Lets downloads land in `dir` (the workspace's `input/`).
    pub(crate) async fn download_to(&self, dir: &Path) -> Result<(), BrowseError> {
        let params = SetDownloadBehaviorParams::builder()
            .behavior(SetDownloadBehaviorBehavior::Allow)
            .download_path(dir.display().to_string())
            .build()
            .map_err(BrowseError::Config)?;
        self.browser
            .execute(params)
            .await
            .map_err(BrowseError::cdp)?;
        Ok(())
    }

    /// The page the run is on, opening a blank one when there is none.
    pub(crate) async fn page(&mut self) -> Result<Page, BrowseError> {
        if let Some(page) = &self.page {
            return Ok(page.clone());
        }
        let page = self
            .browser
            .new_page("about:blank")
            .await
            .map_err(BrowseError::cdp)?;
        let mut opened = page
            .event_listener::<EventJavascriptDialogOpening>()
            .await
            .map_err(BrowseError::cdp)?;
        let texts = std::sync::Arc::clone(&self.dialog_texts);
        let answering = page.clone();
        self.dialogs = Some(tokio::spawn(async move {
            while let Some(dialog) = opened.next().await {
                if let Ok(mut list) = texts.lock() {
                    list.push(dialog.message.clone());
                }
                let _ = answering
                    .execute(HandleJavaScriptDialogParams::new(true))
                    .await;
            }
        }));
        self.page = Some(page.clone());
        Ok(page)
    }

    /// The messages of the dialogs the page opened (and that were accepted) since the last call.
    pub(crate) fn take_dialogs(&self) -> Vec<String> {
        self.dialog_texts
            .lock()
            .map(|mut list| std::mem::take(&mut *list))
            .unwrap_or_default()
    }

    /// Closes pages beyond `max` (pop-ups, new tabs), never the run's own; how many it closed.
    pub(crate) async fn cap_pages(&self, max: usize) -> Result<usize, BrowseError> {
        let Some(current) = &self.page else {
            return Ok(0);
        };
        let pages = self.browser.pages().await.map_err(BrowseError::cdp)?;
        let others: Vec<Page> = pages
            .into_iter()
            .filter(|p| p.target_id() != current.target_id())
            .collect();
        let keep = max.saturating_sub(1);
        let mut closed = 0;
        for page in others.into_iter().skip(keep) {
            if page.close().await.is_ok() {
                closed += 1;
            }
        }
        Ok(closed)
    }
}

/// Navigates and waits for the page to load.
pub(crate) async fn goto(page: &Page, url: &str) -> Result<(), BrowseError> {
    page.goto(url)
        .await
        .map_err(|source| BrowseError::Navigate {
            url: url.to_string(),
            source,
        })?;
    settle(page).await;
    Ok(())
}

/// Waits until the document has loaded (a click or `back` may have started a navigation), at
/// most [`SETTLE`]: a page whose last image never arrives is still read as it is.
pub(crate) async fn settle(page: &Page) {
    let _ = tokio::time::timeout(SETTLE, loaded(page)).await;
}

async fn loaded(page: &Page) {
    tokio::time::sleep(POLL).await;
    loop {
        let state = page
            .evaluate("document.readyState")
            .await
            .ok()
            .and_then(|r| r.into_value::<String>().ok());
        if state.as_deref() == Some("complete") {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Clicks the first element matching `selector`.
pub(crate) async fn click(page: &Page, selector: &str) -> Result<(), BrowseError> {
    let element = find(page, selector).await?;
    element
        .click()
        .await
        .map_err(|e| BrowseError::action("click", selector, e))?;
    settle(page).await;
    Ok(())
}

/// Focuses the first element matching `selector` and types `text` into it.
pub(crate) async fn type_text(page: &Page, selector: &str, text: &str) -> Result<(), BrowseError> {
    let element = find(page, selector).await?;
    element
        .click()
        .await
        .map_err(|e| BrowseError::action("type", selector, e))?;
    element
        .type_str(text)
        .await
        .map_err(|e| BrowseError::action("type", selector, e))?;
    Ok(())
}

/// Waits until an element matches `selector` (the call's time limit bounds the wait).
pub(crate) async fn wait_for(page: &Page, selector: &str) {
    while page.find_element(selector).await.is_err() {
        tokio::time::sleep(POLL).await;
    }
}

/// Scrolls by most of a screen.
pub(crate) async fn scroll(page: &Page, down: bool) -> Result<(), BrowseError> {
    let sign = if down { "" } else { "-" };
    page.evaluate(format!(
        "window.scrollBy(0, {sign}window.innerHeight * 0.9)"
    ))
    .await
    .map_err(|e| BrowseError::action("scroll", "window", e))?;
    Ok(())
}

/// Goes back one page in the history.
pub(crate) async fn back(page: &Page) -> Result<(), BrowseError> {
    page.evaluate("history.back()")
        .await
        .map_err(|e| BrowseError::action("back", "history", e))?;
    settle(page).await;
    Ok(())
}

/// A PNG of the visible part of the page.
pub(crate) async fn screenshot(page: &Page) -> Result<Vec<u8>, BrowseError> {
    page.screenshot(
        ScreenshotParams::builder()
            .format(CaptureScreenshotFormat::Png)
            .build(),
    )
    .await
    .map_err(|e| BrowseError::action("screenshot", "page", e))
}

/// The page's URL, title and HTML.
pub(crate) async fn snapshot(page: &Page) -> Result<(String, String, String), BrowseError> {
    let url = page
        .url()
        .await
        .map_err(BrowseError::cdp)?
        .unwrap_or_else(|| "about:blank".to_string());
    let title = page
        .get_title()
        .await
        .map_err(BrowseError::cdp)?
        .unwrap_or_default();
    let html = page.content().await.map_err(BrowseError::cdp)?;
    Ok((url, title, html))
}

async fn find(page: &Page, selector: &str) -> Result<chromiumoxide::Element, BrowseError> {
    page.find_element(selector)
        .await
        .map_err(|_| BrowseError::NoElement(selector.to_string()))
}
