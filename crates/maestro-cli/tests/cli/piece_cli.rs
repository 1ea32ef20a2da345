//! `maestro validate`, `maestro prompt` and `maestro pieces`, run as the real binary.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use pretty_assertions::assert_eq;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures")
        .canonicalize()
        .unwrap()
}

fn takt_pieces() -> PathBuf {
    fixtures().join("takt-v0.30/builtins/en/pieces")
}

fn maestro(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("maestro").unwrap();
    // Keep the user's own ~/.maestro facets out of the picture.
    cmd.env("HOME", home).current_dir(home);
    cmd
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Out {
    let output = cmd.output().unwrap();
    Out {
        code: output.status.code().unwrap(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

const BROKEN: &str = "\
dialect: maestro
name: broken
description: A piece with a wrong target.
max_movements: 5
initial_movement: plan
movements:
  - name: plan
    edit: false
    persona: You plan.
    instruction: Plan the work.
    allowed_tools: [Read]
    rules:
      - condition: planned
        next: execute
  - name: execute
    edit: true
    persona: You execute.
    instruction: Do the work.
    allowed_tools: [Read, Write]
    rules:
      - condition: done
        next: deploy
";

#[test]
fn validate_accepts_every_fixture() {
    let home = tempfile::tempdir().unwrap();
    let out = run(maestro(home.path())
        .arg("validate")
        .arg("--quiet")
        .arg(takt_pieces())
        .arg(fixtures().join("workflow-graph")));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.ends_with("35 files: 35 valid, 0 invalid\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("debate.yaml (graph, 2 movements)"),
        "{}",
        out.stdout
    );
}

#[test]
fn validate_rejects_a_broken_piece_with_position_path_and_snippet() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.yaml");
    std::fs::write(&file, BROKEN).unwrap();
    let out = run(maestro(dir.path()).arg("validate").arg("broken.yaml"));
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stdout,
        "invalid  broken.yaml (maestro, 1 error)\n1 file: 0 valid, 1 invalid\n"
    );
    insta::assert_snapshot!("validate_broken_human", out.stderr);
}

#[test]
fn validate_json_prints_one_object_per_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("broken.yaml"), BROKEN).unwrap();
    std::fs::copy(
        fixtures().join("workflow-graph/debate.yaml"),
        dir.path().join("debate.yml"),
    )
    .unwrap();
    let out = run(maestro(dir.path()).args(["validate", "--json", "."]));
    assert_eq!(out.code, 1, "{}", out.stderr);
    let lines: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![
            serde_json::json!({
                "file": "./broken.yaml",
                "valid": false,
                "dialect": "maestro",
                "errors": [{
                    "path": "movements[1].rules[0].next",
                    "line": 22,
                    "column": 15,
                    "message": "unknown movement `deploy`; known: plan, execute, WAIT_SUBTASKS",
                }],
                "warnings": [],
            }),
            serde_json::json!({
                "file": "./debate.yml",
                "valid": true,
                "dialect": "graph",
                "errors": [],
                "warnings": [],
            }),
        ]
    );
}

#[test]
fn validate_dialect_flag_overrides_detection() {
    let home = tempfile::tempdir().unwrap();
    let out = run(maestro(home.path())
        .args(["validate", "--json", "--dialect", "maestro"])
        .arg(takt_pieces().join("magi.yaml")));
    assert_eq!(out.code, 1);
    let line: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(line["dialect"], "maestro");
    assert_eq!(
        line["errors"][0]["message"],
        "unknown field `piece_config` in a maestro piece; known: name, description, max_movements, initial_movement, triggers, required_mcp, model, budget, movements, dialect"
    );
}

#[test]
fn validate_usage_and_io_errors_exit_2() {
    let home = tempfile::tempdir().unwrap();
    let missing = run(maestro(home.path()).args(["validate", "no-such-piece.yaml"]));
    assert_eq!(missing.code, 2);
    assert_eq!(
        missing.stderr,
        "error: no-such-piece.yaml: no such file or directory\n"
    );
    assert_eq!(run(maestro(home.path()).arg("validate")).code, 2);
    assert_eq!(
        run(maestro(home.path()).args(["validate", "--dialect", "yaml", "x.yaml"])).code,
        2
    );
    let empty = run(maestro(home.path()).args(["validate", "."]));
    assert_eq!(empty.code, 2);
}

