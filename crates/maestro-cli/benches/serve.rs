//! `maestro serve` under load, as a whole process: 1,000 clients follow one running job's
//! event stream (every client must receive every event; the server's peak resident set is
//! reported), then `GET /api/v1/jobs/{id}` is driven at 1,000 requests/s by `oha` (from
//! crates.io: `cargo install oha`) and its latency percentiles are reported.
//!
//! ```text
//! cargo bench -p maestro-cli --bench serve
//! ```
//!
//! `MAESTRO_BENCH_CLIENTS` (default 1000) and `MAESTRO_BENCH_OHA` (the `oha` binary, default
//! `oha` on `PATH`) change the set-up. Results and how they were taken: docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::{Value, json};

const PIECE: &str = "\
name: long
description: many tool calls in one movement
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

const CALLS: usize = 25;

fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on a local struct.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    raise_open_files();
    let clients: usize = std::env::var("MAESTRO_BENCH_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut turns = vec![
        Turn::tool_call("Read", json!({"file_path": "nothing-0.txt"}))
            .with_delay(Duration::from_secs(4)),
    ];
    for n in 1..CALLS {
        turns.push(
            Turn::tool_call("Read", json!({"file_path": format!("nothing-{n}.txt")}))
                .with_delay(Duration::from_millis(40)),
        );
    }
    turns.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "done"}),
    ));
    let llm = ScriptedLlm::start(turns).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pieces")).unwrap();
    std::fs::create_dir_all(dir.path().join(".maestro")).unwrap();
    std::fs::write(dir.path().join("pieces/long.yaml"), PIECE).unwrap();
    std::fs::write(
        dir.path().join(".maestro/config.yaml"),
        "llm:\n  tool_mode: native\n",
    )
    .unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_maestro"))
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .args(["serve", "--bind", "127.0.0.1:0", "--llm-base-url"])
        .arg(llm.base_url())
        .args(["--model", "scripted-model"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = server.id();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().expect("serve exited").unwrap();
        if let Some(url) = line.strip_prefix("serve: listening on ") {
            break url.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let job: Value = http
        .post(format!("{base}/api/v1/jobs"))
        .json(&json!({"piece": "long", "task": "read many files"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = job["id"].as_str().unwrap().to_string();

    // The clients connect while the first model call waits.
    let connected = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let url = format!("{base}/api/v1/jobs/{id}/events");
        let connected = Arc::clone(&connected);
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let response = client.get(url).send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200);
            connected.fetch_add(1, Ordering::Relaxed);
            let mut body = response.bytes_stream();
            let mut text = String::new();
            while let Some(chunk) = body.next().await {
                text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            }
            text.lines().filter(|l| l.starts_with("id:")).count()
        }));
    }
    let mut counts = Vec::with_capacity(clients);
    for task in tasks {
        counts.push(task.await.unwrap());
    }
    let streamed = started.elapsed();
    let log = http
        .get(format!("{base}/api/v1/jobs/{id}/events?format=jsonl"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = log.lines().count();
    let complete = counts.iter().filter(|&&n| n == events).count();
    let rss = peak_rss_kib(pid);
    println!(
        "stream clients      {clients} ({} connected)",
        connected.load(Ordering::Relaxed)
    );
    println!("events in the run   {events}");
    println!("clients with all    {complete} of {clients}");
    println!("run + streams took  {:.2} s", streamed.as_secs_f64());
    println!("server peak RSS     {:.1} MiB", rss as f64 / 1024.0);
    assert_eq!(complete, clients, "some clients missed events: {counts:?}");

    let oha = std::env::var("MAESTRO_BENCH_OHA").unwrap_or_else(|_| "oha".to_string());
    let url = format!("{base}/api/v1/jobs/{id}");
    match Command::new(&oha)
        .args([
            "--no-tui",
            "--output-format",
            "json",
            "-z",
            "15s",
            "-q",
            "1000",
            "-c",
            "16",
        ])
        .arg(&url)
        .output()
    {
        Ok(out) if out.status.success() => {
            let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let p = &report["latencyPercentiles"];
            let ms = |key: &str| p[key].as_f64().unwrap_or(f64::NAN) * 1000.0;
            println!(
                "GET /jobs/{{id}}     {:.0} req/s; p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms; success {:.4}",
                report["summary"]["requestsPerSec"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                ms("p50"),
                ms("p99"),
                ms("p99.9"),
                report["summary"]["successRate"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
            );
            println!(
                "server peak RSS     {:.1} MiB (after the load)",
                peak_rss_kib(pid) as f64 / 1024.0
            );
        }
        Ok(out) => println!(
            "oha failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("")
        ),
        Err(e) => {
            println!("GET /jobs/{{id}} not measured: `{oha}` cannot run ({e}); cargo install oha")
        }
    }
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = server.wait();
}
