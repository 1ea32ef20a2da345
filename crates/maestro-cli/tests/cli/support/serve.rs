//! `maestro serve` as a real process on 127.0.0.1, and an HTTP client for it: JSON calls and
//! the event stream read as Server-Sent Events.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::Value;

use super::jobs::{Project, signal};

/// A running `maestro serve`.
pub(crate) struct Served {
    pub child: Option<Child>,
    pub base: String,
    pub http: reqwest::Client,
    /// Its stderr after the startup lines, read in the background.
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Project {
    /// `maestro serve --bind 127.0.0.1:0 EXTRA…` with the scripted model at `base_url`;
    /// returns once it listens.
    pub(crate) fn serve(&self, base_url: &str, extra: &[&str]) -> Served {
        self.serve_with_env(base_url, extra, &[])
    }

    /// `maestro serve --bind 127.0.0.1:0 EXTRA…` with only the flags given: the model and the
    /// endpoint come from the project's configuration.
    pub(crate) fn serve_plain(&self, extra: &[&str]) -> Served {
        self.spawn_serve(extra, &[], false)
    }

    /// As [`Project::serve`], with environment variables set for the server.
    pub(crate) fn serve_with_env(
        &self,
        base_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Served {
        let mut all = vec!["--llm-base-url", base_url, "--model", "scripted-model"];
        all.extend(extra);
        self.spawn_serve(&all, env, true)
    }

    /// `maestro gateway --bind 127.0.0.1:0` with the project's configuration and store, and
    /// `env` set; returns once it listens.
    pub(crate) fn gateway(&self, env: &[(&str, &str)]) -> Served {
        self.spawn_listening(&["gateway"], &[], env, "gateway: listening on ")
    }

    fn spawn_serve(&self, extra: &[&str], env: &[(&str, &str)], short_lease: bool) -> Served {
        let mut all: Vec<&str> = Vec::new();
        if short_lease && !extra.contains(&"--lease-secs") && !extra.contains(&"--no-worker") {
            all.extend(["--lease-secs", "3"]);
        }
        all.extend(extra);
        self.spawn_listening(&["serve"], &all, env, "serve: listening on ")
    }

    fn spawn_listening(
        &self,
        command: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
        listening: &str,
    ) -> Served {
        let mut cmd = self.command(command);
        if !extra.contains(&"--bind") {
            cmd.args(["--bind", "127.0.0.1:0"]);
        }
        cmd.envs(env.iter().copied());
        cmd.args(extra).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let started = Instant::now();
        let mut seen = String::new();
        let base = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("serve exited before listening:\n{seen}"))
                .unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if let Some(url) = line.strip_prefix(listening) {
                break url
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
            }
            assert!(started.elapsed() < Duration::from_secs(30), "{seen}");
        };
        let log = std::sync::Arc::new(std::sync::Mutex::new(seen));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Served {
            child: Some(child),
            base,
            http: reqwest::Client::new(),
            log,
        }
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sse {
    pub id: Option<String>,
    pub event: String,
    pub data: Value,
}

impl Served {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        let body = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&body).unwrap_or(Value::String(body)),
        )
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&body).unwrap_or(Value::String(body)),
        )
    }

    /// Polls `GET /jobs/{id}` until `done` holds, at most 30 s.
    pub(crate) async fn until(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let (status, job) = self.get(&format!("/api/v1/jobs/{id}")).await;
            assert_eq!(status, 200, "{job}");
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

    /// Opens the job's event stream (after `after`, as `Last-Event-ID`).
    pub(crate) async fn stream(&self, id: &str, after: Option<i64>) -> EventStream {
        let mut request = self
            .http
            .get(self.url(&format!("/api/v1/jobs/{id}/events")));
        if let Some(after) = after {
            request = request.header("Last-Event-ID", after.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        EventStream {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// SIGTERM, and waits for it to exit 0.
    pub(crate) async fn stop(mut self) -> String {
        let child = self.child.take().unwrap();
        signal(&child, "TERM");
        let status = tokio::task::spawn_blocking(move || {
            let mut child = child;
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    return Some(status);
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    return None;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
        .await
        .unwrap();
        let status = status.unwrap_or_else(|| {
            panic!(
                "serve did not stop within 20 s:\n{}",
                self.log.lock().unwrap()
            )
        });
        let log = self.log.lock().unwrap().clone();
        assert!(status.success(), "{log}");
        log
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A job's event stream as it arrives.
pub(crate) struct EventStream {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl EventStream {
    /// The next event; `None` when the server ended the stream. Comments (keep-alives) are
    /// skipped.
    pub(crate) async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut event = "message".to_string();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if data.is_empty() && id.is_none() {
                    continue;
                }
                return Some(Sse {
                    id,
                    event,
                    data: serde_json::from_str(&data).unwrap(),
                });
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.body.next())
                .await
                .expect("no event for 30 s")?;
            self.buffer
                .push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    }

    /// Every event until the server ends the stream.
    pub(crate) async fn rest(&mut self) -> Vec<Sse> {
        let mut all = Vec::new();
        while let Some(e) = self.next().await {
            all.push(e);
        }
        all
    }
}