#[test]
fn prompt_shows_what_the_takt_plan_movement_gets() {
    let home = tempfile::tempdir().unwrap();
    let out = run(maestro(home.path())
        .args([
            "prompt",
            "--movement",
            "plan",
            "--task",
            "Add a --verbose flag to the CLI.",
        ])
        .arg(takt_pieces().join("default.yaml")));
    assert_eq!(out.code, 0, "{}", out.stderr);
    insta::assert_snapshot!("prompt_takt_default_plan", out.stdout);
}

#[test]
fn prompt_shows_what_the_first_graph_role_gets() {
    let home = tempfile::tempdir().unwrap();
    let out = run(maestro(home.path())
        .args([
            "prompt",
            "--movement",
            "against",
            "--task",
            "Remote work beats office work.",
        ])
        .arg(fixtures().join("workflow-graph/debate.yaml")));
    assert_eq!(out.code, 0, "{}", out.stderr);
    insta::assert_snapshot!("prompt_graph_debate_against", out.stdout);
}

#[test]
fn prompt_names_the_known_movements_when_one_is_unknown() {
    let home = tempfile::tempdir().unwrap();
    let out = run(maestro(home.path())
        .args(["prompt", "--movement", "deploy", "--task", "x"])
        .arg(takt_pieces().join("magi.yaml")));
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr,
        "error: piece `magi` has no movement `deploy`; known: melchior, balthasar, casper\n"
    );
}

#[test]
fn pieces_lists_name_dialect_count_and_description() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("broken.yaml"),
        BROKEN.replace("dialect: maestro\n", ""),
    )
    .unwrap();
    std::fs::copy(
        fixtures().join("workflow-graph/debate.yaml"),
        dir.path().join("debate.yaml"),
    )
    .unwrap();
    std::fs::copy(
        takt_pieces().join("magi.yaml"),
        dir.path().join("magi.yaml"),
    )
    .unwrap();
    let out = run(maestro(dir.path()).args(["pieces", "."]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "\
NAME    DIALECT  MOVEMENTS  DESCRIPTION
broken  maestro          -  INVALID (1 error; run `maestro validate ./broken.yaml`)
debate  graph            2  Structured debate between two sides. Tests cross-process session resume.
magi    takt             3  MAGI Deliberation System - Analyze from 3 perspectives and decide by majority
"
    );
}

#[test]
fn validate_searches_extra_facet_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let piece = "\
name: helper
max_movements: 2
initial_movement: help
movements:
  - name: help
    edit: false
    persona: helper
    instruction: Help with {task}.
    rules:
      - condition: done
        next: COMPLETE
";
    std::fs::create_dir_all(dir.path().join("pieces")).unwrap();
    std::fs::write(dir.path().join("pieces/helper.yaml"), piece).unwrap();
    std::fs::create_dir_all(dir.path().join("extra/personas")).unwrap();
    std::fs::write(dir.path().join("extra/personas/helper.md"), "You help.").unwrap();
    let warnings = |extra: &[&str]| -> usize {
        let out = run(maestro(dir.path())
            .args(["validate", "--json"])
            .args(extra)
            .arg("pieces/helper.yaml"));
        assert_eq!(out.code, 0, "{}", out.stderr);
        let line: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
        line["warnings"].as_array().unwrap().len()
    };
    assert_eq!(warnings(&[]), 1, "the persona name resolves nowhere");
    assert_eq!(warnings(&["--facets-dir", "extra"]), 0);
}

