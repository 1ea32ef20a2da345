//! What `maestro run` sends: which model, how many calls, and how tools are offered when the
//! tool mode is left to `auto`. The real binary against the scripted model server.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::{Value, json};
use support::{args, events, maestro, maestro_with_env, write_config};

fn takt_builtin(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/takt-v0.30/builtins/en/pieces")
        .join(format!("{name}.yaml"))
        .display()
        .to_string()
}

/// `maestro run PIECE --task … --llm-base-url … --model scripted-model`, records under `runs`,
/// the tool mode left to the default (`auto`).
async fn run_piece(dir: &Path, server: &ScriptedLlm, piece: &str, runs: &str) -> Output {
    let runs = dir.join(runs).display().to_string();
    let out = maestro(
        dir,
        args(&[
            "run",
            piece,
            "--task",
            "Should we add a greeting function?",
            "--llm-base-url",
            &server.base_url(),
            "--model",
            "scripted-model",
            "--runs-dir",
            &runs,
        ]),
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The events of the only run under `runs`.
fn run_events(runs: &Path) -> Vec<Value> {
    let dirs: Vec<PathBuf> = std::fs::read_dir(runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    events(&dirs[0])
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

fn magi_answers() -> [&'static str; 3] {
    [
        "[MELCHIOR:APPROVE]\n\nReason: small and testable.",
        "[BALTHASAR:APPROVE]\n\nReason: kind to users.",
        "## MAGI System Final Judgment\n\n**Conclusion: [MAGI:APPROVE]**",
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn the_takt_magi_builtin_costs_one_call_per_movement_and_no_probe() {
    let server = ScriptedLlm::start(magi_answers().map(Turn::text)).await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_piece(dir.path(), &server, &takt_builtin("magi"), "runs").await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("[MAGI:APPROVE]"));
    let paths: Vec<String> = server
        .recorded()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| p.ends_with("/chat/completions"))
        .collect();
    assert_eq!(paths.len(), 3, "one call per movement");
    let events = run_events(&dir.path().join("runs"));
    assert_eq!(count(&events, "llm_request"), 3, "every call is recorded");
    assert_eq!(events.last().unwrap()["status"], "completed");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_refusing_tools_falls_back_to_json_once_and_the_next_run_starts_there() {
    let json_answer = |text: &str| Turn::json(json!({"tool": "answer", "content": text}));
    let server = ScriptedLlm::builder()
        .reject_tools()
        .turns(magi_answers().map(json_answer))
        .start()
        .await;
    let dir = tempfile::tempdir().unwrap();
    run_piece(dir.path(), &server, &takt_builtin("magi"), "first").await;
    let sent = server.requests();
    let offered = |r: &Value| (r.get("tools").is_some(), r.get("response_format").is_some());
    assert_eq!(
        sent.iter().map(offered).collect::<Vec<_>>(),
        vec![(true, false), (false, true), (false, true), (false, true)],
        "native tools refused once, then JSON mode"
    );
    let first = run_events(&dir.path().join("first"));
    let changed: Vec<&Value> = first
        .iter()
        .filter(|e| e["type"] == "tool_mode_changed")
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0]["mode"], "json");
    assert!(
        changed[0]["reason"]
            .as_str()
            .unwrap()
            .contains("tools param requires --jinja flag"),
        "{}",
        changed[0]
    );
    let cache = dir.path().join(".maestro/cache/tool-modes.json");
    let remembered: Value =
        serde_json::from_str(&std::fs::read_to_string(&cache).unwrap()).unwrap();
    assert_eq!(
        remembered,
        json!({server.base_url(): {"scripted-model": "json"}})
    );

    for answer in magi_answers() {
        server.push(json_answer(answer));
    }
    run_piece(dir.path(), &server, &takt_builtin("magi"), "second").await;
    let sent = server.requests();
    assert_eq!(sent.len(), 7);
    assert!(
        sent[4..].iter().all(|r| offered(r) == (false, true)),
        "the second run sends JSON mode from its first request"
    );
    assert_eq!(
        count(&run_events(&dir.path().join("second")), "tool_mode_changed"),
        0
    );
}

fn report(name: &str) -> (String, Value) {
    (
        "write_report".to_string(),
        json!({"name": name, "content": format!("# {name}\nDone.")}),
    )
}

/// One turn writing `reports` and naming the outcome with `tag`.
fn reports_and_tag(reports: &[&str], tag: &str) -> Turn {
    Turn::tool_calls(reports.iter().map(|r| report(r))).with_text(format!("Done.\n{tag}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_takt_default_happy_path_costs_six_calls_with_a_cooperating_model() {
    let here = |movement: &str| format!("{movement}  <- you are here");
    let server = ScriptedLlm::start([
        reports_and_tag(&["plan.md"], "[PLAN:1]"),
        reports_and_tag(&["test-scope.md", "test-decisions.md"], "[WRITE_TESTS:1]"),
        reports_and_tag(&["coder-scope.md", "coder-decisions.md"], "[IMPLEMENT:1]"),
        reports_and_tag(&["ai-review.md"], "[AI_REVIEW:1]"),
        Turn::when_contains(
            here("arch-review"),
            reports_and_tag(&["architect-review.md"], "[ARCH-REVIEW:1]"),
        ),
        Turn::when_contains(
            here("supervise"),
            reports_and_tag(&["supervisor-validation.md", "summary.md"], "[SUPERVISE:1]"),
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    run_piece(dir.path(), &server, &takt_builtin("default"), "runs").await;
    assert_eq!(server.requests().len(), 6);
    let events = run_events(&dir.path().join("runs"));
    let path: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "movement_finished" && e.get("parent").is_none())
        .map(|e| &e["next"])
        .collect();
    assert_eq!(
        path,
        [
            "write_tests",
            "implement",
            "ai_review",
            "reviewers",
            "COMPLETE"
        ]
        .map(|next| json!(next))
        .iter()
        .collect::<Vec<_>>()
    );
    assert_eq!(count(&events, "report_written"), 9);
    assert_eq!(count(&events, "reminder"), 0);
}

const PIECE_WITHOUT_MODEL: &str = "name: one-step
description: One step that completes the run.
max_movements: 3
initial_movement: only
movements:
  - name: only
    edit: false
    persona: You finish tasks.
    instruction: Call `complete`.
    allowed_tools: [Read]
    rules:
      - condition: more to do
        next: only
";

/// Runs a one-step maestro piece (with `model: piece-model` when `piece_model`) and returns
/// the model the server was asked for, or the failed run's output.
async fn model_asked_for(
    server: &ScriptedLlm,
    piece_model: bool,
    flag: Option<&str>,
    env: &[(&str, &str)],
) -> Result<String, Output> {
    let dir = tempfile::tempdir().unwrap();
    let mut piece = PIECE_WITHOUT_MODEL.to_string();
    if piece_model {
        piece.push_str("model: piece-model\n");
    }
    std::fs::write(dir.path().join("piece.yaml"), piece).unwrap();
    let config = write_config(dir.path(), "llm:\n  model: config-model\n");
    let mut list = args(&["run", "piece.yaml", "--task", "t", "--llm-base-url"]);
    list.push(server.base_url());
    list.extend(args(&["--config", config.to_str().unwrap()]));
    if let Some(model) = flag {
        list.extend(args(&["--model", model]));
    }
    let before = server.requests().len();
    server.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "done"}),
    ));
    let out = maestro_with_env(dir.path(), list, env).await;
    if out.status.code() != Some(0) {
        return Err(out);
    }
    let sent = server.requests();
    assert_eq!(sent.len(), before + 1);
    Ok(sent[before]["model"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_flag_then_the_piece_then_the_environment_then_the_config_name_the_model() {
    let server = ScriptedLlm::builder()
        .model_id("config-model")
        .also_serves("env-model")
        .also_serves("piece-model")
        .also_serves("flag-model")
        .start()
        .await;
    let env = [("MAESTRO_MODEL", "env-model")];
    let asked = [
        model_asked_for(&server, true, Some("flag-model"), &env).await,
        model_asked_for(&server, true, None, &env).await,
        model_asked_for(&server, false, None, &env).await,
        model_asked_for(&server, false, None, &[]).await,
    ];
    let asked: Vec<String> = asked
        .into_iter()
        .map(|r| r.unwrap_or_else(|out| panic!("{}", String::from_utf8_lossy(&out.stderr))))
        .collect();
    assert_eq!(
        asked,
        vec!["flag-model", "piece-model", "env-model", "config-model"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_the_endpoint_does_not_serve_stops_the_run_listing_what_it_serves() {
    let server = ScriptedLlm::builder()
        .model_id("config-model")
        .also_serves("piece-model")
        .start()
        .await;
    let out = model_asked_for(&server, true, Some("gpt-nonexistent"), &[])
        .await
        .unwrap_err();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "the model `gpt-nonexistent` is not served by {}; it serves: config-model, piece-model.",
            server.base_url()
        )),
        "{stderr}"
    );
    assert!(server.requests().is_empty(), "no model call was made");
}
