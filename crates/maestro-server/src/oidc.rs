//! OpenID Connect login: the authorization code flow with PKCE, against any provider that
//! publishes its discovery document (Google, Gitea, Keycloak, …), through the `openidconnect`
//! crate. The login in flight (its PKCE verifier and nonce) is kept in the store under the
//! hash of its `state`, so that any node can finish a login another node began.

use std::sync::Arc;
use std::time::Duration;

use maestro_protocol::Secret;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet,
    EndpointSet, HttpRequest, HttpResponse, IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier,
    RedirectUrl, Scope, TokenResponse as _,
};
use tokio::sync::OnceCell;

/// How long a login may take between the redirect to the provider and the way back.
pub(crate) const LOGIN_TTL: Duration = Duration::from_secs(600);

type Client = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// What the configuration says about the provider.
#[derive(Debug, Clone)]
pub(crate) struct OidcSettings {
    pub(crate) issuer: String,
    pub(crate) client_id: String,
    pub(crate) client_secret: Option<Secret>,
    pub(crate) redirect_url: String,
    pub(crate) scopes: Vec<String>,
}

/// The provider, discovered at the first login (and again after a failed discovery).
#[derive(Debug)]
pub(crate) struct Oidc {
    settings: OidcSettings,
    http: reqwest::Client,
    client: OnceCell<Arc<Client>>,
}

/// Why a login failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoginError {
    /// The provider's discovery document could not be read.
    #[error("the OpenID provider {issuer} could not be reached or described itself wrongly: {why}")]
    Discovery {
        /// The configured issuer.
        issuer: String,
        /// What went wrong.
        why: String,
    },
    /// A configured URL is not one.
    #[error("`{field}` is not a URL: {why}")]
    Url {
        /// The configuration key.
        field: &'static str,
        /// Why it does not parse.
        why: String,
    },
    /// The code could not be exchanged, or the ID token did not verify.
    #[error("the OpenID provider's answer was refused: {0}")]
    Exchange(String),
    /// The provider gave no e-mail address for the user.
    #[error(
        "the OpenID provider gave no verified e-mail address; ask for the `email` scope \
         (`auth.oidc.scopes`) and make sure the account has a verified address"
    )]
    NoEmail,
}

/// A login begun: where to send the browser, and what to keep until it comes back.
pub(crate) struct Begun {
    pub(crate) url: String,
    pub(crate) state: String,
    pub(crate) verifier: String,
    pub(crate) nonce: String,
}

async fn send(http: reqwest::Client, request: HttpRequest) -> Result<HttpResponse, reqwest::Error> {
    let request = reqwest::Request::try_from(request)?;
    let response = http.execute(request).await?;
    let mut out = HttpResponse::new(Vec::new());
    *out.status_mut() = response.status();
    *out.headers_mut() = response.headers().clone();
    *out.body_mut() = response.bytes().await?.to_vec();
    Ok(out)
}

impl Oidc {
    pub(crate) fn new(settings: OidcSettings) -> Oidc {
        let http = reqwest::Client::builder()
            // Following redirects would let a provider's answer send the server elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(15))
            .build()
            .unwrap_or_default();
        Oidc {
            settings,
            http,
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> Result<Arc<Client>, LoginError> {
        self.client
            .get_or_try_init(|| async {
                let issuer =
                    IssuerUrl::new(self.settings.issuer.clone()).map_err(|e| LoginError::Url {
                        field: "auth.oidc.issuer",
                        why: e.to_string(),
                    })?;
                let http = self.http.clone();
                let call = move |request: HttpRequest| send(http.clone(), request);
                let metadata = CoreProviderMetadata::discover_async(issuer, &call)
                    .await
                    .map_err(|e| LoginError::Discovery {
                        issuer: self.settings.issuer.clone(),
                        why: maestro_app::error_chain(&e),
                    })?;
                let redirect =
                    RedirectUrl::new(self.settings.redirect_url.clone()).map_err(|e| {
                        LoginError::Url {
                            field: "auth.oidc.redirect_url",
                            why: e.to_string(),
                        }
                    })?;
                let client = CoreClient::from_provider_metadata(
                    metadata,
                    ClientId::new(self.settings.client_id.clone()),
                    self.settings
                        .client_secret
                        .as_ref()
                        .map(|s| ClientSecret::new(s.expose().to_string())),
                )
                .set_redirect_uri(redirect);
                Ok(Arc::new(client))
            })
            .await
            .cloned()
    }

    /// Where to send the browser to log in, with a new PKCE pair, state and nonce.
    pub(crate) async fn begin(&self) -> Result<Begun, LoginError> {
        let client = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in &self.settings.scopes {
            if scope != "openid" {
                request = request.add_scope(Scope::new(scope.clone()));
            }
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok(Begun {
            url: url.to_string(),
            state: state.secret().clone(),
            verifier: verifier.secret().clone(),
            nonce: nonce.secret().clone(),
        })
    }

    /// Exchanges the code with the login's verifier, verifies the ID token (signature,
    /// issuer, audience, expiry, nonce) and gives the user's e-mail address.
    pub(crate) async fn finish(
        &self,
        code: &str,
        verifier: &str,
        nonce: &str,
    ) -> Result<String, LoginError> {
        let client = self.client().await?;
        let http = self.http.clone();
        let call = move |request: HttpRequest| send(http.clone(), request);
        let token = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| LoginError::Exchange(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_string()))
            .request_async(&call)
            .await
            .map_err(|e| LoginError::Exchange(maestro_app::error_chain(&e)))?;
        let id_token = token
            .id_token()
            .ok_or_else(|| LoginError::Exchange("the answer has no ID token".to_string()))?;
        let claims = id_token
            .claims(&client.id_token_verifier(), &Nonce::new(nonce.to_string()))
            .map_err(|e| LoginError::Exchange(e.to_string()))?;
        if claims.email_verified() == Some(false) {
            return Err(LoginError::NoEmail);
        }
        claims
            .email()
            .map(|e| e.as_str().to_lowercase())
            .ok_or(LoginError::NoEmail)
    }
}
