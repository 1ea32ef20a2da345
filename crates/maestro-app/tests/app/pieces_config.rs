//! Pieces kept in the store and the configuration changed at runtime, through the app's use
//! cases: real stores (SQLite files, a PostgreSQL cluster), real workers, the scripted model
//! server over HTTP on 127.0.0.1.

use std::time::Duration;

use maestro_app::{
    ConfigWatch, ConfigWriteError, JobId, JobStatus, PieceOrigin, PieceWriteError, Profile,
    Shutdown, Store, StoreUrl, Submission, Worker, WorkerOptions, WorkerStats, config_json,
    delete_piece, effective_config, get_piece, list_pieces, put_config, put_piece, submit,
    validate_piece_text,
};
use maestro_config::Config;
use maestro_store::{Classes, JobQueue};
use maestro_testkit::{PgCluster, ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::json;

/// A one-movement piece; `PERSONA` and `NAME` are replaced.
const PIECE: &str = "\
name: NAME
description: DESCRIPTION
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: false
    persona: PERSONA
    instruction: \"{task}\"
    rules:
      - condition: done
        next: COMPLETE
";

/// Two movements: the second's model call can be held back to stop the run half-way.
const TWO: &str = "\
name: two
description: two movements
max_movements: 4
initial_movement: first
movements:
  - name: first
    edit: false
    persona: PERSONA
    instruction: \"First {task}.\"
    rules:
      - condition: first done
        next: second
  - name: second
    edit: false
    persona: PERSONA
    instruction: \"Second {task}.\"
    rules:
      - condition: second done
        next: COMPLETE
";

fn piece(name: &str, description: &str, persona: &str) -> String {
    PIECE
        .replace("NAME", name)
        .replace("DESCRIPTION", description)
        .replace("PERSONA", persona)
}

/// A project directory with a pieces directory and the configuration a node runs with.
struct Project {
    dir: tempfile::TempDir,
    config: Config,
}

impl Project {
    fn new(base_url: &str, model: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let pieces = root.join("pieces");
        std::fs::create_dir_all(&pieces).unwrap();
        let mut config = Config {
            root: root.clone(),
            ..Config::default()
        };
        config.llm.base_url = base_url.to_string();
        config.llm.model = Some(model.to_string());
        config.llm.api_key = Some(maestro_protocol::Secret::new("sk-base-secret"));
        config.paths.runs_dir = root.join(".maestro/runs");
        config.paths.pieces_dirs = vec![pieces];
        Project { dir, config }
    }

    fn pieces_dir(&self) -> std::path::PathBuf {
        self.config.paths.pieces_dirs[0].clone()
    }

    fn sqlite(&self) -> StoreUrl {
        StoreUrl::Sqlite {
            path: self.dir.path().join(".maestro/maestro.db"),
        }
    }
}

/// A worker on `store` with `config` as its base, running until `shutdown`.
fn worker(store: &Store, config: &Config) -> Worker {
    Worker::new(
        store.clone(),
        config.clone(),
        WorkerOptions {
            name: "test".into(),
            profiles: vec![Profile {
                name: "default".into(),
                concurrency: 1,
                classes: Classes::Any,
            }],
            lease: WorkerOptions::LEASE,
            drain: Duration::from_secs(5),
            idle_poll: Duration::from_millis(50),
            model_from_flag: false,
        },
    )
}

async fn job(store: &Store, config: &Config, piece: &str, task: &str) -> JobId {
    submit(
        store,
        config,
        Submission {
            piece: piece.into(),
            task: task.into(),
            workspace: None,
            class: None,
            priority: 0,
            max_attempts: None,
            submitted_by: "alice".into(),
            owner: None,
            inputs: Vec::new(),
            budget: Default::default(),
        },
    )
    .await
    .unwrap()
}

async fn finished(store: &Store, id: JobId) -> maestro_store::Job {
    let job = maestro_app::wait_job(store, id, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(job.status, JobStatus::Completed, "{job:?}");
    job
}

/// The system prompts (the first message) of the model calls the server saw.
fn personas(llm: &ScriptedLlm) -> Vec<String> {
    llm.requests()
        .iter()
        .map(|r| {
            r["messages"][0]["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// A piece put through one store handle (one node) is found, submitted and run by a worker on
/// another handle of the same store (another node) whose pieces directory does not have it;
/// the job records the version it ran.
async fn a_piece_put_on_one_node_runs_on_another(url_of: impl Fn(&Project) -> StoreUrl) {
    let llm = ScriptedLlm::builder()
        .model_id("model-a")
        .turns([Turn::text("Done. [WORK:1]")])
        .start()
        .await;
    let writer = Project::new(&llm.base_url(), "model-a");
    let runner = Project::new(&llm.base_url(), "model-a");
    let url = url_of(&writer);
    let a = Store::open(&url).await.unwrap();
    let b = Store::open(&url).await.unwrap();
    let stored = put_piece(
        &a,
        &writer.config,
        "shared",
        &piece("shared", "shared by the store", "You are the shared piece."),
        "alice",
    )
    .await
    .unwrap();
    assert_eq!((stored.name.as_str(), stored.version), ("shared", 1));
    assert_eq!(stored.created_by, "alice");

    let id = job(&b, &runner.config, "shared", "go").await;
    let shutdown = Shutdown::new();
    let running = tokio::spawn({
        let worker = worker(&b, &runner.config);
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await.unwrap() }
    });
    let done = finished(&b, id).await;
    shutdown.hand_back();
    let _: WorkerStats = running.await.unwrap();
    assert_eq!(done.piece_version, Some(1));
    assert!(
        personas(&llm)[0].contains("You are the shared piece."),
        "{:?}",
        personas(&llm)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_put_on_one_sqlite_handle_runs_on_a_worker_of_another() {
    a_piece_put_on_one_node_runs_on_another(Project::sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn a_piece_put_on_one_postgres_handle_runs_on_a_worker_of_another() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let url = cluster.url();
    a_piece_put_on_one_node_runs_on_another(move |_| StoreUrl::Postgres { url: url.clone() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_are_validated_named_listed_and_deleted_with_the_store_first() {
    let project = Project::new("http://127.0.0.1:9/v1", "model-a");
    let store = Store::open(&project.sqlite()).await.unwrap();
    let config = &project.config;
    std::fs::write(
        project.pieces_dir().join("filed.yaml"),
        piece("filed", "from the directory", "You file."),
    )
    .unwrap();

    for bad in ["../etc", "Upper", "", "auto", "a/b", ".hidden", "-dash"] {
        assert!(
            matches!(
                put_piece(&store, config, bad, "x", "alice").await,
                Err(PieceWriteError::BadName(_))
            ),
            "{bad:?}"
        );
    }
    // The one validator's errors, with field path and position, as `maestro validate --json`.
    let broken = "name: broken\nmovements:\n  - name: m\n    rules:\n      - condition: x\n        next: nowhere\n";
    let problems = match put_piece(&store, config, "broken", broken, "alice").await {
        Err(PieceWriteError::Invalid(problems)) => problems,
        other => panic!("{other:?}"),
    };
    assert!(!problems.is_empty());
    assert_eq!(problems, validate_piece_text(config, "broken", broken));
    let json_problems: Vec<serde_json::Value> = problems.iter().map(|p| p.to_json()).collect();
    assert!(
        json_problems
            .iter()
            .any(|p| p["path"].as_str().is_some_and(|path| !path.is_empty())
                && p["line"].as_u64().is_some_and(|l| l > 0)),
        "{json_problems:?}"
    );
    // The YAML's name must be the name it is written under.
    let misnamed = validate_piece_text(config, "other", &piece("shared", "d", "p"));
    assert_eq!(misnamed.len(), 1);
    assert_eq!(misnamed[0].path, "name");
    assert_eq!(store.piece_latest("broken").await.unwrap(), None);

    // A directory's piece: shown with a path relative to the project, never the host's.
    let filed = get_piece(&store, config, "filed").await.unwrap().unwrap();
    assert_eq!(
        filed.origin,
        PieceOrigin::Dir {
            path: "pieces/filed.yaml".into()
        }
    );
    // It cannot be deleted through the store ...
    match delete_piece(&store, config, "filed", "alice").await {
        Err(PieceWriteError::ReadOnly { name, path }) => {
            assert_eq!(
                (name.as_str(), path.as_str()),
                ("filed", "pieces/filed.yaml")
            );
        }
        other => panic!("{other:?}"),
    }
    // ... but a stored version overrides it, and deleting that shows the file's again.
    let over = piece("filed", "from the store", "You are stored.");
    put_piece(&store, config, "filed", &over, "bob")
        .await
        .unwrap();
    put_piece(&store, config, "fresh", &piece("fresh", "new", "p"), "bob")
        .await
        .unwrap();
    let got = get_piece(&store, config, "filed").await.unwrap().unwrap();
    assert_eq!(
        (got.yaml.as_str(), got.origin),
        (over.as_str(), PieceOrigin::Store { version: 1 })
    );
    let listed: Vec<(String, String, Option<i64>)> = list_pieces(&store, config)
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.name, l.description, l.version))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("filed".to_string(), "from the store".to_string(), Some(1)),
            ("fresh".to_string(), "new".to_string(), Some(1)),
        ]
    );
    let deleted = delete_piece(&store, config, "filed", "carol")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((deleted.version, deleted.created_by.as_str()), (2, "carol"));
    let back = get_piece(&store, config, "filed").await.unwrap().unwrap();
    assert!(matches!(back.origin, PieceOrigin::Dir { .. }));
    assert_eq!(
        delete_piece(&store, config, "nothing", "carol")
            .await
            .unwrap(),
        None
    );
    assert_eq!(get_piece(&store, config, "nothing").await.unwrap(), None);
}

/// A job handed back half-way and resumed after its piece changed in the store runs on with
/// the version it started with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_job_keeps_the_piece_version_it_started_with() {
    let llm = ScriptedLlm::builder()
        .model_id("model-a")
        .turns([
            Turn::text("[FIRST:1]"),
            Turn::text("[SECOND:1]").with_delay(Duration::from_secs(30)),
        ])
        .start()
        .await;
    let project = Project::new(&llm.base_url(), "model-a");
    let config = &project.config;
    let store = Store::open(&project.sqlite()).await.unwrap();
    put_piece(
        &store,
        config,
        "two",
        &TWO.replace("PERSONA", "You are one."),
        "alice",
    )
    .await
    .unwrap();
    let id = job(&store, config, "two", "go").await;

    let shutdown = Shutdown::new();
    let first = tokio::spawn({
        let worker = worker(&store, config);
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await.unwrap() }
    });
    // The second movement's call is under way: hand the job back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while llm.requests().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never got half-way"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.hand_back();
    let stats = first.await.unwrap();
    assert_eq!(stats.handed_back, 1);
    assert_eq!(store.job(id).await.unwrap().unwrap().piece_version, Some(1));

    put_piece(
        &store,
        config,
        "two",
        &TWO.replace("PERSONA", "You are two."),
        "bob",
    )
    .await
    .unwrap();
    llm.push(Turn::text("[SECOND:1]"));
    let shutdown = Shutdown::new();
    let second = tokio::spawn({
        let worker = worker(&store, config);
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await.unwrap() }
    });
    let done = finished(&store, id).await;
    shutdown.hand_back();
    second.await.unwrap();
    assert_eq!(done.piece_version, Some(1));
    let seen = personas(&llm);
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(seen.iter().all(|p| p.contains("You are one.")), "{seen:?}");
    // A new job takes the new version.
    assert!(!seen.iter().any(|p| p.contains("You are two.")));
}

/// The piece `maker` in the project's pieces directory: one movement offered `tools` (a YAML
/// list).
fn write_maker(project: &Project, tools: &str) {
    std::fs::write(
        project.pieces_dir().join("maker.yaml"),
        PIECE
            .replace("NAME", "maker")
            .replace("DESCRIPTION", "makes pieces")
            .replace("PERSONA", "You make pieces.")
            .replace(
                "    edit: false\n",
                &format!("    edit: false\n    allowed_tools: {tools}\n"),
            ),
    )
    .unwrap();
}

/// `CreatePiece` in a run writes to the store: a later job (on a worker whose pieces directory
/// never saw the file) runs the piece it created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_created_by_the_tool_in_a_run_is_run_by_a_later_job() {
    let created = piece("made", "made by an agent", "You were made by an agent.");
    let llm = ScriptedLlm::builder()
        .model_id("model-a")
        .turns([
            Turn::tool_call(
                "CreatePiece",
                json!({"name": "made", "content": created.clone()}),
            ),
            Turn::tool_calls([
                ("GetPiece", json!({"name": "made"})),
                ("ListPieces", json!({})),
            ]),
            Turn::text("Created it. [WORK:1]"),
            Turn::text("Done. [WORK:1]"),
        ])
        .start()
        .await;
    let project = Project::new(&llm.base_url(), "model-a");
    let config = &project.config;
    write_maker(&project, "[CreatePiece, GetPiece, ListPieces]");
    let store = Store::open(&project.sqlite()).await.unwrap();
    let shutdown = Shutdown::new();
    let running = tokio::spawn({
        let worker = worker(&store, config);
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await.unwrap() }
    });
    let maker = job(&store, config, "maker", "make a piece").await;
    finished(&store, maker).await;
    // GetPiece and ListPieces in the same run read the piece from the store.
    let results: Vec<String> = llm.requests()[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[1], created);
    assert_eq!(results[2], "made (stored, version 1): made by an agent\n");
    let stored = store.piece_latest("made").await.unwrap().unwrap();
    assert_eq!(stored.yaml.as_deref(), Some(created.as_str()));
    assert!(!project.pieces_dir().join("made.yaml").exists());

    let later = job(&store, config, "made", "run the new piece").await;
    let done = finished(&store, later).await;
    shutdown.hand_back();
    running.await.unwrap();
    assert_eq!(done.piece_version, Some(1));
    assert!(
        personas(&llm)
            .last()
            .unwrap()
            .contains("You were made by an agent."),
        "{:?}",
        personas(&llm)
    );
}

/// A running worker takes a model changed through `put_config` for its next job, without a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_runs_its_next_job_with_the_model_put_in_the_config() {
    let llm = ScriptedLlm::builder()
        .model_id("model-a")
        .also_serves("model-b")
        .turns([Turn::text("Done. [WORK:1]"), Turn::text("Done. [WORK:1]")])
        .start()
        .await;
    let project = Project::new(&llm.base_url(), "model-a");
    let config = &project.config;
    std::fs::write(
        project.pieces_dir().join("one.yaml"),
        piece("one", "one movement", "You work."),
    )
    .unwrap();
    let store = Store::open(&project.sqlite()).await.unwrap();
    let shutdown = Shutdown::new();
    let node = worker(&store, config);
    let watch = node.config_watch().unwrap().clone();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { node.run(shutdown).await.unwrap() }
    });
    let before = job(&store, config, "one", "first").await;
    finished(&store, before).await;

    let (_, etag) = effective_config(&store, config).await.unwrap();
    let mut doc = config_json(config);
    doc["llm"]["model"] = json!("model-b");
    put_config(&store, config, doc, Some(&etag.to_string()), "alice")
        .await
        .unwrap();
    // The worker's watch takes the change within its poll (the deadline is the 5 s a change
    // may take to reach the next job), without a restart.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while watch.current().await.llm.model.as_deref() != Some("model-b") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker kept model-a"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = job(&store, config, "one", "second").await;
    finished(&store, after).await;
    shutdown.hand_back();
    running.await.unwrap();
    let models: Vec<String> = llm
        .requests()
        .iter()
        .map(|r| r["model"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(models, vec!["model-a".to_string(), "model-b".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_is_written_by_if_match_once_and_keeps_its_secrets() {
    let project = Project::new("http://127.0.0.1:9/v1", "model-a");
    let base = &project.config;
    let store = Store::open(&project.sqlite()).await.unwrap();
    let (effective, etag) = effective_config(&store, base).await.unwrap();
    assert_eq!(effective.llm.model.as_deref(), Some("model-a"));
    assert_eq!(etag.version(), Some(0));
    assert!(etag.to_string().starts_with('"') && etag.to_string().ends_with('"'));

    let shown = config_json(&effective);
    assert!(!shown.to_string().contains("sk-base-secret"), "{shown}");
    assert_eq!(shown["llm"]["api_key"], "***");

    // No If-Match: refused.
    assert!(matches!(
        put_config(&store, base, shown.clone(), None, "alice").await,
        Err(ConfigWriteError::PreconditionRequired)
    ));
    // The document read back, one value changed, `***` left in place: the secret stays.
    let mut doc = shown.clone();
    doc["llm"]["model"] = json!("model-b");
    let first = put_config(&store, base, doc.clone(), Some(&etag.to_string()), "alice")
        .await
        .unwrap();
    assert_eq!(first.version(), Some(1));
    let (now, tag) = effective_config(&store, base).await.unwrap();
    assert_eq!(tag, first);
    assert_eq!(now.llm.model.as_deref(), Some("model-b"));
    assert_eq!(now.llm.api_key.as_ref().unwrap().expose(), "sk-base-secret");
    // Only what differs from the base is stored, and no secret the base holds.
    let overlay = store.config_overlay().await.unwrap().unwrap();
    assert_eq!(overlay.doc, json!({"llm": {"model": "model-b"}}));

    // A key set through the API, then read back as `***` and written back: it is kept.
    let mut keyed = config_json(&now);
    keyed["llm"]["api_key"] = json!("sk-overlay-secret");
    let second = put_config(&store, base, keyed, Some(first.as_str()), "alice")
        .await
        .unwrap();
    let (now, _) = effective_config(&store, base).await.unwrap();
    let mut again = config_json(&now);
    assert_eq!(again["llm"]["api_key"], "***");
    again["subtasks"]["max_depth"] = json!(0);
    let third = put_config(&store, base, again, Some(&second.to_string()), "bob")
        .await
        .unwrap();
    let (now, _) = effective_config(&store, base).await.unwrap();
    assert_eq!(
        now.llm.api_key.as_ref().unwrap().expose(),
        "sk-overlay-secret"
    );
    assert_eq!(now.subtasks.max_depth, 0);

    // A stale tag: refused with the current one.
    match put_config(&store, base, doc.clone(), Some(&first.to_string()), "carol").await {
        Err(ConfigWriteError::Stale { current }) => assert_eq!(current, third),
        other => panic!("{other:?}"),
    }
    // Invalid: every problem with its field and fix; nothing written.
    let mut bad = config_json(&now);
    bad["llm"]["retry"]["max_attempts"] = json!(0);
    bad["llm"]["idle_timeout_secs"] = json!(0);
    match put_config(&store, base, bad, Some(&third.to_string()), "carol").await {
        Err(ConfigWriteError::Invalid(issues)) => {
            let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
            assert!(fields.contains(&"llm.retry.max_attempts"), "{issues:?}");
            assert!(fields.contains(&"llm.idle_timeout_secs"), "{issues:?}");
            assert!(issues.iter().all(|i| !i.fix.is_empty()));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.config_version().await.unwrap(), 3);

    // Two writers with the same If-Match: exactly one wins.
    let racers: Vec<_> = ["model-c", "model-d"]
        .into_iter()
        .map(|model| {
            let store = store.clone();
            let base = base.clone();
            let tag = third.to_string();
            tokio::spawn(async move {
                put_config(
                    &store,
                    &base,
                    json!({"llm": {"model": model}}),
                    Some(&tag),
                    model,
                )
                .await
            })
        })
        .collect();
    let mut won = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(tag) => {
                won += 1;
                assert_eq!(tag.version(), Some(4));
            }
            Err(ConfigWriteError::Stale { current }) => assert_eq!(current.version(), Some(4)),
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(won, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_watch_sees_a_new_overlay_within_its_poll() {
    let project = Project::new("http://127.0.0.1:9/v1", "model-a");
    let base = &project.config;
    let store = Store::open(&project.sqlite()).await.unwrap();
    let other = Store::open(&project.sqlite()).await.unwrap();
    let watch = ConfigWatch::new(store.clone(), base.clone());
    assert_eq!(watch.current().await.llm.model.as_deref(), Some("model-a"));
    let (_, tag) = effective_config(&other, base).await.unwrap();
    put_config(
        &other,
        base,
        json!({"llm": {"model": "model-b"}}),
        Some(tag.as_str()),
        "alice",
    )
    .await
    .unwrap();
    // The watch asks the store at most every `POLL`; the deadline leaves room for a busy machine.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if watch.current().await.llm.model.as_deref() == Some("model-b") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch did not see the new overlay"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(watch.latest().1.version(), Some(1));
}

#[tokio::test]
async fn a_fresh_read_of_the_watch_sees_a_write_made_since_its_last_check() {
    let project = Project::new("http://127.0.0.1:9/v1", "model-a");
    let base = &project.config;
    let store = Store::open(&project.sqlite()).await.unwrap();
    let other = Store::open(&project.sqlite()).await.unwrap();
    let watch = ConfigWatch::new(store.clone(), base.clone());
    let (config, read) = watch.fresh_tagged().await;
    assert_eq!(config.llm.model.as_deref(), Some("model-a"));
    // Someone else writes; a write with the tag read before is stale.
    let written = put_config(
        &other,
        base,
        json!({"llm": {"model": "model-b"}}),
        Some(read.as_str()),
        "bob",
    )
    .await
    .unwrap();
    let stale = put_config(
        &store,
        base,
        json!({"llm": {"model": "model-c"}}),
        Some(read.as_str()),
        "alice",
    )
    .await
    .unwrap_err();
    assert!(matches!(stale, ConfigWriteError::Stale { .. }), "{stale:?}");
    // Read at once (well within the poll), the watch gives the written configuration and the
    // tag that a write now accepts.
    let (config, tag) = watch.fresh_tagged().await;
    assert_eq!(config.llm.model.as_deref(), Some("model-b"));
    assert_eq!(tag, written);
    put_config(
        &store,
        base,
        json!({"llm": {"model": "model-c"}}),
        Some(tag.as_str()),
        "alice",
    )
    .await
    .unwrap();
}

/// Stored pieces are every user's pieces: the job of a user who is not an admin reads them, but
/// its `CreatePiece` is refused with the reason (the API refuses that user too), while an
/// admin's job writes one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admins_job_creates_a_stored_piece() {
    let created = piece("made", "made by an agent", "You were made by an agent.");
    let llm = ScriptedLlm::builder()
        .model_id("model-a")
        .turns([
            Turn::tool_call(
                "CreatePiece",
                json!({"name": "made", "content": created.clone()}),
            ),
            Turn::text("Tried. [WORK:1]"),
            Turn::tool_call(
                "CreatePiece",
                json!({"name": "made", "content": created.clone()}),
            ),
            Turn::text("Created it. [WORK:1]"),
        ])
        .start()
        .await;
    let project = Project::new(&llm.base_url(), "model-a");
    let config = &project.config;
    write_maker(&project, "[CreatePiece]");
    let store = Store::open(&project.sqlite()).await.unwrap();
    maestro_app::add_user(&store, "bob@example.com", false)
        .await
        .unwrap();
    maestro_app::add_user(&store, "ana@example.com", true)
        .await
        .unwrap();
    let shutdown = Shutdown::new();
    let running = tokio::spawn({
        let worker = worker(&store, config);
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await.unwrap() }
    });
    let owned_by = |owner: &str| Submission {
        piece: "maker".into(),
        task: "make a piece".into(),
        workspace: None,
        class: None,
        priority: 0,
        max_attempts: None,
        submitted_by: owner.into(),
        owner: Some(owner.into()),
        inputs: Vec::new(),
        budget: Default::default(),
    };
    let bobs = submit(&store, config, owned_by("bob@example.com"))
        .await
        .unwrap();
    finished(&store, bobs).await;
    let refused = llm.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        refused.contains("only an admin's jobs change the stored pieces")
            && refused.contains("bob@example.com"),
        "{refused}"
    );
    assert!(store.piece_latest("made").await.unwrap().is_none());

    let anas = submit(&store, config, owned_by("ana@example.com"))
        .await
        .unwrap();
    finished(&store, anas).await;
    shutdown.hand_back();
    running.await.unwrap();
    let stored = store.piece_latest("made").await.unwrap().unwrap();
    assert_eq!(stored.yaml.as_deref(), Some(created.as_str()));
}
