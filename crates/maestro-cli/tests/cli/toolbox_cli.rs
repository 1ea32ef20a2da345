//! The configured tool set through the real binary: `maestro tools list|call` and `maestro run`
//! with web, MCP, SSH, pieces and skills tools from a configuration file, against real servers on
//! 127.0.0.1 (an axum web server, the Python SDK MCP server, OpenSSH, the scripted model server).
//! Two scripted runs between them call every tool `maestro tools list` shows.

use std::path::{Path, PathBuf};

use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::{Value, json};

use crate::support;
use support::{
    Sshd, SshdConfig, Web, args, call, events, last_tool_message, maestro, only_run, run_piece,
    scripted_model, tool_results, write_config,
};

/// A private copy of the Python SDK test server (`mcp==2.3.0`), so that its processes can be
/// told apart from other tests' by their command line.
fn mcp_script(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../maestro-tools-mcp/tests/mcp_support/server.py");
    let target = dir.join("calc-server").join("server.py");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(source, &target).unwrap();
    target
}

fn mcp_config(script: &Path) -> String {
    format!(
        "mcp:\n  servers:\n    calc:\n      command: python3\n      args: [\"{}\", stdio]\n",
        script.display()
    )
}

/// Processes whose command line mentions `needle`.
fn processes_running(needle: &Path) -> Vec<String> {
    let needle = needle.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        if line.contains(&needle) {
            found.push(format!("{}: {line}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn web_fetch_is_refused_by_default_and_allowed_by_the_config() {
    let web = Web::start().await;
    let dir = tempfile::tempdir().unwrap();
    let input = json!({"url": web.url("/page")});

    let (code, out) = call(dir.path(), "WebFetch", input.clone(), &[]).await;
    assert_eq!(code, 1, "{out}");
    let error = out["error"].as_str().unwrap();
    assert!(
        error.contains("refused to connect to 127.0.0.1") && error.contains("loopback"),
        "{error}"
    );
    assert_eq!(
        web.hits(),
        Vec::<String>::new(),
        "the guard refuses before connecting"
    );

    let config = write_config(dir.path(), "web:\n  allow_hosts: [127.0.0.1]\n");
    let (code, out) = call(
        dir.path(),
        "WebFetch",
        input,
        &["--config", config.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let page = out["output"].as_str().unwrap();
    assert!(page.contains("Welcome to the toolbelt page"), "{page}");
    assert_eq!(web.hits(), ["/page"]);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_python_mcp,
    ignore = "needs the Python MCP SDK: python3 -m pip install mcp==2.3.0, or scripts/prerequisites.sh"
)]
async fn mcp_tools_are_listed_and_called_and_their_servers_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let script = mcp_script(dir.path());
    let config = write_config(
        dir.path(),
        &format!(
            "{}    broken:\n      command: /nonexistent/mcp-server\n",
            mcp_config(&script)
        ),
    );
    let config = config.to_str().unwrap();

    let out = maestro(dir.path(), args(&["tools", "list", "--config", config])).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for tool in [
        "Read",
        "Bash",
        "WebFetch",
        "DownloadFile",
        "WebSearch",
        "BrowseWeb",
        "SshExec",
        "SshUpload",
        "SshDownload",
        "mcp__calc__add",
        "mcp__calc__fail",
    ] {
        assert!(names.contains(&tool), "{tool} missing from:\n{text}");
    }
    assert!(text.contains("Add two integers."), "{text}");
    assert!(
        stderr.contains("MCP server `broken` is not available") && stderr.contains("/nonexistent"),
        "{stderr}"
    );
    assert_eq!(processes_running(&script), Vec::<String>::new());

    let (code, out) = call(
        dir.path(),
        "mcp__calc__add",
        json!({"a": 20, "b": 22}),
        &["--config", config],
    )
    .await;
    assert_eq!(
        (code, out),
        (0, json!({"ok": true, "output": "42", "error": null}))
    );
    // The server exited with the command, not after it.
    assert_eq!(processes_running(&script), Vec::<String>::new());

    let (code, out) = call(
        dir.path(),
        "mcp__calc__fail",
        json!({"reason": "by hand"}),
        &["--config", config],
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("failed on purpose: by hand"),
        "{out}"
    );

    let (code, out) = call(
        dir.path(),
        "mcp__broken__anything",
        json!({}),
        &["--config", config],
    )
    .await;
    assert_eq!(code, 1);
    let error = out["error"].as_str().unwrap();
    assert!(
        error.contains("MCP server `broken` is required but not available")
            && error.contains("mcp.servers.broken"),
        "{error}"
    );
}

const MISSING_PIECE: &str = "\
dialect: maestro
name: needs-missing
description: Needs an MCP server nobody configured.
max_movements: 2
initial_movement: work
required_mcp: [missing]
movements:
  - name: work
    edit: false
    persona: You work.
    instruction: Work.
    allowed_tools: [Read, mcp__missing__*]
    rules: []
";

#[tokio::test(flavor = "multi_thread")]
async fn a_run_needing_an_unconfigured_mcp_server_does_not_start() {
    let server = ScriptedLlm::start([Turn::text("unused")]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("piece.yaml"), MISSING_PIECE).unwrap();
    let out = maestro(
        dir.path(),
        args(&[
            "run",
            "piece.yaml",
            "--task",
            "t",
            "--llm-base-url",
            &server.base_url(),
            "--model",
            "scripted-model",
        ]),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("piece `needs-missing` cannot run: MCP server `missing` is required but not configured (configured servers: none)")
            && stderr.contains("configure `mcp.servers.missing` in .maestro/config.yaml"),
        "{stderr}"
    );
    assert!(server.requests().is_empty());
    assert!(!dir.path().join(".maestro/runs").exists());
}

const TOOLBELT_PIECE: &str = "\
dialect: maestro
name: toolbelt
description: Calls every kind of tool once.
max_movements: 2
initial_movement: work
required_mcp: [calc]
movements:
  - name: work
    edit: true
    persona: You try every tool.
    instruction: Use each tool once, then complete the run.
    allowed_tools: [Read, Write, Edit, Glob, Grep, Bash, SQLite, CreateChecklist, CheckItem,
      GetChecklist, ReadToolDoc, WebFetch, 'mcp__calc__*']
    allowed_commands: [ls]
    rules: []
";

/// Every tool the scripted model calls, with a piece of text its output must carry back to the
/// model.
fn toolbelt_calls(page_url: &str) -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "Write",
            json!({"file_path": "output/notes.md", "content": "alpha line\nbeta line\n"}),
            "output/notes.md",
        ),
        ("Read", json!({"file_path": "output/notes.md"}), "beta line"),
        (
            "Edit",
            json!({"file_path": "output/notes.md", "old_string": "beta", "new_string": "gamma"}),
            "output/notes.md",
        ),
        ("Glob", json!({"pattern": "output/*.md"}), "output/notes.md"),
        (
            "Grep",
            json!({"pattern": "gamma", "path": "output"}),
            "gamma line",
        ),
        ("Bash", json!({"command": "ls output"}), "notes.md"),
        (
            "SQLite",
            json!({"database": "output/data.db", "query": "CREATE TABLE t AS SELECT 'row-from-sqlite' AS name"}),
            "",
        ),
        (
            "SQLite",
            json!({"database": "output/data.db", "query": "SELECT name FROM t"}),
            "row-from-sqlite",
        ),
        (
            "CreateChecklist",
            json!({"items": ["fetch the page", "add with MCP"]}),
            "fetch the page",
        ),
        (
            "CheckItem",
            json!({"index": 1, "note": "fetched"}),
            "fetch the page",
        ),
        ("GetChecklist", json!({}), "add with MCP"),
        ("ReadToolDoc", json!({"tool": "Bash"}), "allowed_commands"),
        (
            "WebFetch",
            json!({"url": page_url}),
            "Welcome to the toolbelt page",
        ),
        ("mcp__calc__add", json!({"a": 20, "b": 22}), "42"),
    ]
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_python_mcp,
    ignore = "needs the Python MCP SDK: python3 -m pip install mcp==2.3.0, or scripts/prerequisites.sh"
)]
async fn every_tool_works_through_a_scripted_run() {
    let web = Web::start().await;
    let dir = tempfile::tempdir().unwrap();
    let script = mcp_script(dir.path());
    let config = write_config(
        dir.path(),
        &format!("web:\n  allow_hosts: [127.0.0.1]\n{}", mcp_config(&script)),
    );
    std::fs::write(dir.path().join("piece.yaml"), TOOLBELT_PIECE).unwrap();
    let calls = toolbelt_calls(&web.url("/page"));
    let script_calls: Vec<(&str, Value)> = calls
        .iter()
        .map(|(tool, input, _)| (*tool, input.clone()))
        .collect();
    let server = scripted_model(&script_calls, "Every tool answered.").await;

    let out = run_piece(dir.path(), &config, &server, "Try every tool").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert_eq!(server.remaining(), 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Every tool answered."),
        "{stderr}"
    );

    // Every call succeeded, in order, as the run record says.
    let run = only_run(dir.path());
    let events = events(&run);
    let mut expected: Vec<(String, bool)> = calls
        .iter()
        .map(|(tool, _, _)| (tool.to_string(), true))
        .collect();
    expected.push(("complete".to_string(), true));
    assert_eq!(tool_results(&events), expected, "stderr:\n{stderr}");
    assert_eq!(events.last().unwrap()["status"], "completed");

    // Each tool's output reached the model: request i+1 ends with the result of call i.
    let requests = server.requests();
    assert_eq!(requests.len(), calls.len() + 1);
    for (i, (tool, _, needle)) in calls.iter().enumerate() {
        let content = last_tool_message(&requests[i + 1]);
        assert!(
            content.contains(needle),
            "{tool}: {needle:?} not in {content:?}"
        );
    }
    // The tools really acted on the run's workspace.
    assert_eq!(
        std::fs::read_to_string(run.join("output/notes.md")).unwrap(),
        "alpha line\ngamma line\n"
    );
    assert!(run.join("output/data.db").is_file());
    assert_eq!(web.hits(), ["/page"]);
    assert_eq!(processes_running(&script), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_sshd,
    ignore = "needs the OpenSSH server: apt-get install openssh-server, or scripts/prerequisites.sh"
)]
async fn ssh_tools_work_by_hand_for_allowed_connections_only() {
    const CONN: &str = "6f9619ff-8b86-d011-b42d-00c04fc964ff";
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &sshd.config(CONN));
    let config = config.to_str().unwrap();
    let exec = json!({"connection_id": CONN, "command": "echo hello-over-ssh"});

    let (code, out) = call(dir.path(), "SshExec", exec.clone(), &["--config", config]).await;
    assert_eq!(code, 1);
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("no_allowed_connections_declared"),
        "{out}"
    );

    let allow = ["--config", config, "--allowed-ssh-connections", CONN];
    let (code, out) = call(dir.path(), "SshExec", exec, &allow).await;
    assert_eq!(code, 0, "{out}");
    let output = out["output"].as_str().unwrap();
    assert!(
        output.contains("exit_code: 0") && output.contains("hello-over-ssh"),
        "{output}"
    );

    std::fs::create_dir_all(dir.path().join("ws/input")).unwrap();
    std::fs::write(dir.path().join("ws/input/up.txt"), "sent over sftp\n").unwrap();
    let remote = sshd.path("up.txt");
    let (code, out) = call(
        dir.path(),
        "SshUpload",
        json!({"connection_id": CONN, "local_path": "input/up.txt", "remote_path": remote}),
        &allow,
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        std::fs::read_to_string(&remote).unwrap(),
        "sent over sftp\n"
    );

    let (code, out) = call(
        dir.path(),
        "SshDownload",
        json!({"connection_id": CONN, "remote_path": remote, "local_path": "input/down.txt"}),
        &allow,
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ws/input/down.txt")).unwrap(),
        "sent over sftp\n"
    );
}

