//! Queue throughput on the embedded SQLite store (a WAL file in a temporary directory, as
//! `.maestro/maestro.db` is): submit, claim then finish, and event appends. Run with
//! `cargo bench -p maestro-store --bench queue`; figures in docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use divan::{AllocProfiler, Bencher};
use maestro_store::{
    Classes, JobQueue, JobStatus, Lease, NewEvent, NewJob, Outcome, Store, StoreUrl,
};
use serde_json::json;

#[global_allocator]
static ALLOC: AllocProfiler = AllocProfiler::system();

const LEASE: Duration = Duration::from_secs(30);
/// Samples × iterations per sample, fixed so the jobs submitted up front suffice.
const SAMPLES: u32 = 40;
const PER_SAMPLE: u32 = 50;

fn main() {
    divan::main();
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    store: Store,
    _dir: tempfile::TempDir,
}

fn fixture(queued: usize) -> Fixture {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::Sqlite {
        path: dir.path().join(".maestro/maestro.db"),
    };
    let store = rt.block_on(Store::open(&url)).unwrap();
    rt.block_on(async {
        for i in 0..queued {
            store
                .submit(NewJob::new("noop", format!("job {i}"), "bench"))
                .await
                .unwrap();
        }
    });
    Fixture {
        rt,
        store,
        _dir: dir,
    }
}

fn done() -> Outcome {
    Outcome {
        status: JobStatus::Completed,
        result: None,
        reason: None,
    }
}

/// One no-op job's whole life on the worker side: claim it, finish it.
#[divan::bench(sample_count = SAMPLES, sample_size = PER_SAMPLE)]
fn claim_and_finish(bencher: Bencher) {
    let total = (SAMPLES * PER_SAMPLE) as usize + 1_000;
    let f = fixture(total);
    bencher.bench_local(|| {
        f.rt.block_on(async {
            let claimed = f
                .store
                .claim("bench", &Classes::Any, LEASE)
                .await
                .unwrap()
                .unwrap();
            f.store.finish(&claimed.lease, done()).await.unwrap();
        })
    });
}

/// Submitting one job (its row and its audit entry, one transaction).
#[divan::bench(sample_count = SAMPLES, sample_size = PER_SAMPLE)]
fn submit(bencher: Bencher) {
    let f = fixture(0);
    bencher.bench_local(|| {
        f.rt.block_on(f.store.submit(NewJob::new("noop", "a task", "bench")))
            .unwrap()
    });
}

fn running(f: &Fixture) -> Lease {
    f.rt.block_on(async {
        f.store
            .claim("bench", &Classes::Any, LEASE)
            .await
            .unwrap()
            .unwrap()
            .lease
    })
}

/// Appending events to a running job, `n` per call (one fenced transaction per call).
#[divan::bench(args = [1, 10], sample_count = SAMPLES, sample_size = PER_SAMPLE)]
fn append_events(bencher: Bencher, n: i64) {
    let f = fixture(1);
    let lease = running(&f);
    let seq = AtomicI64::new(0);
    let payload = json!({"tool": "Read", "output": "x".repeat(400)});
    bencher.bench_local(|| {
        let events: Vec<NewEvent> = (0..n)
            .map(|_| {
                NewEvent::new(
                    seq.fetch_add(1, Ordering::Relaxed) + 1,
                    "tool_result",
                    &payload,
                )
                .unwrap()
            })
            .collect();
        f.rt.block_on(f.store.append_events(&lease, &events))
            .unwrap()
    });
}

/// Queue throughput: 1,000 queued no-op jobs drained by 4 workers at once, each with 8 slots,
/// as `maestro worker` does it: one transaction claims a job for every idle slot, the runs
/// that ended together are finished in one transaction (each fenced on its own lease), then
/// the next claim. On SQLite and, where `initdb` is installed, on a throwaway PostgreSQL
/// cluster. The counter gives jobs per second.
#[divan::bench(args = ["sqlite", "postgres"], sample_count = 5, sample_size = 1)]
fn drain_with_4_workers(bencher: Bencher, backend: &str) {
    const JOBS: usize = 1_000;
    const SLOTS: usize = 8;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cluster = match backend {
        "postgres" => match maestro_testkit::PgCluster::bin_dir() {
            Some(_) => Some(maestro_testkit::PgCluster::start()),
            None => {
                eprintln!("skipped: no initdb on this machine");
                return;
            }
        },
        _ => None,
    };
    let url: StoreUrl = match &cluster {
        Some(pg) => pg.url().parse().unwrap(),
        None => StoreUrl::Sqlite {
            path: dir.path().join(".maestro/maestro.db"),
        },
    };
    let store = rt.block_on(Store::open(&url)).unwrap();
    bencher
        .counter(divan::counter::ItemsCount::new(JOBS))
        .with_inputs(|| {
            rt.block_on(async {
                for i in 0..JOBS {
                    store
                        .submit(NewJob::new("noop", format!("job {i}"), "bench"))
                        .await
                        .unwrap();
                }
            })
        })
        .bench_local_values(|()| {
            rt.block_on(async {
                let workers: Vec<_> = (0..4)
                    .map(|w| {
                        let store = store.clone();
                        tokio::spawn(async move {
                            let name = format!("bench-{w}");
                            loop {
                                let batch = store
                                    .claim_batch(&name, &Classes::Any, LEASE, SLOTS)
                                    .await
                                    .unwrap();
                                if batch.is_empty() {
                                    break;
                                }
                                // What a worker's completer does with the runs that
                                // ended together: one transaction, each job fenced.
                                let finishes: Vec<_> =
                                    batch.into_iter().map(|c| (c.lease, done())).collect();
                                let answers = store.finish_batch(&finishes).await.unwrap();
                                assert!(answers.iter().all(Result::is_ok));
                            }
                        })
                    })
                    .collect();
                for worker in workers {
                    worker.await.unwrap();
                }
            })
        });
}
