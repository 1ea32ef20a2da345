//! A real OpenID Connect provider for tests: the npm package `oidc-provider` (pinned in
//! `oidc/package-lock.json`) run by `node oidc/provider.mjs` on a free loopback port, with one
//! confidential client, PKCE (S256) required, and accounts whose `email` is the login name.
//!
//! # Prerequisites
//!
//! `node` 20.12 or later on `PATH` (Debian 12's own `nodejs` is 18: take node from NodeSource or
//! a later Debian) and the npm packages installed (`npm ci` in `crates/maestro-testkit/oidc`);
//! `scripts/prerequisites.sh` does both. Without them [`OidcProvider::start`] returns
//! [`OidcError::Unavailable`] with the fix, and a crate whose build script calls
//! `maestro_buildcheck::check_oidc_provider()` is built with the `no_oidc_provider` cfg, so its
//! tests show as ignored rather than failing:
//!
//! ```ignore
//! // build.rs: fn main() { maestro_buildcheck::check_oidc_provider(); }
//! #[tokio::test]
//! #[cfg_attr(no_oidc_provider, ignore = "needs node and oidc-provider: scripts/prerequisites.sh")]
//! async fn logs_in_with_oidc() {
//!     let provider = OidcProvider::start(OidcClient {
//!         id: "maestro".into(),
//!         secret: "s3cret".into(),
//!         redirect_uri: "http://127.0.0.1:8080/auth/callback".into(),
//!     })
//!     .unwrap();
//!     // Point the code under test at `provider.issuer()`, let it build its authorize URL, then:
//!     let callback = provider.login(&authorize_url, "alice@example.test").await.unwrap();
//!     // `callback` is the redirect URI with `code` and `state`: hand it to the code under test.
//! }
//! ```
//!
//! # What the provider does
//!
//! - Discovery at `{issuer}/.well-known/openid-configuration`; the issuer is
//!   `http://127.0.0.1:PORT` (plain http: its cookies are only `secure` on https requests).
//! - One client: `client_secret_basic` at the token endpoint, grant `authorization_code`,
//!   response type `code`, scopes `openid email profile`, the one redirect URI given.
//! - PKCE is required for every authorization request, S256 only.
//! - Any login name (with any password) is an account: `sub` and `email` are the name,
//!   `email_verified` is true, `name` is the part before `@`. The claims of the granted scopes
//!   are in the ID token as well as at userinfo.
//! - Login and consent are the library's development pages, plain HTML forms, which
//!   [`OidcProvider::login`] fills in over HTTP.
//! - The process is killed when the [`OidcProvider`] drops (and exits by itself when the test
//!   process goes away, as its stdin closes).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use url::Url;

/// How long the provider may take to start listening (node loads the package, makes its keys).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The exit status of `provider.mjs` on a node without what `oidc-provider` needs.
const NODE_TOO_OLD: i32 = 3;

/// The login follows at most this many redirects and forms before giving up.
const MAX_STEPS: usize = 20;

/// The one client the provider knows.
#[derive(Debug, Clone)]
pub struct OidcClient {
    /// `client_id`.
    pub id: String,
    /// `client_secret`, sent with HTTP basic authentication at the token endpoint.
    pub secret: String,
    /// The only redirect URI the client may use.
    pub redirect_uri: String,
}

/// Why the provider could not be started or a login did not complete.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// A prerequisite is missing on this machine (node, or the npm packages): the test cannot
    /// run here. Tests built with the `no_oidc_provider` cfg are ignored instead.
    #[error("the test OpenID Connect provider cannot run here: {reason}")]
    Unavailable {
        /// What is missing and how to install it.
        reason: String,
    },
    /// The provider process started but did not report that it listens.
    #[error("the test OpenID Connect provider ({script}) did not start: {reason}\n{stderr}")]
    Start {
        /// The script that was run.
        script: PathBuf,
        /// What went wrong.
        reason: String,
        /// What the process wrote on stderr.
        stderr: String,
    },
    /// A request of the login could not be made.
    #[error("OpenID Connect login: request to {url} failed")]
    Http {
        /// The URL requested.
        url: String,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },
    /// The provider answered something the login does not expect.
    #[error("OpenID Connect login: {reason}")]
    Login {
        /// What was expected and what came.
        reason: String,
    },
}