/// A misspelled tool is an error with a suggestion; a real tool this configuration does not
/// set up (web search without a provider, SSH without connections, a tool not built yet) is a
/// warning and the piece stays valid.
#[test]
fn validate_reports_unknown_and_unconfigured_tools() {
    let dir = tempfile::tempdir().unwrap();
    let piece = "\
name: research
description: Look things up.
max_movements: 4
initial_movement: look
movements:
  - name: look
    edit: false
    persona: You research.
    instruction: Find out.
    allowed_tools: [Read, Glbo, WebSearch, SshExec, BrowseWeb]
    allowed_ssh_connections: ['*']
    rules: []
";
    std::fs::write(dir.path().join("research.yaml"), piece).unwrap();
    let out = run(maestro(dir.path()).args(["validate", "research.yaml"]));
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "invalid  research.yaml (maestro, 1 error)\n1 file: 0 valid, 1 invalid\n"
    );
    insta::assert_snapshot!("validate_unknown_tool_human", out.stderr);

    // Configured, the same tools are valid without a warning.
    std::fs::write(
        dir.path().join("research.yaml"),
        piece.replace("Glbo", "Glob"),
    )
    .unwrap();
    let out = run(maestro(dir.path()).args(["validate", "--json", "research.yaml"]));
    let line: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!((out.code, line["valid"].as_bool()), (0, Some(true)));
    assert_eq!(line["warnings"].as_array().unwrap().len(), 2, "{line}");
    std::fs::write(
        dir.path().join("config.yaml"),
        "web:\n  search:\n    searxng_url: http://127.0.0.1:9\nssh:\n  connections:\n    - id: 0b6f1c2e-4d3a-4f5e-9a8b-7c6d5e4f3a2b\n      name: box\n      host: 127.0.0.1\n      user: me\n      auth:\n        password: x\n      insecure_accept_any_host_key: true\n",
    )
    .unwrap();
    let out = run(maestro(dir.path()).args([
        "validate",
        "--json",
        "--config",
        "config.yaml",
        "research.yaml",
    ]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let line: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let warnings: Vec<&str> = line["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["message"].as_str().unwrap())
        .collect();
    // BrowseWeb needs no configuration: it is offered either way.
    assert_eq!(warnings, Vec::<&str>::new());
}

/// A TAKT project runs unchanged: its facets in `.takt/facets/<kind>/` and the user's
/// `~/.takt/facets/<kind>/` (or `$TAKT_CONFIG_DIR/facets/<kind>/`) are found.
#[test]
fn takt_facet_directories_reach_the_prompt() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    let write = |path: PathBuf, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        project.join("pieces/review.yaml"),
        "\
name: review
max_movements: 2
initial_movement: review
movements:
  - name: review
    edit: false
    persona: takt-reviewer
    policy: team-rules
    instruction: Review {task}.
    rules:
      - condition: done
        next: COMPLETE
",
    );
    write(
        project.join(".takt/facets/personas/takt-reviewer.md"),
        "You are the project's TAKT reviewer.",
    );
    write(
        home.path().join(".takt/facets/policies/team-rules.md"),
        "Follow the user's TAKT team rules.",
    );
    let prompt = |extra_env: Option<(&str, &Path)>| {
        let mut cmd = maestro(home.path());
        cmd.current_dir(&project).args([
            "prompt",
            "pieces/review.yaml",
            "--movement",
            "review",
            "--task",
            "the patch",
        ]);
        if let Some((key, value)) = extra_env {
            cmd.env(key, value);
        }
        run(&mut cmd)
    };
    let out = prompt(None);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("You are the project's TAKT reviewer.")
            && out.stdout.contains("Follow the user's TAKT team rules."),
        "{}",
        out.stdout
    );
    // `$TAKT_CONFIG_DIR` replaces `~/.takt`, as in TAKT.
    let elsewhere = home.path().join("takt-config");
    write(
        elsewhere.join("facets/policies/team-rules.md"),
        "Rules from TAKT_CONFIG_DIR.",
    );
    let out = prompt(Some(("TAKT_CONFIG_DIR", &elsewhere)));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("Rules from TAKT_CONFIG_DIR."),
        "{}",
        out.stdout
    );
}

