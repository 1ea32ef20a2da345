//! Watching a job: its events replayed then live, each once and in order across any number of
//! reconnects, its status changes, through a question and its answer to the job's end; from
//! the process that runs it and from another store handle. Real parts: the scripted model
//! server over HTTP on 127.0.0.1, a real worker, SQLite on disk, PostgreSQL (`PgCluster`).

use crate::support;

use std::time::Duration;

use maestro_app::{JobId, JobStatus, JobWatch, Store, StoreUrl, Watched, Worker, watch_job};
use maestro_protocol::EventRecord;
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use support::{Project, ask, done, upload};

/// The next item, or a failure after a minute.
async fn next(watch: &mut JobWatch) -> Option<Watched> {
    tokio::time::timeout(Duration::from_secs(60), watch.next())
        .await
        .expect("the watch hands out its next item within a minute")
}

/// Everything a watch hands out until it ends, with `on` called on each item.
async fn drain(watch: &mut JobWatch, mut on: impl AsyncFnMut(&Watched)) -> Vec<Watched> {
    let mut items = Vec::new();
    while let Some(item) = next(watch).await {
        on(&item).await;
        items.push(item);
    }
    items
}

fn events(items: &[Watched]) -> Vec<EventRecord> {
    items
        .iter()
        .filter_map(|item| match item {
            Watched::Event(record) => Some((**record).clone()),
            _ => None,
        })
        .collect()
}

fn statuses(items: &[Watched]) -> Vec<JobStatus> {
    items
        .iter()
        .filter_map(|item| match item {
            Watched::Status(status) => Some(*status),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_follows_a_job_through_its_question_and_answer_to_its_end() {
    let server = ScriptedLlm::start([
        Turn::text("Thinking it over.").with_delay(Duration::from_millis(20)),
        ask("Which colour?"),
        done("Blue it is."),
    ])
    .await;
    let project = Project::sqlite(&server.base_url()).await;
    let id = project.submit("Choose a colour", Vec::new()).await;
    let worker = project.worker_on(project.store.clone());
    let mut watch = watch_job(&project.store, Some(&worker.worker), id, None)
        .await
        .unwrap();
    worker.start();
    let store = project.store.clone();
    let items = drain(&mut watch, async |item| {
        // The park does not end the watch: the question is answered while it goes on.
        if *item == Watched::Status(JobStatus::WaitingInput) {
            maestro_app::answer_job(&store, id, "bob", "Blue")
                .await
                .unwrap();
        }
    })
    .await;
    worker.stop().await;

    assert_eq!(events(&items), project.stored(id).await);
    let seen = statuses(&items);
    assert_eq!(seen.first(), Some(&JobStatus::Queued), "{seen:?}");
    assert_eq!(seen.last(), Some(&JobStatus::Completed), "{seen:?}");
    for status in [JobStatus::Running, JobStatus::WaitingInput] {
        assert!(seen.contains(&status), "{status} in {seen:?}");
    }
    // The park came after the run_finished that led to it, and the end after the last event.
    let kinds: Vec<String> = items
        .iter()
        .map(|item| match item {
            Watched::Event(record) => record.event.kind().to_string(),
            Watched::Status(status) => status.to_string(),
            Watched::TextDelta { .. } => "delta".into(),
            Watched::Resync { .. } => "resync".into(),
        })
        .filter(|kind| kind != "delta")
        .collect();
    let parked = kinds.iter().position(|k| k == "waiting_input").unwrap();
    assert_eq!(kinds[parked - 1], "run_finished", "{kinds:?}");
    assert_eq!(kinds[kinds.len() - 2], "run_finished", "{kinds:?}");
    assert_eq!(kinds.last().unwrap(), "completed", "{kinds:?}");
    assert!(
        kinds[parked..].contains(&"run_resumed".to_string()),
        "the answered run goes on in the same stream: {kinds:?}"
    );
    // The model's text streamed while the run went on in this process.
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Watched::TextDelta { text, .. } if !text.is_empty())),
        "{kinds:?}"
    );

    // A watch of the ended job replays it and ends; one past its end says where it is.
    let mut again = watch_job(&project.store, None, id, None).await.unwrap();
    let replayed = drain(&mut again, async |_| {}).await;
    assert_eq!(events(&replayed), project.stored(id).await);
    assert_eq!(statuses(&replayed), vec![JobStatus::Completed]);
    let last = project.stored(id).await.last().unwrap().seq;
    let mut past = watch_job(&project.store, None, id, Some(10_000))
        .await
        .unwrap();
    let items = drain(&mut past, async |_| {}).await;
    assert_eq!(
        items,
        vec![
            Watched::Resync {
                last_seq: i64::try_from(last).unwrap()
            },
            Watched::Status(JobStatus::Completed)
        ]
    );
    let mut tail = watch_job(
        &project.store,
        None,
        id,
        Some(i64::try_from(last).unwrap() - 2),
    )
    .await
    .unwrap();
    let items = drain(&mut tail, async |_| {}).await;
    let seqs: Vec<u64> = events(&items).iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![last - 1, last]);
    assert!(matches!(
        watch_job(&project.store, None, JobId::new(), None).await,
        Err(maestro_app::JobError::NoSuchJob(_))
    ));
}

