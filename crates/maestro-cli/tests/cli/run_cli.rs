//! `maestro run` end to end: the real binary, the real fixtures, the scripted model server over
//! HTTP on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::Output;

use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::{Value, json};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures")
        .join(rel)
}

/// Runs `maestro run` with `args` against `server`, in a fresh directory.
async fn maestro_run(server: &ScriptedLlm, args: &[&str]) -> (Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir.path())
        .arg("run")
        .args(args)
        .args([
            "--llm-base-url",
            &server.base_url(),
            "--model",
            "scripted-model",
            "--tool-mode",
            "native",
        ])
        .env("HOME", dir.path())
        .env_remove("MAESTRO_LLM_BASE_URL")
        .env_remove("MAESTRO_MODEL")
        .env_remove("MAESTRO_API_KEY");
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (output, dir)
}

fn events_of(dir: &Path) -> Vec<Value> {
    let runs = dir.join(".maestro/runs");
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn report(name: &str, content: &str) -> (String, Value) {
    (
        "write_report".to_string(),
        json!({"name": name, "content": content}),
    )
}

fn here(movement: &str) -> String {
    format!("{movement}  <- you are here")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_takt_default_fixture_completes() {
    let server = ScriptedLlm::start([
        Turn::tool_call(
            "write_report",
            json!({"name": "plan.md", "content": "# Plan\nAdd a greeting."}),
        ),
        Turn::text("The plan is clear.\n[PLAN:1]"),
        Turn::tool_calls([
            report("test-scope.md", "scope"),
            report("test-decisions.md", "decisions"),
        ]),
        Turn::text("Tests written.\n[WRITE_TESTS:1]"),
        Turn::tool_calls([
            report("coder-scope.md", "scope"),
            report("coder-decisions.md", "decisions"),
        ]),
        Turn::text("Implemented.\n[IMPLEMENT:1]"),
        Turn::tool_call(
            "write_report",
            json!({"name": "ai-review.md", "content": "No issues."}),
        ),
        Turn::text("No AI-specific issues.\n[AI_REVIEW:1]"),
        Turn::when_contains(
            here("arch-review"),
            Turn::tool_call(
                "write_report",
                json!({"name": "architect-review.md", "content": "ok"}),
            ),
        ),
        Turn::when_contains(
            here("arch-review"),
            Turn::text("Approved.\n[ARCH-REVIEW:1]"),
        ),
        Turn::when_contains(
            here("supervise"),
            Turn::tool_calls([
                report("supervisor-validation.md", "ok"),
                report("summary.md", "All good."),
            ]),
        ),
        Turn::when_contains(
            here("supervise"),
            Turn::text("All checks passed.\n[SUPERVISE:1]"),
        ),
    ])
    .await;
    let piece = fixture("takt-v0.30/builtins/en/pieces/default.yaml");
    let (out, dir) = maestro_run(
        &server,
        &[piece.to_str().unwrap(), "--task", "Add a hello function"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert_eq!(server.remaining(), 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Approved.") && stdout.contains("All checks passed."),
        "{stdout}"
    );
    assert!(
        stderr.contains("▶ plan (1/30)") && stderr.contains("completed"),
        "{stderr}"
    );
    let events = events_of(dir.path());
    let finished: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "movement_finished" && e.get("parent").is_none())
        .map(|e| (e["movement"].as_str().unwrap(), e["next"].as_str().unwrap()))
        .collect();
    assert_eq!(
        finished,
        vec![
            ("plan", "write_tests"),
            ("write_tests", "implement"),
            ("implement", "ai_review"),
            ("ai_review", "reviewers"),
            ("reviewers", "COMPLETE")
        ]
    );
    assert_eq!(events.last().unwrap()["status"], "completed");
    let run_dir = PathBuf::from(events[0]["run_dir"].as_str().unwrap());
    for name in [
        "plan.md",
        "ai-review.md",
        "architect-review.md",
        "summary.md",
    ] {
        assert!(run_dir.join("reports").join(name).is_file(), "{name}");
    }
    for sub in ["input", "output", "logs", "subtasks", "skills"] {
        assert!(run_dir.join(sub).is_dir(), "{sub}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_graph_debate_fixture_completes() {
    let server = ScriptedLlm::start([
        Turn::text(
            "---\n$status: continue\nargument: Remote work removes commuting.\n---\nMy case.",
        ),
        Turn::text("---\n$status: conceded\nargument: That is convincing.\n---\n"),
    ])
    .await;
    let piece = fixture("workflow-graph/debate.yaml");
    let (out, dir) = maestro_run(
        &server,
        &[
            piece.to_str().unwrap(),
            "--task",
            "Remote work is better than office work.",
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1]
            .to_string()
            .contains("Counter the opposing argument: Remote work removes commuting.")
    );
    let events = events_of(dir.path());
    assert_eq!(events.last().unwrap()["status"], "completed");
}

#[tokio::test(flavor = "multi_thread")]
async fn events_jsonl_goes_to_stdout_and_an_abort_exits_3() {
    let server = ScriptedLlm::start([
        Turn::text("Too vague to plan.\n[PLAN:3]"),
        Turn::text("No report: the request is unclear."),
    ])
    .await;
    let piece = fixture("takt-v0.30/builtins/en/pieces/default.yaml");
    let (out, _dir) = maestro_run(
        &server,
        &[
            piece.to_str().unwrap(),
            "--task",
            "Do the thing",
            "--events",
            "jsonl",
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every stdout line is an event"))
        .collect();
    assert_eq!(lines[0]["type"], "run_started");
    assert_eq!(lines.last().unwrap()["type"], "run_finished");
    assert_eq!(lines.last().unwrap()["status"], "aborted");
    let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=lines.len() as u64).collect::<Vec<_>>());
}

/// A run that did not complete prints why it ended, marked as a failure, where a completed
/// run prints its result: never its last answer as if it were one.
#[tokio::test(flavor = "multi_thread")]
async fn an_aborted_run_prints_its_end_reason_not_its_last_answer() {
    let server = ScriptedLlm::start([
        Turn::text("Too vague to plan.\n[PLAN:3]"),
        Turn::text("No report: the request is unclear."),
    ])
    .await;
    let piece = fixture("takt-v0.30/builtins/en/pieces/default.yaml");
    let (out, _dir) = maestro_run(
        &server,
        &[piece.to_str().unwrap(), "--task", "Do the thing"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr:\n{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "error: the run did not complete: aborted (abort_rule)\n"
    );
}

/// `--workflow NAME`, as TAKT users type it, names the piece as PIECE does.
#[tokio::test(flavor = "multi_thread")]
async fn run_takes_the_piece_as_workflow_too() {
    let server = ScriptedLlm::start([
        Turn::text("Too vague to plan.\n[PLAN:3]"),
        Turn::text("No report: the request is unclear."),
    ])
    .await;
    let piece = fixture("takt-v0.30/builtins/en/pieces/default.yaml");
    let (out, dir) = maestro_run(
        &server,
        &[
            "--workflow",
            piece.to_str().unwrap(),
            "--task",
            "Do the thing",
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr:\n{stderr}");
    let events = events_of(dir.path());
    assert_eq!(events[0]["type"], "run_started");
    assert_eq!(events[0]["piece"], "default", "{:?}", events[0]);

    // Both at once is a usage error that names them.
    let (out, _dir) = maestro_run(
        &server,
        &["default", "--workflow", "default", "--task", "Do the thing"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(stderr.contains("--workflow"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_classifier_picks_a_piece_or_says_none_fits() {
    let server = ScriptedLlm::start([
        Turn::json(json!({"piece": "debate", "reason": "the task is a proposition to argue"})),
        Turn::text("---\n$status: conceded\nargument: Agreed.\n---\n"),
    ])
    .await;
    let dir = fixture("workflow-graph");
    let (out, _tmp) = maestro_run(
        &server,
        &[
            "auto",
            "--pieces-dir",
            dir.to_str().unwrap(),
            "--task",
            "Debate: tabs beat spaces",
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = &server.requests()[0];
    assert_eq!(first["response_format"]["type"], "json_schema");
    let text = first.to_string();
    assert!(
        text.contains("debate") && text.contains("analyze-topic"),
        "{text}"
    );

    let none = ScriptedLlm::start([Turn::json(
        json!({"piece": "none", "reason": "this is a cooking task"}),
    )])
    .await;
    let (out, _tmp) = maestro_run(
        &none,
        &[
            "--pieces-dir",
            dir.to_str().unwrap(),
            "--task",
            "Bake bread",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no piece fits this task (this is a cooking task)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_configured_model_the_endpoints_only_model_is_used() {
    let server = ScriptedLlm::builder()
        .model_id("only-model")
        .turns([Turn::text(
            "---\n$status: conceded\nargument: You win.\n---\n",
        )])
        .start()
        .await;
    let dir = tempfile::tempdir().unwrap();
    let piece = fixture("workflow-graph/debate.yaml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"))
        .current_dir(dir.path())
        .args([
            "run",
            piece.to_str().unwrap(),
            "--task",
            "t",
            "--llm-base-url",
        ])
        .arg(server.base_url())
        .env("HOME", dir.path())
        .env_remove("MAESTRO_MODEL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("model: only-model"), "{stderr}");
    assert_eq!(server.requests()[0]["model"], "only-model");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_classifier_also_uses_the_endpoints_only_model() {
    let server = ScriptedLlm::builder()
        .model_id("solo")
        .turns([
            Turn::json(json!({"piece": "debate", "reason": "a proposition to argue"})),
            Turn::text("---\n$status: conceded\nargument: Agreed.\n---\n"),
        ])
        .start()
        .await;
    let dir = tempfile::tempdir().unwrap();
    let pieces = fixture("workflow-graph");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"))
        .current_dir(dir.path())
        .args([
            "run",
            "--pieces-dir",
            pieces.to_str().unwrap(),
            "--task",
            "Debate: tabs",
        ])
        .arg("--llm-base-url")
        .arg(server.base_url())
        .env("HOME", dir.path())
        .env_remove("MAESTRO_MODEL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let models: Vec<Value> = server
        .requests()
        .iter()
        .map(|r| r["model"].clone())
        .collect();
    assert_eq!(models, vec![json!("solo"), json!("solo")]);
}

/// Runs the graph debate fixture with `--events jsonl` after one failed model call, with `env`
/// set; returns stdout and stderr.
async fn debate_after_a_retry(env: &[(&str, &str)]) -> (String, String) {
    let server = ScriptedLlm::start([
        Turn::http_error(503, r#"{"error":{"message":"overloaded"}}"#).retry_after(0),
        Turn::text("---\n$status: continue\nargument: Commuting.\n---\nMy case."),
        Turn::text("---\n$status: conceded\nargument: Convincing.\n---\n"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let piece = fixture("workflow-graph/debate.yaml");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir.path())
        .args([
            "run",
            piece.to_str().unwrap(),
            "--task",
            "t",
            "--events",
            "jsonl",
        ])
        .args([
            "--llm-base-url",
            &server.base_url(),
            "--model",
            "scripted-model",
        ])
        .env("HOME", dir.path())
        .env_remove("MAESTRO_LOG")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    (stdout, stderr)
}

#[tokio::test(flavor = "multi_thread")]
async fn warnings_go_to_stderr_and_stdout_stays_pure_jsonl() {
    let (stdout, stderr) = debate_after_a_retry(&[]).await;
    assert!(
        stderr.contains("WARN") && stderr.contains("model call failed; retrying"),
        "{stderr}"
    );
    let types: Vec<String> = stdout
        .lines()
        .map(|line| {
            let event: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
            event["type"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(types.contains(&"llm_retry".to_string()), "{types:?}");
    assert_eq!(types.last().map(String::as_str), Some("run_finished"));
}

#[tokio::test(flavor = "multi_thread")]
async fn maestro_log_chooses_what_is_logged_over_rust_log() {
    let (_, quiet) = debate_after_a_retry(&[("RUST_LOG", "error")]).await;
    assert!(!quiet.contains("retrying"), "{quiet}");
    let (_, shown) = debate_after_a_retry(&[("MAESTRO_LOG", "warn"), ("RUST_LOG", "error")]).await;
    assert!(shown.contains("model call failed; retrying"), "{shown}");
    let (_, quiet) = debate_after_a_retry(&[("MAESTRO_LOG", "error"), ("RUST_LOG", "warn")]).await;
    assert!(!quiet.contains("retrying"), "{quiet}");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_endpoint_answering_the_run_says_how_to_start_the_local_model() {
    // Nothing listens on port 1. With a model given the run starts and fails; without one, the
    // model cannot be asked for. Both say the same thing.
    let piece = fixture("workflow-graph/debate.yaml");
    for model in [Some("m"), None] {
        let dir = tempfile::tempdir().unwrap();
        // No retries: the failure is the point, not the client's patience.
        std::fs::create_dir(dir.path().join(".maestro")).unwrap();
        std::fs::write(
            dir.path().join(".maestro/config.yaml"),
            "llm:\n  retry:\n    max_attempts: 1\n",
        )
        .unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"));
        cmd.current_dir(dir.path())
            .args(["run", piece.to_str().unwrap(), "--task", "t"])
            .args(["--llm-base-url", "http://127.0.0.1:1/v1"])
            .env("HOME", dir.path())
            .env_remove("MAESTRO_MODEL")
            .env_remove("MAESTRO_LLM_BASE_URL");
        if let Some(model) = model {
            cmd.args(["--model", model]);
        }
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let hint: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("bash scripts/local-llm.sh start"))
            .collect();
        assert_eq!(hint.len(), 1, "{model:?}: {stderr}");
        assert!(
            hint[0].starts_with("error: no model endpoint answers at http://127.0.0.1:1/v1"),
            "{}",
            hint[0]
        );
        assert_ne!(out.status.code(), Some(0), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_task_is_refused_and_a_task_file_is_read() {
    let server = ScriptedLlm::start([]).await;
    let (out, dir) = maestro_run(&server, &["auto", "--task", "  \n"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the task is empty"), "{stderr}");
    assert!(!dir.path().join(".maestro/runs").exists());
    assert!(server.requests().is_empty());

    // --task-file: an empty file is refused the same way, a missing one is named.
    let (out, _dir) = maestro_run(&server, &["auto", "--task-file", "/nonexistent/task.md"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/task.md"), "{stderr}");
}

/// A limit of 0 is a mistake, not a run that ends at once: `--max-tokens`, `--max-iterations`
/// and `--context-length` refuse it as a usage error, and nothing is recorded.
#[test]
fn zero_limits_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    for flag in ["--max-tokens", "--max-iterations", "--context-length"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"))
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .args(["run", "explore", "--task", "t", flag, "0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '0' for '{flag}")),
            "{flag}: {stderr}"
        );
    }
    assert!(!dir.path().join(".maestro").exists());
}

/// The usage line says how a run is started (a task, a task file, or a resume), and
/// `--task-file -` reads standard input as `--task -` does.
#[test]
fn the_usage_names_every_way_to_start_and_a_task_file_of_dash_is_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let maestro = || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"));
        cmd.current_dir(dir.path()).env("HOME", dir.path());
        cmd
    };
    let help = maestro().args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for usage in [
        "maestro run [PIECE] --task TEXT [OPTIONS]",
        "maestro run [PIECE] --task-file FILE [OPTIONS]",
        "maestro run --resume ID [OPTIONS]",
    ] {
        assert!(help.contains(usage), "{help}");
    }
    let mut child = maestro()
        .args(["run", "explore", "--task-file", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the task is empty"), "{stderr}");
}

/// A run whose reader goes away (`maestro run … | head -1`) goes on to its end and records it:
/// the progress and the result it can no longer print are dropped, and nothing panics (before,
/// the first line written to the closed pipe ended the process with 101 and left the job
/// running).
#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_output_pipes_close_goes_on_to_its_end() {
    let server = ScriptedLlm::start([
        Turn::tool_call("Write", json!({"file_path": "a.txt", "content": "one\n"})),
        Turn::tool_call("complete", json!({"status": "success", "result": "done"})),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("piece.yaml"),
        "name: writer\ndescription: writes\nmax_movements: 2\ninitial_movement: write\n\
         movements:\n  - name: write\n    edit: true\n    persona: You write.\n    \
         instruction: \"{task}\"\n    allowed_tools: [Write]\n    rules: []\n",
    )
    .unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir.path())
        .args(["run", "piece.yaml", "--task", "Write a.txt."])
        .args(["--llm-base-url", &server.base_url()])
        .args(["--model", "scripted-model", "--tool-mode", "native"])
        .env("HOME", dir.path())
        .env_remove("MAESTRO_LLM_BASE_URL")
        .env_remove("MAESTRO_MODEL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let status = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().unwrap();
        // Both readers go away before the run has printed anything.
        drop(child.stdout.take());
        drop(child.stderr.take());
        child.wait().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(server.remaining(), 0, "the run stopped before its end");
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"))
        .current_dir(dir.path())
        .args(["jobs", "list", "--json"])
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let jobs: Vec<Value> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["status"], "completed", "{jobs:?}");
}
