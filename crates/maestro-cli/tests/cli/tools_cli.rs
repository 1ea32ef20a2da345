//! `maestro tools list` and `maestro tools call`: one JSON object out, exit code 0 / 1 / 2.

use assert_cmd::Command;
use serde_json::{Value, json};

fn maestro() -> Command {
    Command::cargo_bin("maestro").unwrap()
}

fn call(workspace: &std::path::Path, args: &[&str]) -> (i32, Value) {
    let out = maestro()
        .args(["tools", "call"])
        .args(args)
        .arg("--workspace")
        .arg(workspace)
        .env("MAESTRO_API_KEY", "sk-cli-secret")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "exactly one JSON line: {stdout}");
    (
        out.status.code().unwrap(),
        serde_json::from_str(&stdout).unwrap(),
    )
}

#[test]
fn list_names_every_builtin_tool() {
    let out = maestro().args(["tools", "list"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for tool in [
        "Read",
        "Write",
        "Edit",
        "Glob",
        "Grep",
        "Bash",
        "SQLite",
        "CreateChecklist",
        "CheckItem",
        "GetChecklist",
        "ListPieces",
        "GetPiece",
        "CreatePiece",
        "UpdatePiece",
        "ReadToolDoc",
    ] {
        assert!(names.contains(&tool), "{tool} missing from:\n{text}");
    }
    let out = maestro()
        .args(["tools", "list", "--json"])
        .output()
        .unwrap();
    let specs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let read = specs.iter().find(|s| s["name"] == "Read").unwrap();
    assert_eq!(read["input_schema"]["required"], json!(["file_path"]));
}

#[test]
fn call_prints_ok_output_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let (code, out) = call(
        &ws,
        &[
            "Write",
            "--edit",
            "--input",
            r#"{"file_path":"output/a.txt","content":"hi\n"}"#,
        ],
    );
    assert_eq!(
        (code, out),
        (
            0,
            json!({"ok": true, "output": "created `output/a.txt` (3 bytes)", "error": null})
        )
    );
    let (code, out) = call(&ws, &["Read", "--input", r#"{"file_path":"output/a.txt"}"#]);
    assert_eq!(
        (code, out),
        (
            0,
            json!({"ok": true, "output": "     1\thi\n", "error": null})
        )
    );
    assert!(ws.join("input").is_dir() && ws.join("skills").is_dir());
}

#[test]
fn tool_failures_exit_one_with_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let (code, out) = call(
        ws,
        &[
            "Write",
            "--input",
            r#"{"file_path":"output/a.txt","content":"x"}"#,
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(out["ok"], false);
    assert_eq!(out["output"], Value::Null);
    assert!(
        out["error"].as_str().unwrap()
            == "`Write` changes files, so it is called only as a movement with `edit: true` \
                would call it: add --edit",
        "{out}"
    );
    let (code, out) = call(ws, &["Nope", "--input", "{}"]);
    assert_eq!(
        (code, out["error"].as_str().unwrap()),
        (
            1,
            "unknown tool `Nope`; the tools you can call here are: Read, Glob, Grep, Bash, SQLite, CreateChecklist, CheckItem, GetChecklist, ListPieces, GetPiece, ReadToolDoc, WebFetch, DownloadFile, ReadDocx, ReadExcel, ReadPPTX, ReadPdf, PdfToImages, ReadImage, BrowseWeb; with --edit also Write, Edit, MergeReviewedResults, SplitPdf, AnnotateImage"
        )
    );
    let (code, out) = call(ws, &["Read", "--input", "{not json"]);
    assert_eq!(code, 1);
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .starts_with("the arguments for `Read` are not valid JSON"),
        "{out}"
    );
}

/// The unknown-tool error lists what can really be called here: the tools the configuration
/// sets up (web search, a pieces directory), the edit tools with `--edit`, and the MCP servers
/// not started for this call; a close name comes first.
#[test]
fn unknown_tools_list_what_this_configuration_can_call() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "tools:\n  pieces_dir: \"{}\"\nweb:\n  search:\n    searxng_url: http://127.0.0.1:9\nmcp:\n  servers:\n    calc:\n      command: /nonexistent/calc\n",
            dir.path().join("pieces").display()
        ),
    )
    .unwrap();
    let ws = dir.path().join("ws");
    let (code, out) = call(
        &ws,
        &["WebSerch", "--edit", "--config", config.to_str().unwrap()],
    );
    assert_eq!(
        (code, out["error"].as_str().unwrap()),
        (
            1,
            "unknown tool `WebSerch`; did you mean `WebSearch`? the tools you can call here are: Read, Write, Edit, Glob, Grep, Bash, SQLite, CreateChecklist, CheckItem, GetChecklist, ListPieces, GetPiece, CreatePiece, UpdatePiece, ReadToolDoc, MergeReviewedResults, WebFetch, DownloadFile, WebSearch, ReadDocx, ReadExcel, ReadPPTX, ReadPdf, PdfToImages, SplitPdf, ReadImage, AnnotateImage, BrowseWeb; and the tools of the MCP servers calc (`maestro tools list` names them)"
        )
    );
}

