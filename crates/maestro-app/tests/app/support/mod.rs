//! A project for the files and watch tests: a piece, a configuration pointed at the scripted
//! model server, a store, and a real worker.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::time::Duration;

use maestro_app::{
    JobId, JobQueue, JobStatus, Profile, Shutdown, Store, StoreUrl, Submission, Upload, Worker,
    WorkerOptions, WorkerStats,
};
use maestro_config::Config;
use maestro_protocol::EventRecord;
use maestro_testkit::Turn;
use serde_json::json;

/// One movement that reads and writes files and ends with `complete`.
pub(crate) const PIECE: &str = "\
name: files
description: reads its inputs and leaves outputs
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: true
    persona: You work with files.
    instruction: \"{task}\"
    allowed_tools: [Read, Write]
    rules: []
";

pub(crate) struct Project {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) store: Store,
    pub(crate) config: Config,
    pub(crate) url: StoreUrl,
}

impl Project {
    /// A project on SQLite.
    pub(crate) async fn sqlite(base_url: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::Sqlite {
            path: dir.path().join(".maestro/maestro.db"),
        };
        Project::on(dir, url, base_url).await
    }

    /// A project on the store at `url`.
    pub(crate) async fn on(dir: tempfile::TempDir, url: StoreUrl, base_url: &str) -> Project {
        let pieces = dir.path().join("pieces");
        std::fs::create_dir_all(&pieces).unwrap();
        std::fs::write(pieces.join("files.yaml"), PIECE).unwrap();
        let mut config = Config {
            root: dir.path().to_path_buf(),
            ..Config::default()
        };
        config.llm.base_url = base_url.to_string();
        config.llm.model = Some("scripted-model".into());
        config.paths.runs_dir = dir.path().join(".maestro/runs");
        config.paths.pieces_dirs = vec![pieces];
        let store = maestro_app::open_url(&url, maestro_app::PoolSize::Shared)
            .await
            .unwrap();
        Project {
            dir,
            store,
            config,
            url,
        }
    }

    pub(crate) fn submission(&self, task: &str, inputs: Vec<Upload>) -> Submission {
        Submission {
            piece: "files".into(),
            task: task.into(),
            workspace: None,
            class: None,
            priority: 0,
            max_attempts: Some(1),
            submitted_by: "alice".into(),
            owner: None,
            inputs,
            budget: Default::default(),
        }
    }

    pub(crate) async fn submit(&self, task: &str, inputs: Vec<Upload>) -> JobId {
        maestro_app::submit(&self.store, &self.config, self.submission(task, inputs))
            .await
            .unwrap()
    }

    /// A worker of one slot on this project's store, running until the returned shutdown.
    pub(crate) fn worker(&self) -> RunningWorker {
        let worker = self.worker_on(self.store.clone());
        worker.start();
        worker
    }

    /// A worker of one slot on `store`.
    pub(crate) fn worker_on(&self, store: Store) -> RunningWorker {
        self.worker_with(store, self.config.clone())
    }

    /// A worker of one slot on `store` with `config` (another node: its own runs directory).
    pub(crate) fn worker_with(&self, store: Store, config: Config) -> RunningWorker {
        let worker = Worker::new(
            store,
            config,
            WorkerOptions {
                name: "w".into(),
                profiles: vec![Profile {
                    name: "default".into(),
                    concurrency: 1,
                    classes: maestro_app::classes(&[]),
                }],
                lease: Duration::from_secs(30),
                drain: Duration::from_secs(10),
                idle_poll: Duration::from_millis(50),
                model_from_flag: true,
            },
        );
        let shutdown = Shutdown::new();
        let (go, started) = tokio::sync::oneshot::channel::<()>();
        let task = {
            let worker = worker.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let _ = started.await;
                worker.run(shutdown).await.unwrap()
            })
        };
        RunningWorker {
            worker,
            shutdown,
            task,
            go: std::sync::Mutex::new(Some(go)),
        }
    }

    /// Waits (at most a minute) until the job is in `status`.
    pub(crate) async fn until(&self, id: JobId, status: JobStatus) {
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let job = self.store.job(id).await.unwrap().unwrap();
                if job.status == status {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let now = self.store.job(id).await.unwrap().unwrap();
        assert!(waited.is_ok(), "job {id} never became {status}: {now:?}");
    }

    /// Every event the store holds for the job.
    pub(crate) async fn stored(&self, id: JobId) -> Vec<EventRecord> {
        stored(&self.store, id).await
    }
}

pub(crate) async fn stored(store: &Store, id: JobId) -> Vec<EventRecord> {
    store
        .events(id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| serde_json::from_value(e.payload).unwrap())
        .collect()
}

pub(crate) struct RunningWorker {
    pub(crate) worker: Worker,
    pub(crate) shutdown: Shutdown,
    pub(crate) task: tokio::task::JoinHandle<WorkerStats>,
    go: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl RunningWorker {
    /// Lets the worker begin claiming.
    pub(crate) fn start(&self) {
        if let Some(go) = self.go.lock().unwrap().take() {
            let _ = go.send(());
        }
    }

    pub(crate) async fn stop(self) -> WorkerStats {
        self.start();
        self.shutdown.stop_claiming();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the worker stops")
            .unwrap()
    }
}

pub(crate) fn upload(path: &str, bytes: &[u8]) -> Upload {
    Upload {
        path: path.into(),
        bytes: bytes::Bytes::copy_from_slice(bytes),
    }
}

pub(crate) fn read(path: &str) -> Turn {
    Turn::tool_call("Read", json!({ "file_path": path }))
}

pub(crate) fn write(path: &str, content: &str) -> Turn {
    Turn::tool_call("Write", json!({ "file_path": path, "content": content }))
}

pub(crate) fn ask(question: &str) -> Turn {
    Turn::tool_call(
        "complete",
        json!({"status": "needs_user_input", "result": question}),
    )
}

pub(crate) fn done(result: &str) -> Turn {
    Turn::tool_call("complete", json!({"status": "success", "result": result}))
}
