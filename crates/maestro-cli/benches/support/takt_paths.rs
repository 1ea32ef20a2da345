//! The fixed paths through builtin TAKT v0.60 workflows that Maestro is compared on with TAKT
//! 0.60 itself (`scripts/takt-compare.sh`): the scripted model answers of each, and how a run's
//! record is read back (step order, model calls per step). Shared by the `takt_compare` bench,
//! which measures them, and `tests/cli/takt_paths.rs`, which keeps them running.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each user takes part of it

use std::collections::BTreeMap;
use std::path::Path;

use maestro_testkit::Turn;
use serde_json::{Value, json};

/// One builtin workflow on one fixed path.
pub(crate) struct TaktPath {
    /// The builtin workflow's name, as `maestro run` and `takt --workflow` take it.
    pub(crate) workflow: &'static str,
    /// The task given to the run.
    pub(crate) task: &'static str,
    /// The scripted model answers that lead the run along the path.
    pub(crate) turns: fn() -> Vec<Turn>,
}

/// The compared paths (the same in `scripts/takt-compare.sh`).
pub(crate) const PATHS: &[TaktPath] = &[
    TaktPath {
        workflow: "compound-eye",
        task: "Review the module layout",
        turns: compound_eye,
    },
    TaktPath {
        workflow: "backend",
        task: "Why does the service use a repository layer?",
        turns: backend,
    },
];

fn here(step: &str) -> String {
    format!("{step}  <- you are here")
}

fn write_report(name: &str, content: &str) -> Turn {
    Turn::tool_call("write_report", json!({"name": name, "content": content}))
}

/// `evaluate` (`eye1` and `eye2` in parallel, both `done`) -> `synthesize` -> COMPLETE.
fn compound_eye() -> Vec<Turn> {
    let mut turns = Vec::new();
    for (eye, tag) in [("eye1", "EYE1"), ("eye2", "EYE2")] {
        turns.push(Turn::when_contains(
            here(eye),
            write_report(
                &format!("{eye}-review.md"),
                "# Eye Review Result\n\n## Conclusion\nThe module layout is sound.",
            ),
        ));
        turns.push(Turn::when_contains(
            here(eye),
            Turn::text(format!("The module layout is sound.\n[{tag}:1]")),
        ));
    }
    turns.push(write_report(
        "synthesis.md",
        "# Multi-Eye Review Synthesis\n\n## Conclusion\nBoth eyes agree.",
    ));
    turns.push(Turn::text("Both eyes agree.\n[SYNTHESIZE:1]"));
    turns
}

/// `develop` calls `development-core`: `plan` writes `plan.md` and picks its second rule (the
/// task is a question) -> COMPLETE, returned to `develop` -> COMPLETE.
fn backend() -> Vec<Turn> {
    vec![
        write_report(
            "plan.md",
            "# Plan\n\nNo implementation: the user asked a question.",
        ),
        Turn::text("The task is a question about the design, not a change request.\n[PLAN:2]"),
    ]
}

/// Puts the builtin `workflow`'s file (as Maestro ships it) into `dir`'s `.takt/workflows/`, the
/// project layer TAKT searches too, and returns the path `maestro run` takes, relative to `dir`.
/// The workflows it calls and the facets it names resolve from the builtins in the binary.
pub(crate) fn place_workflow(dir: &Path, workflow: &str) -> String {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../maestro-piece/takt-builtins/v0.60/en/workflows")
        .join(format!("{workflow}.yaml"));
    let rel = format!(".takt/workflows/{workflow}.yaml");
    std::fs::create_dir_all(dir.join(".takt/workflows")).unwrap();
    std::fs::copy(&source, dir.join(&rel)).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    rel
}

/// Every event of the one run recorded under `dir` (none when there is no record).
pub(crate) fn events_of(dir: &Path) -> Vec<Value> {
    let Ok(mut runs) = std::fs::read_dir(dir.join(".maestro/runs")) else {
        return Vec::new();
    };
    let Some(Ok(run)) = runs.next() else {
        return Vec::new();
    };
    std::fs::read_to_string(run.path().join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The steps in the order they started: `a -> b[x,y] -> c`, the sub-steps of a parallel step
/// (sorted, as they run at once) in brackets.
pub(crate) fn step_order(events: &[Value]) -> String {
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for e in events.iter().filter(|e| e["type"] == "movement_started") {
        let name = e["movement"].as_str().unwrap_or("?").to_string();
        match e["parent"].as_str() {
            None => steps.push((name, Vec::new())),
            Some(parent) => {
                if let Some((_, subs)) = steps.iter_mut().rev().find(|(n, _)| n == parent)
                    && !subs.contains(&name)
                {
                    subs.push(name);
                    subs.sort();
                }
            }
        }
    }
    steps
        .into_iter()
        .map(|(name, subs)| {
            if subs.is_empty() {
                name
            } else {
                format!("{name}[{}]", subs.join(","))
            }
        })
        .collect::<Vec<_>>()
        .join(" -> ")
}

/// The model calls the record says were sent, per step.
pub(crate) fn calls_by_step(events: &[Value]) -> BTreeMap<String, usize> {
    let mut calls = BTreeMap::new();
    for e in events.iter().filter(|e| e["type"] == "llm_request") {
        *calls
            .entry(e["movement"].as_str().unwrap_or("?").to_string())
            .or_insert(0) += 1;
    }
    calls
}

/// How the run ended, from its `run_finished` event: the status and the result.
pub(crate) fn finish_of(events: &[Value]) -> Option<(String, String)> {
    events
        .iter()
        .rev()
        .find(|e| e["type"] == "run_finished")
        .map(|e| {
            (
                e["status"].as_str().unwrap_or("?").to_string(),
                e["result"].as_str().unwrap_or("").to_string(),
            )
        })
}
