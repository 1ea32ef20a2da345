//! Why a web tool call failed. Every message is a sentence the model can act on.

use maestro_tools::workspace_file::FileError;

/// Why a request, a conversion or a download failed.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("the HTTP client could not be set up: {0}")]
    ClientSetup(#[source] std::sync::Arc<reqwest::Error>),
    #[error("invalid URL {url:?}: {source}")]
    InvalidUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("unsupported URL scheme {scheme:?} in {url}: only http and https are fetched")]
    UnsupportedScheme { scheme: String, url: String },
    #[error("URL {0} has no host")]
    NoHost(String),
    #[error(transparent)]
    Blocked(#[from] super::guard::Blocked),
    /// `message` names the cause a person can act on (the SSRF refusal, the redirect limit, a
    /// timeout), found in the source's chain.
    #[error("{message}")]
    Request {
        message: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("cancelled")]
    Cancelled,
    #[error(
        "{url} redirects to {location}, which was not followed: only http and https redirects are"
    )]
    RedirectNotFollowed { url: String, location: String },
    #[error("{url} answered HTTP {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error(
        "{url} is {what}, not a text page; WebFetch reads HTML, plain text, markdown, JSON and XML. Use DownloadFile to save other files into input/"
    )]
    NotText { url: String, what: String },
    #[error("converting the page failed: {0}")]
    Conversion(#[source] tokio::task::JoinError),
    #[error("the HTML could not be converted: {0}")]
    Html(#[source] std::io::Error),
    #[error("filename {0:?} must be a plain file name without folders; it is saved into input/")]
    FileNameWithFolders(String),
    #[error("the file is {length} bytes, larger than the {limit}-byte limit")]
    TooLarge { length: u64, limit: u64 },
    #[error("the file is larger than the {0}-byte limit; nothing was saved")]
    GrewTooLarge(u64),
    #[error("writing the file failed: {0}")]
    Write(#[source] std::io::Error),
    #[error("cannot move the download into place: {0}")]
    Rename(#[source] std::io::Error),
    #[error("input/ already holds 1000 files named like {0}; choose another filename")]
    NoFreeName(String),
    #[error(transparent)]
    File(#[from] FileError),
    #[error("WebSearch is not configured: set web.search.searxng_url")]
    SearchNotConfigured,
    #[error("the query is empty")]
    EmptyQuery,
    #[error("web.search.searxng_url {url:?} is not a URL: {source}")]
    SearchUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("the search provider failed: {0}")]
    SearchProvider(#[source] Box<WebError>),
    #[error("the search provider did not answer with SearXNG JSON ({0}); is format=json enabled?")]
    SearchAnswer(#[source] serde_json::Error),
}