/// A small random generator, seeded per run and printed, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = std::env::var("WATCH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("WATCH_SEED={seed}");
        Rng(seed | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// A long run watched by a client that reconnects 20 times at random points, each time from a
/// random `seq` among those it received (so it is sent some events again), while the run goes
/// on committing events. Each watch starts right after its cursor and never skips or repeats;
/// what the client keeps is the whole log, once, in order.
async fn reconnecting_watches_see_the_whole_log(
    project: &Project,
    watcher: &Store,
    worker: Option<&Worker>,
    id: JobId,
) {
    let mut rng = Rng::seeded();
    let mut log: Vec<EventRecord> = Vec::new();
    let mut after: Option<i64> = None;
    let mut reconnects = 0;
    loop {
        // Every other watch through the worker's live run, when there is one.
        let through = worker.filter(|_| reconnects % 2 == 0);
        let mut watch = watch_job(watcher, through, id, after).await.unwrap();
        let cursor = after.unwrap_or(0);
        log.retain(|e| i64::try_from(e.seq).unwrap() <= cursor);
        let cut_after = if reconnects < 20 {
            1 + rng.below(25)
        } else {
            u64::MAX
        };
        let mut taken = 0;
        let mut ended = true;
        while let Some(item) = next(&mut watch).await {
            match item {
                Watched::Event(record) => {
                    let expected = log.last().map_or(1, |e| e.seq + 1);
                    assert_eq!(
                        record.seq, expected,
                        "no gap, no repeat (reconnect {reconnects})"
                    );
                    log.push((*record).clone());
                    taken += 1;
                }
                Watched::Resync { .. } => {
                    panic!("a cursor among the received is never past the end")
                }
                Watched::Status(_) | Watched::TextDelta { .. } => {}
            }
            if taken >= cut_after {
                ended = false;
                break;
            }
        }
        if ended {
            break;
        }
        reconnects += 1;
        drop(watch);
        // The run commits events while the client is away.
        tokio::time::sleep(Duration::from_millis(rng.below(30))).await;
        let pick = rng.below(log.len() as u64 + 1) as usize;
        after = Some(if pick == 0 {
            0
        } else {
            i64::try_from(log[pick - 1].seq).unwrap()
        });
    }
    assert_eq!(reconnects, 20);
    let stored = project.stored(id).await;
    let tail: Vec<String> = stored
        .iter()
        .rev()
        .take(6)
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    assert!(
        stored.len() > 250,
        "a long run: {} events, ending {tail:#?}",
        stored.len()
    );
    assert_eq!(log, stored, "the whole log, once, in order");
}

/// Turns that make a long run: many tool calls, each a few events, a little apart.
fn long_run(calls: usize) -> Vec<Turn> {
    // Each call asks for a different number of lines: not the same call over and over.
    let mut turns: Vec<Turn> = (0..calls)
        .map(|i| {
            Turn::tool_call(
                "Read",
                serde_json::json!({"file_path": "input/x.txt", "limit": i + 1}),
            )
            .with_delay(Duration::from_millis(5))
        })
        .collect();
    turns.push(done("read it many times"));
    turns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_watches_see_a_long_run_once_and_in_order_on_sqlite() {
    let server = ScriptedLlm::start(long_run(120)).await;
    let mut project = Project::sqlite(&server.base_url()).await;
    project.config.engine.max_iterations_per_movement = 500;
    let id = project
        .submit(
            "Read input/x.txt again and again",
            vec![upload("x.txt", b"x")],
        )
        .await;
    let worker = project.worker();
    reconnecting_watches_see_the_whole_log(&project, &project.store, Some(&worker.worker), id)
        .await;
    assert_eq!(worker.stop().await.finished, 1);
}

/// The same on PostgreSQL, the worker writing through one store handle and the watches reading
/// through another: their wakeups come through the database's notifications.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn reconnecting_watches_on_another_handle_see_a_long_run_on_postgres() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let server = ScriptedLlm::start(long_run(120)).await;
    let url = StoreUrl::Postgres { url: cluster.url() };
    let mut project = Project::on(
        tempfile::tempdir().unwrap(),
        url.clone(),
        &server.base_url(),
    )
    .await;
    project.config.engine.max_iterations_per_movement = 500;
    let watcher = Store::open(&url).await.unwrap();
    let id = project
        .submit(
            "Read input/x.txt again and again",
            vec![upload("x.txt", b"x")],
        )
        .await;
    let worker = project.worker();
    reconnecting_watches_see_the_whole_log(&project, &watcher, None, id).await;
    assert_eq!(worker.stop().await.finished, 1);
}
