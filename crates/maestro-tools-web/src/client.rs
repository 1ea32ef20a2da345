//! The guarded HTTP client every web tool uses, and the bounded body reader.

use std::error::Error as _;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use maestro_tools::CancellationToken;
use reqwest::redirect::{Attempt, Policy};

use super::guard::{Blocked, GuardedResolver, HostLookup, HostPolicy};
use super::{WebConfig, WebError};

/// Redirect hops followed before giving up.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// An HTTP client whose every connection and redirect passes the SSRF guard.
///
/// The HTTP client itself (its TLS setup reads and parses the system's root certificates) is
/// built on the first request, so a run that never fetches does not pay for it.
#[derive(Clone)]
pub struct WebClient {
    /// `Err` when the HTTP client could not be built (the TLS backend failed to initialise);
    /// every request then reports it. There is deliberately no unguarded fallback client.
    http: Arc<OnceLock<Result<reqwest::Client, Arc<reqwest::Error>>>>,
    resolver: Arc<GuardedResolver>,
    policy: Arc<HostPolicy>,
    pub(crate) max_bytes: u64,
    timeout: Duration,
}

impl std::fmt::Debug for WebClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebClient")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// A response whose status is a success, with the URL it finally came from.
#[derive(Debug)]
pub struct Fetched {
    /// The response, its body not yet read.
    pub response: reqwest::Response,
    /// The URL that answered, after redirects.
    pub final_url: String,
    /// The `Content-Type` header, lower-cased; `None` when absent or not plain ASCII.
    pub content_type: Option<String>,
}

/// A response read whole by [`WebClient::get_bytes`].
#[derive(Debug)]
pub struct FetchedBytes {
    /// The URL that answered, after redirects.
    pub final_url: String,
    /// The `Content-Type` header, lower-cased; `None` when absent or not plain ASCII.
    pub content_type: Option<String>,
    /// The body; `None` when it was larger than the limit.
    pub body: Option<Vec<u8>>,
}

impl WebClient {
    /// A client with `config`'s limits and guard (`web.allow_private`, `web.allow_hosts`),
    /// resolving host names with `lookup` ([`SystemLookup`](super::SystemLookup) outside tests).
    pub fn new(config: &WebConfig, lookup: Arc<dyn HostLookup>) -> Self {
        Self::with_policy(
            config,
            HostPolicy::new(config.allow_private, &config.allow_hosts),
            lookup,
        )
    }

    pub(crate) fn with_policy(
        config: &WebConfig,
        policy: HostPolicy,
        lookup: Arc<dyn HostLookup>,
    ) -> Self {
        let policy = Arc::new(policy);
        let resolver = GuardedResolver {
            policy: Arc::clone(&policy),
            lookup,
        };
        WebClient {
            http: Arc::default(),
            resolver: Arc::new(resolver),
            policy,
            max_bytes: config.max_bytes,
            timeout: config.timeout(),
        }
    }