/// A running `oidc-provider`; killed on drop.
#[derive(Debug)]
pub struct OidcProvider {
    issuer: String,
    client: OidcClient,
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl OidcProvider {
    /// What the provider wrote on stderr so far.
    fn stderr_text(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The directory of `provider.mjs`, `package.json` and (after `npm ci`) `node_modules`.
    pub fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("oidc")
    }

    /// Starts the provider with `client` registered and waits until it listens. Blocks (about a
    /// second; up to a minute on a loaded machine).
    pub fn start(client: OidcClient) -> Result<OidcProvider, OidcError> {
        let dir = OidcProvider::dir();
        let script = dir.join("provider.mjs");
        if !dir.join("node_modules/oidc-provider/package.json").exists() {
            return Err(OidcError::Unavailable {
                reason: format!(
                    "the npm packages are not installed in {}: run `npm ci` there, or \
                     scripts/prerequisites.sh",
                    dir.display()
                ),
            });
        }
        let mut child = match Command::new("node")
            .arg(&script)
            .current_dir(&dir)
            .env("OIDC_PORT", "0")
            .env("OIDC_CLIENT_ID", &client.id)
            .env("OIDC_CLIENT_SECRET", &client.secret)
            .env("OIDC_REDIRECT_URIS", &client.redirect_uri)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(OidcError::Unavailable {
                    reason: "node is not on PATH: apt-get install nodejs npm, or \
                             scripts/prerequisites.sh"
                        .into(),
                });
            }
            Err(e) => {
                return Err(OidcError::Start {
                    script,
                    reason: format!("cannot run node: {e}"),
                    stderr: String::new(),
                });
            }
        };
        // stderr is drained all along (a full pipe would stop node) and kept for error reports.
        let stderr = Arc::new(Mutex::new(String::new()));
        let (Some(mut err_pipe), Some(stdout)) = (child.stderr.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(OidcError::Start {
                script,
                reason: "node was started without its stdout and stderr pipes".into(),
                stderr: String::new(),
            });
        };
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err_pipe.read(&mut buf) {
                sink.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = ready_tx.send(line);
            }
            for _ in lines {}
        });
        // Built before waiting, so that a provider that never gets ready is still killed.
        let mut provider = OidcProvider {
            issuer: String::new(),
            client,
            child,
            stderr,
        };
        let fail = |provider: &OidcProvider, reason: String| OidcError::Start {
            script: script.clone(),
            reason,
            stderr: provider.stderr_text(),
        };
        let line = match ready_rx.recv_timeout(START_TIMEOUT) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(fail(
                    &provider,
                    format!("no ready line on stdout within {START_TIMEOUT:?}"),
                ));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = provider.child.wait().ok();
                // Let the stderr reader take the last words.
                std::thread::sleep(Duration::from_millis(100));
                if status.and_then(|s| s.code()) == Some(NODE_TOO_OLD) {
                    let reason = provider.stderr_text().trim().to_string();
                    return Err(OidcError::Unavailable { reason });
                }
                return Err(fail(
                    &provider,
                    format!("it exited before listening ({status:?})"),
                ));
            }
        };
        let issuer = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v.get("issuer")?.as_str().map(str::to_owned));
        match issuer {
            Some(issuer) => {
                provider.issuer = issuer;
                Ok(provider)
            }
            None => Err(fail(
                &provider,
                format!("its first line is not {{\"issuer\": …}}: {line}"),
            )),
        }
    }

    /// The issuer URL, `http://127.0.0.1:PORT` (no trailing slash); discovery is at
    /// `{issuer}/.well-known/openid-configuration`.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The client the provider was started with.
    pub fn client(&self) -> &OidcClient {
        &self.client
    }

    /// Logs in as `email` the way a browser would, with a fresh cookie jar: GETs
    /// `authorize_url`, follows the provider's redirects, submits its login form (`email`, any
    /// password) and its consent form, and stops at the redirect to the client's redirect URI,
    /// which it returns without fetching it. That URL carries `code`, `state` and `iss`, or
    /// `error` when the provider refused the request (say, no PKCE challenge).
    pub async fn login(&self, authorize_url: &str, email: &str) -> Result<String, OidcError> {
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|source| OidcError::Http {
                url: authorize_url.to_string(),
                source,
            })?;
        let mut next = Request::Get(authorize_url.to_string());
        for _ in 0..MAX_STEPS {
            let url = next.url().to_string();
            let sent = match &next {
                Request::Get(url) => http.get(url).send().await,
                Request::Post(url, form) => http.post(url).form(form).send().await,
            };
            let response = sent.map_err(|source| OidcError::Http {
                url: url.clone(),
                source,
            })?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| OidcError::Login {
                        reason: format!("{url} answered {status} without a Location header"),
                    })?;
                let target = Url::parse(&url)
                    .and_then(|base| base.join(location))
                    .map_err(|e| OidcError::Login {
                        reason: format!("{url} redirected to {location:?}, not a URL: {e}"),
                    })?;
                if self.is_redirect_uri(&target) {
                    return Ok(target.to_string());
                }
                next = Request::Get(target.to_string());
                continue;
            }
            let body = response.text().await.map_err(|source| OidcError::Http {
                url: url.clone(),
                source,
            })?;
            if !status.is_success() {
                return Err(OidcError::Login {
                    reason: format!("{url} answered {status}: {}", excerpt(&body)),
                });
            }
            let (action, prompt) = form_of(&body).ok_or_else(|| OidcError::Login {
                reason: format!(
                    "{url} answered a page without the login or consent form: {}",
                    excerpt(&body)
                ),
            })?;
            let action = Url::parse(&url)
                .and_then(|base| base.join(&action))
                .map_err(|e| OidcError::Login {
                    reason: format!("the form at {url} posts to {action:?}, not a URL: {e}"),
                })?;
            let form = match prompt.as_str() {
                "login" => vec![
                    ("prompt", "login".to_string()),
                    ("login", email.to_string()),
                    ("password", "any".to_string()),
                ],
                "consent" => vec![("prompt", "consent".to_string())],
                other => {
                    return Err(OidcError::Login {
                        reason: format!("the form at {url} is for the prompt {other:?}"),
                    });
                }
            };
            next = Request::Post(action.to_string(), form);
        }
        Err(OidcError::Login {
            reason: format!(
                "no redirect to {} after {MAX_STEPS} steps from {authorize_url}",
                self.client.redirect_uri
            ),
        })
    }

    /// True when `target` is the client's redirect URI (whatever its query and fragment).
    fn is_redirect_uri(&self, target: &Url) -> bool {
        let Ok(mut expected) = Url::parse(&self.client.redirect_uri) else {
            return false;
        };
        let mut target = target.clone();
        for url in [&mut expected, &mut target] {
            url.set_query(None);
            url.set_fragment(None);
        }
        target == expected
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One step of the login.
enum Request {
    Get(String),
    Post(String, Vec<(&'static str, String)>),
}

impl Request {
    fn url(&self) -> &str {
        match self {
            Request::Get(url) | Request::Post(url, _) => url,
        }
    }
}

/// The first form's `action` and its hidden `prompt` value, from the provider's interaction
/// page (`<form … action="…" method="post"><input type="hidden" name="prompt" value="login"/>`).
fn form_of(html: &str) -> Option<(String, String)> {
    let form = &html[html.find("<form")?..];
    let action = attribute(form, "action")?;
    let prompt_at = form.find("name=\"prompt\"")?;
    let prompt = attribute(&form[prompt_at..], "value")?;
    Some((unescape(&action), unescape(&prompt)))
}

/// The value of the first `name="…"` attribute in `html`.
fn attribute(html: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = html.find(&key)? + key.len();
    let len = html[start..].find('"')?;
    Some(html[start..start + len].to_string())
}

fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The start of an error page, for error messages.
fn excerpt(body: &str) -> String {
    body.chars().take(2000).collect()
}