/// `maestro validate … | head -1`: when the reader goes away, the command stops quietly (by
/// SIGPIPE, as `ls` does) rather than panicking on the closed pipe.
#[test]
fn a_listing_whose_reader_went_away_stops_quietly() {
    use std::os::unix::process::ExitStatusExt as _;
    use std::process::Stdio;

    let home = tempfile::tempdir().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("maestro");
    let mut child = std::process::Command::new(bin)
        .args(["validate", "--json"])
        .arg(takt_pieces())
        .env("HOME", home.path())
        .current_dir(home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader closes its end before the command writes a byte.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
}

/// A piece is text from outside too: whoever wrote it, `validate`, `pieces` and `prompt` print
/// its control characters escaped, in the excerpt, the message and the listing alike, so a
/// piece cannot retitle the window or rewrite what the terminal shows.
#[test]
fn control_characters_in_a_piece_never_reach_the_terminal_raw() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("mine");
    std::fs::create_dir(&dir).unwrap();
    let valid = "name: shown\n\
                 description: \"red \\e[31mRED\\e[0m title \\e]0;PWNED\\a end\"\n\
                 max_movements: 2\n\
                 initial_movement: work\n\
                 movements:\n  \
                 - name: work\n    \
                 edit: false\n    \
                 persona: \"You \\e[2J work.\"\n    \
                 instruction: \"Do it.\"\n    \
                 allowed_tools: []\n    \
                 rules: []\n    \
                 default_next: ABORT\n";
    std::fs::write(dir.join("shown.yaml"), valid).unwrap();
    std::fs::write(
        dir.join("broken.yaml"),
        "name: \"x\\e]0;PWNED\\a\"\nmovements: 3\n",
    )
    .unwrap();
    let raw = |s: &str| s.contains('\u{1b}') || s.contains('\u{7}');

    let listed = run(maestro(home.path()).arg("pieces").arg(&dir));
    assert!(listed.stdout.contains("shown"), "{}", listed.stdout);
    assert!(!raw(&listed.stdout), "{:?}", listed.stdout);
    assert!(
        listed.stdout.contains("\\x1b]0;PWNED\\x07"),
        "{}",
        listed.stdout
    );

    let checked = run(maestro(home.path()).arg("validate").arg(&dir));
    assert_eq!(checked.code, 1, "{}", checked.stderr);
    assert!(checked.stderr.contains("PWNED"), "{}", checked.stderr);
    assert!(
        !raw(&checked.stderr) && !raw(&checked.stdout),
        "{:?}",
        checked.stderr
    );

    let prompt = run(maestro(home.path())
        .arg("prompt")
        .arg(dir.join("shown.yaml"))
        .args(["--movement", "work", "--task", "t"]));
    assert_eq!(prompt.code, 0, "{}", prompt.stderr);
    assert!(
        prompt.stdout.contains("You \\x1b[2J work."),
        "{}",
        prompt.stdout
    );
    assert!(!raw(&prompt.stdout), "{:?}", prompt.stdout);
}

/// A piece file that does not load is passed over with a note that says so and how to see why,
/// when a run looks for a piece by name among its neighbours.
#[test]
fn a_piece_passed_over_is_named_with_how_to_see_why() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("mine");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("broken.yaml"), "name: broken\nmovements: 3\n").unwrap();
    let out = run(maestro(home.path())
        .args(["run", "missing", "--task", "t", "--pieces-dir"])
        .arg(&dir)
        .args(["--llm-base-url", "http://127.0.0.1:9/v1", "--model", "m"]));
    assert_eq!(out.code, 2, "{}", out.stderr);
    let broken = dir.join("broken.yaml");
    assert!(
        out.stderr.contains(&format!(
            "note: skipping {}: it does not load (",
            broken.display()
        )) && out.stderr.contains(&format!(
            "`maestro validate {}` shows them",
            broken.display()
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("no piece file or piece named `missing`"),
        "{}",
        out.stderr
    );
}

/// `pieces` and `prompt` judge a piece by the same tool catalogue as `validate`: a piece that
/// names a tool that does not exist is listed as invalid, and has no prompt.
#[test]
fn pieces_and_prompt_refuse_an_unknown_tool_as_validate_does() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("mine");
    std::fs::create_dir(&dir).unwrap();
    let explore = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../pieces/explore.yaml"),
    )
    .unwrap();
    let bad = explore.replace("[Glob, Grep, Read]", "[Glob, Grepp, Read]");
    assert_ne!(bad, explore);
    std::fs::write(dir.join("bad.yaml"), bad).unwrap();
    let listed = run(maestro(home.path()).arg("pieces").arg(&dir));
    assert!(
        listed.stdout.contains("INVALID (1 error"),
        "{}",
        listed.stdout
    );
    let prompt = run(maestro(home.path())
        .arg("prompt")
        .arg(dir.join("bad.yaml"))
        .args(["--movement", "investigate", "--task", "t"]));
    assert_eq!(prompt.code, 1, "{}", prompt.stderr);
    assert!(
        prompt.stderr.contains("unknown tool `Grepp`"),
        "{}",
        prompt.stderr
    );
}

