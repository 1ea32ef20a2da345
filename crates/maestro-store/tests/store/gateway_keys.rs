//! The gateway's virtual keys over real HTTP on 127.0.0.1, kept in a real store: no key needed
//! while none exists; then a missing, unknown, revoked or expired key is a 401, a model the key
//! does not allow a 403 naming those it does, and a good key is served and recorded as its own.

use crate::common;

use std::sync::Arc;

use maestro_gateway::{Gateway, GatewayConfig, GatewayKey, GatewayStore, new_key};
use maestro_store::Store;
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sqlx::Connection;

use common::Db;

fn key(name: &str, models: Option<&[&str]>, expires_at_ms: Option<i64>) -> (String, GatewayKey) {
    let (secret, hash, prefix) = new_key();
    let key = GatewayKey {
        id: String::new(),
        name: name.into(),
        hash,
        prefix,
        models: models.map(|m| m.iter().map(|s| s.to_string()).collect()),
        budget_micro_usd: None,
        budget_tokens: None,
        period: None,
        rpm: None,
        tpm: None,
        expires_at_ms,
        created_at_ms: 0,
        created_by: "test".into(),
        revoked_at_ms: None,
    };
    (secret, key)
}

async fn call(base: &str, bearer: Option<&str>, model: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

async fn keys_guard_the_gateway_once_one_exists(db: Db) {
    let store = db.open().await;
    let upstream = ScriptedLlm::start((0..4).map(|_| Turn::text("hello").with_usage(10, 2))).await;
    let config: GatewayConfig = serde_json::from_value(json!({
        "upstreams": {"primary": {"kind": "openai", "base_url": upstream.base_url()}},
        "models": {
            "team-model": [{"upstream": "primary", "model": "some-model"}],
            "other-model": [{"upstream": "primary", "model": "some-model"}],
        },
    }))
    .unwrap();
    let gateway = Gateway::new(
        &config,
        Default::default(),
        Some(Arc::new(store.clone()) as Arc<dyn GatewayStore>),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = gateway.standalone_router();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // No key yet: the gateway is open, whatever the client sends.
    assert_eq!(call(&base, None, "team-model").await.0, 200);
    assert_eq!(call(&base, Some("placeholder"), "team-model").await.0, 200);

    let (good, good_key) = key("ana", Some(&["team-model"]), None);
    let good_key = store.insert_gateway_key(&good_key).await.unwrap().unwrap();
    let (old, old_key) = key("old", None, Some(1_000));
    store.insert_gateway_key(&old_key).await.unwrap().unwrap();
    let (gone, gone_key) = key("gone", None, None);
    let gone_key = store.insert_gateway_key(&gone_key).await.unwrap().unwrap();
    assert!(store.revoke_gateway_key(&gone_key.id).await.unwrap());
    assert!(!store.revoke_gateway_key("no-such-key").await.unwrap());
    // The gateway takes "no key exists" from memory for a second.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;

    for (bearer, says) in [
        (None, "requires a virtual key"),
        (
            Some("mk-not-a-key"),
            "not one of this gateway's virtual keys",
        ),
        (Some(old.as_str()), "has expired"),
        (Some(gone.as_str()), "was revoked"),
    ] {
        let (status, body) = call(&base, bearer, "team-model").await;
        assert_eq!(status, 401, "{bearer:?}: {body}");
        assert_eq!(body["error"]["code"], "invalid_api_key");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
        for secret in [&good, &old, &gone] {
            assert!(!message.contains(secret.as_str()), "{message}");
        }
    }

    let (status, body) = call(&base, Some(&good), "other-model").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "model_not_allowed");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("other-model") && message.contains("may call: team-model"),
        "{message}"
    );

    let (status, body) = call(&base, Some(&good), "team-model").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "hello");
    assert_eq!(upstream.requests().len(), 3);

    // The served request is recorded under its key.
    gateway.close().await;
    server.abort();
    let rows = store
        .gateway_usage(maestro_store::UsageGroup::Key, 0, i64::MAX)
        .await
        .unwrap();
    let ana = rows
        .iter()
        .find(|r| r.key.as_deref() == Some("ana"))
        .unwrap();
    assert_eq!(ana.requests, 1);

    // Listing never shows a key, only what recognises it.
    let listed = store.gateway_keys().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["ana", "old", "gone"]);
    assert_eq!(listed[0], good_key);
    assert!(good.starts_with(&listed[0].prefix));
    assert_eq!(listed[0].hash, maestro_gateway::key_hash(&good));
    let _: &Store = &store;
}

