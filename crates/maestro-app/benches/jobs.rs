//! Job benchmarks on the embedded store (results in docs/benchmarks.md). Everything is real: a
//! WAL-mode SQLite file in a temporary directory, an in-process [`Worker`], the engine, and the
//! scripted model server answering over HTTP on 127.0.0.1.
//!
//! - `submit_to_first_movement`: one idle worker (one slot, polling every 200 ms as `maestro
//!   worker` does); a job is submitted and the time runs until its first `movement_started`
//!   event can be read from the store. With `wake` the submitter calls [`Worker::wake`], as a
//!   process that queues and runs its own jobs does; with `poll` it does not, and the worker
//!   finds the job at its next poll.
//! - `thousand_runs`: 1,000 queued jobs of a 3-movement takt piece, each movement one model
//!   call answered after 200 ms; one worker with 1,000 slots runs them all. The critical path is
//!   3 × 200 ms = 600 ms; the time runs from the worker's start to the last job's end as the
//!   store records it (the job's `updated_at`).
//! - `http_floor` and `tcp_floor`: the floors under `thousand_runs` on this machine: the same
//!   3,000 calls through the model client alone (no engine, store or run directory), and the
//!   same exchanges over bare loopback sockets (no HTTP at all).
//! - `record_floor`: `http_floor` with only what a durable run cannot do without: the 1,000
//!   jobs claimed in one batch, each call's `llm_request` committed (and waited for) before it
//!   is made, and the jobs finished in batches; no engine, prompts, run directory or tools.
//!
//! Each bench prints what divan cannot: the latency from the event's own timestamp, the wall
//! time over the critical path (and where it went), and the process's peak resident set
//! (`VmHWM`) at the end. `thousand_runs` and `http_floor` also print each sample's own peak:
//! the process's high-water mark is reset (`/proc/self/clear_refs`) as the sample's runs start
//! and read once they have ended, before the bench reads the record back for its figures (in
//! `thousand_runs`, every job's events: a read the worker never makes, which maps most of the
//! store file). In `thousand_runs` the scripted server keeps no record of the requests
//! (`MAESTRO_BENCH_KEEP_REQUESTS=1` makes it keep them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use divan::Bencher;
use maestro_app::{Profile, Shutdown, Submission, Worker, WorkerOptions, submit};
use maestro_config::Config;
use maestro_store::{Classes, JobId, JobQueue, JobStatus, NewJob, Store, StoreUrl};
use maestro_testkit::{ScriptedLlm, Turn};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The shipped binary's allocator (`--cfg maestro_bench_system_alloc` leaves the system's, for
/// heap profilers that hook `malloc`).
#[cfg(not(maestro_bench_system_alloc))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The shipped binary's allocator setting (`give_back_freed_memory_soon` in
/// `maestro-cli/src/main.rs`): freed memory goes back to the system after 10 ms, unless
/// `MIMALLOC_PURGE_DELAY` says otherwise.
#[allow(unsafe_code)]
fn give_back_freed_memory_soon() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // `mi_option_purge_delay` in mimalloc's option enum (the binary's test pins the number).
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets one of mimalloc's options, which any thread may do at any time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10) }
}

fn main() {
    give_back_freed_memory_soon();
    divan::main();
    let whole = WHOLE_PEAK_KIB
        .load(Ordering::Relaxed)
        .max(vm_hwm_kib().unwrap_or(0));
    println!("peak RSS of the whole process (VmHWM): {whole} kB");
}

const ONE: &str = "\
name: one
description: one movement
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: false
    persona: You work.
    instruction: \"{task}\"
    rules:
      - condition: done
        next: COMPLETE
";

const THREE: &str = "\
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

/// The answer every call gets: each movement finds its own tag in it.
const ANSWER: &str = "Done. [WORK:1] [PLAN:1] [BUILD:1] [CHECK:1]";

