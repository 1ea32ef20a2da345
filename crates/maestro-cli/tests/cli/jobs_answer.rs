//! Questions answered later: a job that asks parks as `waiting_input`, `maestro jobs answer`
//! queues it again, and its run goes on in the same movement and conversation, over two rounds
//! and a worker restart; a local `maestro run` that asks exits 4 and goes on with `--resume`.

use std::time::Duration;

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support;

use support::jobs::{Project, stderr, stop_worker};

fn ask(question: &str) -> Turn {
    Turn::tool_call(
        "complete",
        json!({"status": "needs_user_input", "result": question}),
    )
}

fn done(result: &str) -> Turn {
    Turn::tool_call("complete", json!({"status": "success", "result": result}))
}

#[tokio::test(flavor = "multi_thread")]
async fn two_rounds_of_questions_across_a_worker_restart() {
    let server = ScriptedLlm::start([
        ask("Which cuisine?"),
        ask("How many guests?"),
        done("Lasagne for six."),
    ])
    .await;
    let project = Project::new();
    let id = project.submit("Plan the dinner", &[]).await;
    let worker = project.worker(&server.base_url(), &[]);
    let job = project
        .until(&id, "waiting", |j| j["status"] == json!("waiting_input"))
        .await;
    assert_eq!(job["question"], "Which cuisine?");
    let out = project.maestro(&["jobs", "answer", &id, "Italian"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let job = project
        .until(&id, "asking again", |j| {
            j["status"] == json!("waiting_input") && j["question"] == json!("How many guests?")
        })
        .await;
    assert_eq!(job["question"], "How many guests?");
    // the worker goes away while the job waits: it holds nothing
    stop_worker(worker, "2 finished").await;
    // answering a job that is not waiting is refused
    let out = project.maestro(&["jobs", "answer", &id, "Six"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let again = project.maestro(&["jobs", "answer", &id, "Seven"]).await;
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("cannot answer a job that is queued"),
        "{}",
        stderr(&again)
    );

    let worker = project.worker(&server.base_url(), &[]);
    project.until_completed(&id, 1, "Lasagne for six.").await;
    stop_worker(worker, "1 finished").await;

    // three calls in all: nothing answered was asked again
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    // the final request carries the whole conversation, with both answers
    let messages = requests[2]["messages"].to_string();
    for part in ["Which cuisine?", "Italian", "How many guests?", "Six"] {
        assert!(messages.contains(part), "{part} missing: {messages}");
    }
    let last = requests[2]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["role"].clone(), last["content"].clone()),
        (json!("user"), json!("Six"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_run_that_asks_exits_4_and_goes_on_after_the_answer() {
    let server = ScriptedLlm::start([ask("Which cuisine?"), done("Risotto.")]).await;
    let project = Project::new();
    let base_url = server.base_url();
    let run = |args: &[&str]| {
        let mut all = vec!["run"];
        all.extend(args);
        all.extend([
            "--llm-base-url",
            base_url.as_str(),
            "--model",
            "scripted-model",
        ]);
        all.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let first = run(&["one", "--task", "Plan the dinner"]);
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let out = project.maestro(&first).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("run ").and_then(|l| l.split(' ').next()))
        .unwrap()
        .to_string();
    assert!(err.contains("the run asks: Which cuisine?"), "{err}");
    assert!(
        err.contains(&format!("maestro jobs answer {id} \"…\"")),
        "{err}"
    );
    assert!(err.contains(&format!("maestro run --resume {id}")), "{err}");
    // The question is the job's, as for a worker's run: `jobs show` has it.
    let out = project.maestro(&["jobs", "show", &id, "--json"]).await;
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["status"], "waiting_input", "{shown}");
    assert_eq!(shown["question"], "Which cuisine?", "{shown}");

    // not answered yet: resuming says what to do
    let resume = run(&["--resume", &id]);
    let resume: Vec<&str> = resume.iter().map(String::as_str).collect();
    let out = project.maestro(&resume).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is waiting for an answer"),
        "{}",
        stderr(&out)
    );

    let out = project.maestro(&["jobs", "answer", &id, "Italian"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = project.maestro(&resume).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Risotto.");
    assert_eq!(server.requests().len(), 2);
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// One `maestro jobs events --follow` follows a job through its question, the answer and the
/// run going on, to its end: the park does not end it, and it prints the whole log once.
#[tokio::test(flavor = "multi_thread")]
async fn one_events_follow_sees_a_job_through_its_question_to_its_end() {
    let server = ScriptedLlm::start([ask("Which cuisine?"), done("Pasta.")]).await;
    let project = Project::new();
    let id = project.submit("Plan the dinner", &[]).await;
    let mut follow = project.command(&["jobs", "events", &id, "--follow"]);
    let follow = tokio::task::spawn_blocking(move || follow.output().unwrap());
    let worker = project.worker(&server.base_url(), &[]);
    project
        .until(&id, "waiting", |j| j["status"] == json!("waiting_input"))
        .await;
    // Still following while the job waits for its answer.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!follow.is_finished(), "--follow stopped at the question");
    let out = project.maestro(&["jobs", "answer", &id, "Italian"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    project.until_completed(&id, 1, "Pasta.").await;
    let followed = tokio::time::timeout(Duration::from_secs(30), follow)
        .await
        .expect("--follow ends with the job")
        .unwrap();
    stop_worker(worker, "2 finished").await;
    assert_eq!(followed.status.code(), Some(0), "{}", stderr(&followed));
    let all = project.maestro(&["jobs", "events", &id]).await;
    let printed = String::from_utf8(followed.stdout).unwrap();
    assert_eq!(printed, String::from_utf8(all.stdout).unwrap());
    let kinds: Vec<String> = printed
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "\"run_finished\"").count(),
        2,
        "the park's end and the job's end: {kinds:?}"
    );
}
