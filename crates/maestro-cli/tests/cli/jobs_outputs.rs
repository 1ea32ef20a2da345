//! A job's output files across a takeover: a worker killed with SIGKILL after some of its
//! file-writing tool calls were recorded, and another worker with its own runs directory (as on
//! another node) that takes the job over without running those calls again. Real `maestro
//! worker` processes, SQLite and PostgreSQL (`PgCluster`), the scripted model server.

use std::time::Duration;

use maestro_store::{FileKind, Store, StoreUrl};
use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support;

use support::jobs::{Project, complete, stop_worker, until_requests};

/// One movement that writes its files.
const PIECE: &str = "\
name: steps
description: writes one file per step
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: true
    persona: You work with files.
    instruction: \"{task}\"
    allowed_tools: [Read, Write]
    rules: []
";

fn write(step: usize) -> Turn {
    Turn::tool_call(
        "Write",
        json!({"file_path": format!("output/step{step}.txt"), "content": format!("step {step}")}),
    )
}

/// The job's output files with their contents, by path.
async fn outputs(url: &StoreUrl, id: &str) -> Vec<(String, String)> {
    let store = Store::open(url).await.unwrap();
    let id = id.parse().unwrap();
    let mut found = Vec::new();
    for file in store.job_files(id).await.unwrap() {
        if file.kind == FileKind::Output {
            let (_, bytes) = store
                .job_file(id, FileKind::Output, &file.path)
                .await
                .unwrap()
                .unwrap();
            found.push((file.path, String::from_utf8(bytes).unwrap()));
        }
    }
    store.close().await;
    found
}

/// Five steps, one file each; the first worker is killed while the model is asked for the third
/// (the first two files written, their results recorded), and the second takes the job over.
async fn killed_after_two_recorded_writes(project: Project, url: StoreUrl) {
    std::fs::write(project.path().join("pieces/steps.yaml"), PIECE).unwrap();
    let server = ScriptedLlm::start([
        write(0),
        write(1),
        // In flight when the first worker dies.
        write(2).with_delay(Duration::from_secs(10)),
        write(2),
        write(3),
        write(4),
        complete("five steps"),
    ])
    .await;
    let id = project
        .submit_piece("steps", "Write one file per step", &[])
        .await;
    let runs = |node: &str| project.path().join("runs").join(node);
    let first_dir = runs("first").display().to_string();
    let mut first = project.worker(
        &server.base_url(),
        &["--name", "doomed", "--runs-dir", &first_dir],
    );
    until_requests(&server, 3).await;
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(runs("first").join(&id).join("output/step1.txt").is_file());

    let second_dir = runs("second").display().to_string();
    let second = project.worker(
        &server.base_url(),
        &["--name", "rescuer", "--runs-dir", &second_dir],
    );
    project.until_completed(&id, 2, "five steps").await;
    stop_worker(second, "1 finished").await;

    // No recorded call was run again: one request per step, the one in flight sent again.
    assert_eq!(server.requests().len(), 7);
    // The files of the calls the first worker ran are in the second's workspace and in the
    // store, with every later one.
    let output = runs("second").join(&id).join("output");
    for step in [0, 1] {
        assert_eq!(
            std::fs::read_to_string(output.join(format!("step{step}.txt"))).unwrap(),
            format!("step {step}")
        );
    }
    let expected: Vec<(String, String)> = (0..5)
        .map(|step| (format!("step{step}.txt"), format!("step {step}")))
        .collect();
    assert_eq!(outputs(&url, &id).await, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_after_a_kill_keeps_the_files_of_the_recorded_calls() {
    let project = Project::new();
    let url = StoreUrl::Sqlite {
        path: project.path().join(".maestro/maestro.db"),
    };
    killed_after_two_recorded_writes(project, url).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn a_takeover_after_a_kill_keeps_the_files_of_the_recorded_calls_on_postgres() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let mut project = Project::new();
    project.db = Some(cluster.url());
    let url = StoreUrl::Postgres { url: cluster.url() };
    killed_after_two_recorded_writes(project, url).await;
}
