//! The test OpenID Connect provider end to end, as a relying party would use it: discovery, an
//! authorization request with PKCE (S256), the login as `alice@example.test`, and the code
//! exchanged at the token endpoint. Ignored (`no_oidc_provider`) where node or the npm packages
//! are missing.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use maestro_testkit::{OidcClient, OidcProvider};
use pretty_assertions::assert_eq;
use serde_json::Value;
use sha2::{Digest, Sha256};
use url::Url;

const EMAIL: &str = "alice@example.test";

fn client() -> OidcClient {
    OidcClient {
        id: "maestro-test".into(),
        secret: "maestro-test-secret".into(),
        // Never fetched: the login stops at the redirect.
        redirect_uri: "http://127.0.0.1:9/auth/callback".into(),
    }
}

/// 43 to 128 characters of `[A-Za-z0-9-._~]`: 32 random bytes, base64url.
fn random_token() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

struct Endpoints {
    authorization: String,
    token: String,
}

async fn discover(provider: &OidcProvider) -> Endpoints {
    let config: Value = reqwest::get(format!(
        "{}/.well-known/openid-configuration",
        provider.issuer()
    ))
    .await
    .unwrap()
    .error_for_status()
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(config["issuer"], provider.issuer());
    assert_eq!(
        config["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    Endpoints {
        authorization: config["authorization_endpoint"].as_str().unwrap().into(),
        token: config["token_endpoint"].as_str().unwrap().into(),
    }
}

/// An authorization request for `openid email profile`, with a PKCE challenge for `verifier`
/// when there is one.
fn authorize_url(endpoint: &str, verifier: Option<&str>, state: &str, nonce: &str) -> String {
    let client = client();
    let mut url = Url::parse(endpoint).unwrap();
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &client.id)
            .append_pair("redirect_uri", &client.redirect_uri)
            .append_pair("scope", "openid email profile")
            .append_pair("state", state)
            .append_pair("nonce", nonce);
        if let Some(verifier) = verifier {
            let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
            query
                .append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256");
        }
    }
    url.to_string()
}

fn query_param(url: &Url, name: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Logs in as `EMAIL` with a fresh PKCE verifier and returns the code, the verifier and the
/// nonce, after checking the redirect carries the state and the issuer.
async fn authorize(provider: &OidcProvider, endpoints: &Endpoints) -> (String, String, String) {
    let (verifier, state, nonce) = (random_token(), random_token(), random_token());
    let url = authorize_url(&endpoints.authorization, Some(&verifier), &state, &nonce);
    let callback = Url::parse(&provider.login(&url, EMAIL).await.unwrap()).unwrap();
    assert!(
        callback.as_str().starts_with(&client().redirect_uri),
        "{callback}"
    );
    assert_eq!(query_param(&callback, "error"), None, "{callback}");
    assert_eq!(query_param(&callback, "state").as_deref(), Some(&*state));
    assert_eq!(
        query_param(&callback, "iss").as_deref(),
        Some(provider.issuer())
    );
    let code = query_param(&callback, "code").expect("a code in the redirect");
    (code, verifier, nonce)
}

async fn exchange(endpoints: &Endpoints, code: &str, verifier: &str) -> (u16, Value) {
    let client = client();
    let response = reqwest::Client::new()
        .post(&endpoints.token)
        .basic_auth(&client.id, Some(&client.secret))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &client.redirect_uri),
            ("code_verifier", verifier),
        ])
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The payload of a compact JWT, unverified.
fn jwt_payload(jwt: &str) -> Value {
    let payload = jwt.split('.').nth(1).expect("a JWT has three parts");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

#[tokio::test]
#[cfg_attr(
    no_oidc_provider,
    ignore = "needs node and the npm packages of crates/maestro-testkit/oidc: scripts/prerequisites.sh"
)]
async fn a_login_with_pkce_yields_an_id_token_for_the_email() {
    let provider = OidcProvider::start(client()).unwrap();
    let endpoints = discover(&provider).await;
    let (code, verifier, nonce) = authorize(&provider, &endpoints).await;

    let (status, tokens) = exchange(&endpoints, &code, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    let id_token = jwt_payload(tokens["id_token"].as_str().expect("an id_token"));
    assert_eq!(id_token["iss"], provider.issuer());
    assert_eq!(id_token["aud"], client().id);
    assert_eq!(id_token["sub"], EMAIL);
    assert_eq!(id_token["email"], EMAIL);
    assert_eq!(id_token["email_verified"], true);
    assert_eq!(id_token["nonce"], nonce.as_str());

    // A code is good once.
    let (status, again) = exchange(&endpoints, &code, &verifier).await;
    assert_eq!((status, &again["error"]), (400, &"invalid_grant".into()));
}

#[tokio::test]
#[cfg_attr(
    no_oidc_provider,
    ignore = "needs node and the npm packages of crates/maestro-testkit/oidc: scripts/prerequisites.sh"
)]
async fn a_code_exchanged_with_another_verifier_is_refused() {
    let provider = OidcProvider::start(client()).unwrap();
    let endpoints = discover(&provider).await;
    let (code, _verifier, _) = authorize(&provider, &endpoints).await;

    let (status, refused) = exchange(&endpoints, &code, &random_token()).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"], "invalid_grant");
    assert_eq!(refused.get("id_token"), None);
}

#[tokio::test]
#[cfg_attr(
    no_oidc_provider,
    ignore = "needs node and the npm packages of crates/maestro-testkit/oidc: scripts/prerequisites.sh"
)]
async fn an_authorization_request_without_pkce_is_refused() {
    let provider = OidcProvider::start(client()).unwrap();
    let endpoints = discover(&provider).await;
    let url = authorize_url(&endpoints.authorization, None, "s", "n");

    let callback = Url::parse(&provider.login(&url, EMAIL).await.unwrap()).unwrap();
    assert_eq!(
        query_param(&callback, "error").as_deref(),
        Some("invalid_request"),
        "{callback}"
    );
    assert_eq!(query_param(&callback, "code"), None);
}
