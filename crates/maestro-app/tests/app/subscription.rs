//! A run's live subscription: every committed event exactly once and in `seq` order, and a
//! subscriber that stalls never holds the run back: it lags, then catches up from the store.
//! Real parts: the scripted model server over HTTP on 127.0.0.1, a SQLite store on disk, the
//! one run path.

use std::time::Duration;

use maestro_app::{
    JobQueue, Live, PoolSize, RunKind, RunOutcome, RunRequest, RunStatus, Store, StoreUrl,
};
use maestro_config::Config;
use maestro_protocol::EventRecord;
use maestro_testkit::{ScriptedLlm, Turn};

const PIECE: &str = "\
name: three
description: three movements, one model call each
max_movements: 5
initial_movement: plan
movements:
  - name: plan
    edit: false
    persona: You plan.
    instruction: \"Plan {task}.\"
    rules:
      - condition: planned
        next: build
  - name: build
    edit: false
    persona: You build.
    instruction: \"Build {task}.\"
    rules:
      - condition: built
        next: check
  - name: check
    edit: false
    persona: You check.
    instruction: \"Check {task}.\"
    rules:
      - condition: checked
        next: COMPLETE
";

struct Project {
    dir: tempfile::TempDir,
    store: Store,
    config: Config,
}

async fn project(base_url: &str) -> Project {
    let dir = tempfile::tempdir().unwrap();
    let pieces = dir.path().join("pieces");
    std::fs::create_dir_all(&pieces).unwrap();
    std::fs::write(pieces.join("three.yaml"), PIECE).unwrap();
    let mut config = Config {
        root: dir.path().to_path_buf(),
        ..Config::default()
    };
    config.llm.base_url = base_url.to_string();
    config.llm.model = Some("scripted-model".into());
    config.paths.runs_dir = dir.path().join(".maestro/runs");
    config.paths.pieces_dirs = vec![pieces];
    let url = StoreUrl::Sqlite {
        path: dir.path().join(".maestro/maestro.db"),
    };
    let store = maestro_app::open_url(&url, PoolSize::Shared).await.unwrap();
    Project { dir, store, config }
}

fn request(task: &str, live_capacity: Option<usize>) -> RunRequest {
    RunRequest {
        live_capacity,
        kind: RunKind::New {
            piece: "three".into(),
            task: task.into(),
            workspace: None,
            submitted_by: "test".into(),
            budget: Default::default(),
        },
        model_from_flag: true,
    }
}

/// Every event the store holds for the run.
async fn stored(store: &Store, id: &str) -> Vec<EventRecord> {
    store
        .events(id.parse().unwrap(), 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| serde_json::from_value(e.payload).unwrap())
        .collect()
}

/// An answer that streams in many pieces and carries every movement's tag.
fn long_answer(words: usize) -> String {
    let mut text = String::from("Done. [PLAN:1] [BUILD:1] [CHECK:1]");
    for i in 0..words {
        text.push_str(&format!(" word{i}"));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_receives_every_committed_event_once_in_seq_order() {
    let turns = (0..3).map(|_| Turn::text(long_answer(40)).with_delay(Duration::from_millis(30)));
    let server = ScriptedLlm::start(turns).await;
    let p = project(&server.base_url()).await;
    let handle = maestro_app::start(
        p.store.clone(),
        p.config.clone(),
        request("the thing", None),
    )
    .await
    .unwrap();
    let id = handle.id().to_string();
    let mut subscription = handle.subscribe();
    let reader = tokio::spawn(async move {
        let mut events = Vec::new();
        let mut deltas = 0;
        while let Some(item) = subscription.next().await {
            match item.unwrap() {
                Live::Event(record) => events.push((*record).clone()),
                Live::TextDelta { .. } => deltas += 1,
                Live::Note(_) => {}
            }
        }
        (events, deltas)
    });
    let outcome = tokio::time::timeout(Duration::from_secs(60), handle.outcome())
        .await
        .unwrap();
    let RunOutcome::Ended(summary) = outcome else {
        panic!("the run did not end: {outcome:?}");
    };
    assert_eq!(summary.status, RunStatus::Completed);
    let (events, deltas) = reader.await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let all = stored(&p.store, &id).await;
    assert!(all.len() > 8, "{all:?}");
    assert_eq!(seqs, (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        events, all,
        "the subscriber saw exactly what the store holds"
    );
    assert!(deltas > 0, "the model's text arrives as it streams");
    drop(p.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscriber_does_not_hold_the_run_and_catches_up_from_the_store() {
    // A channel of 4 items, far fewer than the run sends: a subscriber that reads nothing lags.
    let turns = (0..3).map(|_| Turn::text(long_answer(20)));
    let server = ScriptedLlm::start(turns).await;
    let p = project(&server.base_url()).await;
    let handle = maestro_app::start(
        p.store.clone(),
        p.config.clone(),
        request("the thing", Some(4)),
    )
    .await
    .unwrap();
    let id = handle.id().to_string();
    let mut stalled = handle.subscribe();
    // The run ends while its subscriber has read nothing at all.
    let outcome = tokio::time::timeout(Duration::from_secs(60), handle.outcome())
        .await
        .expect("a subscriber that reads nothing held the run back");
    assert!(
        matches!(outcome, RunOutcome::Ended(ref s) if s.status == RunStatus::Completed),
        "{outcome:?}"
    );
    let mut events = Vec::new();
    while let Some(item) = stalled.next().await {
        if let Live::Event(record) = item.unwrap() {
            events.push((*record).clone());
        }
    }
    assert!(
        stalled.lags() > 0,
        "the subscriber fell behind and was told so ({} events, last {})",
        events.len(),
        stalled.last_seq()
    );
    assert_eq!(
        events,
        stored(&p.store, &id).await,
        "and caught up from the store, each event once"
    );
    drop(p.dir);
}
