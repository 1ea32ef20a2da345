//! The job commands when the store is at fault: a failed migration, a store that cannot be
//! opened or does not exist, a full disk under a worker, a PostgreSQL restart under a waiting
//! command, and what a clean exit leaves behind. Real `maestro` processes, real SQLite files,
//! real PostgreSQL clusters.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use maestro_store::{Store, StoreUrl};
use maestro_testkit::ScriptedLlm;
use pretty_assertions::assert_eq;
use serde_json::json;
use sqlx::Connection;

use crate::support;

use support::jobs::{Project, exited, stderr};

/// A store at schema 1 whose `job_comments` table was made by hand: migration 2 fails.
async fn store_that_fails_migration_2(project: &Project) -> StoreUrl {
    let path = project.path().join(".maestro/maestro.db");
    let url = StoreUrl::Sqlite { path: path.clone() };
    let store = Store::connect(&url).await.unwrap();
    store.migrate_to(1).await.unwrap();
    store.close().await;
    let mut raw = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE job_comments (id TEXT)")
        .execute(&mut raw)
        .await
        .unwrap();
    raw.close().await.unwrap();
    url
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_migration_prints_each_cause_once() {
    let project = Project::new();
    let url = store_that_fails_migration_2(&project).await;
    let out = project
        .maestro(&["submit", "one", "--task", "anything"])
        .await;
    assert_eq!(
        stderr(&out),
        format!(
            "error: migrating the store at `{url}` failed: while executing migration 2: error \
             returned from database: (code: 1) table job_comments already exists\n"
        )
    );
}

/// A size-limited tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(mounted.success(), "mount -t tmpfs failed");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn remount_read_only(&self) {
        let remounted = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(self.path())
            .status()
            .unwrap();
        assert!(remounted.success(), "mount -o remount,ro failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a process a failed test left behind may still hold a file there.
        let _ = Command::new("umount")
            .arg("--lazy")
            .arg(self.dir.path())
            .status();
    }
}

/// A worker process that is killed if the test ends before stopping it.
struct Running(Option<std::process::Child>);

