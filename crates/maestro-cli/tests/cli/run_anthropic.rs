//! `maestro run` with `llm.provider: anthropic`: the real binary runs a real piece (tool calls,
//! parallel reviewers) against a server speaking the Anthropic Messages API, and the record holds
//! each call's model and usage; the key goes as x-api-key and nowhere else.

use crate::support;

use std::path::{Path, PathBuf};

use maestro_testkit::{ScriptedAnthropic, Turn};
use serde_json::{Value, json};
use support::{args, events, maestro_with_env, write_config};

const KEY: &str = "sk-ant-cli-0123456789secret";

fn takt_builtin(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/takt-v0.30/builtins/en/pieces")
        .join(format!("{name}.yaml"))
        .display()
        .to_string()
}

fn report(name: &str) -> (String, Value) {
    (
        "write_report".to_string(),
        json!({"name": name, "content": format!("# {name}\nDone.")}),
    )
}

/// One turn writing `reports` and naming the outcome with `tag`, as the Anthropic API answers:
/// a text block, then a tool_use block per report, with usage.
fn reports_and_tag(reports: &[&str], tag: &str) -> Turn {
    Turn::tool_calls(reports.iter().map(|r| report(r)))
        .with_text(format!("Done.\n{tag}"))
        .with_usage(1000, 50)
        .answered_by("claude-test-20250101")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_takt_piece_runs_on_the_anthropic_messages_api() {
    let here = |movement: &str| format!("{movement}  <- you are here");
    let server = ScriptedAnthropic::builder()
        .api_key(KEY)
        .cache_tokens(200, 0)
        .turns([
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
        .start()
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "llm:\n  provider: anthropic\n  base_url: {}\n  model: claude-test\n  api_key_env: TEST_ANTHROPIC_KEY\n",
        server.base_url()
    );
    let config = write_config(dir.path(), &config);
    let runs = dir.path().join("runs").display().to_string();
    let out = maestro_with_env(
        dir.path(),
        args(&[
            "run",
            &takt_builtin("default"),
            "--task",
            "Add a hello function",
            "--runs-dir",
            &runs,
            "--config",
            config.to_str().unwrap(),
        ]),
        &[("TEST_ANTHROPIC_KEY", KEY)],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert_eq!(server.remaining(), 0, "every scripted turn was asked for");

    let recorded: Vec<_> = server
        .recorded()
        .into_iter()
        .filter(|r| r.path == "/v1/messages")
        .collect();
    assert_eq!(recorded.len(), 6);
    for request in &recorded {
        assert_eq!(request.header("x-api-key"), Some(KEY));
        assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(request.body["model"], "claude-test");
        assert!(
            request.body["system"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        );
        assert!(
            request.body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == "write_report" && t["input_schema"].is_object()),
            "{}",
            request.body["tools"]
        );
    }
    let run_dirs: Vec<PathBuf> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let events = events(&run_dirs[0]);
    let started = events.iter().find(|e| e["type"] == "run_started").unwrap();
    assert_eq!(started["model"], "claude-test");
    let responses: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "llm_response")
        .collect();
    assert_eq!(responses.len(), 6);
    for response in &responses {
        assert_eq!(response["model"], "claude-test-20250101", "{response}");
        assert_eq!(
            response["usage"],
            json!({"prompt_tokens": 1200, "completion_tokens": 50, "total_tokens": 1250,
                   "cached_prompt_tokens": 200}),
            "{response}"
        );
    }
    // Every tool_use block ran as a tool call: each report was written.
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "report_written")
            .count(),
        9
    );
    assert_eq!(events.last().unwrap()["status"], "completed");

    let record = std::fs::read_to_string(run_dirs[0].join("events.jsonl")).unwrap();
    for text in [&stdout, &stderr, &record] {
        assert!(!text.contains(KEY), "the key leaked:\n{text}");
    }
}
