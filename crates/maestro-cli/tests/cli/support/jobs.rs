//! Shared parts of the job command tests: a project directory with a one-movement piece, the
//! `maestro` commands run in it, worker processes and their signals, and the store read
//! directly.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::{Value, json};

pub(crate) const PIECE: &str = "\
name: one
description: one movement that completes
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: false
    persona: You work.
    instruction: \"{task}\"
    allowed_tools: [Read]
    rules: []
";

/// A project directory (also HOME) with the piece `one` in `pieces/` and native tool calls.
pub(crate) struct Project {
    dir: tempfile::TempDir,
    pub db: Option<String>,
}

impl Project {
    pub(crate) fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pieces")).unwrap();
        std::fs::write(dir.path().join("pieces/one.yaml"), PIECE).unwrap();
        std::fs::create_dir_all(dir.path().join(".maestro")).unwrap();
        std::fs::write(
            dir.path().join(".maestro/config.yaml"),
            "llm:\n  tool_mode: native\n",
        )
        .unwrap();
        Project { dir, db: None }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(binary());
        cmd.current_dir(self.path())
            .args(args)
            .env("HOME", self.path())
            .env_remove("MAESTRO_LLM_BASE_URL")
            .env_remove("MAESTRO_MODEL")
            .env_remove("MAESTRO_API_KEY")
            .env_remove("MAESTRO_DB");
        if let Some(db) = &self.db {
            cmd.args(["--db", db]);
        }
        cmd
    }

    pub(crate) async fn maestro(&self, args: &[&str]) -> Output {
        let mut cmd = self.command(args);
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap()
    }

    /// `maestro submit one --task TASK EXTRA…`: the job id.
    pub(crate) async fn submit(&self, task: &str, extra: &[&str]) -> String {
        self.submit_piece("one", task, extra).await
    }

    /// `maestro submit PIECE --task TASK EXTRA…`: the job id.
    pub(crate) async fn submit_piece(&self, piece: &str, task: &str, extra: &[&str]) -> String {
        let mut args = vec!["submit", piece, "--task", task];
        args.extend(extra);
        let out = self.maestro(&args).await;
        assert!(out.status.success(), "{}", stderr(&out));
        let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert_eq!(id.len(), 36, "a UUID: {id}");
        id
    }

    pub(crate) fn worker(&self, base_url: &str, extra: &[&str]) -> Child {
        let mut cmd = self.command(&["worker", "--llm-base-url", base_url]);
        cmd.args(["--model", "scripted-model"]);
        if !extra.contains(&"--lease-secs") {
            cmd.args(["--lease-secs", "3"]);
        }
        cmd.args(extra).stdout(Stdio::null()).stderr(Stdio::piped());
        cmd.spawn().unwrap()
    }

    pub(crate) async fn show(&self, id: &str) -> Value {
        let out = self.maestro(&["jobs", "show", id, "--json"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Waits until the job is `completed`; checks its attempt count and result text.
    pub(crate) async fn until_completed(&self, id: &str, attempt: i64, result: &str) -> Value {
        let done = self
            .until(id, "completed", |job| job["status"] == json!("completed"))
            .await;
        assert_eq!(
            (&done["attempt"], &done["result"]["result"]),
            (&json!(attempt), &json!(result)),
            "{done}"
        );
        done
    }

    /// Polls `jobs show` until `done` holds for the job, at most 30 s.
    pub(crate) async fn until(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let job = self.show(id).await;
            if done(&job) {
                return job;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "job never {what}: {job}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The `maestro` binary the tests run: the one cargo built, or `$MAESTRO_TEST_BIN` (a copy of
/// it kept aside, when several checkouts share one target directory and rebuild it meanwhile).
pub(crate) fn binary() -> std::ffi::OsString {
    std::env::var_os("MAESTRO_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_maestro").into())
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits for the worker to exit (at most `within`); its status and stderr.
pub(crate) async fn exited(mut child: Child, within: Duration) -> (ExitStatus, String) {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
                return (status, err);
            }
            if Instant::now() > deadline {
                child.kill().unwrap();
                let mut err = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
                panic!("the worker did not exit within {within:?}; stderr:\n{err}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap()
}

/// SIGTERM to an idle worker: it exits 0 and its last line counts what it did.
pub(crate) async fn stop_worker(worker: Child, summary: &str) {
    signal(&worker, "TERM");
    let (status, err) = exited(worker, Duration::from_secs(10)).await;
    assert!(status.success(), "{err}");
    assert!(err.contains(summary), "{err}");
}

pub(crate) async fn until_requests(server: &ScriptedLlm, n: usize) {
    let started = Instant::now();
    while server.requests().len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the model saw {} requests, not {n}",
            server.requests().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn complete(result: &str) -> Turn {
    Turn::tool_call("complete", json!({"status": "success", "result": result}))
}

/// The job's stored events with the fencing token of the claim that wrote each.
pub(crate) async fn stored_events(project: &Project, id: &str) -> Vec<maestro_store::StoredEvent> {
    let url = maestro_store::StoreUrl::Sqlite {
        path: project.path().join(".maestro/maestro.db"),
    };
    let store = maestro_store::Store::open(&url).await.unwrap();
    let events = maestro_store::JobQueue::events(&store, id.parse().unwrap(), 0)
        .await
        .unwrap();
    store.close().await;
    events
}
