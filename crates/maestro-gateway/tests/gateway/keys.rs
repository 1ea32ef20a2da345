//! Virtual keys over real HTTP on 127.0.0.1: `/v1/models` authenticates like the other routes
//! and lists only what the key may call; a key's token budget reserves the chat template's
//! allowance and every one of the request's `n` choices.

use crate::support;

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use support::{Served, client, key, serve_keyed};

const OPEN: &str = "mk-open-key-with-every-model";
const NARROW: &str = "mk-narrow-key-with-one-model";
const BUDGETED: &str = "mk-budgeted-key-with-few-tokens";

fn two_models(url: &str) -> maestro_gateway::GatewayConfig {
    serde_json::from_value(json!({
        "upstreams": {"primary": {"kind": "openai", "base_url": url}},
        "models": {
            "team-model": [{"upstream": "primary", "model": "some-model"}],
            "secret-model": [{"upstream": "primary", "model": "other-model"}],
        },
    }))
    .unwrap()
}

async fn get_models(gateway: &Served, bearer: Option<&str>) -> (u16, Value) {
    let mut request = client().get(format!("{}/models", gateway.base_url()));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

fn ids(models: &Value) -> Vec<&str> {
    models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn models_needs_a_usable_key_once_keys_exist_and_lists_only_what_it_may_call() {
    let upstream = ScriptedLlm::start([]).await;
    let gateway = serve_keyed(
        two_models(&upstream.base_url()),
        &[],
        vec![
            key(OPEN, "open", None, None),
            key(NARROW, "narrow", Some(&["team-model"]), None),
        ],
    )
    .await;

    for bearer in [None, Some("mk-not-a-key-of-this-gateway")] {
        let (status, body) = get_models(&gateway, bearer).await;
        assert_eq!(status, 401, "{bearer:?}: {body}");
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert_eq!(body["error"]["type"], "authentication_error");
        assert!(body["error"]["message"].is_string());
        assert!(body.get("data").is_none());
    }

    let (status, body) = get_models(&gateway, Some(OPEN)).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&body), ["secret-model", "team-model"]);

    let (status, body) = get_models(&gateway, Some(NARROW)).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&body), ["team-model"]);

    // An unknown model's 404 lists only what the key may call.
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .bearer_auth(NARROW)
        .json(&json!({"model": "made-up-model", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("team-model"), "{message}");
    assert!(!message.contains("secret-model"), "{message}");
    assert!(upstream.requests().is_empty());
}

#[tokio::test]
async fn models_is_open_while_no_key_exists() {
    let upstream = ScriptedLlm::start([]).await;
    let gateway = serve_keyed(two_models(&upstream.base_url()), &[], Vec::new()).await;
    for bearer in [None, Some("sk-placeholder")] {
        let (status, body) = get_models(&gateway, bearer).await;
        assert_eq!(status, 200, "{bearer:?}: {body}");
        assert_eq!(ids(&body), ["secret-model", "team-model"]);
    }
}

/// The old estimate of `[{"role":"user","content":"hi"}]` (32 bytes of JSON): 8 tokens.
const HI_BYTES_ESTIMATE: u64 = 8;
/// The chat template's allowance for one request of one message (docs/gateway.md).
const TEMPLATE_ONE_MESSAGE: u64 = 48 + 8;

/// `"hi"` asked of `team-model` with the key `BUDGETED`, `max_tokens` and `n` as given.
async fn ask_hi(gateway: &Served, max_tokens: u64, n: u64) -> reqwest::Response {
    client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .bearer_auth(BUDGETED)
        .json(&json!({
            "model": "team-model",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens,
            "n": n,
        }))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_budget_reserves_the_chat_template_so_a_short_prompt_cannot_overrun_it() {
    // llama.cpp counts 31 prompt tokens for "hi" with its chat template.
    let upstream = ScriptedLlm::start([Turn::text("hello").with_usage(31, 16)]).await;
    // Above what the prompt's bytes and max_tokens alone reserve (8 + 16 = 24), below what the
    // request may really spend (31 + 16 = 47).
    let gateway = serve_keyed(
        two_models(&upstream.base_url()),
        &[],
        vec![key(BUDGETED, "budgeted", None, Some(30))],
    )
    .await;
    let answer = ask_hi(&gateway, 16, 1).await;
    let status = answer.status();
    let body: Value = answer.json().await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded");
    assert_eq!(body["error"]["budget"]["cap"], "tokens");
    assert!(upstream.requests().is_empty());
    assert!(
        gateway
            .store
            .spent
            .lock()
            .unwrap()
            .values()
            .all(|s| *s == 0)
    );
}

#[tokio::test]
async fn n_choices_reserve_n_completions() {
    let upstream = ScriptedLlm::start([Turn::text("hello").with_usage(31, 100)]).await;
    let prompt = HI_BYTES_ESTIMATE + TEMPLATE_ONE_MESSAGE;
    // Room for the prompt and two answers of 100 tokens, not three.
    let gateway = serve_keyed(
        two_models(&upstream.base_url()),
        &[],
        vec![key(BUDGETED, "budgeted", None, Some((prompt + 250) as i64))],
    )
    .await;
    let answer = ask_hi(&gateway, 100, 3).await;
    let status = answer.status();
    let body: Value = answer.json().await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded");
    assert!(upstream.requests().is_empty());

    let answer = ask_hi(&gateway, 100, 1).await;
    assert_eq!(answer.status(), 200);
    let reserved: Vec<u64> = gateway
        .store
        .reserved
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.tokens)
        .collect();
    assert_eq!(reserved, [prompt + 100]);
}

#[tokio::test]
async fn n_3_reserves_three_completions() {
    let upstream = ScriptedLlm::start([Turn::text("hello").with_usage(31, 300)]).await;
    let prompt = HI_BYTES_ESTIMATE + TEMPLATE_ONE_MESSAGE;
    let gateway = serve_keyed(
        two_models(&upstream.base_url()),
        &[],
        vec![key(BUDGETED, "budgeted", None, Some(10_000))],
    )
    .await;
    let answer = ask_hi(&gateway, 100, 3).await;
    assert_eq!(answer.status(), 200);
    let reserved: Vec<u64> = gateway
        .store
        .reserved
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.tokens)
        .collect();
    assert_eq!(reserved, [prompt + 3 * 100]);
}

