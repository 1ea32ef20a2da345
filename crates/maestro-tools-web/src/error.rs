//! Why a web tool call failed. Every message is a sentence the model can act on.

use maestro_tools::workspace_file::FileError;

/// Why a request, a conversion or a download failed.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// The HTTP client could not be built (its TLS backend failed to initialise); every request
    /// fails with this until the process restarts.
    #[error("the HTTP client could not be set up: {0}")]
    ClientSetup(#[source] std::sync::Arc<reqwest::Error>),
    /// The URL the model sent does not parse.
    #[error("invalid URL {url:?}: {source}")]
    InvalidUrl {
        /// The URL as sent.
        url: String,
        /// Why it does not parse.
        #[source]
        source: url::ParseError,
    },
    /// The URL's scheme is neither `http` nor `https`.
    #[error("unsupported URL scheme {scheme:?} in {url}: only http and https are fetched")]
    UnsupportedScheme {
        /// The scheme (`file`, `ftp`, ...).
        scheme: String,
        /// The URL as sent.
        url: String,
    },
    /// The URL has no host to connect to; holds the URL.
    #[error("URL {0} has no host")]
    NoHost(String),
    /// The SSRF guard refused an IP-literal host before any request was made.
    #[error(transparent)]
    Blocked(#[from] super::guard::Blocked),
    /// `message` names the cause a person can act on (the SSRF refusal, the redirect limit, a
    /// timeout), found in the source's chain.
    #[error("{message}")]
    Request {
        /// The sentence the model reads.
        message: String,
        /// reqwest's error, whose chain holds the cause.
        #[source]
        source: reqwest::Error,
    },
    /// The run was cancelled while the request or the download was under way.
    #[error("cancelled")]
    Cancelled,
    /// A redirect to a scheme other than http or https.
    #[error(
        "{url} redirects to {location}, which was not followed: only http and https redirects are"
    )]
    RedirectNotFollowed {
        /// The URL that answered with the redirect.
        url: String,
        /// Its `Location` header (`(no location)` when missing).
        location: String,
    },
    /// The server answered with a status other than 2xx.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// The URL that answered, after redirects.
        url: String,
        /// The status it answered with.
        status: reqwest::StatusCode,
    },
    /// WebFetch got something other than text (by its content type, or sniffed as binary).
    #[error(
        "{url} is {what}, not a text page; WebFetch reads HTML, plain text, markdown, JSON and XML. Use DownloadFile to save other files into input/"
    )]
    NotText {
        /// The URL that answered, after redirects.
        url: String,
        /// What it is: its MIME type, or `binary data`.
        what: String,
    },
    /// The task converting HTML to markdown panicked or was cancelled.
    #[error("converting the page failed: {0}")]
    Conversion(#[source] tokio::task::JoinError),
    /// The HTML to markdown converter failed on the page.
    #[error("the HTML could not be converted: {0}")]
    Html(#[source] std::io::Error),
    /// DownloadFile's `filename` holds a `/` or `\`, or is `.` or `..`; holds it.
    #[error("filename {0:?} must be a plain file name without folders; it is saved into input/")]
    FileNameWithFolders(String),
    /// The response's `Content-Length` is over `web.max_bytes`; nothing was downloaded.
    #[error("the file is {length} bytes, larger than the {limit}-byte limit")]
    TooLarge {
        /// The announced length, in bytes.
        length: u64,
        /// `web.max_bytes`.
        limit: u64,
    },
    /// The body grew past `web.max_bytes` (holds the limit) while downloading; the partial file
    /// was removed.
    #[error("the file is larger than the {0}-byte limit; nothing was saved")]
    GrewTooLarge(u64),
    /// Writing the download to its partial file failed (a full disk, permissions).
    #[error("writing the file failed: {0}")]
    Write(#[source] std::io::Error),
    /// Renaming the finished partial file to its name in `input/` failed.
    #[error("cannot move the download into place: {0}")]
    Rename(#[source] std::io::Error),
    /// Every name from `<name>` to `<stem>-999.<ext>` is taken in `input/`; holds the name.
    #[error("input/ already holds 1000 files named like {0}; choose another filename")]
    NoFreeName(String),
    /// The file in `input/` cannot be created inside the workspace.
    #[error(transparent)]
    File(#[from] FileError),
    /// WebSearch was called but `web.search` is not set.
    #[error("WebSearch is not configured: set web.search.searxng_url")]
    SearchNotConfigured,
    /// WebSearch was called with an empty or blank query.
    #[error("the query is empty")]
    EmptyQuery,
    /// `web.search.searxng_url` does not parse as a URL.
    #[error("web.search.searxng_url {url:?} is not a URL: {source}")]
    SearchUrl {
        /// The configured value.
        url: String,
        /// Why it does not parse.
        #[source]
        source: url::ParseError,
    },
    /// The request to the search provider failed (refused, unreachable, an error status, ...).
    #[error("the search provider failed: {0}")]
    SearchProvider(#[source] Box<WebError>),
    /// The search provider's answer is not SearXNG's JSON (its JSON format is likely off).
    #[error("the search provider did not answer with SearXNG JSON ({0}); is format=json enabled?")]
    SearchAnswer(#[source] serde_json::Error),
}