const SSH_CONN: &str = "0b6f1c2e-4d3a-4f5e-9a8b-7c6d5e4f3a2b";

const REMOTE_PIECE: &str = "\
dialect: maestro
name: toolbelt-remote
description: Calls the download, search, pieces, skills and SSH tools once each.
max_movements: 2
initial_movement: work
movements:
  - name: work
    edit: false
    persona: You try the remaining tools.
    instruction: Use each tool once, then complete the run.
    allowed_tools: [Read, DownloadFile, WebSearch, ListPieces, GetPiece, CreatePiece, UpdatePiece,
      SshExec, SshUpload, SshDownload]
    allowed_ssh_connections: ['0b6f1c2e-4d3a-4f5e-9a8b-7c6d5e4f3a2b']
    rules: []
";

const HELLO_PIECE: &str = "\
dialect: maestro
name: hello
description: Says hello.
max_movements: 2
initial_movement: greet
movements:
  - name: greet
    edit: false
    persona: You greet.
    instruction: Greet whoever asks.
    allowed_tools: [Read]
    rules: []
";

/// `hello` renamed to `name` with `description`.
fn renamed_piece(name: &str, description: &str) -> String {
    HELLO_PIECE
        .replace("name: hello", &format!("name: {name}"))
        .replace("Says hello.", description)
}

