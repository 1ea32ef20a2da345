//! What a job spent, through `maestro serve`'s API and `maestro jobs show --json`, against the
//! scripted model server over real HTTP and the project's real SQLite store: a parent with one
//! subtask shows its own tokens and cost, and the tree's, priced by the configuration's table.

use maestro_testkit::{ScriptedLlm, Turn};
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

const INPUT_PER_MTOK: f64 = 1000.0;
const OUTPUT_PER_MTOK: f64 = 10000.0;

fn priced() -> String {
    format!(
        "llm:\n  tool_mode: native\n  retry:\n    max_attempts: 1\n  models:\n    scripted-model:\n      \
         price: {{input_per_mtok: {INPUT_PER_MTOK}, output_per_mtok: {OUTPUT_PER_MTOK}}}\n"
    )
}

fn cost(prompt: u64, completion: u64) -> f64 {
    (prompt as f64 * INPUT_PER_MTOK + completion as f64 * OUTPUT_PER_MTOK) / 1_000_000.0
}

fn assert_spend(job: &Value, usage: (u64, u64), cost_usd: f64, tree: (u64, u64), tree_usd: f64) {
    assert_eq!(job["usage"]["prompt_tokens"], json!(usage.0), "{job}");
    assert_eq!(job["usage"]["completion_tokens"], json!(usage.1), "{job}");
    assert!(
        (job["cost_usd"].as_f64().unwrap() - cost_usd).abs() < 1e-9,
        "{job}"
    );
    assert_eq!(job["tree_usage"]["prompt_tokens"], json!(tree.0), "{job}");
    assert_eq!(
        job["tree_usage"]["completion_tokens"],
        json!(tree.1),
        "{job}"
    );
    assert!(
        (job["tree_cost_usd"].as_f64().unwrap() - tree_usd).abs() < 1e-9,
        "{job}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_shows_what_it_and_its_subtasks_spent_in_the_api_and_the_cli() {
    // The parent's three calls use (1000, 100) tokens each; the child's one call (2000, 300).
    let (parent_call, child_call) = ((1000, 100), (2000, 300));
    let turns = vec![
        Turn::when_contains("You work.", complete("child result").with_usage(2000, 300)),
        Turn::tool_call(
            "SpawnSubTask",
            json!({"task": "Write part A", "title": "part A", "piece": "one"}),
        )
        .with_usage(1000, 100),
        Turn::tool_call("transition", json!({"next": "WAIT_SUBTASKS"})).with_usage(1000, 100),
        complete("Report from one part.").with_usage(1000, 100),
    ];
    let llm = ScriptedLlm::start(turns).await;
    let project = Project::new();
    std::fs::write(project.path().join("pieces/split.yaml"), SPLIT).unwrap();
    std::fs::write(project.path().join(".maestro/config.yaml"), priced()).unwrap();
    let served = project.serve(&llm.base_url(), &["--concurrency", "2"]);
    let (status, job) = served
        .post(
            "/api/v1/jobs",
            json!({"piece": "split", "task": "Plan the report"}),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    served
        .until(&id, "completed", |j| j["status"] == "completed")
        .await;
    assert_eq!(llm.requests().len(), 4);

    let own = (3 * parent_call.0, 3 * parent_call.1);
    let own_usd = 3.0 * cost(parent_call.0, parent_call.1);
    let tree = (own.0 + child_call.0, own.1 + child_call.1);
    let tree_usd = own_usd + cost(child_call.0, child_call.1);

    let (status, parent) = served.get(&format!("/api/v1/jobs/{id}")).await;
    assert_eq!(status, 200, "{parent}");
    assert_spend(&parent, own, own_usd, tree, tree_usd);
    let (_, children) = served.get(&format!("/api/v1/jobs/{id}/children")).await;
    let child_id = children["jobs"][0]["id"].as_str().unwrap().to_string();
    let (_, child) = served.get(&format!("/api/v1/jobs/{child_id}")).await;
    let child_usd = cost(child_call.0, child_call.1);
    assert_spend(&child, child_call, child_usd, child_call, child_usd);
    served.stop().await;

    let out = project.maestro(&["jobs", "show", &id, "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_spend(&shown, own, own_usd, tree, tree_usd);
}
