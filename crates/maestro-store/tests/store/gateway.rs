//! The gateway's usage records on both backends: written in one batch, summed per key, model
//! and job over a time range.

use crate::common;

use maestro_gateway::{GatewayStore, UsageRecord, UsageStatus};
use maestro_store::{UsageGroup, UsageTotal};
use pretty_assertions::assert_eq;
use sqlx::Connection;

use common::Db;

fn record(
    at_ms: i64,
    key: Option<&str>,
    model: &str,
    job: Option<&str>,
    tokens: (u64, u64),
    cost: Option<f64>,
) -> UsageRecord {
    UsageRecord {
        at_ms,
        key_id: key.map(|k| format!("id-{k}")),
        key_name: key.map(str::to_string),
        endpoint: "chat".into(),
        model: model.into(),
        upstream: Some("primary".into()),
        upstream_model: Some("some-model".into()),
        prompt_tokens: tokens.0,
        completion_tokens: tokens.1,
        cost_usd: cost,
        estimated: false,
        latency_ms: 12,
        status: UsageStatus::Ok,
        http_status: 200,
        job: job.map(str::to_string),
        movement: job.map(|_| "plan".to_string()),
    }
}

async fn usage_is_written_in_a_batch_and_summed_per_key_model_and_job(db: Db) {
    let store = db.open().await;
    let records = vec![
        record(
            1_000,
            Some("ana"),
            "team-model",
            Some("job-1"),
            (100, 10),
            Some(0.25),
        ),
        record(
            2_000,
            Some("ana"),
            "team-model",
            Some("job-1"),
            (200, 20),
            Some(0.5),
        ),
        record(3_000, Some("bo"), "embedder", None, (7, 0), None),
        // Outside the range asked for below.
        record(9_000, Some("bo"), "team-model", None, (1, 1), Some(100.0)),
    ];
    GatewayStore::record_usage(&store, &records).await.unwrap();

    let by_key = store
        .gateway_usage(UsageGroup::Key, 0, 5_000)
        .await
        .unwrap();
    assert_eq!(
        by_key,
        vec![
            UsageTotal {
                key: Some("ana".into()),
                model: None,
                job: None,
                requests: 2,
                prompt_tokens: 300,
                completion_tokens: 30,
                cost_usd: 0.75
            },
            UsageTotal {
                key: Some("bo".into()),
                model: None,
                job: None,
                requests: 1,
                prompt_tokens: 7,
                completion_tokens: 0,
                cost_usd: 0.0
            },
        ]
    );
    let by_model = store
        .gateway_usage(UsageGroup::Model, 0, 5_000)
        .await
        .unwrap();
    let models: Vec<(Option<String>, u64)> = by_model
        .iter()
        .map(|t| (t.model.clone(), t.requests))
        .collect();
    assert_eq!(
        models,
        vec![(Some("team-model".into()), 2), (Some("embedder".into()), 1)]
    );
    let by_job = store
        .gateway_usage(UsageGroup::Job, 0, 10_000)
        .await
        .unwrap();
    let jobs: Vec<(Option<String>, u64)> =
        by_job.iter().map(|t| (t.job.clone(), t.requests)).collect();
    assert_eq!(jobs, vec![(None, 2), (Some("job-1".into()), 2)]);
}

on_both_backends!(usage_is_written_in_a_batch_and_summed_per_key_model_and_job);

async fn a_record_of_what_was_charged_in_full_is_stored_as_an_estimate(db: Db) {
    let store = db.open().await;
    let mut charged = record(1_000, Some("ana"), "team-model", None, (64, 100), Some(0.1));
    charged.estimated = true;
    let reported = record(2_000, Some("ana"), "team-model", None, (31, 7), Some(0.01));
    GatewayStore::record_usage(&store, &[charged, reported])
        .await
        .unwrap();
    let mut conn = sqlx::AnyConnection::connect(&db.raw_url()).await.unwrap();
    let estimated: Vec<(i64, i64)> = sqlx::query_as::<sqlx::Any, (i64, i64)>(
        "SELECT prompt_tokens, estimated FROM gateway_usage ORDER BY at",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    assert_eq!(estimated, [(64, 1), (31, 0)]);
}

on_both_backends!(a_record_of_what_was_charged_in_full_is_stored_as_an_estimate);
