//! The web UI in headless Chromium (Debian's, through chromedriver: `maestro_testkit::Browser`)
//! against the release `maestro serve` with a scripted model:
//!
//! 1. the job page's weight: the bytes of the page's shell, stylesheet and scripts (resource
//!    timing's decoded body sizes, so uncompressed), the job's own data (`/api/…`) left out;
//! 2. time to first render of a finished job of about 5,000 events: from navigation start to the
//!    element of the job's last event being in the DOM (a `MutationObserver` installed before
//!    the page's own scripts), the median of several loads;
//! 3. frame times while about 50 events/s stream into the page of a running job
//!    (`requestAnimationFrame` deltas: p50, p95, max), and the renderer's peak resident set.
//!
//! ```text
//! bash scripts/prerequisites.sh               # chromium, chromium-driver
//! cargo bench -p maestro-cli --bench web
//! ```
//!
//! `MAESTRO_BENCH_LOADS` (default 7) is the number of loads of the finished job;
//! `MAESTRO_TEST_BIN` runs another `maestro` binary. Results: docs/benchmarks.md ("Web UI").
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use maestro_testkit::{Browser, ScriptedLlm, Turn, Viewport};
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

const WAIT: Duration = Duration::from_secs(120);

/// Turns of 40 parallel reads each: 2 events a model call and 2 a tool call, about 5,100 in all.
const BIG_TURNS: usize = 62;
const CALLS_PER_TURN: usize = 40;

/// The streaming run: four reads a turn (10 events), one turn every 200 ms or so: about 50
/// events/s (the bench prints the rate it saw).
const LIVE_TURNS: usize = 80;
const LIVE_CALLS: usize = 4;
const LIVE_DELAY: Duration = Duration::from_millis(170);

/// How long frames are recorded while the events stream in.
const FRAMES_FOR: Duration = Duration::from_secs(8);