/// The process's high-water mark of resident memory (`VmHWM`), in KiB.
fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

/// The highest `VmHWM` seen before a reset, so that the whole process's peak is still known at
/// the end.
static WHOLE_PEAK_KIB: AtomicU64 = AtomicU64::new(0);

/// Starts measuring one sample's peak: the high-water mark is set back to the current resident
/// set (`echo 5 > /proc/self/clear_refs`). `false` when the kernel does not allow it.
fn reset_peak() -> bool {
    if let Some(kib) = vm_hwm_kib() {
        WHOLE_PEAK_KIB.fetch_max(kib, Ordering::Relaxed);
    }
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak since [`reset_peak`], in MiB, as text (`unknown` when it could not be reset).
fn sample_peak(reset: bool) -> String {
    match vm_hwm_kib() {
        Some(kib) if reset => format!("{:.1} MiB", kib as f64 / 1024.0),
        _ => "unknown".into(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A project directory with both pieces, its store, and the configuration a worker runs with.
struct Project {
    dir: tempfile::TempDir,
    store: Store,
    config: Config,
}

impl Project {
    async fn new(base_url: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let pieces = dir.path().join("pieces");
        std::fs::create_dir_all(&pieces).unwrap();
        std::fs::write(pieces.join("one.yaml"), ONE).unwrap();
        std::fs::write(pieces.join("three.yaml"), THREE).unwrap();
        let mut config = Config {
            root: dir.path().to_path_buf(),
            ..Config::default()
        };
        config.llm.base_url = base_url.to_string();
        config.llm.model = Some("scripted-model".into());
        // `MAESTRO_BENCH_RUNS_DIR` puts the run directories elsewhere (a tmpfs, say): on ext4,
        // creating files just after many were deleted (an earlier sample's, a build's) makes the
        // kernel skip every recently deleted inode, and that can take most of the CPU
        // (docs/benchmarks.md).
        config.paths.runs_dir = match std::env::var_os("MAESTRO_BENCH_RUNS_DIR") {
            Some(runs) => Path::new(&runs).join(dir.path().file_name().unwrap()),
            None => dir.path().join(".maestro/runs"),
        };
        config.paths.pieces_dirs = vec![pieces];
        let url = StoreUrl::Sqlite {
            path: dir.path().join(".maestro/maestro.db"),
        };
        let store = Store::open(&url).await.unwrap();
        Project { dir, store, config }
    }

    fn worker(&self, slots: usize, idle_poll: Duration) -> Worker {
        Worker::new(
            self.store.clone(),
            self.config.clone(),
            WorkerOptions {
                name: "bench".into(),
                profiles: vec![Profile {
                    name: "default".into(),
                    concurrency: slots,
                    classes: Classes::Any,
                }],
                lease: WorkerOptions::LEASE,
                drain: Duration::from_secs(5),
                idle_poll,
                model_from_flag: true,
            },
        )
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        // Run directories put outside the project by `MAESTRO_BENCH_RUNS_DIR`.
        if !self.config.paths.runs_dir.starts_with(self.dir.path()) {
            let _ = std::fs::remove_dir_all(&self.config.paths.runs_dir);
        }
    }
}

fn ended(status: JobStatus) -> bool {
    !matches!(
        status,
        JobStatus::Queued | JobStatus::Running | JobStatus::WaitingSubtasks
    )
}

async fn until_ended(store: &Store, id: JobId) {
    until_ended_every(store, id, Duration::from_millis(2)).await;
}

/// Waits for `id` to end, looking every `every`.
async fn until_ended_every(store: &Store, id: JobId, every: Duration) {
    loop {
        let job = store.job(id).await.unwrap().unwrap();
        if ended(job.status) {
            assert_eq!(job.status, JobStatus::Completed, "{:?}", job.reason);
            return;
        }
        tokio::time::sleep(every).await;
    }
}

/// The idle poll of `maestro worker`.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// Submit to the first `movement_started` in the store, one idle single-slot worker.
#[divan::bench(args = ["wake", "poll"], sample_count = 30, sample_size = 1)]
fn submit_to_first_movement(bencher: Bencher, how: &str) {
    let rt = runtime();
    let server = rt.block_on(ScriptedLlm::start([]));
    let project = rt.block_on(Project::new(&server.base_url()));
    let worker = project.worker(1, IDLE_POLL);
    let shutdown = Shutdown::new();
    let running = rt.spawn({
        let worker = worker.clone();
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await }
    });
    let wake = how == "wake";
    let last: Mutex<Option<JobId>> = Mutex::new(None);
    // From the submit call to the event's own timestamp (set when the engine emitted it).
    let stamped: Mutex<Vec<f64>> = Mutex::new(Vec::new());
    bencher
        .with_inputs(|| {
            // The previous job has ended and the worker is idle again, polling.
            if let Some(id) = last.lock().unwrap().take() {
                rt.block_on(until_ended(&project.store, id));
            }
            server.push(Turn::text(ANSWER));
            std::thread::sleep(Duration::from_millis(20));
        })
        .bench_local_values(|()| {
            rt.block_on(async {
                let submitted = OffsetDateTime::now_utc();
                let id = submit(
                    &project.store,
                    &project.config,
                    Submission {
                        piece: "one".into(),
                        task: "measure the latency".into(),
                        workspace: Some(project.path().to_path_buf()),
                        class: None,
                        priority: 0,
                        max_attempts: None,
                        submitted_by: "bench".into(),
                        owner: None,
                        inputs: Vec::new(),
                        budget: Default::default(),
                    },
                )
                .await
                .unwrap();
                if wake {
                    worker.wake();
                }
                let started = loop {
                    let events = project.store.events(id, 0).await.unwrap();
                    if let Some(e) = events.iter().find(|e| e.kind == "movement_started") {
                        break e.payload["ts"].as_str().unwrap().to_string();
                    }
                    tokio::task::yield_now().await;
                };
                let at = OffsetDateTime::parse(&started, &Rfc3339).unwrap();
                let ms = (at - submitted).as_seconds_f64() * 1e3;
                stamped.lock().unwrap().push(ms);
                *last.lock().unwrap() = Some(id);
            })
        });
    if let Some(id) = last.lock().unwrap().take() {
        rt.block_on(until_ended(&project.store, id));
    }
    shutdown.stop_claiming();
    let stats = rt.block_on(running).unwrap().unwrap();
    let mut ms = stamped.into_inner().unwrap();
    if !ms.is_empty() {
        ms.sort_by(f64::total_cmp);
        println!(
            "submit_to_first_movement/{how}: submit → movement_started's own timestamp over {} \
             jobs: fastest {:.2} ms, median {:.2} ms, slowest {:.2} ms ({} runs finished)",
            ms.len(),
            ms[0],
            ms[ms.len() / 2],
            ms[ms.len() - 1],
            stats.finished,
        );
    }
}

const RUNS: usize = 1_000;
const DELAY: Duration = Duration::from_millis(200);
const CRITICAL_PATH: Duration = Duration::from_millis(600);

/// Where a sample's time went, in ms from the worker's start (by the wall clock): when the
/// last run wrote its first event (all claimed and started), its last event (all runs done),
/// and when the last job's end was written.
/// Also, the median run's span from its first to its last event, and the part of it spent
/// waiting for model answers (`llm_request` to `llm_response`).
struct Phases {
    last_first_event: f64,
    last_last_event: f64,
    last_end: f64,
    median_span: f64,
    median_model: f64,
    /// The k-th model call of every run: when the runs asked (`llm_request`), when the server
    /// received the requests and began the answers (its 200 ms over), and when the runs had the
    /// answers (`llm_response`), as median and last, in ms from the worker's start.
    calls: Vec<String>,
}

impl Phases {
    /// Reads the sample's record back. The events are read through a connection of the bench's
    /// own that maps nothing of the file (`mmap_size = 0`) and takes only each event's kind and
    /// time: the store's connections map the file (`PRAGMA mmap_size`), and reading every event
    /// of 1,000 jobs through them put about 10 MB of the store's pages into the process's
    /// resident set after the runs, which its peak is not about.
    async fn read(
        store: &Store,
        dir: &Path,
        ids: &[JobId],
        started_at: OffsetDateTime,
        server: &[maestro_testkit::Timing],
    ) -> Phases {
        use sqlx::{Connection, Executor};
        let ms = |at: OffsetDateTime| (at - started_at).as_seconds_f64() * 1e3;
        let stamp = |ts: &str| OffsetDateTime::parse(ts, &Rfc3339).unwrap();
        let url = format!(
            "sqlite://{}?mode=ro",
            dir.join(".maestro/maestro.db").display()
        );
        let mut reader = sqlx::SqliteConnection::connect(&url).await.unwrap();
        reader.execute("PRAGMA mmap_size = 0").await.unwrap();
        reader.execute("PRAGMA cache_size = -256").await.unwrap();
        let mut phases = Phases {
            last_first_event: 0.0,
            last_last_event: 0.0,
            last_end: 0.0,
            median_span: 0.0,
            median_model: 0.0,
            calls: Vec::new(),
        };
        let (mut spans, mut models) = (Vec::new(), Vec::new());
        let (mut asked, mut answered): (Vec<Vec<f64>>, Vec<Vec<f64>>) = (vec![], vec![]);
        for id in ids {
            let events: Vec<(String, String)> = sqlx::query_as(
                "SELECT kind, json_extract(payload, '$.ts') FROM job_events \
                 WHERE job_id = ? ORDER BY seq",
            )
            .bind(id.to_string())
            .fetch_all(&mut reader)
            .await
            .unwrap();
            let job = store.job(*id).await.unwrap().unwrap();
            let (first, last) = (events.first().unwrap(), events.last().unwrap());
            phases.last_first_event = phases.last_first_event.max(ms(stamp(&first.1)));
            phases.last_last_event = phases.last_last_event.max(ms(stamp(&last.1)));
            phases.last_end = phases.last_end.max(ms(job.updated_at));
            spans.push(ms(stamp(&last.1)) - ms(stamp(&first.1)));
            let mut model = 0.0;
            let mut pending = None;
            let (mut requests, mut responses) = (0, 0);
            for (kind, ts) in &events {
                match kind.as_str() {
                    "llm_request" => {
                        let at = ms(stamp(ts));
                        pending = Some(at);
                        if asked.len() <= requests {
                            asked.push(Vec::new());
                        }
                        asked[requests].push(at);
                        requests += 1;
                    }
                    "llm_response" => {
                        let at = ms(stamp(ts));
                        model += at - pending.take().unwrap_or(0.0);
                        if answered.len() <= responses {
                            answered.push(Vec::new());
                        }
                        answered[responses].push(at);
                        responses += 1;
                    }
                    _ => {}
                }
            }
            models.push(model);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let last = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
        let system = |at: std::time::SystemTime| ms(OffsetDateTime::from(at));
        let mut received: Vec<(f64, f64)> = server
            .iter()
            .map(|t| (system(t.received), system(t.answered)))
            .collect();
        received.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (k, (asked, answered)) in asked.iter().zip(&answered).enumerate() {
            let at_server = received
                .get(k * ids.len()..(k + 1) * ids.len())
                .unwrap_or(&[]);
            let (got, began): (Vec<f64>, Vec<f64>) = at_server.iter().copied().unzip();
            let pair = |v: &[f64]| {
                if v.is_empty() {
                    "-".to_string()
                } else {
                    format!("{:.0}/{:.0}", median(v.to_vec()), last(v))
                }
            };
            phases.calls.push(format!(
                "call {}: asked {}, server received {}, answer began {}, answer read {}",
                k + 1,
                pair(asked),
                pair(&got),
                pair(&began),
                pair(answered),
            ));
        }
        phases.median_span = median(spans);
        phases.median_model = median(models);
        phases
    }
}

/// 1,000 queued 3-movement runs, 200 ms per model call, one worker with 1,000 slots.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn thousand_runs(bencher: Bencher) {
    let rt = runtime();
    // The server's record of every request (3,000 prompts a sample) is not the worker's memory;
    // `MAESTRO_BENCH_KEEP_REQUESTS=1` keeps it, to see what it adds.
    let keep = std::env::var_os("MAESTRO_BENCH_KEEP_REQUESTS").is_some_and(|v| v == "1");
    let own: Option<usize> = std::env::var("MAESTRO_BENCH_SERVER_THREADS")
        .ok()
        .and_then(|v| v.parse().ok());
    let server_rt = own.map(|n| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .thread_name("scripted-llm")
            .enable_all()
            .build()
            .unwrap()
    });
    let server_rt_ref = server_rt.as_ref().unwrap_or(&rt);
    let server = if keep {
        server_rt_ref.block_on(ScriptedLlm::start([]))
    } else {
        server_rt_ref.block_on(ScriptedLlm::builder().forget_requests().start())
    };
    let walls: Mutex<Vec<(Duration, String)>> = Mutex::new(Vec::new());
    let phases: Mutex<Vec<Phases>> = Mutex::new(Vec::new());
    bencher
        .with_inputs(|| {
            for _ in 0..RUNS * 3 {
                // Real endpoints report usage (llama.cpp, vLLM and OpenAI all do when asked).
                server.push(Turn::text(ANSWER).with_delay(DELAY).with_usage(60, 12));
            }
            // A new store for every sample, so that each one starts as the first did: the
            // store's connections map its file, and a store that kept every earlier sample's
            // 1,000 jobs and their events grew the later samples' resident sets by the pages of
            // it they read (about 4 MiB a sample).
            rt.block_on(async {
                let project = Project::new(&server.base_url()).await;
                let mut ids = Vec::with_capacity(RUNS);
                for i in 0..RUNS {
                    let mut job = NewJob::new("three", format!("job {i}"), "bench");
                    job.workspace = Some(project.path().display().to_string());
                    ids.push(project.store.submit(job).await.unwrap());
                }
                (project, ids)
            })
        })
        .bench_local_values(|(project, ids)| {
            rt.block_on(async {
                let reset = reset_peak();
                let started_at = OffsetDateTime::now_utc();
                let worker = project.worker(RUNS, IDLE_POLL);
                let shutdown = Shutdown::new();
                let running = tokio::spawn({
                    let shutdown = shutdown.clone();
                    async move { worker.run(shutdown).await }
                });
                // Looked at every 20 ms, not every 2: the looking takes CPU from the runs. The
                // wall time is read from the store afterwards (the last job's end), so the
                // looking's coarseness is not in it.
                for id in &ids {
                    until_ended_every(&project.store, *id, Duration::from_millis(20)).await;
                }
                shutdown.stop_claiming();
                let stats = running.await.unwrap().unwrap();
                assert_eq!(stats.finished, RUNS as u64);
                let peak = sample_peak(reset);
                let timings = server.take_timings();
                let read =
                    Phases::read(&project.store, project.path(), &ids, started_at, &timings).await;
                walls
                    .lock()
                    .unwrap()
                    .push((Duration::from_secs_f64(read.last_end / 1e3), peak));
                phases.lock().unwrap().push(read);
                drop(project);
            })
        });
    for ((wall, peak), phases) in walls
        .into_inner()
        .unwrap()
        .into_iter()
        .zip(phases.into_inner().unwrap())
    {
        println!(
            "thousand_runs: {RUNS} runs in {:.0} ms, {:.2} × the critical path of {} ms; \
             last first event {:.0} ms, last last event {:.0} ms, last job end {:.0} ms; \
             median run {:.0} ms from first to last event, {:.0} ms of it waiting for the model; \
             peak RSS while the runs ran {peak}",
            wall.as_secs_f64() * 1e3,
            wall.as_secs_f64() / CRITICAL_PATH.as_secs_f64(),
            CRITICAL_PATH.as_millis(),
            phases.last_first_event,
            phases.last_last_event,
            phases.last_end,
            phases.median_span,
            phases.median_model,
        );
        println!("  (median/last, ms) {}", phases.calls.join("; "));
    }
    assert_eq!(server.remaining(), 0);
}

/// The floors' request: the conversation so far to the scripted model, nothing else.
fn floor_request(messages: &[maestro_llm::Message]) -> maestro_llm::ChatRequest {
    maestro_llm::ChatRequest {
        model: "scripted-model".into(),
        messages: messages.to_vec(),
        tools: std::sync::Arc::from(Vec::new()),
        response_schema: None,
        temperature: None,
        max_tokens: None,
        headers: Vec::new(),
    }
}

/// What `thousand_runs` cannot go below on this machine: the same 1,000 × 3 model calls
/// (200 ms each, streamed over real HTTP from the same scripted server in the same process),
/// made by 1,000 tasks through one model client (new for each sample, as each `thousand_runs`
/// sample starts a new worker: 1,000 connections are opened), with no engine, store, run
/// directory or events. The wall time runs from the first call to the last answer.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn http_floor(bencher: Bencher) {
    use maestro_llm::{Message, OpenAiCompat, OpenAiConfig, Provider};
    use std::sync::Arc;
    let rt = runtime();
    let server = rt.block_on(ScriptedLlm::builder().forget_requests().start());
    let walls: Mutex<Vec<(Duration, String, String)>> = Mutex::new(Vec::new());
    bencher
        .with_inputs(|| {
            for _ in 0..RUNS * 3 {
                server.push(Turn::text(ANSWER).with_delay(DELAY).with_usage(60, 12));
            }
        })
        .bench_local_values(|()| {
            rt.block_on(async {
                let reset = reset_peak();
                let client =
                    Arc::new(OpenAiCompat::new(OpenAiConfig::new(server.base_url())).unwrap());
                let started = std::time::Instant::now();
                let started_at = std::time::SystemTime::now();
                let tasks: Vec<_> = (0..RUNS)
                    .map(|i| {
                        let client = Arc::clone(&client);
                        tokio::spawn(async move {
                            let mut messages = vec![
                                Message::System {
                                    content: "You plan. ".repeat(30),
                                },
                                Message::user(format!(
                                    "Plan job {i}. {}",
                                    "Some context. ".repeat(20)
                                )),
                            ];
                            for _ in 0..3 {
                                let answer = client
                                    .chat(floor_request(&messages), &|_| {})
                                    .await
                                    .unwrap();
                                messages.push(Message::Assistant {
                                    content: answer.content,
                                    tool_calls: Vec::new(),
                                });
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.unwrap();
                }
                let wall = started.elapsed();
                let peak = sample_peak(reset);
                // When the server received the k-th call of every task (median/last, ms).
                let since = |at: std::time::SystemTime| {
                    at.duration_since(started_at)
                        .unwrap_or_default()
                        .as_secs_f64()
                        * 1e3
                };
                let mut received: Vec<f64> = server
                    .take_timings()
                    .iter()
                    .map(|t| since(t.received))
                    .collect();
                received.sort_by(f64::total_cmp);
                let calls: Vec<String> = received
                    .chunks(RUNS)
                    .enumerate()
                    .map(|(k, c)| {
                        format!(
                            "call {}: {:.0}/{:.0}",
                            k + 1,
                            c[c.len() / 2],
                            c[c.len() - 1]
                        )
                    })
                    .collect();
                walls.lock().unwrap().push((wall, calls.join("; "), peak));
            })
        });
    for (wall, calls, peak) in walls.into_inner().unwrap() {
        println!(
            "http_floor: {RUNS} × 3 calls in {:.0} ms, {:.2} × the critical path of {} ms; \
             server received (median/last, ms) {calls}; peak RSS while the calls ran {peak}",
            wall.as_secs_f64() * 1e3,
            wall.as_secs_f64() / CRITICAL_PATH.as_secs_f64(),
            CRITICAL_PATH.as_millis(),
        );
    }
    assert_eq!(server.remaining(), 0);
}

/// The floor of a durable run under `thousand_runs`: `http_floor`'s 1,000 × 3 calls, each made
/// under a job's lease with only what the record cannot do without. The 1,000 jobs are claimed
/// in one batch (as the worker claims them); before each call the task commits an
/// `llm_request` event through the worker's [`EventWriter`] and waits for the commit (the
/// write-ahead record of the call, with the previous call's `llm_response` in the same batch);
/// after the last answer it commits the last `llm_response`, and the jobs are finished in
/// batches (as the worker finishes them). No engine, prompts, run directory, tools or
/// `events.jsonl`. The wall time runs from the claim to the last job's finish.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn record_floor(bencher: Bencher) {
    use maestro_app::EventWriter;
    use maestro_llm::{Message, OpenAiCompat, OpenAiConfig, Provider};
    use maestro_store::{NewEvent, Outcome};
    use std::sync::Arc;
    let rt = runtime();
    let server = rt.block_on(ScriptedLlm::builder().forget_requests().start());
    let walls: Mutex<Vec<(Duration, String)>> = Mutex::new(Vec::new());
    bencher
        .with_inputs(|| {
            for _ in 0..RUNS * 3 {
                server.push(Turn::text(ANSWER).with_delay(DELAY).with_usage(60, 12));
            }
            rt.block_on(async {
                let project = Project::new(&server.base_url()).await;
                for i in 0..RUNS {
                    let job = NewJob::new("three", format!("job {i}"), "bench");
                    project.store.submit(job).await.unwrap();
                }
                project
            })
        })
        .bench_local_values(|project| {
            rt.block_on(async {
                let reset = reset_peak();
                let started = std::time::Instant::now();
                let store = project.store.clone();
                let claimed = store
                    .claim_batch("bench", &Classes::Any, WorkerOptions::LEASE, RUNS)
                    .await
                    .unwrap();
                assert_eq!(claimed.len(), RUNS);
                let client =
                    Arc::new(OpenAiCompat::new(OpenAiConfig::new(server.base_url())).unwrap());
                let writer = EventWriter::new(store.clone());
                let (ended, mut ends) = tokio::sync::mpsc::unbounded_channel();
                let finisher = tokio::spawn({
                    let store = store.clone();
                    async move {
                        let mut finished = 0;
                        let mut group = Vec::new();
                        while ends.recv_many(&mut group, 512).await > 0 {
                            let results = store.finish_batch(&group).await.unwrap();
                            assert!(results.iter().all(Result::is_ok));
                            finished += group.len();
                            group.clear();
                        }
                        finished
                    }
                });
                for (i, claim) in claimed.into_iter().enumerate() {
                    let client = Arc::clone(&client);
                    let writer = writer.clone();
                    let ended = ended.clone();
                    tokio::spawn(async move {
                        let lease = claim.lease;
                        let mut messages = vec![
                            Message::System {
                                content: "You plan. ".repeat(30),
                            },
                            Message::user(format!("Plan job {i}. {}", "Some context. ".repeat(20))),
                        ];
                        let mut seq = 0;
                        let mut pending = Vec::new();
                        for call in 0..3 {
                            seq += 1;
                            pending.push(
                                NewEvent::new(
                                    seq,
                                    "llm_request",
                                    &serde_json::json!({"call": call, "model": "scripted-model"}),
                                )
                                .unwrap(),
                            );
                            writer
                                .append(&lease, std::mem::take(&mut pending))
                                .await
                                .unwrap()
                                .unwrap();
                            let answer = client
                                .chat(floor_request(&messages), &|_| {})
                                .await
                                .unwrap();
                            seq += 1;
                            pending.push(
                                NewEvent::new(
                                    seq,
                                    "llm_response",
                                    &serde_json::json!({"call": call, "content": answer.content}),
                                )
                                .unwrap(),
                            );
                            messages.push(Message::Assistant {
                                content: answer.content,
                                tool_calls: Vec::new(),
                            });
                        }
                        writer.append(&lease, pending).await.unwrap().unwrap();
                        let outcome = Outcome {
                            status: JobStatus::Completed,
                            result: None,
                            reason: None,
                        };
                        let _ = ended.send((lease, outcome));
                    });
                }
                drop(ended);
                assert_eq!(finisher.await.unwrap(), RUNS);
                let wall = started.elapsed();
                let peak = sample_peak(reset);
                walls.lock().unwrap().push((wall, peak));
                drop(project);
            })
        });
    for (wall, peak) in walls.into_inner().unwrap() {
        println!(
            "record_floor: {RUNS} × 3 recorded calls in {:.0} ms, {:.2} × the critical path of {} ms; \
             peak RSS while the calls ran {peak}",
            wall.as_secs_f64() * 1e3,
            wall.as_secs_f64() / CRITICAL_PATH.as_secs_f64(),
            CRITICAL_PATH.as_millis(),
        );
    }
    assert_eq!(server.remaining(), 0);
}

/// The floor under `http_floor`: the same 1,000 × 3 exchanges over 1,000 new loopback TCP
/// connections, with the same bytes a streamed answer takes, but written and read with bare
/// `tokio` sockets on both sides (a fixed request, a fixed answer after 200 ms, no HTTP parsing
/// and no JSON). What is left is the kernel's TCP and the runtime's scheduling on this machine.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn tcp_floor(bencher: Bencher) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = runtime();
    // A request and an answer of the sizes the engine's calls have (about 2 KB and 1.3 KB).
    let request: &'static [u8] = Box::leak(vec![b'q'; 2048].into_boxed_slice());
    let answer: &'static [u8] = Box::leak(vec![b'a'; 1300].into_boxed_slice());
    let listener = rt
        .block_on(async { maestro_testkit::listen_loopback() })
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                loop {
                    let mut got = 0;
                    while got < request.len() {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got += n,
                        }
                    }
                    tokio::time::sleep(DELAY).await;
                    if socket.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let walls: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
    bencher.bench_local(|| {
        rt.block_on(async {
            let started = std::time::Instant::now();
            let tasks: Vec<_> = (0..RUNS)
                .map(|_| {
                    tokio::spawn(async move {
                        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
                        socket.set_nodelay(true).unwrap();
                        let mut buf = vec![0u8; 4096];
                        for _ in 0..3 {
                            socket.write_all(request).await.unwrap();
                            let mut got = 0;
                            while got < answer.len() {
                                let n = socket.read(&mut buf).await.unwrap();
                                assert!(n > 0, "the server closed the connection");
                                got += n;
                            }
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            walls.lock().unwrap().push(started.elapsed());
        })
    });
    for wall in walls.into_inner().unwrap() {
        println!(
            "tcp_floor: {RUNS} × 3 exchanges in {:.0} ms, {:.2} × the critical path of {} ms",
            wall.as_secs_f64() * 1e3,
            wall.as_secs_f64() / CRITICAL_PATH.as_secs_f64(),
            CRITICAL_PATH.as_millis(),
        );
    }
}