    /// The guarded HTTP client, built on first use.
    fn http(&self) -> Result<&reqwest::Client, WebError> {
        let built = self.http.get_or_init(|| {
            let redirect_policy = Arc::clone(&self.policy);
            reqwest::Client::builder()
                // A proxy would resolve names itself and bypass the guard.
                .no_proxy()
                .dns_resolver(Arc::clone(&self.resolver))
                .redirect(Policy::custom(move |attempt| {
                    check_redirect(&redirect_policy, attempt)
                }))
                .timeout(self.timeout)
                .connect_timeout(self.timeout.min(Duration::from_secs(10)))
                .user_agent(concat!("maestro/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(Arc::new)
        });
        built
            .as_ref()
            .map_err(|e| WebError::ClientSetup(Arc::clone(e)))
    }

    /// GETs `url` (http or https only), following guarded redirects, and fails on a non-2xx
    /// status. Errors are sentences for the model.
    pub async fn get(&self, url: &str, cancel: &CancellationToken) -> Result<Fetched, WebError> {
        let parsed = url::Url::parse(url).map_err(|source| WebError::InvalidUrl {
            url: url.to_string(),
            source,
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(WebError::UnsupportedScheme {
                scheme: parsed.scheme().to_string(),
                url: url.to_string(),
            });
        }
        if parsed.host_str().is_none() {
            return Err(WebError::NoHost(url.to_string()));
        }
        self.policy.check_url(&parsed)?;
        let http = self.http()?;
        let response = tokio::select! {
            r = http.get(parsed).send() => r.map_err(|e| self.request_error(e))?,
            () = cancel.cancelled() => return Err(WebError::Cancelled),
        };
        let final_url = response.url().to_string();
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("(no location)");
            return Err(WebError::RedirectNotFollowed {
                url: final_url,
                location: location.to_string(),
            });
        }
        if !status.is_success() {
            return Err(WebError::Status {
                url: final_url,
                status,
            });
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.to_ascii_lowercase());
        Ok(Fetched {
            response,
            final_url,
            content_type,
        })
    }

    /// GETs `url` as [`WebClient::get`] does and reads its whole body, at most `limit` bytes
    /// (and never more than `web.max_bytes`): `Ok(None)` when the body is larger. For callers
    /// outside the web tools that need a document's bytes (the knowledge base).
    pub async fn get_bytes(
        &self,
        url: &str,
        limit: u64,
        cancel: &CancellationToken,
    ) -> Result<FetchedBytes, WebError> {
        let Fetched {
            response,
            final_url,
            content_type,
        } = self.get(url, cancel).await?;
        let (body, cut) = read_limited(self, response, limit.min(self.max_bytes), cancel).await?;
        Ok(FetchedBytes {
            final_url,
            content_type,
            body: (!cut).then_some(body),
        })
    }

    /// A failed request, with the sentence [`describe`](Self::describe) makes of it.
    pub(crate) fn request_error(&self, source: reqwest::Error) -> WebError {
        WebError::Request {
            message: self.describe(&source),
            source,
        }
    }

    /// Turns a reqwest error into a sentence, naming the SSRF refusal when that is the cause.
    fn describe(&self, err: &reqwest::Error) -> String {
        let mut source = err.source();
        while let Some(cause) = source {
            if let Some(blocked) = cause.downcast_ref::<Blocked>() {
                return format!(
                    "{blocked}; private, loopback and metadata addresses are not reachable from \
                     the web tools"
                );
            }
            if let Some(hops) = cause.downcast_ref::<TooManyRedirects>() {
                return hops.to_string();
            }
            if let Some(scheme) = cause.downcast_ref::<BadRedirectScheme>() {
                return scheme.0.clone();
            }
            source = cause.source();
        }
        if err.is_timeout() {
            return format!("request timed out after {}s", self.timeout.as_secs());
        }
        let mut text = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

#[derive(Debug)]
struct TooManyRedirects;

impl std::fmt::Display for TooManyRedirects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped after {MAX_REDIRECTS} redirects")
    }
}

impl std::error::Error for TooManyRedirects {}

#[derive(Debug)]
struct BadRedirectScheme(String);

impl std::fmt::Display for BadRedirectScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadRedirectScheme {}

fn check_redirect(policy: &HostPolicy, attempt: Attempt<'_>) -> reqwest::redirect::Action {
    if attempt.previous().len() > MAX_REDIRECTS {
        return attempt.error(TooManyRedirects);
    }
    let url = attempt.url();
    if !matches!(url.scheme(), "http" | "https") {
        let msg = format!("refused redirect to {url}: only http and https are followed");
        return attempt.error(BadRedirectScheme(msg));
    }
    // Names are checked by the resolver when the new connection is made.
    match policy.check_url(url) {
        Ok(()) => attempt.follow(),
        Err(blocked) => attempt.error(blocked),
    }
}

/// Reads at most `limit` bytes of the body; the flag says whether more was left unread.
pub(crate) async fn read_limited(
    client: &WebClient,
    mut response: reqwest::Response,
    limit: u64,
    cancel: &CancellationToken,
) -> Result<(Vec<u8>, bool), WebError> {
    let mut body = Vec::new();
    loop {
        let chunk = tokio::select! {
            c = response.chunk() => c.map_err(|e| client.request_error(e))?,
            () = cancel.cancelled() => return Err(WebError::Cancelled),
        };
        let Some(chunk) = chunk else {
            return Ok((body, false));
        };
        let room = usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
}