struct Server {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(llm: &ScriptedLlm) -> Server {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pieces")).unwrap();
    std::fs::create_dir_all(dir.path().join(".maestro")).unwrap();
    std::fs::write(dir.path().join("pieces/long.yaml"), PIECE).unwrap();
    std::fs::write(
        dir.path().join(".maestro/config.yaml"),
        // A long movement: more model calls and tool calls per answer than the defaults.
        "llm:\n  tool_mode: native\nengine:\n  max_iterations_per_movement: 500\n  \
         max_tool_calls_per_answer: 64\n",
    )
    .unwrap();
    let binary = std::env::var_os("MAESTRO_TEST_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_maestro").into());
    let mut child = Command::new(binary)
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .args(["serve", "--bind", "127.0.0.1:0", "--llm-base-url"])
        .arg(llm.base_url())
        .args(["--model", "scripted-model"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().expect("serve exited").unwrap();
        if let Some(url) = line.strip_prefix("serve: listening on ") {
            break url.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    Server {
        child,
        base,
        _dir: dir,
    }
}

async fn submit(http: &reqwest::Client, base: &str, task: &str) -> String {
    let job: Value = http
        .post(format!("{base}/api/v1/jobs"))
        .json(&json!({"piece": "long", "task": task}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    job["id"].as_str().unwrap().to_string()
}

async fn until_final(http: &reqwest::Client, base: &str, id: &str) -> Value {
    let started = Instant::now();
    loop {
        let job: Value = http
            .get(format!("{base}/api/v1/jobs/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if ["completed", "failed", "aborted", "exceeded", "cancelled"]
            .contains(&job["status"].as_str().unwrap_or(""))
        {
            return job;
        }
        assert!(started.elapsed() < Duration::from_secs(600), "{job}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn last_seq(http: &reqwest::Client, base: &str, id: &str) -> (usize, i64) {
    let log = http
        .get(format!("{base}/api/v1/jobs/{id}/events?format=jsonl"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let last = log
        .lines()
        .last()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .unwrap_or(0);
    (log.lines().count(), last)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if !std::path::Path::new(maestro_testkit::browser::CHROMIUM).exists()
        || !std::path::Path::new(maestro_testkit::browser::CHROMEDRIVER).exists()
    {
        println!("web: skipped, chromium or chromium-driver is missing (scripts/prerequisites.sh)");
        return;
    }
    let loads: usize = std::env::var("MAESTRO_BENCH_LOADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let http = reqwest::Client::new();

    // The finished job of about 5,000 events.
    let mut turns = Vec::new();
    for t in 0..BIG_TURNS {
        turns.push(Turn::tool_calls((0..CALLS_PER_TURN).map(|c| {
            ("Read", json!({"file_path": format!("missing-{t}-{c}.txt")}))
        })));
    }
    turns.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "Read them all."}),
    ));
    let llm = ScriptedLlm::start(turns).await;
    let server = serve(&llm);
    let base = server.base.clone();
    let seeding = Instant::now();
    let big = submit(&http, &base, "read many files").await;
    let job = until_final(&http, &base, &big).await;
    let (events, last) = last_seq(&http, &base, &big).await;
    println!(
        "seeded job           {events} events (last seq {last}), {} in {:.1} s",
        job["status"],
        seeding.elapsed().as_secs_f64()
    );

    let browser = Browser::start("bench-web", Viewport::Desktop)
        .await
        .unwrap();

    // 1. The page's weight, on the first (uncached) load.
    browser.goto(&format!("{base}/jobs/{big}")).await.unwrap();
    browser
        .wait_for(&format!("#timeline [data-seq=\"{last}\"]"), WAIT)
        .await
        .unwrap();
    let sizes = browser
        .execute(
            "const nav = performance.getEntriesByType('navigation')[0];
             const all = [nav, ...performance.getEntriesByType('resource')];
             return all.map((e) => [new URL(e.name).pathname, e.decodedBodySize, e.transferSize]);",
            vec![],
        )
        .await
        .unwrap();
    let sizes: Vec<(String, u64, u64)> = serde_json::from_value(sizes).unwrap();
    let mut shell_total = 0;
    println!("job page resources   (path, decoded bytes, transferred bytes)");
    for (path, decoded, transferred) in &sizes {
        let own_data = path.starts_with("/api/") || path.starts_with("/share/");
        println!(
            "  {path:<40} {decoded:>9} {transferred:>9}{}",
            if own_data { "  (the job's data)" } else { "" }
        );
        if !own_data {
            shell_total += decoded;
        }
    }
    println!(
        "job page weight      {:.1} KB uncompressed (shell, styles and scripts; the job's data excluded)",
        shell_total as f64 / 1000.0
    );

    // 2. Time to first render of the finished job, several loads.
    let observer = format!(
        "(() => {{
           const target = '#timeline [data-seq=\"{last}\"]';
           const seen = () => {{
             if (window.__rendered === undefined && document.querySelector(target)) {{
               window.__rendered = performance.now();
             }}
           }};
           new MutationObserver(seen).observe(document, {{ childList: true, subtree: true }});
         }})();"
    );
    browser
        .cdp(
            "Page.addScriptToEvaluateOnNewDocument",
            json!({ "source": observer }),
        )
        .await
        .unwrap();
    let mut times = Vec::new();
    for n in 0..loads {
        // Every other load without the cache: a first visit and a later one.
        let cold = n % 2 == 0;
        browser
            .cdp("Network.setCacheDisabled", json!({ "cacheDisabled": cold }))
            .await
            .ok();
        browser.goto(&format!("{base}/jobs/{big}")).await.unwrap();
        let rendered = browser
            .wait_until("the last event", "window.__rendered", WAIT)
            .await
            .unwrap();
        let ms = rendered.as_f64().unwrap();
        println!(
            "  load {n}: last event in the DOM after {ms:.0} ms ({})",
            if cold { "cache off" } else { "cache on" }
        );
        times.push(ms);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "first render         median {:.0} ms, min {:.0} ms, max {:.0} ms over {} loads of {events} events",
        percentile(&times, 50.0),
        times[0],
        times[times.len() - 1],
        times.len()
    );
    let rendered_nodes = browser
        .execute(
            "return document.querySelectorAll('#timeline [data-seq]').length;",
            vec![],
        )
        .await
        .unwrap();
    println!("events on the page   {rendered_nodes}");
    drop(server);
    drop(llm);

    // 3. Frame times while events stream in.
    let mut turns = Vec::new();
    for n in 0..LIVE_TURNS {
        turns.push(
            Turn::tool_calls(
                (0..LIVE_CALLS)
                    .map(|c| ("Read", json!({"file_path": format!("live-{n}-{c}.txt")}))),
            )
            .with_delay(LIVE_DELAY),
        );
    }
    turns.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "done"}),
    ));
    let llm = ScriptedLlm::start(turns).await;
    let server = serve(&llm);
    let base = server.base.clone();
    let live = submit(&http, &base, "read as they come").await;
    browser.goto(&format!("{base}/jobs/{live}")).await.unwrap();
    browser
        .wait_for("#timeline [data-seq]", WAIT)
        .await
        .unwrap();
    let frames = browser
        .execute_async(
            "const done = arguments[arguments.length - 1];
             const ms = arguments[0];
             const count = () => document.querySelectorAll('#timeline [data-seq]').length;
             const deltas = [];
             const first = count();
             const start = performance.now();
             let last = start;
             const tick = (now) => {
               deltas.push(now - last);
               last = now;
               if (now - start < ms) requestAnimationFrame(tick);
               else done({ deltas, events: count() - first, seconds: (now - start) / 1000 });
             };
             requestAnimationFrame((now) => { last = now; requestAnimationFrame(tick); });",
            vec![json!(FRAMES_FOR.as_millis() as u64)],
        )
        .await
        .unwrap();
    let mut deltas: Vec<f64> = serde_json::from_value(frames["deltas"].clone()).unwrap();
    deltas.sort_by(f64::total_cmp);
    let rate = frames["events"].as_f64().unwrap() / frames["seconds"].as_f64().unwrap();
    println!(
        "frames while streaming {:.0} events/s: {} frames, p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        rate,
        deltas.len(),
        percentile(&deltas, 50.0),
        percentile(&deltas, 95.0),
        deltas[deltas.len() - 1]
    );
    until_final(&http, &base, &live).await;
    let rss = browser.renderer_peak_rss_kib();
    println!(
        "renderer peak RSS    {:.1} MiB (largest of {} renderer processes)",
        rss.iter().copied().max().unwrap_or(0) as f64 / 1024.0,
        rss.len()
    );
    browser.close().await;
}