#[test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
fn bash_goes_through_the_sandbox_and_the_allowlist() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let (code, out) = call(
        ws,
        &[
            "Bash",
            "--bash-sandbox",
            "always",
            "--allowed-commands",
            "echo,cat",
            "--input",
            r#"{"command":"echo \"[$MAESTRO_API_KEY]\"; cat /etc/shadow"}"#,
        ],
    );
    assert_eq!(code, 1);
    let error = out["error"].as_str().unwrap();
    assert!(
        error.starts_with("[]\ncat: /etc/shadow: No such file or directory\n[exit code: 1]"),
        "{out}"
    );
    let (code, out) = call(
        ws,
        &[
            "Bash",
            "--allowed-commands",
            "echo",
            "--input",
            r#"{"command":"sh -c 'echo hi'"}"#,
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(
        out["error"],
        "command refused: `sh` is a shell: it runs any command, so an allowlist cannot limit what it does; it runs only when the movement's allowed_commands contains `*` (any program, any options; the command still runs inside the sandbox)"
    );
}

#[test]
fn the_scratch_file_carries_the_checklist_between_calls() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("scratch.json");
    let s = scratch.to_str().unwrap();
    let (code, _) = call(
        dir.path(),
        &[
            "CreateChecklist",
            "--scratch",
            s,
            "--input",
            r#"{"items":["a","b"]}"#,
        ],
    );
    assert_eq!(code, 0);
    let (_, _) = call(
        dir.path(),
        &["CheckItem", "--scratch", s, "--input", r#"{"index":2}"#],
    );
    let (code, out) = call(dir.path(), &["GetChecklist", "--scratch", s]);
    assert_eq!(
        (code, out["output"].as_str().unwrap()),
        (0, "checklist: 1/2 done\n1. [ ] a\n2. [x] b\n")
    );
}

#[test]
fn usage_errors_exit_two() {
    let out = maestro().args(["tools", "call", "Read"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The operator sees which sandbox `Bash` runs in, at the default log level: bubblewrap as
/// information, the landlock fallback as a warning.
#[test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
fn the_chosen_sandbox_is_logged_once() {
    for (mode, expected) in [
        ("always", "Bash sandbox: bubblewrap + seccomp"),
        ("off", "Bash sandbox: landlock + seccomp"),
        ("unsafe-no-sandbox", "Bash sandbox: NO SANDBOX"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = maestro()
            .args(["tools", "call", "Bash", "--bash-sandbox", mode])
            .args(["--allowed-commands", "echo", "--input"])
            .arg(r#"{"command":"echo hi"}"#)
            .arg("--workspace")
            .arg(dir.path())
            .env_remove("MAESTRO_LOG")
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.matches(expected).count(), 1, "{mode}: {stderr}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(stdout.contains("hi"), "{mode}: {stdout}");
    }
}
