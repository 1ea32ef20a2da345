//! Pieces and the configuration overlay in the store, on SQLite and on a real PostgreSQL
//! cluster: versions taken once each however many writers race, deletions as tombstones, a
//! job's piece version, and the overlay's compare-and-set.

use crate::common;

use common::Db;
use maestro_store::{ConfigPut, JobQueue, NewJob, Store};
use pretty_assertions::assert_eq;
use serde_json::json;

on_both_backends!(
    pieces_are_versioned_listed_and_deleted,
    racing_piece_writes_take_every_version_once,
    a_job_records_the_piece_version_it_started_with,
    the_config_overlay_is_written_by_one_of_two_racing_writers,
    a_piece_written_through_one_handle_is_read_through_another,
);

async fn pieces_are_versioned_listed_and_deleted(db: Db) {
    let store = db.open().await;
    assert_eq!(store.piece_latest("review").await.unwrap(), None);
    let first = store
        .put_piece("review", Some("v1"), "alice")
        .await
        .unwrap();
    let second = store.put_piece("review", Some("v2"), "bob").await.unwrap();
    store.put_piece("build", Some("b1"), "alice").await.unwrap();
    assert_eq!((first.version, second.version), (1, 2));
    assert_eq!(second.created_by, "bob");
    let latest = store.piece_latest("review").await.unwrap().unwrap();
    assert_eq!((latest.version, latest.yaml.as_deref()), (2, Some("v2")));
    let old = store.piece_at("review", 1).await.unwrap().unwrap();
    assert_eq!(old.yaml.as_deref(), Some("v1"));
    assert_eq!(store.piece_at("review", 9).await.unwrap(), None);
    let names = |list: Vec<maestro_store::StoredPieceVersion>| {
        list.into_iter()
            .map(|p| (p.name, p.version))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(store.pieces_latest().await.unwrap()),
        vec![("build".to_string(), 1), ("review".to_string(), 2)]
    );

    let deleted = store
        .delete_piece("review", "carol")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((deleted.version, deleted.yaml), (3, None));
    // Deleting what is deleted writes nothing; the old versions stay readable.
    assert_eq!(store.delete_piece("review", "carol").await.unwrap(), None);
    assert_eq!(store.delete_piece("never", "carol").await.unwrap(), None);
    assert_eq!(
        names(store.pieces_latest().await.unwrap()),
        vec![("build".to_string(), 1)]
    );
    assert_eq!(
        store
            .piece_at("review", 2)
            .await
            .unwrap()
            .unwrap()
            .yaml
            .as_deref(),
        Some("v2")
    );
    // Written again after a deletion: the next version.
    let again = store.put_piece("review", Some("v4"), "dave").await.unwrap();
    assert_eq!(again.version, 4);
}

async fn racing_piece_writes_take_every_version_once(db: Db) {
    let store = db.open().await;
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .put_piece("shared", Some(&format!("text {i}")), &format!("writer-{i}"))
                    .await
                    .unwrap()
                    .version
            })
        })
        .collect();
    let mut versions = Vec::new();
    for writer in writers {
        versions.push(writer.await.unwrap());
    }
    versions.sort_unstable();
    assert_eq!(versions, (1..=8).collect::<Vec<i64>>());
}

async fn a_job_records_the_piece_version_it_started_with(db: Db) {
    let store = db.open().await;
    let id = store
        .submit(NewJob::new("review", "look", "alice"))
        .await
        .unwrap();
    assert_eq!(store.job(id).await.unwrap().unwrap().piece_version, None);
    assert!(store.set_job_piece_version(id, 3).await.unwrap());
    // A resumed run does not move it.
    assert!(!store.set_job_piece_version(id, 4).await.unwrap());
    assert_eq!(store.job(id).await.unwrap().unwrap().piece_version, Some(3));
}

async fn the_config_overlay_is_written_by_one_of_two_racing_writers(db: Db) {
    let store = db.open().await;
    assert_eq!(store.config_version().await.unwrap(), 0);
    assert_eq!(store.config_overlay().await.unwrap(), None);
    let first = json!({"llm": {"model": "one"}});
    assert_eq!(
        store.put_config_overlay(0, &first, "alice").await.unwrap(),
        ConfigPut::Written(1)
    );
    // Both read version 1; exactly one writes version 2.
    let racers: Vec<_> = ["bob", "carol"]
        .into_iter()
        .map(|who| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .put_config_overlay(1, &json!({"llm": {"model": who}}), who)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut results = Vec::new();
    for racer in racers {
        results.push(racer.await.unwrap());
    }
    let won: Vec<_> = results
        .iter()
        .filter(|r| matches!(r, ConfigPut::Written(2)))
        .collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert!(
        results.contains(&ConfigPut::Stale { current: 2 }),
        "{results:?}"
    );
    let newest = store.config_overlay().await.unwrap().unwrap();
    assert_eq!(newest.version, 2);
    assert_eq!(newest.doc["llm"]["model"], json!(newest.updated_by));
    // A writer that read an old version, or a version that never was, writes nothing.
    assert_eq!(
        store.put_config_overlay(1, &first, "dave").await.unwrap(),
        ConfigPut::Stale { current: 2 }
    );
    assert_eq!(
        store.put_config_overlay(7, &first, "dave").await.unwrap(),
        ConfigPut::Stale { current: 2 }
    );
    assert_eq!(store.config_version().await.unwrap(), 2);
}

async fn a_piece_written_through_one_handle_is_read_through_another(db: Db) {
    let a = db.open().await;
    let b = Store::open(&db.url).await.unwrap();
    a.put_piece("shared", Some("from a"), "node-a")
        .await
        .unwrap();
    let seen = b.piece_latest("shared").await.unwrap().unwrap();
    assert_eq!(seen.yaml.as_deref(), Some("from a"));
    b.put_config_overlay(0, &json!({"llm": {"model": "m"}}), "node-b")
        .await
        .unwrap();
    assert_eq!(a.config_version().await.unwrap(), 1);
}
