//! Virtual keys' budgets and rate limits over real HTTP on 127.0.0.1, on a real store: a burst
//! of concurrent requests never passes a key's budget (each reserves its worst case on the
//! budget ledger first), a refusal is a 429 that says which budget and when it resets, a budget
//! per period starts again in the next period, and the RPM and TPM limits hold (on PostgreSQL,
//! through the store too, as several gateways would share them).

use crate::common;

use std::sync::Arc;

use maestro_gateway::{Gateway, GatewayConfig, GatewayKey, GatewayStore, Price, Prices, new_key};
use maestro_store::{Store, UsageGroup};
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::Db;

/// The prompt every request sends: its estimate is 64 tokens (32 bytes of JSON, 4 a token: 8;
/// and the chat template's allowance, 48 a request and 8 a message).
fn prompt() -> Value {
    json!([{"role": "user", "content": "hi"}])
}

struct Limits {
    budget_tokens: Option<i64>,
    budget_micro_usd: Option<i64>,
    period: Option<&'static str>,
    rpm: Option<i64>,
    tpm: Option<i64>,
}

const NONE: Limits = Limits {
    budget_tokens: None,
    budget_micro_usd: None,
    period: None,
    rpm: None,
    tpm: None,
};

async fn make_key(store: &Store, name: &str, limits: Limits) -> (String, GatewayKey) {
    let (secret, hash, prefix) = new_key();
    let key = GatewayKey {
        id: String::new(),
        name: name.into(),
        hash,
        prefix,
        models: None,
        budget_micro_usd: limits.budget_micro_usd,
        budget_tokens: limits.budget_tokens,
        period: limits.period.map(str::to_string),
        rpm: limits.rpm,
        tpm: limits.tpm,
        expires_at_ms: None,
        created_at_ms: 0,
        created_by: "test".into(),
        revoked_at_ms: None,
    };
    let key = store.insert_gateway_key(&key).await.unwrap().unwrap();
    (secret, key)
}

struct Served {
    gateway: Gateway,
    base: String,
    server: tokio::task::JoinHandle<()>,
}

