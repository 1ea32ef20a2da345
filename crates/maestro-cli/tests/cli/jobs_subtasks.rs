//! Subtasks through the `maestro` binary, on SQLite and on a real PostgreSQL cluster: a
//! parent spawns three children that run in parallel, parks as `waiting_subtasks` holding no
//! slot, and completes with all three results in its prompt; a cancelled parent cancels its
//! children; the depth and fan-out limits are tool errors the model sees; with subtasks off
//! the wait takes `default_next`; and a local `maestro run` runs its children itself.

use std::time::Duration;

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{Project, complete, stderr, stop_worker};

const SPLIT: &str = "\
name: split
description: splits the task into subtasks and waits for them
max_movements: 6
initial_movement: plan
movements:
  - name: plan
    edit: false
    persona: You plan.
    instruction: \"Split this into parts: {task}\"
    allowed_tools: [SpawnSubTask]
    rules:
      - condition: the parts are spawned
        next: WAIT_SUBTASKS
    default_next: write
  - name: write
    edit: false
    persona: You write.
    instruction: Write it up alone.
    allowed_tools: [Read]
    rules: []
";

/// A child piece that tries to split further.
const NESTED: &str = "\
name: nested
description: a subtask that would split again
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: false
    persona: You nest.
    instruction: \"{task}\"
    allowed_tools: [SpawnSubTask]
    rules: []
";

fn project_with(config: &str) -> Project {
    let project = Project::new();
    std::fs::write(project.path().join("pieces/split.yaml"), SPLIT).unwrap();
    std::fs::write(project.path().join("pieces/nested.yaml"), NESTED).unwrap();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        format!("llm:\n  tool_mode: native\n{config}"),
    )
    .unwrap();
    project
}

fn spawn_parts(piece: &str, parts: &[&str]) -> Turn {
    Turn::tool_calls(parts.iter().map(|part| {
        (
            "SpawnSubTask",
            json!({"task": format!("Write part {part}"), "title": format!("part {part}"), "piece": piece}),
        )
    }))
}

fn wait() -> Turn {
    Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"}))
}

/// The parent's three turns (unconditional, in order) and one answer per child (children are
/// the requests with the child piece's persona), each child's answer slowed down so that the
/// three overlap.
fn parent_and_children(delay: Duration) -> Vec<Turn> {
    let mut turns: Vec<Turn> = (1..=3)
        .map(|n| {
            Turn::when_contains(
                "You work.",
                complete(&format!("child result {n}")).with_delay(delay),
            )
        })
        .collect();
    turns.extend([
        spawn_parts("one", &["A", "B", "C"]),
        wait(),
        complete("Report from three parts."),
    ]);
    turns
}

/// The parent spawns and waits; its children would take a minute to answer, so they are still
/// running whatever the test does next (the parent never goes on).
fn children_outlasting_the_parent() -> Vec<Turn> {
    let mut turns = parent_and_children(Duration::from_secs(60));
    turns.pop();
    turns
}

