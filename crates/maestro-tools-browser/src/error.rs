//! Why a BrowseWeb call failed. Every message is a sentence the model (or the operator) can
//! act on.

use maestro_tools::workspace_file::FileError;

/// Why starting the browser, navigating or an action failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowseError {
    /// The configured Chromium program does not exist.
    #[error(
        "Chromium was not found at {0}; install Debian's chromium (apt-get install chromium) or \
         set `web.browser.chromium` in .maestro/config.yaml to its path"
    )]
    NoChromium(String),
    /// Chromium did not start or did not open its DevTools connection.
    #[error(
        "Chromium ({chromium}) did not start: {source}; check that it runs on its own \
         (`{chromium} --headless --dump-dom about:blank`)"
    )]
    Launch {
        /// The program that was started.
        chromium: String,
        /// What chromiumoxide reported.
        #[source]
        source: chromiumoxide::error::CdpError,
    },
    /// The guard proxy could not listen on 127.0.0.1.
    #[error("the browser's guard proxy could not listen on 127.0.0.1: {0}")]
    Proxy(#[source] std::io::Error),
    /// The fresh profile directory could not be made.
    #[error("the browser's profile directory could not be created in the temporary directory: {0}")]
    Profile(#[source] std::io::Error),
    /// A DevTools command could not be built (a bug, reported as is).
    #[error("the browser could not be configured: {0}")]
    Config(String),
    /// A DevTools command failed.
    #[error("the browser did not answer: {0}")]
    Cdp(#[source] chromiumoxide::error::CdpError),
    /// Navigation failed.
    #[error("could not open {url}: {source}")]
    Navigate {
        /// The URL asked for.
        url: String,
        /// What Chromium reported (`net::ERR_…`).
        #[source]
        source: chromiumoxide::error::CdpError,
    },
    /// An action failed on an element that exists.
    #[error("{action} on {target} failed: {source}")]
    Action {
        /// The action (`click`, `type`, …).
        action: &'static str,
        /// Its selector or object.
        target: String,
        /// What Chromium reported.
        #[source]
        source: chromiumoxide::error::CdpError,
    },
    /// No element matches the selector.
    #[error("no element matches the CSS selector {0:?} on this page")]
    NoElement(String),
    /// The URL is not http(s).
    #[error("{0}")]
    Url(String),
    /// A screenshot or download path was refused, or the file could not be written.
    #[error(transparent)]
    File(#[from] FileError),
    /// Writing the screenshot failed.
    #[error("could not write the screenshot {path}: {source}")]
    Write {
        /// The workspace-relative path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The page's HTML could not be converted.
    #[error("the page could not be turned into text: {0}")]
    Text(#[source] maestro_tools_web::WebError),
}

impl BrowseError {
    pub(crate) fn cdp(source: chromiumoxide::error::CdpError) -> Self {
        BrowseError::Cdp(source)
    }

    pub(crate) fn action(
        action: &'static str,
        target: &str,
        source: chromiumoxide::error::CdpError,
    ) -> Self {
        BrowseError::Action {
            action,
            target: target.to_string(),
            source,
        }
    }
}
