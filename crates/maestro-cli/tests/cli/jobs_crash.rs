//! A worker killed with SIGKILL while three `maestro worker` processes drain a queue on a real
//! PostgreSQL cluster: every job ends exactly once, no job ran under two workers at the same
//! time, and the model saw only the one resend per job the killed worker held.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use maestro_store::{JobId, JobQueue, JobStatus, NewJob, Store, StoreUrl};
use maestro_testkit::{PgCluster, ScriptedLlm};
use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support;

use support::jobs::{Project, complete, exited, signal};

const JOBS: usize = 200;
/// Jobs one worker holds at most (`--concurrency`), so the resends the kill can cause.
const CONCURRENCY: usize = 4;

/// The task of job `n`; every model request of the job carries it.
fn task(n: usize) -> String {
    format!("Crash task #{n:03}.")
}

/// Which job's task a model request carries.
fn task_of(request: &Value) -> usize {
    let text = request["messages"].to_string();
    let at = text
        .find("Crash task #")
        .unwrap_or_else(|| panic!("a request without a task: {text}"));
    let digits = &text[at + "Crash task #".len()..][..3];
    digits.parse().unwrap()
}

/// The job ids whose run directories a worker's `--runs-dir` holds.
fn run_dirs(dir: &Path) -> BTreeSet<JobId> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// Queues every task as `maestro submit one --task TASK` does (that command has its own tests;
/// 200 processes would take most of this test's time); the ids in task order.
async fn submit_all(store: &Store) -> Vec<JobId> {
    let mut ids = Vec::with_capacity(JOBS);
    for n in 0..JOBS {
        ids.push(
            store
                .submit(NewJob::new("one", task(n), "test"))
                .await
                .unwrap(),
        );
    }
    ids
}