/// The calls of the second scripted run, each with whether it succeeds and a piece of text its
/// result must carry back to the model.
fn remote_calls(web: &Web, sshd: &Sshd) -> Vec<(&'static str, Value, bool, String)> {
    let remote_up = sshd.path("uploaded.csv");
    let remote_note = sshd.path("remote-note.txt");
    vec![
        (
            "DownloadFile",
            json!({"url": web.url("/files/data.csv")}),
            true,
            "to input/data.csv (text/csv)".to_string(),
        ),
        (
            "WebSearch",
            json!({"query": "sftp tips", "max_results": 1}),
            true,
            "1. Guide to sftp tips\n   https://docs.example/ssh".to_string(),
        ),
        (
            "ListPieces",
            json!({}),
            true,
            "hello (maestro, 1 movements): Says hello.".to_string(),
        ),
        (
            "GetPiece",
            json!({"name": "hello"}),
            true,
            "instruction: Greet whoever asks.".to_string(),
        ),
        (
            "CreatePiece",
            json!({"name": "greeter", "content": renamed_piece("greeter", "Greets.")}),
            true,
            "created piece `greeter` (1 movements, version 1 in the store)".to_string(),
        ),
        // Not in allowed_tools: refused, and the run goes on.
        (
            "Bash",
            json!({"command": "ls"}),
            false,
            "error: `Bash` is not offered in this movement".to_string(),
        ),
        (
            "UpdatePiece",
            json!({"name": "greeter", "content": renamed_piece("greeter", "Greets warmly.")}),
            true,
            "updated piece `greeter` (1 movements, version 2 in the store)".to_string(),
        ),
        (
            "ListSkills",
            json!({}),
            true,
            "deploy: Ship it safely".to_string(),
        ),
        (
            "ReadSkill",
            json!({"name": "deploy"}),
            true,
            "[skill `deploy` saved to skills/deploy/".to_string(),
        ),
        (
            "SshExec",
            json!({"connection_id": SSH_CONN, "command": "echo ssh-run-$((6*7))"}),
            true,
            "exit_code: 0\n--- stdout ---\nssh-run-42\n".to_string(),
        ),
        (
            "SshUpload",
            json!({"connection_id": SSH_CONN, "local_path": "input/data.csv",
                   "remote_path": remote_up}),
            true,
            format!(
                "uploaded input/data.csv ({} bytes) to {}",
                support::CSV.len(),
                remote_up.display()
            ),
        ),
        (
            "SshDownload",
            json!({"connection_id": SSH_CONN, "remote_path": remote_note,
                   "local_path": "input/remote-note.txt"}),
            true,
            "(15 bytes) to input/remote-note.txt".to_string(),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_sshd,
    ignore = "needs the OpenSSH server: apt-get install openssh-server, or scripts/prerequisites.sh"
)]
async fn download_search_pieces_skills_and_ssh_tools_work_through_a_scripted_run() {
    let web = Web::start().await;
    let sshd = Sshd::start();
    std::fs::write(sshd.path("remote-note.txt"), "from the server").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pieces = d.join("library");
    std::fs::create_dir_all(&pieces).unwrap();
    std::fs::write(pieces.join("hello.yaml"), HELLO_PIECE).unwrap();
    let skills = d.join("skills-src");
    std::fs::create_dir_all(skills.join("deploy/scripts")).unwrap();
    std::fs::write(
        skills.join("deploy/SKILL.md"),
        "---\ndescription: Ship it safely\n---\n# Deploy\nRun scripts/go.sh\n",
    )
    .unwrap();
    std::fs::write(skills.join("deploy/scripts/go.sh"), "echo go\n").unwrap();
    let config = write_config(
        d,
        &format!(
            "tools:\n  pieces_dir: \"{}\"\n  skills_dirs: [\"{}\"]\n\
             web:\n  allow_hosts: [127.0.0.1]\n  search:\n    searxng_url: \"{}\"\n{}",
            pieces.display(),
            skills.display(),
            web.url("/"),
            sshd.config(SSH_CONN)
        ),
    );
    std::fs::write(d.join("piece.yaml"), REMOTE_PIECE).unwrap();
    let calls = remote_calls(&web, &sshd);
    let script: Vec<(&str, Value)> = calls
        .iter()
        .map(|(tool, input, _, _)| (*tool, input.clone()))
        .collect();
    let server = scripted_model(&script, "The remaining tools answered.").await;

    let out = run_piece(d, &config, &server, "Try the remaining tools").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert_eq!(server.remaining(), 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("The remaining tools answered."),
        "{stderr}"
    );

    // The movement is offered its allowed tools and the skills tools, never Bash.
    let requests = server.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for (tool, _, ok, _) in &calls {
        assert_eq!(offered.contains(tool), *ok, "{tool} in {offered:?}");
    }

    // The run record has every result in order: Bash refused, everything else done.
    let run = only_run(d);
    let events = events(&run);
    let mut expected: Vec<(String, bool)> = calls
        .iter()
        .map(|(tool, _, ok, _)| (tool.to_string(), *ok))
        .collect();
    expected.push(("complete".to_string(), true));
    assert_eq!(tool_results(&events), expected, "stderr:\n{stderr}");
    assert_eq!(events.last().unwrap()["status"], "completed");

    // Each result reached the model: request i+1 ends with the result of call i.
    assert_eq!(requests.len(), calls.len() + 1);
    for (i, (tool, _, _, needle)) in calls.iter().enumerate() {
        let content = last_tool_message(&requests[i + 1]);
        assert!(
            content.contains(needle.as_str()),
            "{tool}: {needle:?} not in {content:?}"
        );
    }

    // The tools acted: on the run's workspace, the job store (where every later job finds the
    // piece; not the pieces directory) and the SSH server.
    let read = |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    assert_eq!(read(run.join("input/data.csv")), support::CSV);
    assert!(!pieces.join("greeter.yaml").exists());
    let store = maestro_app::Store::open_existing(
        &maestro_app::StoreUrl::Sqlite {
            path: d.join(".maestro/maestro.db"),
        },
        maestro_app::PoolSize::Single,
    )
    .await
    .unwrap();
    let greeter = store.piece_latest("greeter").await.unwrap().unwrap();
    assert_eq!(
        (greeter.version, greeter.yaml),
        (2, Some(renamed_piece("greeter", "Greets warmly.")))
    );
    store.close().await;
    assert_eq!(read(run.join("skills/deploy/scripts/go.sh")), "echo go\n");
    assert_eq!(read(sshd.path("uploaded.csv")), support::CSV);
    assert_eq!(read(run.join("input/remote-note.txt")), "from the server");
    assert_eq!(
        web.hits(),
        ["/files/data.csv", "/search?format=json&q=sftp+tips"]
    );
}
