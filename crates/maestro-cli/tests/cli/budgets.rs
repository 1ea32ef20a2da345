//! Cost caps through the `maestro` binary, against the scripted model server over real HTTP and
//! the project's real SQLite store: a parent with three parallel children under
//! `--max-cost-usd` ends `exceeded` (`budget: max_cost_usd`) with the tree's recorded spend
//! within the cap and exactly the calls the price table allows; a token cap stops a single run;
//! and a resumed run does not charge its recorded calls again.

use std::time::Duration;

use maestro_testkit::{ScriptedLlm, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{Project, complete, stderr};

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

/// Prompt tokens are free and an answer token costs $0.01; every answer may have at most 100
/// tokens, so a call reserves exactly $1.00 and (answering with 100 tokens) spends $1.00.
const PRICED: &str = "\
llm:
  tool_mode: native
  retry:
    max_attempts: 1
  models:
    scripted-model:
      price: {input_per_mtok: 0, output_per_mtok: 10000}
engine:
  max_tokens: 100
";

fn project() -> Project {
    let project = Project::new();
    std::fs::write(project.path().join("pieces/split.yaml"), SPLIT).unwrap();
    std::fs::write(project.path().join(".maestro/config.yaml"), PRICED).unwrap();
    project
}

async fn run(project: &Project, server: &ScriptedLlm, args: &[&str]) -> std::process::Output {
    let mut all: Vec<&str> = vec!["run"];
    all.extend(args);
    let url = server.base_url();
    all.extend(["--llm-base-url", &url, "--model", "scripted-model"]);
    project.maestro(&all).await
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

async fn events_of(project: &Project, id: &str) -> Vec<Value> {
    let out = project.maestro(&["jobs", "events", id]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The `usage` of every `llm_response` in the job's record.
fn responses(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == json!("llm_response"))
        .map(|e| e["usage"].clone())
        .collect()
}

fn finished(events: &[Value]) -> (Value, Value) {
    let end = events
        .iter()
        .rfind(|e| e["type"] == json!("run_finished"))
        .unwrap_or_else(|| panic!("no run_finished in {events:?}"));
    (end["status"].clone(), end["reason"].clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_tree_under_a_cost_cap_stops_at_the_cap_across_parallel_children() {
    let project = project();
    let mut turns: Vec<Turn> = (1..=3)
        .map(|n| {
            Turn::when_contains(
                "You work.",
                complete(&format!("child result {n}"))
                    .with_usage(400, 100)
                    .with_delay(Duration::from_millis(300)),
            )
        })
        .collect();
    turns.extend([
        Turn::tool_calls(["A", "B", "C"].map(|part| {
            (
                "SpawnSubTask",
                json!({"task": format!("Write part {part}"), "piece": "one"}),
            )
        }))
        .with_usage(400, 100),
        Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"})).with_usage(400, 100),
        complete("Report from three parts.").with_usage(400, 100),
    ]);
    let server = ScriptedLlm::start(turns).await;
    let out = run(
        &project,
        &server,
        &[
            "split",
            "--task",
            "Plan the report",
            "--max-cost-usd",
            "3.5",
        ],
    )
    .await;
    // Exit 5: exceeded.
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("exceeded (budget: max_cost_usd)"),
        "{}",
        stderr(&out)
    );

    // Every call reserves $1.00 of the $3.50 and spends it: three calls fit, and nothing more
    // ever does, whichever runs ask first.
    let predicted_calls = (3.5_f64 / 1.0).floor() as usize;
    assert_eq!(server.requests().len(), predicted_calls);

    let all = jobs(&project).await;
    let parent = all.iter().find(|j| j["parent_id"].is_null()).unwrap();
    let parent_id = parent["id"].as_str().unwrap();
    let parent_events = events_of(&project, parent_id).await;
    assert_eq!(
        finished(&parent_events),
        (json!("exceeded"), json!("budget: max_cost_usd"))
    );
    let mut usages = responses(&parent_events);
    let children: Vec<&Value> = all
        .iter()
        .filter(|j| j["parent_id"] == json!(parent_id))
        .collect();
    assert_eq!(children.len(), 3, "{all:?}");
    let mut ends = Vec::new();
    for child in &children {
        let events = events_of(&project, child["id"].as_str().unwrap()).await;
        usages.extend(responses(&events));
        ends.push(finished(&events));
    }
    // The parent's second turn and the three children raced for the $2.50 left after its first
    // call: two of them got a call, whichever they were, and every other run ended at the cap.
    let parent_calls = responses(&parent_events).len();
    let completed = ends
        .iter()
        .filter(|e| **e == (json!("completed"), Value::Null))
        .count();
    let capped = ends
        .iter()
        .filter(|e| **e == (json!("exceeded"), json!("budget: max_cost_usd")))
        .count();
    assert_eq!(completed + capped, 3, "{ends:?}");
    assert_eq!(parent_calls + completed, predicted_calls, "{ends:?}");
    assert!(capped >= 1, "{ends:?}");
    assert_eq!(usages.len(), predicted_calls);
    let spent_usd: f64 = usages
        .iter()
        .map(|u| u["completion_tokens"].as_f64().unwrap() * 10_000.0 / 1_000_000.0)
        .sum();
    assert!(spent_usd <= 3.5, "the tree spent ${spent_usd}");
    assert_eq!(spent_usd, 3.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_cap_ends_a_single_run_before_the_call_that_would_pass_it() {
    let project = project();
    // The first answer reports 60,000 tokens: the next call cannot fit a 50,000-token cap.
    let server = ScriptedLlm::start(vec![
        Turn::tool_call("Read", json!({"path": "missing.txt"})).with_usage(59_950, 50),
        complete("never reached").with_usage(10, 10),
    ])
    .await;
    let out = run(
        &project,
        &server,
        &[
            "one",
            "--task",
            "Read a file",
            "--max-total-tokens",
            "50000",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("exceeded (budget: max_total_tokens)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.requests().len(), 1);
    // The run's spend, from its record: the one answer, priced at $0.01 a completion token.
    assert!(
        stderr(&out).contains("tokens: 60,000 (prompt 59,950, completion 50) · cost: $0.5000"),
        "{}",
        stderr(&out)
    );
    let all = jobs(&project).await;
    let events = events_of(&project, all[0]["id"].as_str().unwrap()).await;
    let warning = events
        .iter()
        .find(|e| e["type"] == json!("warning") && e["message"].to_string().contains("token cap"))
        .unwrap_or_else(|| panic!("no budget warning in {events:?}"));
    assert!(
        warning["message"].to_string().contains("50000"),
        "{warning}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_run_does_not_charge_its_recorded_calls_again() {
    let project = project();
    // The first attempt: one answer of 30,000 tokens, then the endpoint fails.
    let first = ScriptedLlm::start(vec![
        Turn::tool_call("Read", json!({"path": "missing.txt"})).with_usage(29_950, 50),
        Turn::http_error(400, "bad request"),
    ])
    .await;
    let out = run(
        &project,
        &first,
        &[
            "one",
            "--task",
            "Read a file",
            "--max-total-tokens",
            "50000",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "failed: {}", stderr(&out));
    let all = jobs(&project).await;
    let id = all[0]["id"].as_str().unwrap().to_string();

    // The resume reuses the recorded answer: only the new call is reserved. Charged again, the
    // recorded 30,000 tokens would leave no room for it under the 50,000 the job keeps.
    let second = ScriptedLlm::start(vec![complete("done").with_usage(100, 10)]).await;
    let out = run(&project, &second, &["--resume", &id]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(second.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_maestro_pieces_own_budget_caps_its_runs() {
    let project = project();
    std::fs::write(
        project.path().join("pieces/capped.yaml"),
        "name: capped\ndescription: reads within a budget\nmax_movements: 3\n\
         initial_movement: read\nbudget: {max_total_tokens: 50000}\nmovements:\n  - name: read\n    \
         edit: false\n    persona: You read.\n    instruction: \"{task}\"\n    allowed_tools: [Read]\n    \
         rules: []\n",
    )
    .unwrap();
    let server = ScriptedLlm::start(vec![
        Turn::tool_call("Read", json!({"path": "missing.txt"})).with_usage(59_950, 50),
        complete("never reached").with_usage(10, 10),
    ])
    .await;
    let out = run(&project, &server, &["capped", "--task", "Read a file"]).await;
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("exceeded (budget: max_total_tokens)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_classifiers_call_is_reserved_from_the_budget_too() {
    let project = project();
    // No call fits ten tokens: not even the classifier's, which is therefore never made.
    let server = ScriptedLlm::start(vec![complete("never reached")]).await;
    let out = run(
        &project,
        &server,
        &["--task", "Read a file", "--max-total-tokens", "10"],
    )
    .await;
    assert!(!out.status.success(), "{}", stderr(&out));
    assert_eq!(server.requests().len(), 0, "{}", stderr(&out));
    let all = jobs(&project).await;
    assert_eq!(all[0]["status"], "exceeded", "{:?}", all[0]);
    assert_eq!(all[0]["reason"], "budget: max_total_tokens", "{:?}", all[0]);
    assert!(stderr(&out).contains("token cap"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_whose_answer_cap_passes_a_token_cap_goes_with_its_cap_lowered_to_fit() {
    // No `engine.max_tokens`: a call's worst case counts `llm.max_answer_tokens` (65,536 by
    // default), more than the whole cap. The call is made with `max_tokens` lowered to what the
    // cap leaves after the prompt, instead of the run ending before its first call.
    let project = Project::new();
    std::fs::write(
        project.path().join(".maestro/config.yaml"),
        "llm:\n  tool_mode: native\n  retry:\n    max_attempts: 1\n",
    )
    .unwrap();
    let server = ScriptedLlm::start(vec![complete("done").with_usage(500, 10)]).await;
    let out = run(
        &project,
        &server,
        &["one", "--task", "Say done", "--max-total-tokens", "50000"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sent = server.requests();
    assert_eq!(sent.len(), 1);
    let cap = sent[0]["max_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("no max_tokens in {}", sent[0]));
    assert!((45_000..50_000).contains(&cap), "max_tokens {cap}");
}
