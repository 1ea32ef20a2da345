//! The gateway's added latency: the same chat request sent at a fixed rate (1,000 requests/s
//! by default) to an in-process stub upstream directly, then through the gateway in front of
//! it, over real HTTP on 127.0.0.1 with kept-alive connections. Prints p50, p90, p99 and p99.9
//! of both, the difference, and the process's resident set.
//!
//! `cargo bench -p maestro-gateway --bench overhead` (`GATEWAY_BENCH_RATE`,
//! `GATEWAY_BENCH_SECS` change the rate and the length of each phase).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use maestro_gateway::{Gateway, GatewayConfig, GatewayStore, StoreFuture, UsageRecord};
use serde_json::json;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"stub","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":9,"total_tokens":33}}"#;

/// A store that takes the records and forgets them (the writer's batching still runs).
#[derive(Debug)]
struct Discard;

impl GatewayStore for Discard {
    fn record_usage<'a>(&'a self, _records: &'a [UsageRecord]) -> StoreFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}/v1")
}

/// Sends `count` requests at `rate` per second (open loop: each starts on its schedule,
/// whether or not the earlier ones finished) and returns each one's latency.
async fn run(url: &str, rate: u64, count: u64) -> Vec<Duration> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let body = serde_json::to_vec(&json!({
        "model": "team-model",
        "messages": [{"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "Say hello."}],
        "max_tokens": 64,
        "temperature": 0.2,
    }))
    .unwrap();
    let body = bytes::Bytes::from(body);
    let url = format!("{url}/chat/completions");
    let start = tokio::time::Instant::now();
    let interval = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let mut tasks = Vec::with_capacity(count as usize);
    for i in 0..count {
        tokio::time::sleep_until(start + interval * u32::try_from(i).unwrap()).await;
        let client = client.clone();
        let url = url.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let answer = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200);
            answer.bytes().await.unwrap();
            sent.elapsed()
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    for task in tasks {
        latencies.push(task.await.unwrap());
    }
    latencies.sort();
    latencies
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let rate = env_number("GATEWAY_BENCH_RATE", 1000);
    let secs = env_number("GATEWAY_BENCH_SECS", 10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let stub = serve(Router::new().route(
            "/v1/chat/completions",
            post(|| async { ([("content-type", "application/json")], ANSWER) }),
        ))
        .await;
        let config: GatewayConfig = serde_json::from_value(json!({
            "upstreams": {"stub": {"kind": "openai", "base_url": stub}},
            "models": {"team-model": [{"upstream": "stub", "model": "stub-model"}]},
        }))
        .unwrap();
        let gateway = Gateway::new(&config, Default::default(), Some(Arc::new(Discard))).unwrap();
        let through = serve(gateway.standalone_router()).await;
        // Warm both paths' connections up.
        run(&stub, rate, rate).await;
        run(&through, rate, rate).await;
        let rss_before = rss_kib();
        let count = rate * secs;
        let direct = run(&stub, rate, count).await;
        let rss_direct = rss_kib();
        let proxied = run(&through, rate, count).await;
        let rss_proxied = rss_kib();
        println!("{count} requests at {rate}/s, each way");
        println!("{:<10} {:>9} {:>9} {:>9} {:>9}", "", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms");
        for (name, l) in [("direct", &direct), ("gateway", &proxied)] {
            println!(
                "{name:<10} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                ms(pct(l, 0.5)),
                ms(pct(l, 0.9)),
                ms(pct(l, 0.99)),
                ms(pct(l, 0.999))
            );
        }
        println!(
            "{:<10} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            "added",
            ms(pct(&proxied, 0.5)) - ms(pct(&direct, 0.5)),
            ms(pct(&proxied, 0.9)) - ms(pct(&direct, 0.9)),
            ms(pct(&proxied, 0.99)) - ms(pct(&direct, 0.99)),
            ms(pct(&proxied, 0.999)) - ms(pct(&direct, 0.999)),
        );
        println!(
            "RSS of the process (client, stub and gateway): {:.1} MiB after warm-up, {:.1} MiB after the direct run, {:.1} MiB after the gateway run",
            rss_before as f64 / 1024.0,
            rss_direct as f64 / 1024.0,
            rss_proxied as f64 / 1024.0
        );
        gateway.close().await;
    });
}
