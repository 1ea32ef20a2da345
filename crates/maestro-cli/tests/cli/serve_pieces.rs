//! `maestro serve`'s piece author routes over real HTTP on 127.0.0.1: a piece's graph as
//! loaded (all three dialects, parallel sub-movements, special targets), the graph a valid
//! piece's validation answers with, and `maestro prompt`'s exact prompts for a movement.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support;

use support::jobs::{PIECE, Project};

fn takt_builtins() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/takt-v0.30/builtins/en")
        .canonicalize()
        .unwrap()
}

fn graph_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/workflow-graph")
        .join(name)
        .canonicalize()
        .unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A project with the takt builtin `default` (and the builtins' facets beside its pieces
/// directory, where takt's layout has them) and the graph piece `debate`, copied at test time.
fn project_with_fixtures() -> Project {
    let project = Project::new();
    let builtins = takt_builtins();
    std::fs::copy(
        builtins.join("pieces/default.yaml"),
        project.path().join("pieces/default.yaml"),
    )
    .unwrap();
    copy_dir(&builtins.join("facets"), &project.path().join("facets"));
    std::fs::copy(
        graph_fixture("debate.yaml"),
        project.path().join("pieces/debate.yaml"),
    )
    .unwrap();
    project
}

fn names(graph: &Value) -> Vec<String> {
    graph["movements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

fn edges(graph: &Value) -> BTreeSet<(String, String, String)> {
    graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap().to_string(),
                e["to"].as_str().unwrap().to_string(),
                e["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_takt_builtin_s_graph_has_one_node_per_movement_and_sub_movement() {
    let project = project_with_fixtures();
    let served = project.serve_plain(&["--insecure-no-auth", "--no-worker"]);
    let (status, graph) = served.get("/api/v1/pieces/default/graph").await;
    assert_eq!(status, 200, "{graph}");
    // What the loader itself makes of the file: every movement, and every parallel
    // sub-movement after its parent.
    let piece = maestro_piece::load_file(
        &project.path().join("pieces/default.yaml"),
        &maestro_piece::LoadOptions::default(),
    )
    .unwrap()
    .piece;
    let mut expected = Vec::new();
    let mut parents = Vec::new();
    for m in &piece.movements {
        expected.push(m.name.clone());
        for sub in &m.parallel {
            expected.push(sub.name.clone());
            parents.push((sub.name.clone(), m.name.clone()));
        }
    }
    assert!(!parents.is_empty(), "the fixture has a parallel movement");
    assert_eq!(names(&graph), expected);
    assert_eq!(graph["dialect"], "takt");
    assert_eq!(graph["initial_movement"], json!(piece.initial_movement));
    for (sub, parent) in &parents {
        let node = graph["movements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == json!(sub))
            .unwrap();
        assert_eq!(
            (node["kind"].clone(), node["parent"].clone()),
            (json!("sub_movement"), json!(parent)),
            "{node}"
        );
        assert!(!node["outcomes"].as_array().unwrap().is_empty(), "{node}");
    }
    // Every rule that leads somewhere is an edge, and the parallel parent's rules aggregate.
    let rules: usize = piece
        .movements
        .iter()
        .map(|m| m.rules.iter().filter(|r| r.next.is_some()).count())
        .sum();
    let rule_edges = graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "rule" || e["kind"] == "aggregate")
        .count();
    assert_eq!(rule_edges, rules, "{graph}");
    let parent = &parents[0].1;
    let edges = edges(&graph);
    assert!(
        edges.contains(&(parent.clone(), "COMPLETE".into(), "aggregate".into())),
        "{edges:?}"
    );
    // Special targets are edge targets, and listed.
    for target in graph["targets"].as_array().unwrap() {
        assert!(
            edges.iter().any(|(_, to, _)| json!(to) == *target),
            "{target}"
        );
    }
    assert!(
        graph["targets"]
            .as_array()
            .unwrap()
            .contains(&json!("ABORT"))
    );
    served.stop().await;
}

const MAESTRO_PIECE: &str = "\
name: flow
description: plans, then builds
max_movements: 6
initial_movement: plan
movements:
  - name: plan
    edit: false
    persona: You plan.
    instruction: \"Plan {task}\"
    allowed_tools: [Read]
    rules:
      - condition: the plan is ready
        next: build
    default_next: ASK
  - name: build
    edit: true
    persona: You build.
    instruction: Build it.
    allowed_tools: [Read, Write]
    rules:
      - condition: split into parts
        next: WAIT_SUBTASKS
      - condition: the plan was wrong
        next: plan
    default_next: ABORT
";

#[tokio::test(flavor = "multi_thread")]
async fn graphs_of_maestro_and_graph_pieces_lead_to_their_special_targets() {
    let project = project_with_fixtures();
    std::fs::write(project.path().join("pieces/flow.yaml"), MAESTRO_PIECE).unwrap();
    let served = project.serve_plain(&["--insecure-no-auth", "--no-worker"]);

    let (status, graph) = served.get("/api/v1/pieces/flow/graph").await;
    assert_eq!(status, 200, "{graph}");
    assert_eq!(
        (graph["dialect"].clone(), graph["initial_movement"].clone()),
        (json!("maestro"), json!("plan"))
    );
    assert_eq!(names(&graph), ["plan", "build"]);
    let found = edges(&graph);
    for edge in [
        ("plan", "build", "rule"),
        ("plan", "ASK", "default_next"),
        ("plan", "COMPLETE", "complete_tool"),
        ("build", "WAIT_SUBTASKS", "rule"),
        ("build", "plan", "rule"),
        ("build", "ABORT", "default_next"),
        ("build", "COMPLETE", "complete_tool"),
    ] {
        let edge = (edge.0.to_string(), edge.1.to_string(), edge.2.to_string());
        assert!(found.contains(&edge), "{edge:?} not in {found:?}");
    }
    assert_eq!(
        graph["targets"],
        json!(["COMPLETE", "ABORT", "ASK", "WAIT_SUBTASKS"])
    );
    let label = graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["to"] == "build")
        .unwrap()["label"]
        .clone();
    assert_eq!(label, "the plan is ready");

    // The graph dialect: roles are movements, `$status` values label the edges, `$END` is
    // COMPLETE.
    let (status, graph) = served.get("/api/v1/pieces/debate/graph").await;
    assert_eq!(status, 200, "{graph}");
    assert_eq!(graph["dialect"], "graph");
    let mut roles = names(&graph);
    roles.sort();
    assert_eq!(roles, ["against", "for"]);
    let labelled: BTreeSet<(String, String, String)> = graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap().to_string(),
                e["to"].as_str().unwrap().to_string(),
                e["label"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        labelled.contains(&("against".into(), "COMPLETE".into(), "conceded".into())),
        "{labelled:?}"
    );
    assert!(
        labelled.contains(&("against".into(), "for".into(), "continue".into())),
        "{labelled:?}"
    );

    // No such piece; a name is never a path.
    let (status, problem) = served.get("/api/v1/pieces/nothing/graph").await;
    assert_eq!(status, 404, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("nothing"),
        "{problem}"
    );
    let (status, _) = served.get("/api/v1/pieces/..%2Fpieces%2Fflow/graph").await;
    assert_eq!(status, 404);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_valid_piece_s_validation_answers_its_graph_and_an_invalid_one_its_errors() {
    let project = Project::new();
    let served = project.serve_plain(&["--insecure-no-auth", "--no-worker"]);
    let validate = |query: &str, body: &str| {
        served
            .http
            .post(served.url(&format!("/api/v1/pieces/validate{query}")))
            .header("content-type", "application/yaml")
            .body(body.to_string())
            .send()
    };
    for query in ["?name=flow", ""] {
        let response = validate(query, MAESTRO_PIECE).await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{query}: {body}");
        assert_eq!(body["valid"], true);
        assert_eq!(names(&body["graph"]), ["plan", "build"], "{body}");
    }
    // Stored under another name than its own: the mismatch is the error, at the `name` field's
    // value (line 1, after `name: `), also when the piece is written there; and when the
    // position is not known it is left out, never given as 0.
    let response = validate("?name=other", MAESTRO_PIECE).await.unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let problem: Value = response.json().await.unwrap();
    let error = &problem["errors"][0];
    assert_eq!(
        (
            error["path"].clone(),
            error["line"].clone(),
            error["column"].clone()
        ),
        (json!("name"), json!(1), json!(7)),
        "{problem}"
    );
    let quoted = format!("# flow, quoted\n\"name\":   flow\n{}", &MAESTRO_PIECE[11..]);
    let response = served
        .http
        .put(served.url("/api/v1/pieces/other"))
        .header("content-type", "application/yaml")
        .body(quoted)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let problem: Value = response.json().await.unwrap();
    let error = &problem["errors"][0];
    assert_eq!(
        (
            error["path"].clone(),
            error["line"].clone(),
            error["column"].clone()
        ),
        (json!("name"), json!(2), json!(11)),
        "{problem}"
    );
    let flow = "{name: flow, description: plans, max_movements: 1, initial_movement: plan, \
                movements: [{name: plan, persona: p, instruction: i, rules: []}]}";
    let response = validate("?name=other", flow).await.unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let problem: Value = response.json().await.unwrap();
    for error in problem["errors"].as_array().unwrap() {
        assert_ne!(error.get("line"), Some(&json!(0)), "{problem}");
        assert_ne!(error.get("column"), Some(&json!(0)), "{problem}");
    }
    let broken = MAESTRO_PIECE.replace("next: build", "next: nowhere");
    let response = validate("?name=flow", &broken).await.unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let problem: Value = response.json().await.unwrap();
    assert!(problem.get("graph").is_none(), "{problem}");
    let error = &problem["errors"][0];
    let line = 1 + MAESTRO_PIECE
        .lines()
        .position(|l| l.contains("next: build"))
        .unwrap();
    assert_eq!(
        (error["path"].clone(), error["line"].clone()),
        (json!("movements[0].rules[0].next"), json!(line)),
        "{problem}"
    );
    served.stop().await;
}

/// What `maestro prompt PIECE --movement M --task T` prints, as (system, user).
fn cli_prompt(project: &Project, piece: &Path, movement: &str, task: &str) -> (String, String) {
    let out = project
        .command(&[
            "prompt",
            piece.to_str().unwrap(),
            "--movement",
            movement,
            "--task",
            task,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rest = text.strip_prefix("===== system =====\n").unwrap();
    let (system, user) = rest.split_once("\n===== user =====\n").unwrap();
    (system.to_string(), user.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_movement_s_prompts_are_the_ones_maestro_prompt_prints() {
    let project = project_with_fixtures();
    std::fs::write(project.path().join("pieces/flow.yaml"), MAESTRO_PIECE).unwrap();
    let served = project.serve_plain(&["--insecure-no-auth", "--no-worker"]);
    let task = "Add a greeting & a farewell";
    for (piece, movement) in [
        ("flow", "plan"),
        ("default", "plan"),
        ("default", "arch-review"),
        ("debate", "for"),
    ] {
        let (status, prompt) = served
            .get(&format!(
                "/api/v1/pieces/{piece}/prompt?movement={movement}&task=Add%20a%20greeting%20%26%20a%20farewell"
            ))
            .await;
        assert_eq!(status, 200, "{prompt}");
        let file = project.path().join(format!("pieces/{piece}.yaml"));
        let (system, user) = cli_prompt(&project, &file, movement, task);
        assert_eq!(
            (
                prompt["system"].as_str().unwrap(),
                prompt["user"].as_str().unwrap()
            ),
            (system.as_str(), user.as_str()),
            "{piece} {movement}"
        );
        assert_eq!(prompt["task"], task);
    }
    // Without a task, the placeholder TASK.
    let (_, prompt) = served.get("/api/v1/pieces/flow/prompt?movement=plan").await;
    let (_, user) = cli_prompt(
        &project,
        &project.path().join("pieces/flow.yaml"),
        "plan",
        "TASK",
    );
    assert_eq!(prompt["user"], json!(user));
    // An unknown movement names the known ones.
    let (status, problem) = served.get("/api/v1/pieces/flow/prompt?movement=ship").await;
    assert_eq!(status, 404, "{problem}");
    assert_eq!(problem["known"], json!(["plan", "build"]));
    // An edit not saved yet (here, a piece not written at all): its YAML as the body.
    let response = served
        .http
        .post(served.url("/api/v1/pieces/flow/prompt?movement=build&task=Ship%20it"))
        .header("content-type", "application/yaml")
        .body(MAESTRO_PIECE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let prompt: Value = response.json().await.unwrap();
    let (system, user) = cli_prompt(
        &project,
        &project.path().join("pieces/flow.yaml"),
        "build",
        "Ship it",
    );
    assert_eq!(
        (prompt["system"].clone(), prompt["user"].clone()),
        (json!(system), json!(user))
    );
    let response = served
        .http
        .post(served.url("/api/v1/pieces/one/prompt?movement=build"))
        .body(PIECE.replace("initial_movement: work", "initial_movement: x"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    served.stop().await;
}