/// Polls the store until `ready` gives a value, at most 30 s.
async fn poll<T>(what: &str, mut ready: impl AsyncFnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = ready().await {
            return value;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "never {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn three_workers_drain_200_jobs_on_postgres_and_one_is_killed_mid_way() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let mut project = Project::new();
    project.db = Some(cluster.url());
    let store = Store::open(&StoreUrl::Postgres { url: cluster.url() })
        .await
        .unwrap();
    // One answer per job, plus one for each resend the kill can cause. The delay keeps runs in
    // flight, so the killed worker holds some, often while its model call is unanswered.
    let turns = JOBS + CONCURRENCY;
    let server = ScriptedLlm::start(
        (0..turns).map(|_| complete("done").with_delay(Duration::from_millis(250))),
    )
    .await;
    let ids = submit_all(&store).await;

    let task_number: BTreeMap<JobId, usize> =
        ids.iter().enumerate().map(|(n, id)| (*id, n)).collect();
    let names = ["alpha", "beta", "doomed"];
    let runs_dir = |name: &str| project.path().join("runs").join(name);
    let mut workers: Vec<Child> = names
        .iter()
        .map(|name| {
            let dir = runs_dir(name).display().to_string();
            project.worker(
                &server.base_url(),
                &[
                    "--name",
                    name,
                    "--concurrency",
                    &CONCURRENCY.to_string(),
                    "--runs-dir",
                    &dir,
                    // Long enough that no survivor's lease lapses on a loaded machine: only the
                    // killed worker's jobs are taken over.
                    "--lease-secs",
                    "8",
                ],
            )
        })
        .collect();
    let doomed_pid = i64::from(workers[2].id());
    let doomed_id = poll("saw the doomed worker register", async || {
        let live = store.live_workers(Duration::from_secs(60)).await.unwrap();
        live.into_iter()
            .find(|worker| worker.pid == doomed_pid)
            .map(|worker| worker.id)
    })
    .await;

    // Kill it once it has finished some jobs of its own and holds running ones, one of them
    // (most likely) waiting for its model answer.
    let held_by_doomed = async || -> BTreeSet<JobId> {
        let running = store.jobs(Some(JobStatus::Running)).await.unwrap();
        running
            .into_iter()
            .filter(|job| job.lease_owner.as_deref() == Some(doomed_id.as_str()))
            .map(|job| job.id)
            .collect()
    };
    poll(
        "saw the doomed worker finish jobs while holding others",
        async || {
            let held = held_by_doomed().await;
            let claimed = run_dirs(&runs_dir("doomed")).len();
            let asked: BTreeSet<usize> = server.requests().iter().map(task_of).collect();
            let waiting = held.iter().any(|id| asked.contains(&task_number[id]));
            (waiting && claimed >= held.len() + 5).then_some(())
        },
    )
    .await;
    let mut doomed = workers.pop().unwrap();
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    // Its leases outlive it by at least two heartbeats, so no one has taken its jobs yet.
    let held = held_by_doomed().await;
    assert!(!held.is_empty());
    let completed_at_kill = store.jobs(Some(JobStatus::Completed)).await.unwrap().len();
    assert!(completed_at_kill < JOBS - held.len(), "killed too late");

    // The other two take its jobs over once the leases expire, and drain the queue.
    let started = Instant::now();
    loop {
        let done = store.jobs(Some(JobStatus::Completed)).await.unwrap().len();
        if done == JOBS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "{done} of {JOBS} jobs completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut finished_by_survivors = 0;
    for worker in workers {
        signal(&worker, "TERM");
        let (status, err) = exited(worker, Duration::from_secs(10)).await;
        assert!(status.success(), "{err}");
        let summary = err.lines().last().unwrap();
        let finished: usize = summary
            .split(": ")
            .nth(1)
            .and_then(|counts| counts.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counts in {summary:?}"));
        assert!(
            summary.ends_with(&format!(
                "{finished} finished, 0 failed, 0 lost or cancelled, 0 handed back"
            )),
            "{err}"
        );
        finished_by_survivors += finished;
    }

    // Every job ended completed, once; the jobs taken over are exactly those the dead worker
    // held, and only they were claimed twice.
    let jobs = store.jobs(None).await.unwrap();
    assert_eq!(jobs.len(), JOBS);
    let retaken: BTreeSet<JobId> = jobs
        .iter()
        .filter(|job| job.attempts != 1)
        .map(|job| job.id)
        .collect();
    assert_eq!(retaken, held);
    for job in &jobs {
        assert_eq!(job.status, JobStatus::Completed, "{job:?}");
        assert_eq!(job.attempts, job.fence, "{job:?}");
        assert_eq!(job.attempts, if held.contains(&job.id) { 2 } else { 1 });
        assert_eq!(job.result.as_ref().unwrap()["result"], "done", "{job:?}");
    }
    // Each worker's run directories are the jobs it claimed (the dead worker may have died
    // before it made one for a job it had just claimed): the survivors split the queue between
    // them, and only the held jobs were also claimed by the dead worker.
    let dirs: BTreeMap<&str, BTreeSet<JobId>> = names
        .iter()
        .map(|name| (*name, run_dirs(&runs_dir(name))))
        .collect();
    assert!(dirs["alpha"].is_disjoint(&dirs["beta"]));
    let survivors: BTreeSet<JobId> = dirs["alpha"].union(&dirs["beta"]).copied().collect();
    assert!(held.is_subset(&survivors));
    let twice: BTreeSet<JobId> = survivors.intersection(&dirs["doomed"]).copied().collect();
    assert!(twice.is_subset(&held), "{twice:?} beyond {held:?}");
    assert_eq!(survivors.len() + dirs["doomed"].len() - twice.len(), JOBS);
    assert!(
        ids.iter()
            .all(|id| survivors.contains(id) || dirs["doomed"].contains(id))
    );
    let finished_by_doomed = dirs["doomed"].len() - twice.len();
    assert!(finished_by_doomed > 0);
    assert_eq!(finished_by_survivors + finished_by_doomed, JOBS);

    // No two workers ran a job at the same time: its events are gapless from 1, every event of
    // one claim precedes every event of the next, and the takeover resumed from the dead
    // worker's last event.
    for job in &jobs {
        let events = store.events(job.id, 0).await.unwrap();
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            (1..=events.len() as i64).collect::<Vec<_>>(),
            "{}",
            job.id
        );
        let fences: Vec<i64> = events.iter().map(|e| e.fence).collect();
        assert!(fences.is_sorted(), "{}: fences {fences:?}", job.id);
        let first_claim = fences.iter().filter(|fence| **fence == 1).count();
        let ended_in_first_claim = events[..first_claim]
            .iter()
            .any(|e| e.kind == "run_finished");
        // The last claim wrote the last event, unless the dead worker recorded the run's end and
        // died before it ended the job: then its successor wrote nothing at all.
        let last_writer = if held.contains(&job.id) && ended_in_first_claim {
            1
        } else {
            job.fence
        };
        assert_eq!(fences.last(), Some(&last_writer), "{}", job.id);
        let count = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
        assert_eq!(
            (count("run_started"), count("run_finished")),
            (1, 1),
            "{}",
            job.id
        );
        // Nothing follows the run's end: when the dead worker recorded the end and died before
        // it ended the job, its successor goes through the record, writes nothing, and ends the
        // job with the recorded outcome.
        assert_eq!(
            events.last().map(|e| e.kind.as_str()),
            Some("run_finished"),
            "{}",
            job.id
        );
        if held.contains(&job.id) && first_claim > 0 && !ended_in_first_claim {
            let resumed = &events[first_claim];
            assert_eq!(
                (
                    resumed.kind.as_str(),
                    resumed.fence,
                    &resumed.payload["after_seq"]
                ),
                ("run_resumed", 2, &Value::from(first_claim)),
                "{}",
                job.id
            );
            assert_eq!(count("run_resumed"), 1, "{}", job.id);
        } else {
            assert_eq!(count("run_resumed"), 0, "{}", job.id);
        }
    }

    // The model answered every job once; only a job the dead worker held may have been asked
    // twice, the second time with the same conversation (the answer it never recorded).
    let requests = server.requests();
    let mut by_task: BTreeMap<usize, Vec<&Value>> = BTreeMap::new();
    for request in &requests {
        by_task.entry(task_of(request)).or_default().push(request);
    }
    assert_eq!(by_task.len(), JOBS);
    let mut resent = 0;
    for (n, id) in ids.iter().enumerate() {
        let asked = &by_task[&n];
        match asked.as_slice() {
            [_] => {}
            [first, again] if held.contains(id) => {
                assert_eq!(first["messages"], again["messages"], "{id}");
                resent += 1;
            }
            _ => panic!("job {id} was asked {} times", asked.len()),
        }
    }
    assert_eq!(requests.len(), JOBS + resent);
    assert_eq!(server.remaining(), turns - requests.len());
    store.close().await;
}
