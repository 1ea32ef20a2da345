//! `maestro validate`, `maestro prompt` and `maestro pieces` on TAKT v0.60 workflows.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn workflows() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/takt-v0.60/builtins/en/workflows")
}

fn maestro(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("maestro").unwrap();
    // Keep the user's own ~/.maestro and ~/.takt out of the picture.
    cmd.env("HOME", home)
        .env_remove("TAKT_CONFIG_DIR")
        .current_dir(home);
    cmd
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let output = cmd.output().unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn validate_accepts_every_v060_builtin_workflow() {
    let home = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run(maestro(home.path()).arg("validate").arg(workflows()));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.ends_with("64 files: 64 valid, 0 invalid\n"),
        "{stdout}"
    );
    // The only warnings: the effects Maestro refuses, by name.
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(
        warnings,
        vec![
            "warning: the effect `close_pr` needs a Git host's pull requests, which Maestro does not have: it is checked here, and a run that reaches it ends with an error naming `close_pr`",
            "warning: the effect `merge_pr` needs a Git host's pull requests, which Maestro does not have: it is checked here, and a run that reaches it ends with an error naming `merge_pr`",
        ],
        "{stderr}"
    );
}

/// A project holding one workflow in `.takt/workflows/`: the rest comes from the builtins
/// inside the binary.
fn project_with(name: &str) -> tempfile::TempDir {
    let project = tempfile::tempdir().unwrap();
    let dir = project.path().join(".takt/workflows");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        workflows().join(format!("{name}.yaml")),
        dir.join(format!("{name}.yaml")),
    )
    .unwrap();
    project
}

#[test]
fn prompt_shows_what_a_workflow_step_gets() {
    let project = project_with("simple-core");
    let (code, stdout, stderr) = run(maestro(project.path()).args([
        "prompt",
        "--movement",
        "plan",
        "--task",
        "Add a --verbose flag to the CLI.",
        ".takt/workflows/simple-core.yaml",
    ]));
    assert_eq!(code, 0, "{stderr}");
    insta::assert_snapshot!("prompt_workflow_simple_core_plan", stdout);
}

#[test]
fn pieces_lists_the_projects_takt_workflows() {
    let project = project_with("simple");
    let (code, stdout, stderr) = run(maestro(project.path()).arg("pieces"));
    assert_eq!(code, 0, "{stderr}");
    // Once, though the project is also the home directory here.
    let listed: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("simple "))
        .collect();
    assert_eq!(listed.len(), 1, "{stdout}");
    assert!(listed[0].contains(" takt "), "{stdout}");
}

#[test]
fn pieces_lists_the_builtin_workflows_a_user_may_run_and_prompt_shows_one() {
    let empty = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run(maestro(empty.path()).args(["pieces", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let backend = rows
        .iter()
        .find(|r| r["name"] == "backend")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(
        backend["file"],
        "builtin:takt-v0.60/en/workflows/backend.yaml"
    );
    assert_eq!(backend["dialect"], "takt");
    // Internal workflows are only called, as in TAKT's own list.
    assert!(
        !rows.iter().any(|r| r["name"] == "development-core"),
        "{stdout}"
    );
    // A builtin runs by name: `maestro prompt` finds it the way `maestro run` does.
    let (code, stdout, stderr) = run(maestro(empty.path()).args([
        "prompt",
        "audit-unit",
        "--movement",
        "plan",
        "--task",
        "Add a flag.",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("Add a flag."), "{stdout}");
}

/// `--movement CALLER/STEP` shows a step of a called workflow as a run sends it: the
/// `workflow_call` step `develop` of `default-mini` runs `mini-core`, whose `plan` runs as
/// `develop/plan`.
#[test]
fn prompt_shows_a_step_of_a_called_workflow_by_its_path() {
    let empty = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run(maestro(empty.path()).args([
        "prompt",
        "default-mini",
        "--movement",
        "develop/plan",
        "--task",
        "Add a flag.",
    ]));
    assert_eq!(code, 0, "{stderr}");
    insta::assert_snapshot!("prompt_workflow_default_mini_develop_plan", stdout);
    // A path that leads nowhere names the paths there are.
    let (code, _, stderr) = run(maestro(empty.path()).args([
        "prompt",
        "default-mini",
        "--movement",
        "develop/plam",
        "--task",
        "x",
    ]));
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with(
            "error: piece `default-mini` has no movement `develop/plam`; known: develop, develop/plan, develop/implement, develop/reviewers, "
        ),
        "{stderr}"
    );
}

/// A `workflow_call` step, a parallel parent and a system step make no model call:
/// `maestro prompt` says so and lists the steps they run, each with the command that shows
/// its prompt.
#[test]
fn prompt_says_which_steps_make_no_model_call_and_what_they_run() {
    let empty = tempfile::tempdir().unwrap();
    for (piece, movement, snapshot) in [
        (
            "default-mini",
            "develop",
            "prompt_workflow_default_mini_develop",
        ),
        (
            "default-mini",
            "develop/reviewers",
            "prompt_workflow_default_mini_develop_reviewers",
        ),
        (
            "auto-improvement-loop",
            "route_context",
            "prompt_workflow_auto_improvement_loop_route_context",
        ),
    ] {
        let (code, stdout, stderr) = run(maestro(empty.path()).args([
            "prompt",
            piece,
            "--movement",
            movement,
            "--task",
            "Add a flag.",
        ]));
        assert_eq!(code, 0, "{stderr}");
        assert!(!stdout.contains("===== system ====="), "{stdout}");
        insta::assert_snapshot!(snapshot, stdout);
    }
}