async fn get_model(gateway: &Served, bearer: Option<&str>, id: &str) -> (u16, Value) {
    let mut request = client().get(format!("{}/models/{id}", gateway.base_url()));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

#[tokio::test]
async fn one_model_is_retrieved_by_id_for_a_key_that_may_call_it() {
    let upstream = ScriptedLlm::start([]).await;
    let mut config = two_models(&upstream.base_url());
    // A public name with a slash, as model names of some servers have.
    config
        .models
        .insert("org/big-model".into(), config.models["team-model"].clone());
    let gateway = serve_keyed(
        config,
        &[],
        vec![
            key(OPEN, "open", None, None),
            key(NARROW, "narrow", Some(&["team-model"]), None),
        ],
    )
    .await;

    for id in ["team-model", "org/big-model", "secret-model"] {
        let (status, body) = get_model(&gateway, Some(OPEN), id).await;
        assert_eq!(status, 200, "{id}: {body}");
        assert_eq!(
            body,
            json!({"id": id, "object": "model", "created": 0, "owned_by": "maestro-gateway"})
        );
    }
    let (status, body) = get_model(&gateway, Some(NARROW), "team-model").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "team-model");

    // A model the key may not call, and one no route serves, are not found, in OpenAI's shape.
    for id in ["secret-model", "made-up-model"] {
        let (status, body) = get_model(&gateway, Some(NARROW), id).await;
        assert_eq!(status, 404, "{id}: {body}");
        assert_eq!(body["error"]["code"], "model_not_found", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(id) && message.contains("team-model"),
            "{message}"
        );
        assert!(
            !message.contains("secret-model") || id == "secret-model",
            "{message}"
        );
    }

    // It authenticates as /v1/models does.
    for bearer in [None, Some("mk-not-a-key-of-this-gateway")] {
        let (status, body) = get_model(&gateway, bearer, "team-model").await;
        assert_eq!(status, 401, "{bearer:?}: {body}");
        assert_eq!(body["error"]["code"], "invalid_api_key");
    }
    assert!(upstream.requests().is_empty());
}

#[tokio::test]
async fn refusals_are_counted_under_the_key_and_model_they_are_known_for() {
    let upstream = ScriptedLlm::start([Turn::text("hello").with_usage(8, 2)]).await;
    let mut limited = key("mk-limited-key-with-one-rpm", "limited", None, None);
    limited.rpm = Some(1);
    let mut revoked = key("mk-revoked-key-of-the-past", "revoked", None, None);
    revoked.revoked_at_ms = Some(1);
    let gateway = serve_keyed(
        two_models(&upstream.base_url()),
        &[],
        vec![
            key(BUDGETED, "budgeted", None, Some(10)),
            key(NARROW, "narrow", Some(&["team-model"]), None),
            limited,
            revoked,
        ],
    )
    .await;
    let chat = |bearer: &'static str, model: &'static str| {
        let url = format!("{}/chat/completions", gateway.base_url());
        async move {
            client()
                .post(url)
                .bearer_auth(bearer)
                .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    // Over its budget.
    assert_eq!(chat(BUDGETED, "team-model").await, 429);
    // A model the key may not call, and one no route serves.
    assert_eq!(chat(NARROW, "secret-model").await, 403);
    assert_eq!(chat(NARROW, "made-up-model").await, 404);
    // Over its rate: the first passes, the second is refused.
    assert_eq!(chat("mk-limited-key-with-one-rpm", "team-model").await, 200);
    assert_eq!(chat("mk-limited-key-with-one-rpm", "team-model").await, 429);
    // A revoked key.
    assert_eq!(chat("mk-revoked-key-of-the-past", "team-model").await, 401);
    // Over the size limit.
    let answer = client()
        .post(format!("{}/chat/completions", gateway.base_url()))
        .bearer_auth(NARROW)
        .json(&json!({"model": "team-model",
            "messages": [{"role": "user", "content": "x".repeat(3 * 1024 * 1024)}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);

    let metrics = gateway.metrics().await;
    for series in [
        r#"{upstream="",model="team-model",key="budgeted",status="refused"} 1"#,
        r#"{upstream="",model="secret-model",key="narrow",status="refused"} 1"#,
        r#"{upstream="",model="(unknown)",key="narrow",status="refused"} 2"#,
        r#"{upstream="",model="team-model",key="limited",status="refused"} 1"#,
        r#"{upstream="",model="(unknown)",key="revoked",status="refused"} 1"#,
    ] {
        assert!(
            metrics.contains(&format!("maestro_gateway_requests_total{series}")),
            "{series} in:\n{metrics}"
        );
    }
    assert!(!metrics.contains("made-up-model"), "{metrics}");
    assert_eq!(upstream.requests().len(), 1);
}