impl Running {
    fn take(mut self) -> std::process::Child {
        self.0.take().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The store commands that only read, with the id of a job that need not exist.
const READ_ONLY_COMMANDS: &[&[&str]] = &[
    &["jobs", "list"],
    &["jobs", "show", "01900000-0000-7000-8000-000000000000"],
    &["jobs", "events", "01900000-0000-7000-8000-000000000000"],
    &["jobs", "wait", "01900000-0000-7000-8000-000000000000"],
    &["workers"],
    &["schedules", "list"],
];

#[tokio::test(flavor = "multi_thread")]
async fn read_only_commands_create_no_store_and_name_the_url_and_its_origin() {
    let project = Project::new();
    let missing = project.path().join("mistyped/path.db");
    let url = format!("sqlite://{}", missing.display());
    for command in READ_ONLY_COMMANDS {
        let mut args = command.to_vec();
        args.extend(["--db", &url]);
        let out = project.maestro(&args).await;
        assert_eq!(
            (out.status.code(), stderr(&out)),
            (
                Some(2),
                format!(
                    "error: the store `{url}` (from --db) does not exist; check the URL, or \
                     create the store with a command that writes (`maestro submit`, `maestro \
                     worker`)\n"
                )
            ),
            "{command:?}"
        );
        assert!(!project.path().join("mistyped").exists(), "{command:?}");
    }
    // The default store, named by nothing.
    let out = project.maestro(&["jobs", "list"]).await;
    let default = project.path().join(".maestro/maestro.db");
    assert!(
        stderr(&out).contains(&format!(
            "the store `sqlite://{}` (from default) does not exist",
            default.display()
        )),
        "{}",
        stderr(&out)
    );
    assert!(!default.exists());
    // A command that writes creates it; then the readers read it.
    project.submit("Create the store", &[]).await;
    let out = project.maestro(&["jobs", "list"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 1);
}

/// Runs `maestro ARGS` and checks that it failed well within the pool's 30 s acquire timeout.
async fn fails_at_once(project: &Project, args: &[&str]) -> String {
    let started = Instant::now();
    let out = project.maestro(args).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{args:?} took {:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains("pool timed out"), "{err}");
    err
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_is_not_a_database_or_corrupt_fails_at_once_with_the_cause() {
    let project = Project::new();
    let path = project.path().join(".maestro/maestro.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = fails_at_once(&project, &["jobs", "list"]).await;
    assert_eq!(
        err,
        format!(
            "error: cannot open the store at `sqlite://{}`: error returned from database: \
             (code: 26) file is not a database\n",
            path.display()
        )
    );
    let err = fails_at_once(&project, &["submit", "one", "--task", "x"]).await;
    assert!(err.contains("(code: 26) file is not a database"), "{err}");

    // A real store whose schema page is overwritten.
    std::fs::remove_file(&path).unwrap();
    project.submit("Before the damage", &[]).await;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100..4096].fill(0xa5);
    std::fs::write(&path, bytes).unwrap();
    let err = fails_at_once(&project, &["jobs", "list"]).await;
    assert!(err.contains("database disk image is malformed"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_postgres_fails_at_once_with_connection_refused() {
    let project = Project::new();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://maestro@127.0.0.1:{port}/maestro");
    for args in [
        &["jobs", "list", "--db", &url][..],
        &["submit", "one", "--task", "x", "--db", &url],
    ] {
        let err = fails_at_once(&project, args).await;
        assert!(
            err.contains(&format!("cannot open the store at `{url}`")),
            "{err}"
        );
        assert!(err.contains("Connection refused"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_mount,
    ignore = "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
)]
async fn a_store_on_a_read_only_file_system_is_read_and_refuses_writes_with_the_cause() {
    let fs = Tmpfs::mount("8m");
    let mut project = Project::new();
    let url = format!("sqlite://{}", fs.path().join("store/maestro.db").display());
    project.db = Some(url.clone());
    let id = project.submit("Written before", &[]).await;
    fs.remount_read_only();

    let out = project.maestro(&["jobs", "list"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8(out.stdout).unwrap().contains(&id));
    assert_eq!(project.show(&id).await["status"], json!("queued"));

    let err = fails_at_once(&project, &["submit", "one", "--task", "x"]).await;
    assert_eq!(
        err,
        format!(
            "error: the store `{url}` cannot be written (Read-only file system (os error 30)); a \
             command that writes needs write access to the file and its directory, while \
             read-only commands (`maestro jobs list`, `maestro jobs show`) can still read it\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_store_is_corrupted_under_it_stops_and_says_why() {
    let server = ScriptedLlm::start([]).await;
    let project = Project::new();
    project.submit("Queued before", &[]).await;
    let path = project.path().join(".maestro/maestro.db");
    let worker = project.worker(&server.base_url(), &["--classes", "nothing-queued"]);
    // Let it register and claim (nothing) at least once.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let size = usize::try_from(std::fs::metadata(&path).unwrap().len()).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &vec![0xa5; size]))
        .unwrap();
    let (status, err) = exited(worker, Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(2), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: the worker stopped: its store can no longer be used: ")
            && (last.contains("database disk image is malformed")
                || last.contains("file is not a database")),
        "{err}"
    );
}

/// The SQLite store's `-wal` and `-shm` files that exist now.
fn wal_files(project: &Project) -> Vec<String> {
    ["maestro.db-wal", "maestro.db-shm"]
        .into_iter()
        .filter(|name| project.path().join(".maestro").join(name).exists())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_command_and_the_worker_leave_no_wal_files_when_they_exit() {
    let server = ScriptedLlm::start([support::jobs::complete("done")]).await;
    let project = Project::new();
    let id = project.submit("Leave it clean", &[]).await;
    assert_eq!(wal_files(&project), Vec::<String>::new(), "after submit");
    for args in [
        &["jobs", "list"][..],
        &["jobs", "show", &id],
        &["jobs", "events", &id],
        &["workers"],
        &["schedules", "list"],
    ] {
        let out = project.maestro(args).await;
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(wal_files(&project), Vec::<String>::new(), "after {args:?}");
    }
    let worker = project.worker(&server.base_url(), &[]);
    project.until_completed(&id, 1, "done").await;
    support::jobs::stop_worker(worker, "1 finished").await;
    assert_eq!(
        wal_files(&project),
        Vec::<String>::new(),
        "after the worker"
    );
}

/// Writes to `path` until the file system is full.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
    let _ = file.sync_all();
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_mount,
    ignore = "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
)]
async fn a_worker_whose_disk_fills_up_finishes_the_queue_once_space_is_freed() {
    let turns: Vec<_> = (0..40)
        .map(|i| {
            support::jobs::complete(&format!("done {i}")).with_delay(Duration::from_millis(200))
        })
        .collect();
    let server = ScriptedLlm::start(turns).await;
    let fs = Tmpfs::mount("4m");
    let mut project = Project::new();
    project.db = Some(format!(
        "sqlite://{}",
        fs.path().join("store/maestro.db").display()
    ));
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            project
                .submit(&format!("Before the disk fills {i}"), &[])
                .await,
        );
    }
    let worker = Running(Some(
        project.worker(&server.base_url(), &["--concurrency", "2"]),
    ));
    support::jobs::until_requests(&server, 1).await;

    let filler = fs.path().join("filler");
    fill(&filler);
    // The worker's commits fail for a while.
    tokio::time::sleep(Duration::from_secs(3)).await;
    std::fs::remove_file(&filler).unwrap();

    ids.push(project.submit("After the space is freed", &[]).await);
    let last = ids.last().unwrap().clone();
    project
        .until(&last, "completed", |job| {
            job["status"] == json!("completed")
        })
        .await;
    for id in &ids {
        let job = project
            .until(id, "ended", |job| {
                !["queued", "running"].contains(&job["status"].as_str().unwrap())
            })
            .await;
        assert!(
            ["completed", "failed"].contains(&job["status"].as_str().unwrap()),
            "{job}"
        );
    }
    support::jobs::stop_worker(worker.take(), "stopped").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_wait_that_times_out_exits_124_not_the_error_code() {
    let project = Project::new();
    let id = project.submit("Never claimed", &[]).await;
    let out = project
        .maestro(&["jobs", "wait", &id, "--timeout", "0.3"])
        .await;
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!("job {id} is still queued after")),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn jobs_wait_and_events_follow_ride_out_a_postgres_restart() {
    use maestro_store::{Classes, JobQueue, JobStatus, NewEvent, Outcome};
    use std::process::Stdio;

    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let mut project = Project::new();
    project.db = Some(cluster.url());
    let id = project.submit("Outlive the restart", &[]).await;
    let spawn = |args: &[&str]| {
        project
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let wait = spawn(&["jobs", "wait", &id]);
    let follow = spawn(&["jobs", "events", &id, "--follow"]);
    tokio::time::sleep(Duration::from_millis(800)).await;

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.stop();
        std::thread::sleep(Duration::from_secs(3));
        cluster.restart();
        cluster
    })
    .await
    .unwrap();

    // A worker's part, by hand: claim, one event, completed.
    let url: StoreUrl = cluster.url().parse().unwrap();
    let store = Store::open(&url).await.unwrap();
    let claimed = store
        .claim("by-hand", &Classes::Any, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let record =
        json!({"seq": 1, "ts": "2026-01-01T00:00:00Z", "type": "warning", "message": "by hand"});
    let event = NewEvent::new(1, "warning", &record).unwrap();
    store.append_events(&claimed.lease, &[event]).await.unwrap();
    store
        .finish(
            &claimed.lease,
            Outcome {
                status: JobStatus::Completed,
                result: Some(json!({"result": "done"})),
                reason: None,
            },
        )
        .await
        .unwrap();
    store.close().await;

    let (waited, followed) = tokio::task::spawn_blocking(move || {
        (
            wait.wait_with_output().unwrap(),
            follow.wait_with_output().unwrap(),
        )
    })
    .await
    .unwrap();
    assert_eq!(waited.status.code(), Some(0), "{}", stderr(&waited));
    assert!(
        stderr(&waited).contains(&format!("job {id} completed")),
        "{}",
        stderr(&waited)
    );
    assert!(
        stderr(&waited).contains("reading the store failed"),
        "{}",
        stderr(&waited)
    );
    assert_eq!(followed.status.code(), Some(0), "{}", stderr(&followed));
    assert_eq!(
        String::from_utf8(followed.stdout).unwrap(),
        "{\"seq\":1,\"ts\":\"2026-01-01T00:00:00Z\",\"type\":\"warning\",\"message\":\"by hand\"}\n"
    );
}