async fn jobs(project: &Project) -> Vec<Value> {
    let out = project.maestro(&["jobs", "list", "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `maestro jobs events ID`: the job's events as JSON.
async fn events_of(project: &Project, id: &str) -> Vec<Value> {
    let out = project.maestro(&["jobs", "events", id]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// When the first event of `kind` was recorded.
fn time_of(events: &[Value], kind: &str) -> time::OffsetDateTime {
    let ts = events
        .iter()
        .find(|e| e["type"] == json!(kind))
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"))["ts"]
        .as_str()
        .unwrap();
    time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).unwrap()
}

fn children_of<'a>(jobs: &'a [Value], parent: &str) -> Vec<&'a Value> {
    jobs.iter()
        .filter(|j| j["parent_id"] == json!(parent))
        .collect()
}

async fn three_children_run_in_parallel_and_the_parent_completes_with_their_results(
    project: &Project,
) {
    let server = ScriptedLlm::start(parent_and_children(Duration::from_millis(1500))).await;
    let id = project.submit_piece("split", "Plan the report", &[]).await;
    let worker = project.worker(&server.base_url(), &["--concurrency", "4"]);
    // While the children run, the parent waits and holds no slot.
    let parked = project
        .until(&id, "waiting for its subtasks", |j| {
            j["status"] == json!("waiting_subtasks")
        })
        .await;
    assert_eq!(parked["attempt"], json!(1), "{parked}");
    let done = project
        .until_completed(&id, 1, "Report from three parts.")
        .await;
    assert_eq!(done["status"], json!("completed"));
    // The parent twice (its park, then its end) and the three children.
    stop_worker(worker, "5 finished").await;

    let all = jobs(project).await;
    let children = children_of(&all, &id);
    assert_eq!(children.len(), 3, "{all:?}");
    let mut results: Vec<String> = children
        .iter()
        .map(|c| {
            assert_eq!(c["status"], json!("completed"), "{c}");
            c["result"]["result"].as_str().unwrap().to_string()
        })
        .collect();
    results.sort();
    assert_eq!(
        results,
        vec!["child result 1", "child result 2", "child result 3"]
    );

    // The three children overlapped: each had asked the model before any got its answer.
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        6,
        "3 parent turns and 3 children, none repeated"
    );
    let mut asked = Vec::new();
    let mut answered = Vec::new();
    for child in &children {
        let events = events_of(project, child["id"].as_str().unwrap()).await;
        asked.push(time_of(&events, "llm_request"));
        answered.push(time_of(&events, "llm_response"));
    }
    let last_asked = asked.iter().max().unwrap();
    let first_answered = answered.iter().min().unwrap();
    assert!(
        last_asked < first_answered,
        "the children ran one after another: asked {asked:?}, answered {answered:?}"
    );
    // Their workspaces are inside the parent's, numbered in spawn order.
    let parent_events = events_of(project, &id).await;
    let parent_workspace = parent_events
        .iter()
        .find(|e| e["type"] == json!("run_started"))
        .unwrap()["workspace"]
        .as_str()
        .unwrap()
        .to_string();
    let mut workspaces: Vec<String> = Vec::new();
    for child in &children {
        let events = events_of(project, child["id"].as_str().unwrap()).await;
        let started = events
            .iter()
            .find(|e| e["type"] == json!("run_started"))
            .unwrap();
        workspaces.push(started["workspace"].as_str().unwrap().to_string());
    }
    workspaces.sort();
    assert_eq!(
        workspaces,
        (1..=3)
            .map(|n| format!("{parent_workspace}/subtasks/{n}"))
            .collect::<Vec<_>>()
    );

    // The parent's last request goes on with plan's conversation and holds all three results,
    // titles and workspaces.
    let last = requests
        .iter()
        .rfind(|r| r.to_string().contains("You plan."))
        .unwrap();
    let told = last["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    // `maestro replay` goes through the whole parent again, park and wait included, with no
    // model call.
    let out = project.maestro(&["replay", &id]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.requests().len(), 6);
    for needle in [
        "Your 3 subtasks have ended",
        "child result 1",
        "child result 2",
        "child result 3",
        "part A",
        "part B",
        "part C",
        "- workspace: subtasks/1/",
        "- workspace: subtasks/3/",
        "- status: completed",
    ] {
        assert!(told.contains(needle), "{needle} missing from {told}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_with_three_children_completes_with_their_results() {
    let project = project_with("");
    three_children_run_in_parallel_and_the_parent_completes_with_their_results(&project).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn a_parent_with_three_children_completes_with_their_results_on_postgres() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let mut project = project_with("");
    project.db = Some(cluster.url());
    three_children_run_in_parallel_and_the_parent_completes_with_their_results(&project).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_parent_cancels_its_children() {
    cancel_cascades(&project_with("")).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn a_cancelled_parent_cancels_its_children_on_postgres() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let mut project = project_with("");
    project.db = Some(cluster.url());
    cancel_cascades(&project).await;
}

async fn cancel_cascades(project: &Project) {
    // The children would take a minute each: they are still running when the parent is
    // cancelled.
    let server = ScriptedLlm::start(children_outlasting_the_parent()).await;
    let id = project.submit_piece("split", "Plan the report", &[]).await;
    let worker = project.worker(&server.base_url(), &["--concurrency", "4"]);
    project
        .until(&id, "waiting for its subtasks", |j| {
            j["status"] == json!("waiting_subtasks")
        })
        .await;
    // Every child has asked the model (and waits for its answer).
    support::jobs::until_requests(&server, 5).await;
    let out = project.maestro(&["jobs", "cancel", &id]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let all = jobs(project).await;
    let children = children_of(&all, &id);
    assert_eq!(children.len(), 3);
    for child in &children {
        assert_eq!(child["status"], json!("cancelled"), "{child}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(child["id"].as_str().unwrap()),
            "the cancel names every job it cancelled"
        );
    }
    assert_eq!(project.show(&id).await["status"], json!("cancelled"));
    // The worker stopped the three runs and is free again: a new job runs at once.
    let next = project.submit("Something else", &[]).await;
    server.push(complete("Done next."));
    project.until_completed(&next, 1, "Done next.").await;
    stop_worker(worker, "lost or cancelled").await;
    assert_eq!(
        server.requests().len(),
        6,
        "only the new job asked after the cancel"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_depth_and_fan_out_limits_are_tool_errors_the_model_sees() {
    limits(&project_with(LIMITS)).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_postgres,
    ignore = "PostgreSQL is not installed: apt-get install postgresql (scripts/prerequisites.sh)"
)]
async fn the_depth_and_fan_out_limits_are_tool_errors_the_model_sees_on_postgres() {
    let cluster = tokio::task::spawn_blocking(maestro_testkit::PgCluster::start)
        .await
        .unwrap();
    let mut project = project_with(LIMITS);
    project.db = Some(cluster.url());
    limits(&project).await;
}

const LIMITS: &str = "subtasks:\n  max_depth: 1\n  max_children: 2\n";

async fn limits(project: &Project) {
    let server = ScriptedLlm::start([
        // A child's second request holds its refused spawn: it completes.
        Turn::when_contains("subtasks may go 1 level deep", complete("nested done")),
        Turn::when_contains("subtasks may go 1 level deep", complete("nested done")),
        // A child's first request: it tries to split again.
        Turn::when_contains(
            "You nest.",
            Turn::tool_call("SpawnSubTask", json!({"task": "deeper"})),
        ),
        Turn::when_contains(
            "You nest.",
            Turn::tool_call("SpawnSubTask", json!({"task": "deeper"})),
        ),
        spawn_parts("nested", &["A", "B", "C"]),
        wait(),
        complete("Two parts were enough."),
    ])
    .await;
    let id = project.submit_piece("split", "Plan the report", &[]).await;
    let worker = project.worker(&server.base_url(), &["--concurrency", "3"]);
    project
        .until_completed(&id, 1, "Two parts were enough.")
        .await;
    stop_worker(worker, "finished").await;

    let all = jobs(project).await;
    let children = children_of(&all, &id);
    assert_eq!(children.len(), 2, "the third spawn was refused");
    for child in &children {
        assert_eq!(child["status"], json!("completed"), "{child}");
        assert!(children_of(&all, child["id"].as_str().unwrap()).is_empty());
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 7);
    // The parent's second request shows the fan-out refusal as the third call's error.
    let parent_second = requests
        .iter()
        .filter(|r| r.to_string().contains("You plan."))
        .nth(1)
        .unwrap()
        .to_string();
    assert!(
        parent_second.contains(
            "error: this run already has 2 subtasks, the most one run may spawn (`subtasks.max_children`)"
        ),
        "{parent_second}"
    );
    // Each child saw the depth refusal.
    let refused = requests
        .iter()
        .filter(|r| {
            r.to_string()
                .contains("error: this run is itself a subtask 1 level deep")
        })
        .count();
    assert_eq!(refused, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_subtasks_off_the_wait_takes_default_next() {
    let project = project_with("subtasks:\n  max_depth: 0\n");
    let server = ScriptedLlm::start([wait(), complete("Written alone.")]).await;
    let id = project.submit_piece("split", "Plan the report", &[]).await;
    let worker = project.worker(&server.base_url(), &[]);
    project.until_completed(&id, 1, "Written alone.").await;
    stop_worker(worker, "1 finished").await;
    let requests = server.requests();
    assert!(
        !requests[0]["tools"].to_string().contains("SpawnSubTask"),
        "not offered: {}",
        requests[0]["tools"]
    );
    assert!(requests[1].to_string().contains("You write."));
    let events = events_of(&project, &id).await;
    let warnings: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == json!("warning"))
        .map(|e| &e["message"])
        .collect();
    assert!(
        warnings.contains(&&json!(
            "subtasks are not available to this run: WAIT_SUBTASKS takes default_next `write`"
        )),
        "{warnings:?}"
    );
    assert!(children_of(&jobs(&project).await, &id).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_run_runs_its_children_itself() {
    let project = project_with("");
    let server = ScriptedLlm::start(parent_and_children(Duration::from_millis(300))).await;
    let out = project
        .maestro(&[
            "run",
            "split",
            "--task",
            "Plan the report",
            "--llm-base-url",
            &server.base_url(),
            "--model",
            "scripted-model",
        ])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Report from three parts."
    );
    let all = jobs(&project).await;
    let parent = all.iter().find(|j| j["parent_id"].is_null()).unwrap();
    assert_eq!(parent["status"], json!("completed"));
    let children = children_of(&all, parent["id"].as_str().unwrap());
    assert_eq!(children.len(), 3);
    assert!(children.iter().all(|c| c["status"] == json!("completed")));
    let last = server
        .requests()
        .into_iter()
        .rfind(|r| r.to_string().contains("You plan."))
        .unwrap()
        .to_string();
    for n in 1..=3 {
        assert!(last.contains(&format!("child result {n}")), "{last}");
    }
    // The local run never parked: its children ran while it waited.
    let events = events_of(&project, parent["id"].as_str().unwrap()).await;
    assert!(
        !events
            .iter()
            .any(|e| e["status"] == json!("waiting_subtasks")),
        "{events:?}"
    );
}

/// kill -9 of a local run while its children run: `maestro run --resume` takes the children
/// over (their process is gone), asks again only the model calls that were in flight, and
/// spawns nothing twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_local_run_resumes_with_its_children() {
    let project = project_with("");
    let server = ScriptedLlm::start(children_outlasting_the_parent()).await;
    let base_url = server.base_url();
    let args = |extra: &[&str]| {
        let mut all: Vec<String> = vec!["run".into()];
        all.extend(extra.iter().map(|s| s.to_string()));
        all.extend(["--llm-base-url".into(), base_url.clone()]);
        all.extend(["--model".into(), "scripted-model".into()]);
        all
    };
    let first = args(&["split", "--task", "Plan the report"]);
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let mut run = project.command(&first);
    run.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = run.spawn().unwrap();
    // The parent spawned and waits; every child has asked the model.
    support::jobs::until_requests(&server, 5).await;
    // The parent has recorded the answer that makes it wait (the server seeing its request is
    // not enough: killed before that, the resumed parent would rightly ask again).
    let started = std::time::Instant::now();
    loop {
        let all = jobs(&project).await;
        if let Some(parent) = all.iter().find(|j| j["parent_id"].is_null()) {
            let events = events_of(&project, parent["id"].as_str().unwrap()).await;
            let answers = events
                .iter()
                .filter(|e| e["type"] == json!("llm_response"))
                .count();
            if answers >= 2 {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the parent never recorded its second answer"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let all = jobs(&project).await;
    let parent = all.iter().find(|j| j["parent_id"].is_null()).unwrap();
    let parent_id = parent["id"].as_str().unwrap().to_string();
    assert_eq!(parent["status"], json!("running"));
    assert_eq!(children_of(&all, &parent_id).len(), 3);

    for n in 1..=3 {
        server.push(Turn::when_contains(
            "You work.",
            complete(&format!("child result {n}")),
        ));
    }
    server.push(complete("Report from three parts."));
    let resume = args(&["--resume", &parent_id]);
    let resume: Vec<&str> = resume.iter().map(String::as_str).collect();
    let out = project.maestro(&resume).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Report from three parts."
    );
    let all = jobs(&project).await;
    let children = children_of(&all, &parent_id);
    assert_eq!(children.len(), 3, "no spawn was repeated");
    assert!(
        children.iter().all(|c| c["status"] == json!("completed")),
        "{children:?}"
    );
    // 2 parent turns, 3 children cut off, 3 children again, the parent's end.
    assert_eq!(server.requests().len(), 9);
}

/// Ctrl-C of a local run while its children run cancels them with it.
#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_of_a_local_run_cancels_its_children() {
    let project = project_with("");
    let server = ScriptedLlm::start(children_outlasting_the_parent()).await;
    let mut run = project.command(&[
        "run",
        "split",
        "--task",
        "Plan the report",
        "--llm-base-url",
        &server.base_url(),
        "--model",
        "scripted-model",
    ]);
    run.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = run.spawn().unwrap();
    support::jobs::until_requests(&server, 5).await;
    support::jobs::signal(&child, "INT");
    let (status, err) = support::jobs::exited(child, Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("failed (cancelled)"), "{err}");
    let all = jobs(&project).await;
    let parent = all.iter().find(|j| j["parent_id"].is_null()).unwrap();
    assert_eq!(parent["status"], json!("cancelled"));
    let children = children_of(&all, parent["id"].as_str().unwrap());
    assert_eq!(children.len(), 3);
    for child in children {
        assert_eq!(child["status"], json!("cancelled"), "{child}");
    }
    assert_eq!(server.requests().len(), 5);
}
