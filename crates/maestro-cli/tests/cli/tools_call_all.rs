//! `maestro tools call` for the tools `tools_cli.rs` and `toolbox_cli.rs` do not call by hand:
//! Glob, Grep, Edit, SQLite, ReadToolDoc, the pieces tools, the skills tools, DownloadFile and
//! WebSearch (against a web server on 127.0.0.1). Each checks what the tool did, not only that
//! it answered.

use std::path::Path;

use serde_json::{Value, json};

use crate::support;
use support::{CSV, Web, call, error_output, maestro, ok_output, write_config};

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn glob_and_grep_find_workspace_files_and_lines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(&d.join("ws/input/a.txt"), "alpha\nbeta gamma\n");
    write(&d.join("ws/input/sub/b.md"), "gamma ray\nno match\n");
    write(&d.join("ws/output/c.md"), "delta\n");

    let out = ok_output(call(d, "Glob", json!({"pattern": "input/**/*.md"}), &[]).await);
    assert_eq!(out, "input/sub/b.md\n");
    let out = ok_output(call(d, "Glob", json!({"pattern": "**/*.md"}), &[]).await);
    let mut found: Vec<&str> = out.lines().collect();
    found.sort();
    assert_eq!(found, ["input/sub/b.md", "output/c.md"]);

    let out = ok_output(call(d, "Grep", json!({"pattern": "gam+a", "path": "input"}), &[]).await);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        ["input/a.txt:2:beta gamma", "input/sub/b.md:1:gamma ray"]
    );
    let out = ok_output(
        call(
            d,
            "Grep",
            json!({"pattern": "GAMMA", "glob": "*.md", "ignore_case": true}),
            &[],
        )
        .await,
    );
    assert_eq!(out, "input/sub/b.md:1:gamma ray\n");
    let error = error_output(call(d, "Grep", json!({"pattern": "("}), &[]).await);
    assert!(error.contains("regular expression"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn edit_changes_only_writable_files_and_only_with_edit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(&d.join("ws/output/notes.md"), "one beta\ntwo beta\n");
    write(&d.join("ws/input/given.md"), "beta\n");
    let notes = d.join("ws/output/notes.md");
    let first = json!({"file_path": "output/notes.md", "old_string": "one beta", "new_string": "one gamma"});

    let error = error_output(call(d, "Edit", first.clone(), &[]).await);
    assert!(
        error.starts_with("`Edit` changes files") && error.ends_with("add --edit"),
        "{error}"
    );
    assert_eq!(read(&notes), "one beta\ntwo beta\n");

    let out = ok_output(call(d, "Edit", first, &["--edit"]).await);
    assert_eq!(out, "replaced 1 occurrence in `output/notes.md`");
    assert_eq!(read(&notes), "one gamma\ntwo beta\n");

    let ambiguous = json!({"file_path": "output/notes.md", "old_string": "o", "new_string": "0"});
    let error = error_output(call(d, "Edit", ambiguous, &["--edit"]).await);
    assert!(error.contains("replace_all"), "{error}");
    let all = json!({"file_path": "output/notes.md", "old_string": "o", "new_string": "0", "replace_all": true});
    ok_output(call(d, "Edit", all, &["--edit"]).await);
    assert_eq!(read(&notes), "0ne gamma\ntw0 beta\n");

    let missing = json!({"file_path": "output/notes.md", "old_string": "zeta", "new_string": "x"});
    let error = error_output(call(d, "Edit", missing, &["--edit"]).await);
    assert!(
        error.starts_with("old_string was not found in `output/notes.md`"),
        "{error}"
    );

    let outside = json!({"file_path": "input/given.md", "old_string": "beta", "new_string": "x"});
    let error = error_output(call(d, "Edit", outside, &["--edit"]).await);
    assert!(error.contains("may write only under `output/`"), "{error}");
    assert_eq!(read(&d.join("ws/input/given.md")), "beta\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_writes_with_edit_and_reads_rows_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sql = |query: &str| json!({"database": "output/d.db", "query": query});

    ok_output(
        call(
            d,
            "SQLite",
            sql("CREATE TABLE t(n TEXT, v INT)"),
            &["--edit"],
        )
        .await,
    );
    let out = ok_output(
        call(
            d,
            "SQLite",
            sql("INSERT INTO t VALUES ('x', 1), ('y', 2)"),
            &["--edit"],
        )
        .await,
    );
    assert_eq!(out, "ok; 2 row(s) changed");
    assert!(d.join("ws/output/d.db").is_file());

    // Without --edit the database opens read-only: reading works, writing is refused.
    let error = error_output(call(d, "SQLite", sql("DELETE FROM t"), &[]).await);
    assert!(error.contains("read-only"), "{error}");
    let out = ok_output(call(d, "SQLite", sql("SELECT n, v FROM t ORDER BY v"), &[]).await);
    let rows: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows, json!([{"n": "x", "v": 1}, {"n": "y", "v": 2}]));

    let error = error_output(call(d, "SQLite", sql("SELECT nope FROM t"), &[]).await);
    assert!(error.contains("no such column: nope"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn read_tool_doc_documents_every_listed_tool() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = ok_output(call(d, "ReadToolDoc", json!({"tool": "Grep"}), &[]).await);
    assert!(out.starts_with("# Grep\n"), "{out}");
    assert!(out.contains("| `pattern` | string | yes |"), "{out}");

    // The error names every documented tool; every tool `maestro tools list` shows is among them.
    let error = error_output(call(d, "ReadToolDoc", json!({"tool": "Nope"}), &[]).await);
    let (_, documented) = error.split_once("documented tools: ").unwrap();
    let documented: Vec<&str> = documented.split(", ").collect();
    let listed = maestro(d, support::args(&["tools", "list", "--json"])).await;
    let specs: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(specs.len() >= 21, "{specs:?}");
    for spec in &specs {
        let name = spec["name"].as_str().unwrap();
        assert!(documented.contains(&name), "{name} undocumented: {error}");
    }
    for skills_tool in ["ListSkills", "ReadSkill"] {
        assert!(documented.contains(&skills_tool), "{error}");
    }
}

const HELLO: &str = "\
dialect: maestro
name: hello
description: Says hello.
max_movements: 2
initial_movement: greet
movements:
  - name: greet
    edit: false
    persona: You greet.
    instruction: Greet.
    allowed_tools: [Read]
    rules: []
";

/// A piece named `name` with `description`, valid unless `edit` is not a boolean.
fn piece(name: &str, description: &str, edit: &str) -> String {
    format!(
        "dialect: maestro\nname: {name}\ndescription: {description}\nmax_movements: 2\n\
         initial_movement: work\nmovements:\n  - name: work\n    edit: {edit}\n    \
         persona: You work.\n    instruction: Do the work now.\n    allowed_tools: [Read]\n    rules: []\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn pieces_tools_list_show_create_and_update_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pieces = d.join("pieces");
    write(&pieces.join("hello.yaml"), HELLO);
    // The pieces directory comes from the configuration file.
    let config = write_config(
        d,
        &format!("tools:\n  pieces_dir: \"{}\"\n", pieces.display()),
    );
    let cfg = ["--config", config.to_str().unwrap()];

    let out = ok_output(call(d, "ListPieces", json!({}), &cfg).await);
    assert_eq!(out, "hello (maestro, 1 movements): Says hello.\n");
    let out = ok_output(call(d, "GetPiece", json!({"name": "hello"}), &cfg).await);
    assert_eq!(out, HELLO);
    let error = error_output(call(d, "GetPiece", json!({"name": "nope"}), &cfg).await);
    assert_eq!(error, "no piece named `nope`; available: hello");

    // A valid piece is written into the pieces directory.
    let greeter = piece("greeter", "Greets people.", "false");
    let create = json!({"name": "greeter", "content": greeter});
    let out = ok_output(call(d, "CreatePiece", create.clone(), &cfg).await);
    assert_eq!(out, "created piece `greeter` (1 movements)\n");
    assert_eq!(read(&pieces.join("greeter.yaml")), greeter);
    let error = error_output(call(d, "CreatePiece", create, &cfg).await);
    assert!(error.contains("already exists; use UpdatePiece"), "{error}");
    let out = ok_output(call(d, "ListPieces", json!({}), &cfg).await);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "greeter (maestro, 1 movements): Greets people.",
            "hello (maestro, 1 movements): Says hello."
        ]
    );

    // An invalid piece is refused with the line, column and field path; nothing is written.
    let bad = json!({"name": "broken", "content": piece("broken", "Broken.", "maybe")});
    let error = error_output(call(d, "CreatePiece", bad, &cfg).await);
    assert!(
        error.starts_with(
            "the piece is invalid; nothing was saved. Fix these and call CreatePiece again:"
        ),
        "{error}"
    );
    assert!(
        error.contains("broken.yaml:8:11: movements[0].edit: expected `true` or `false`"),
        "{error}"
    );
    assert!(!pieces.join("broken.yaml").exists());

    // UpdatePiece replaces a valid piece and keeps it when the new text is invalid.
    let changed = piece("greeter", "Greets people warmly.", "true");
    let update = json!({"name": "greeter", "content": changed});
    let out = ok_output(call(d, "UpdatePiece", update, &cfg).await);
    assert_eq!(out, "updated piece `greeter` (1 movements)\n");
    assert_eq!(read(&pieces.join("greeter.yaml")), changed);
    let invalid = json!({"name": "greeter", "content": piece("greeter", "x", "maybe")});
    let error = error_output(call(d, "UpdatePiece", invalid, &cfg).await);
    assert!(
        error.contains("greeter.yaml:8:11: movements[0].edit:"),
        "{error}"
    );
    assert_eq!(read(&pieces.join("greeter.yaml")), changed);
    let missing = json!({"name": "ghost", "content": piece("ghost", "x", "false")});
    let error = error_output(call(d, "UpdatePiece", missing, &cfg).await);
    assert_eq!(
        error,
        "no piece named `ghost`; use CreatePiece to create it"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn skills_are_listed_and_materialised_into_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let skills = d.join("skills-src");
    write(
        &skills.join("deploy/SKILL.md"),
        "---\ndescription: Ship it safely\n---\n# Deploy\nRun scripts/go.sh\n",
    );
    write(&skills.join("deploy/scripts/go.sh"), "echo go\n");
    write(&skills.join("tdd.md"), "# Write tests first\nAlways.\n");
    let flag = ["--skills-dir", skills.to_str().unwrap()];

    // Without a skills directory the skills tools do not exist.
    let error = error_output(call(d, "ListSkills", json!({}), &[]).await);
    assert!(error.starts_with("unknown tool `ListSkills`"), "{error}");

    let out = ok_output(call(d, "ListSkills", json!({}), &flag).await);
    assert_eq!(out, "deploy: Ship it safely\ntdd: Write tests first\n");

    let out = ok_output(call(d, "ReadSkill", json!({"name": "deploy"}), &flag).await);
    assert!(
        out.starts_with(
            "[skill `deploy` saved to skills/deploy/ (2 file(s); instructions in skills/deploy/SKILL.md)]\n\n---\n"
        ) && out.ends_with("# Deploy\nRun scripts/go.sh\n"),
        "{out}"
    );
    assert_eq!(read(&d.join("ws/skills/deploy/scripts/go.sh")), "echo go\n");
    assert_eq!(
        read(&d.join("ws/skills/deploy/SKILL.md")),
        read(&skills.join("deploy/SKILL.md"))
    );

    let out = ok_output(call(d, "ReadSkill", json!({"name": "tdd"}), &flag).await);
    assert_eq!(
        out,
        "[skill `tdd` saved to skills/tdd.md]\n\n# Write tests first\nAlways.\n"
    );
    assert_eq!(
        read(&d.join("ws/skills/tdd.md")),
        "# Write tests first\nAlways.\n"
    );

    let error = error_output(call(d, "ReadSkill", json!({"name": "nope"}), &flag).await);
    assert_eq!(error, "no skill named `nope`; available: deploy, tdd");
}

#[tokio::test(flavor = "multi_thread")]
async fn download_file_saves_into_input_when_the_host_is_allowed() {
    let web = Web::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = web.url("/files/data.csv");

    let error = error_output(call(d, "DownloadFile", json!({"url": url}), &[]).await);
    assert!(error.contains("refused to connect to 127.0.0.1"), "{error}");
    assert_eq!(
        web.hits(),
        Vec::<String>::new(),
        "refused before connecting"
    );

    let config = write_config(d, "web:\n  allow_hosts: [127.0.0.1]\n");
    let cfg = ["--config", config.to_str().unwrap()];
    let out = ok_output(call(d, "DownloadFile", json!({"url": url}), &cfg).await);
    assert_eq!(
        out,
        format!(
            "Saved {} bytes from {url} to input/data.csv (text/csv)",
            CSV.len()
        )
    );
    assert_eq!(read(&d.join("ws/input/data.csv")), CSV);

    let named = json!({"url": url, "filename": "rows.csv"});
    let out = ok_output(call(d, "DownloadFile", named, &cfg).await);
    assert!(out.contains("to input/rows.csv"), "{out}");
    assert_eq!(read(&d.join("ws/input/rows.csv")), CSV);

    let escaping = json!({"url": url, "filename": "../output/x.csv"});
    let error = error_output(call(d, "DownloadFile", escaping, &cfg).await);
    assert!(error.contains("must be a plain file name"), "{error}");
    assert!(!d.join("ws/output/x.csv").exists());
    assert_eq!(web.hits(), ["/files/data.csv", "/files/data.csv"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn web_search_asks_the_configured_searxng_instance() {
    let web = Web::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let query = json!({"query": "rust ssh"});

    let error = error_output(call(d, "WebSearch", query.clone(), &[]).await);
    assert_eq!(
        error,
        "WebSearch is not configured: set web.search.searxng_url"
    );

    // The SearXNG host is trusted for searching although it is on loopback.
    let config = write_config(
        d,
        &format!("web:\n  search:\n    searxng_url: \"{}\"\n", web.url("/")),
    );
    let cfg = ["--config", config.to_str().unwrap()];
    let out = ok_output(call(d, "WebSearch", query, &cfg).await);
    assert_eq!(
        out,
        "Results for \"rust ssh\":\n\n1. Guide to rust ssh\n   https://docs.example/ssh\n   \
         How the searxng fake answers.\n\n2. Second hit\n   https://docs.example/other\n"
    );
    let one = json!({"query": "bwrap", "max_results": 1});
    let out = ok_output(call(d, "WebSearch", one, &cfg).await);
    assert!(
        out.contains("1. Guide to bwrap") && !out.contains("2. "),
        "{out}"
    );
    assert_eq!(
        web.hits(),
        [
            "/search?format=json&q=rust+ssh",
            "/search?format=json&q=bwrap"
        ]
    );
}