/// A TAKT workflow of the project, named as `maestro run` and `maestro pieces` name it.
fn project_with_caller_workflow() -> (tempfile::TempDir, PathBuf) {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".takt/workflows");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("caller.yaml");
    std::fs::write(
        &file,
        "name: caller\ndescription: Calls nobody.\nmax_steps: 3\ninitial_step: implement\nsteps:\n  - name: implement\n    persona: coder\n    instruction: Implement it.\n    rules:\n      - condition: done\n        next: COMPLETE\n",
    )
    .unwrap();
    (home, file)
}

/// `prompt NAME` finds a workflow of the project's `.takt/workflows/` by name, as `run` does.
#[test]
fn prompt_finds_a_project_workflow_by_name() {
    let (home, _) = project_with_caller_workflow();
    let listed = run(maestro(home.path()).arg("pieces"));
    assert!(listed.stdout.contains("caller"), "{}", listed.stdout);
    let out = run(maestro(home.path()).args([
        "prompt",
        "caller",
        "--movement",
        "implement",
        "--task",
        "Add a --verbose flag.",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("===== system =====\n")
            && out.stdout.contains("Add a --verbose flag."),
        "{}",
        out.stdout
    );
}

/// `validate NAME` checks the file the name resolves to, and says which file that is.
#[test]
fn validate_checks_the_file_a_piece_name_resolves_to() {
    let (home, file) = project_with_caller_workflow();
    let out = run(maestro(home.path()).args(["validate", "caller"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "valid    {} (takt, 1 movement)\n1 file: 1 valid, 0 invalid\n",
            file.display()
        )
    );
    // A builtin workflow by name, as `run` finds it last.
    let builtin = run(maestro(home.path()).args(["validate", "--quiet", "default-mini"]));
    assert_eq!(builtin.code, 0, "{}{}", builtin.stdout, builtin.stderr);
    assert!(
        builtin
            .stdout
            .starts_with("valid    builtin:takt-v0.60/en/workflows/default-mini.yaml (takt, "),
        "{}",
        builtin.stdout
    );
    // A workflow of that name that does not load is checked, to show why.
    let broken = file.with_file_name("broken.yaml");
    std::fs::write(&broken, "name: broken\nmovements: 3\n").unwrap();
    let out = run(maestro(home.path()).args(["validate", "broken"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .starts_with(&format!("invalid  {} (", broken.display())),
        "{}",
        out.stdout
    );
}

/// An unknown name gets `run`'s not-found error, listing what is known, from both commands.
#[test]
fn prompt_and_validate_refuse_an_unknown_name_as_run_does() {
    let (home, _) = project_with_caller_workflow();
    let prompt = run(maestro(home.path()).args([
        "prompt",
        "callr",
        "--movement",
        "implement",
        "--task",
        "t",
    ]));
    assert_eq!(prompt.code, 2, "{}", prompt.stderr);
    assert!(
        prompt
            .stderr
            .contains("no piece file or piece named `callr` (searched ")
            && prompt.stderr.contains("known pieces: caller"),
        "{}",
        prompt.stderr
    );
    let validate = run(maestro(home.path()).args(["validate", "callr"]));
    assert_eq!(validate.code, 2, "{}", validate.stderr);
    assert!(
        validate
            .stderr
            .contains("no piece file or piece named `callr` (searched ")
            && validate.stderr.contains("known pieces: caller"),
        "{}",
        validate.stderr
    );
}
