//! TAKT's `{review_scope}`: a step whose text uses it is told which files the task changed in
//! the workspace (committed since the branch's base, uncommitted and untracked), computed by
//! `git` in the sandbox.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use maestro_engine::{Engine, RunRecord};
use maestro_llm::{OpenAiCompat, OpenAiConfig, Provider};
use maestro_piece::{LoadOptions, load_str};
use maestro_testkit::{ScriptedLlm, Turn};
use maestro_tools::{Registry, ToolsConfig};
use support::{engine_config, fast_retries, messages_text};

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

#[tokio::test]
async fn a_reviewer_is_told_the_files_the_task_changed() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("kept.txt"), "untouched\n").unwrap();
    std::fs::write(repo.join("edited.txt"), "one\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(repo.join("committed.txt"), "new\n").unwrap();
    git(&repo, &["add", "committed.txt"]);
    git(&repo, &["commit", "-q", "-m", "work"]);
    std::fs::write(repo.join("edited.txt"), "two\n").unwrap();
    std::fs::write(repo.join("untracked.txt"), "fresh\n").unwrap();
    std::fs::write(repo.join(".gitignore"), "ignored.txt\n").unwrap();
    std::fs::write(repo.join("ignored.txt"), "no\n").unwrap();

    let piece = load_str(
        "\
name: scoped
initial_step: review
steps:
  - name: review
    persona: reviewer
    edit: false
    instruction: |
      Review only these files.
      {review_scope}
    rules:
      - condition: Approved
        next: COMPLETE
",
        Path::new("scoped.yaml"),
        &LoadOptions::default(),
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .piece;
    let server = ScriptedLlm::start(vec![Turn::text("Fine.\n[REVIEW:1]")]).await;
    let provider: Arc<dyn Provider> = Arc::new(
        OpenAiCompat::new(OpenAiConfig::new(server.base_url()).with_retry(fast_retries())).unwrap(),
    );
    let engine = Engine::new(
        provider,
        Registry::builtin(ToolsConfig::default()),
        engine_config(),
    );
    let record = RunRecord::create(&dir.path().join("runs"), Some(&repo)).unwrap();
    let report = engine
        .run(Arc::new(piece), "Review the change.", record, vec![])
        .await
        .unwrap();
    assert_eq!(report.status.to_string(), "completed");
    let prompt = messages_text(&server.requests()[0]);
    let listed: Vec<&str> = prompt
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter(|l| l.ends_with(".txt") || *l == ".gitignore")
        .collect();
    assert_eq!(
        listed,
        vec![".gitignore", "committed.txt", "edited.txt", "untracked.txt"],
        "{prompt}"
    );
    assert!(
        prompt.contains("Files changed by this task (committed since"),
        "{prompt}"
    );
    assert!(!prompt.contains("{review_scope}"), "{prompt}");
}
