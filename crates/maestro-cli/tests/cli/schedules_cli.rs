//! `maestro schedules …` end to end, with real `maestro worker` processes ticking the scheduler
//! on a real SQLite file (and a real PostgreSQL cluster). The workers serve another task class,
//! so the fired jobs stay queued and can be counted.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::support;

use support::jobs::{Project, exited, signal, stderr};

async fn json_lines(project: &Project, args: &[&str]) -> Vec<Value> {
    let out = project.maestro(args).await;
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn add(project: &Project, spec: &[&str]) -> String {
    let mut args = vec![
        "schedules",
        "add",
        "--piece",
        "one",
        "--task",
        "tick",
        "--json",
    ];
    args.extend(spec);
    let out = project.maestro(&args).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let id: Value = serde_json::from_slice(&out.stdout).unwrap();
    id["id"].as_str().unwrap().to_string()
}

/// The slot times of the schedule's jobs, sorted.
async fn slots(project: &Project, id: &str) -> Vec<OffsetDateTime> {
    let mut slots: Vec<OffsetDateTime> = json_lines(project, &["jobs", "list", "--json"])
        .await
        .iter()
        .filter(|j| j["schedule_id"] == id)
        .map(|j| OffsetDateTime::parse(j["scheduled_for"].as_str().unwrap(), &Rfc3339).unwrap())
        .collect();
    slots.sort();
    slots
}

/// A `*/2 * * * * *` schedule on three worker processes for 16 s: one job per slot, no slot
/// twice and none skipped between the first and the last.
async fn three_workers_fire_each_slot_once(project: &Project) {
    let id = add(project, &["--cron", "*/2 * * * * *"]).await;
    let workers: Vec<_> = (0..3)
        .map(|_| project.worker("http://127.0.0.1:9", &["--classes", "elsewhere"]))
        .collect();
    tokio::time::sleep(Duration::from_secs(16)).await;
    for worker in workers {
        signal(&worker, "TERM");
        let (status, err) = exited(worker, Duration::from_secs(10)).await;
        assert!(status.success(), "{err}");
    }
    let slots = slots(project, &id).await;
    assert!(slots.len() >= 5, "{slots:?}");
    let steps: Vec<i64> = slots
        .windows(2)
        .map(|w| (w[1] - w[0]).whole_seconds())
        .collect();
    assert_eq!(steps, vec![2; slots.len() - 1], "{slots:?}");
    let listed = json_lines(project, &["schedules", "list", "--json"]).await;
    assert_eq!(
        (listed[0]["fired"].as_i64(), listed[0]["missed"].as_i64()),
        (Some(i64::try_from(slots.len()).unwrap()), Some(0))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn three_workers_fire_each_slot_once_on_sqlite() {
    three_workers_fire_each_slot_once(&Project::new()).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn three_workers_fire_each_slot_once_on_postgres() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let mut project = Project::new();
    project.db = Some(cluster.url());
    three_workers_fire_each_slot_once(&project).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_resume_and_rm_show_in_the_list_and_the_audit_log() {
    let project = Project::new();
    let id = add(&project, &["--daily", "02:30", "--tz", "America/New_York"]).await;
    let listed = json_lines(&project, &["schedules", "list", "--json"]).await;
    assert_eq!(
        (
            listed[0]["spec"].as_str(),
            listed[0]["tz"].as_str(),
            listed[0]["misfire"].as_str(),
            listed[0]["paused"].as_bool()
        ),
        (
            Some("daily 02:30"),
            Some("America/New_York"),
            Some("skip"),
            Some(false)
        )
    );
    assert!(listed[0]["next_fire"].is_string(), "{listed:?}");
    for (cmd, paused) in [("pause", Some(true)), ("resume", Some(false))] {
        let out = project.maestro(&["schedules", cmd, &id]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        let listed = json_lines(&project, &["schedules", "list", "--json"]).await;
        assert_eq!(listed[0]["paused"].as_bool(), paused);
    }
    let out = project.maestro(&["schedules", "rm", &id]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        json_lines(&project, &["schedules", "list", "--json"])
            .await
            .is_empty()
    );
    let out = project.maestro(&["schedules", "rm", &id]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&format!("no schedule with id {id}")),
        "{}",
        stderr(&out)
    );
    let url = maestro_store::StoreUrl::Sqlite {
        path: project.path().join(".maestro/maestro.db"),
    };
    let store = maestro_store::Store::open(&url).await.unwrap();
    let actions: Vec<_> = store
        .audit_log(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.schedule_id.as_deref() == Some(id.as_str()))
        .map(|e| e.action)
        .collect();
    use maestro_store::AuditAction::*;
    assert_eq!(
        actions,
        [ScheduleAdd, SchedulePause, ScheduleResume, ScheduleRemove]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn add_refuses_a_bad_spec_and_an_unknown_piece_with_the_fix() {
    let project = Project::new();
    for (args, message) in [
        (
            vec!["--piece", "one", "--every", "5 minutes"],
            "--every `5 minutes` is not a duration; write a positive number with a unit",
        ),
        (
            vec!["--piece", "one", "--cron", "* * *"],
            "--cron `* * *` is not a cron expression",
        ),
        (
            vec!["--piece", "one", "--daily", "02:30", "--tz", "Mars/Olympus"],
            "--tz `Mars/Olympus` is not a time zone",
        ),
        (
            vec!["--piece", "one", "--daily", "02:30", "--misfire", "later"],
            "--misfire `later` is not a misfire policy; write `skip` or `catch_up_once`",
        ),
        (
            vec!["--piece", "nosuch", "--daily", "02:30"],
            "no piece file or piece named `nosuch`",
        ),
    ] {
        let mut all = vec!["schedules", "add", "--task", "t"];
        all.extend(args);
        let out = project.maestro(&all).await;
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert!(stderr(&out).contains(message), "{all:?}: {}", stderr(&out));
    }
    let out = project
        .maestro(&[
            "schedules",
            "add",
            "--piece",
            "one",
            "--task",
            "t",
            "--daily",
            "1:00",
            "--every",
            "5m",
        ])
        .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        json_lines(&project, &["schedules", "list", "--json"])
            .await
            .is_empty()
    );
}

/// Every slot of a `*/2 * * * * *` schedule across a 10 s outage of the only worker is either
/// fired or counted missed: `skip` fires no job for the missed ones, `catch_up_once` one.
#[tokio::test(flavor = "multi_thread")]
async fn misfire_after_all_workers_were_stopped_for_ten_seconds() {
    let project = Project::new();
    let skip = add(&project, &["--cron", "*/2 * * * * *"]).await;
    let catch_up = add(
        &project,
        &["--cron", "*/2 * * * * *", "--misfire", "catch_up_once"],
    )
    .await;
    for pause in [Duration::from_secs(10), Duration::ZERO] {
        let worker = project.worker("http://127.0.0.1:9", &["--classes", "elsewhere"]);
        tokio::time::sleep(Duration::from_secs(5)).await;
        signal(&worker, "TERM");
        let (status, err) = exited(worker, Duration::from_secs(10)).await;
        assert!(status.success(), "{err}");
        tokio::time::sleep(pause).await;
    }
    let listed = json_lines(&project, &["schedules", "list", "--json"]).await;
    for (id, jobs_for_missed) in [(&skip, 0), (&catch_up, 1)] {
        let s = listed.iter().find(|s| s["id"] == id.as_str()).unwrap();
        let (fired, missed) = (s["fired"].as_i64().unwrap(), s["missed"].as_i64().unwrap());
        let slots = slots(&project, id).await;
        assert!(missed >= 2, "{s}");
        assert_eq!(i64::try_from(slots.len()).unwrap(), fired, "{s}");
        let span = (*slots.last().unwrap() - slots[0]).whole_seconds() / 2 + 1;
        assert_eq!(span, fired - jobs_for_missed + missed, "{s} {slots:?}");
    }
}

/// What `maestro schedules list` prints for a person, ids replaced.
#[tokio::test(flavor = "multi_thread")]
async fn list_prints_one_line_per_schedule() {
    let project = Project::new();
    let once = add(&project, &["--once", "2099-01-01T09:00:00+01:00"]).await;
    let weekly = add(
        &project,
        &[
            "--weekly",
            "mon@09:00",
            "--tz",
            "Europe/Paris",
            "--misfire",
            "catch_up_once",
        ],
    )
    .await;
    let out = project.maestro(&["schedules", "pause", &weekly]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = project.maestro(&["schedules", "list"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout)
        .unwrap()
        .replace(&once, &format!("{:<36}", "<once>"))
        .replace(&weekly, &format!("{:<36}", "<weekly>"));
    insta::assert_snapshot!("schedules_list_human", text);
}

#[tokio::test(flavor = "multi_thread")]
async fn schedules_that_would_never_fire_are_refused() {
    let project = Project::new();
    let refused = |task: &'static str, spec: &'static [&'static str]| {
        let project = &project;
        async move {
            let mut args = vec!["schedules", "add", "--piece", "one", "--task", task];
            args.extend(spec);
            let out = project.maestro(&args).await;
            assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
            stderr(&out)
        }
    };
    let past = refused("tick", &["--once", "2020-01-01T09:00:00Z"]).await;
    assert!(
        past.starts_with("error: --once `2020-01-01T09:00:00+00:00` is in the past (it is now 20")
            && past.ends_with("), so it would never fire; give a time still to come\n"),
        "{past}"
    );
    assert_eq!(
        refused("tick", &["--cron", "0 0 30 2 *"]).await,
        "error: --cron `0 0 30 2 *` matches no date, so it would never fire; check its \
         day-of-month and month fields (February has no 30th or 31st; April, June, September and \
         November no 31st)\n"
    );
    assert_eq!(
        refused(" ", &["--daily", "09:00"]).await,
        "error: the task is empty; say what each fired job should do, e.g. \
         `--task \"report the open issues\"`\n"
    );
    assert!(
        json_lines(&project, &["schedules", "list", "--json"])
            .await
            .is_empty()
    );
}