async fn serve(store: &Store, upstream: &ScriptedLlm, prices: Prices) -> Served {
    let config: GatewayConfig = serde_json::from_value(json!({
        "upstreams": {"primary": {"kind": "openai", "base_url": upstream.base_url()}},
        "models": {"team-model": [{"upstream": "primary", "model": "some-model"}]},
    }))
    .unwrap();
    let gateway = Gateway::new(
        &config,
        prices,
        Some(Arc::new(store.clone()) as Arc<dyn GatewayStore>),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = gateway.standalone_router();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Served {
        gateway,
        base,
        server,
    }
}

/// `some-model` at `usd` per million tokens, prompt and answer alike.
fn per_mtok(usd: f64) -> Prices {
    Prices::from([(
        "some-model".to_string(),
        Price {
            input_per_mtok: usd,
            output_per_mtok: usd,
            cached_input_per_mtok: None,
        },
    )])
}

async fn call(http: &reqwest::Client, base: &str, key: &str, body: Value) -> (u16, Value) {
    let answer = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

/// Waits until no reservation of `budget` is open (settles run after the answer).
async fn settled(store: &Store, budget: &str) -> maestro_store::BudgetState {
    for _ in 0..200 {
        let state = store.budget_state(budget).await.unwrap().unwrap();
        if state.reserved.tokens == 0 && state.reserved.micro_usd == 0 {
            return state;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("reservations of {budget} stayed open");
}

async fn a_burst_never_passes_a_keys_budget(db: Db) {
    let store = db.open().await;
    // Each answer spends 64 prompt and 10 answer tokens: exactly what a request reserves (its
    // prompt's estimate and its max_tokens), so the budget of 740 fits ten.
    let upstream =
        ScriptedLlm::start((0..100).map(|_| Turn::text("hello").with_usage(64, 10))).await;
    let served = serve(&store, &upstream, per_mtok(1.0)).await;
    let (secret, key) = make_key(
        &store,
        "team",
        Limits {
            budget_tokens: Some(740),
            ..NONE
        },
    )
    .await;
    let http = reqwest::Client::new();
    let body = json!({"model": "team-model", "messages": prompt(), "max_tokens": 10});
    let calls = (0..100).map(|_| {
        let (http, base, secret, body) = (
            http.clone(),
            served.base.clone(),
            secret.clone(),
            body.clone(),
        );
        tokio::spawn(async move { call(&http, &base, &secret, body).await })
    });
    let answers = futures::future::join_all(calls).await;
    let mut ok = 0;
    for answer in answers {
        let (status, body) = answer.unwrap();
        match status {
            200 => ok += 1,
            429 => {
                let error = &body["error"];
                assert_eq!(error["code"], "budget_exceeded", "{body}");
                assert_eq!(error["budget"]["cap"], "tokens", "{body}");
                assert_eq!(error["budget"]["limit"], 740, "{body}");
                assert_eq!(error["budget"]["resets_at"], Value::Null, "{body}");
                let message = error["message"].as_str().unwrap();
                assert!(
                    message.contains("token budget") && message.contains("does not reset"),
                    "{message}"
                );
                assert!(!message.contains(&secret), "{message}");
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(ok, 10, "ten requests fit the budget");
    assert_eq!(
        upstream.requests().len(),
        10,
        "only admitted requests went upstream"
    );
    // The client's own answer cap went upstream unchanged.
    assert!(upstream.requests().iter().all(|r| r["max_tokens"] == 10));
    let state = settled(&store, &format!("key:{}", key.id)).await;
    assert_eq!(state.spent.tokens, 740);

    served.gateway.close().await;
    served.server.abort();
    let rows = store
        .gateway_usage(UsageGroup::Key, 0, i64::MAX)
        .await
        .unwrap();
    let team = rows
        .iter()
        .find(|r| r.key.as_deref() == Some("team"))
        .unwrap();
    assert_eq!(team.requests, 10);
    assert!(team.prompt_tokens + team.completion_tokens <= 740);
}

on_both_backends!(a_burst_never_passes_a_keys_budget);

async fn a_dollar_budget_per_day_refuses_with_its_reset_and_needs_prices(db: Db) {
    let store = db.open().await;
    let upstream = ScriptedLlm::start((0..4).map(|_| Turn::text("hello").with_usage(8, 10))).await;
    // 64 prompt tokens (the estimate) at $10/M and 100 answer tokens at $10/M: a request
    // reserves $0.00164; the answer spends 18 tokens, $0.00018.
    let served = serve(&store, &upstream, per_mtok(10.0)).await;
    let (secret, key) = make_key(
        &store,
        "daily",
        Limits {
            budget_micro_usd: Some(1_700),
            period: Some("day"),
            ..NONE
        },
    )
    .await;
    let http = reqwest::Client::new();
    let body = json!({"model": "team-model", "messages": prompt(), "max_tokens": 100});
    let (status, answer) = call(&http, &served.base, &secret, body.clone()).await;
    assert_eq!(status, 200, "{answer}");
    let today = time::OffsetDateTime::now_utc().date();
    let budget = format!("key:{}:day:{today}", key.id);
    let state = settled(&store, &budget).await;
    assert_eq!(state.spent.micro_usd, 180);
    assert_eq!(state.spent.tokens, 18);
    // $0.00018 spent: another $0.00164 would pass $0.0017.
    let (status, answer) = call(&http, &served.base, &secret, body.clone()).await;
    assert_eq!(status, 429, "{answer}");
    let error = &answer["error"];
    assert_eq!(error["budget"]["cap"], "usd");
    assert_eq!(error["budget"]["period"], "day");
    assert_eq!(error["budget"]["limit"], 0.0017);
    assert_eq!(error["budget"]["spent"], 0.00018);
    let tomorrow = today.next_day().unwrap();
    assert_eq!(
        error["budget"]["resets_at"],
        format!("{tomorrow}T00:00:00Z"),
        "{answer}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("dollar budget per day") && message.contains("it resets at"),
        "{message}"
    );
    // A smaller answer cap fits ($0.00114 more).
    let small = json!({"model": "team-model", "messages": prompt(), "max_tokens": 50});
    assert_eq!(call(&http, &served.base, &secret, small).await.0, 200);
    served.gateway.close().await;
    served.server.abort();

    // A route whose model has no price cannot be bounded in dollars: refused before any call.
    let unpriced = serve(&store, &upstream, Prices::new()).await;
    let before = upstream.requests().len();
    let (status, answer) = call(&http, &unpriced.base, &secret, body).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "model_unpriced");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("llm.models.some-model.price")
    );
    assert_eq!(upstream.requests().len(), before);
    unpriced.gateway.close().await;
    unpriced.server.abort();
}

on_both_backends!(a_dollar_budget_per_day_refuses_with_its_reset_and_needs_prices);

async fn a_budgeted_request_without_max_tokens_gets_the_default_cap(db: Db) {
    let store = db.open().await;
    let upstream = ScriptedLlm::start([Turn::text("hello").with_usage(8, 10)]).await;
    let served = serve(&store, &upstream, Prices::new()).await;
    let (secret, key) = make_key(
        &store,
        "capped",
        Limits {
            budget_tokens: Some(100_000),
            ..NONE
        },
    )
    .await;
    let http = reqwest::Client::new();
    let (status, answer) = call(
        &http,
        &served.base,
        &secret,
        json!({"model": "team-model", "messages": prompt()}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(upstream.requests()[0]["max_tokens"], 4096);
    let state = settled(&store, &format!("key:{}", key.id)).await;
    assert_eq!(state.spent.tokens, 18);

    // A budget smaller than the default cap: the 429 says to send a smaller max_tokens.
    let (small, _) = make_key(
        &store,
        "small",
        Limits {
            budget_tokens: Some(1_000),
            ..NONE
        },
    )
    .await;
    let (status, answer) = call(
        &http,
        &served.base,
        &small,
        json!({"model": "team-model", "messages": prompt()}),
    )
    .await;
    assert_eq!(status, 429, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("up to 4160 tokens") && message.contains("send a smaller max_tokens"),
        "{message}"
    );
    served.gateway.close().await;
    served.server.abort();
}

on_both_backends!(a_budgeted_request_without_max_tokens_gets_the_default_cap);

async fn rpm_and_tpm_refuse_with_429_and_retry_after(db: Db) {
    let store = db.open().await;
    let upstream = ScriptedLlm::start((0..10).map(|_| Turn::text("hello").with_usage(8, 2))).await;
    let served = serve(&store, &upstream, Prices::new()).await;
    let http = reqwest::Client::new();
    let body = json!({"model": "team-model", "messages": prompt()});

    let (rpm_key, _) = make_key(
        &store,
        "rpm",
        Limits {
            rpm: Some(3),
            ..NONE
        },
    )
    .await;
    for _ in 0..3 {
        assert_eq!(
            call(&http, &served.base, &rpm_key, body.clone()).await.0,
            200
        );
    }
    let answer = http
        .post(format!("{}/v1/chat/completions", served.base))
        .bearer_auth(&rpm_key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 429);
    let retry: u64 = answer.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=61).contains(&retry), "{retry}");
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "rpm_exceeded", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limited to 3 requests per minute")
    );

    // TPM 132: the first request counts its prompt's estimate, 64, and then its answer's 2 (66);
    // the second is admitted below 132 and brings the minute to 132; a third finds it used.
    let (tpm_key, _) = make_key(
        &store,
        "tpm",
        Limits {
            tpm: Some(132),
            ..NONE
        },
    )
    .await;
    assert_eq!(
        call(&http, &served.base, &tpm_key, body.clone()).await.0,
        200
    );
    assert_eq!(
        call(&http, &served.base, &tpm_key, body.clone()).await.0,
        200
    );
    let (status, answer) = call(&http, &served.base, &tpm_key, body.clone()).await;
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["error"]["code"], "tpm_exceeded", "{answer}");
    // A prompt larger than a minute's tokens can never pass: said so.
    let (tiny_key, _) = make_key(
        &store,
        "tiny",
        Limits {
            tpm: Some(5),
            ..NONE
        },
    )
    .await;
    let (status, answer) = call(&http, &served.base, &tiny_key, body.clone()).await;
    assert_eq!(status, 429, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("larger than the 5 tokens per minute"),
        "{answer}"
    );
    assert_eq!(upstream.requests().len(), 5);
    served.gateway.close().await;
    served.server.abort();
}

on_both_backends!(rpm_and_tpm_refuse_with_429_and_retry_after);

async fn a_shared_store_counts_rate_limits_across_gateways(db: Db) {
    let store = db.open().await;
    let upstream = ScriptedLlm::start((0..10).map(|_| Turn::text("hello").with_usage(8, 2))).await;
    let a = serve(&store, &upstream, Prices::new()).await;
    let b = serve(&store, &upstream, Prices::new()).await;
    let (key, stored) = make_key(
        &store,
        "shared",
        Limits {
            rpm: Some(4),
            ..NONE
        },
    )
    .await;
    let http = reqwest::Client::new();
    let body = json!({"model": "team-model", "messages": prompt()});
    let mut ok = 0;
    for i in 0..6 {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        let (status, _) = call(&http, base, &key, body.clone()).await;
        if status == 200 {
            ok += 1;
        }
    }
    if store.shared() {
        // Each gateway alone would admit 4 (8 in all); through the store they admit 4 together.
        assert_eq!(ok, 4);
    } else {
        assert_eq!(
            ok, 6,
            "two gateways on one SQLite file each count their own"
        );
    }
    // The store's window itself refuses past the limit, on either backend.
    let minute = 60_000 * 1_000;
    let take = maestro_gateway::RateTake {
        requests: 1,
        tokens: 1,
        rpm: Some(2),
        tpm: None,
    };
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(
            store
                .gateway_rate_take(&stored.id, minute, take)
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        taken,
        [Ok(()), Ok(()), Err(maestro_gateway::RateLimit::Rpm)]
    );
    for served in [a, b] {
        served.gateway.close().await;
        served.server.abort();
    }
}

on_both_backends!(a_shared_store_counts_rate_limits_across_gateways);