on_both_backends!(keys_guard_the_gateway_once_one_exists);

async fn a_name_is_given_to_one_key_even_when_creators_race(db: Db) {
    let store = db.open().await;
    let creators = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move {
            let (_, team) = key("team", None, None);
            store.insert_gateway_key(&team).await.unwrap()
        })
    });
    let mut made = Vec::new();
    let mut refused = Vec::new();
    for creator in futures::future::join_all(creators).await {
        match creator.unwrap() {
            Ok(key) => made.push(key),
            Err(existing) => refused.push(existing),
        }
    }
    let keys = store.gateway_keys().await.unwrap();
    let teams = keys.iter().filter(|k| k.name == "team").count();
    assert_eq!(teams, 1, "{keys:?}");
    assert_eq!(made.len(), 1);
    // Each creator that lost is told which key has the name.
    assert_eq!(refused.len(), 7);
    assert!(refused.iter().all(|k| k.id == made[0].id), "{refused:?}");

    // A revoked key keeps its name.
    assert!(store.revoke_gateway_key(&made[0].id).await.unwrap());
    let (_, again) = key("team", None, None);
    let existing = store.insert_gateway_key(&again).await.unwrap().unwrap_err();
    assert_eq!(existing.id, made[0].id);
    assert!(existing.revoked_at_ms.is_some());
}

on_both_backends!(a_name_is_given_to_one_key_even_when_creators_race);

async fn keys_of_one_name_in_an_older_store_are_told_apart_by_the_upgrade(db: Db) {
    // A store as version 11 left it: three keys named "ci", one "solo", with usage under each.
    let old = Store::connect(&db.url).await.unwrap();
    old.migrate_to(11).await.unwrap();
    old.close().await;
    let mut conn = sqlx::AnyConnection::connect(&db.raw_url()).await.unwrap();
    for (id, name, created_at) in [
        ("k1", "ci", 1_000),
        ("k2", "ci", 2_000),
        ("k3", "ci", 2_000),
        ("k4", "solo", 3_000),
    ] {
        sqlx::query::<sqlx::Any>(
            "INSERT INTO gateway_keys (id, name, hash, prefix, created_at, created_by) \
             VALUES ($1, $2, $3, 'mk-abc', $4, 'test')",
        )
        .bind(id)
        .bind(name)
        .bind(format!("hash-{id}"))
        .bind(created_at)
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query::<sqlx::Any>(
            "INSERT INTO gateway_usage (at, key_id, key_name, endpoint, model, prompt_tokens, \
             completion_tokens, latency_ms, status, http_status) \
             VALUES (5000, $1, $2, 'chat', 'team-model', 10, 1, 5, 'ok', 200)",
        )
        .bind(id)
        .bind(name)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    conn.close().await.unwrap();

    let store = db.open().await;
    let names: Vec<(String, String)> = store
        .gateway_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| (k.id, k.name))
        .collect();
    // The oldest keeps its name; the others get their id beside it.
    assert_eq!(
        names,
        [
            ("k1".to_string(), "ci".to_string()),
            ("k2".to_string(), "ci (k2)".to_string()),
            ("k3".to_string(), "ci (k3)".to_string()),
            ("k4".to_string(), "solo".to_string()),
        ]
    );
    // Their usage is summed apart from then on.
    let mut by_key: Vec<(Option<String>, u64)> = store
        .gateway_usage(maestro_store::UsageGroup::Key, 0, i64::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.requests))
        .collect();
    by_key.sort();
    assert_eq!(
        by_key,
        [
            (Some("ci".to_string()), 1),
            (Some("ci (k2)".to_string()), 1),
            (Some("ci (k3)".to_string()), 1),
            (Some("solo".to_string()), 1),
        ]
    );
}

on_both_backends!(keys_of_one_name_in_an_older_store_are_told_apart_by_the_upgrade);
