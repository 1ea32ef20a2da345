//! The configured tool set through the real binary: `maestro tools list|call` and `maestro run`
//! with web, MCP and SSH tools from a configuration file, against real servers on 127.0.0.1 (an
//! axum page server, the Python SDK MCP server, OpenSSH, the scripted model server).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::routing::get;
use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::{Value, json};

const PAGE: &str = "<html><head><title>Toolbelt</title></head><body>\
    <h1>Welcome to the toolbelt page</h1><p>Fetched through the guard.</p></body></html>";

/// Runs the binary in `dir` (also its HOME, so no user or project configuration leaks in).
async fn maestro(dir: &Path, args: Vec<String>) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir)
        .args(args)
        .env("HOME", dir)
        .env_remove("MAESTRO_LLM_BASE_URL")
        .env_remove("MAESTRO_MODEL")
        .env_remove("MAESTRO_API_KEY");
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `maestro tools call TOOL --workspace ws --input INPUT EXTRA…`: exit code and the JSON line.
async fn call(dir: &Path, tool: &str, input: Value, extra: &[&str]) -> (i32, Value) {
    let ws = dir.join("ws");
    let mut list = args(&["tools", "call", tool, "--input", &input.to_string()]);
    list.extend(args(&["--workspace", ws.to_str().unwrap()]));
    list.extend(args(extra));
    let out = maestro(dir, list).await;
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "one JSON line; stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap(),
        serde_json::from_str(&stdout).unwrap(),
    )
}

fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("maestro-test-config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A page server on 127.0.0.1 that records the paths it served.
struct Web {
    port: u16,
    hits: Arc<Mutex<Vec<String>>>,
}

impl Web {
    async fn start() -> Web {
        let hits = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route(
                "/page",
                get(|State(hits): State<Arc<Mutex<Vec<String>>>>| async move {
                    hits.lock().unwrap().push("/page".to_string());
                    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE)
                }),
            )
            .with_state(Arc::clone(&hits));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Web { port, hits }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/page", self.port)
    }

    fn hits(&self) -> usize {
        self.hits.lock().unwrap().len()
    }
}

/// A private copy of the Python SDK test server (`mcp==2.3.0`), so that its processes can be
/// told apart from other tests' by their command line.
fn mcp_script(dir: &Path) -> PathBuf {
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../maestro-tools/tests/mcp_support/server.py");
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
    let input = json!({"url": web.url()});

    let (code, out) = call(dir.path(), "WebFetch", input.clone(), &[]).await;
    assert_eq!(code, 1, "{out}");
    let error = out["error"].as_str().unwrap();
    assert!(
        error.contains("refused to connect to 127.0.0.1") && error.contains("loopback"),
        "{error}"
    );
    assert_eq!(web.hits(), 0, "the guard refuses before connecting");

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
    assert_eq!(web.hits(), 1);
}

#[tokio::test(flavor = "multi_thread")]
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
async fn every_tool_works_through_a_scripted_run() {
    let web = Web::start().await;
    let dir = tempfile::tempdir().unwrap();
    let script = mcp_script(dir.path());
    let config = write_config(
        dir.path(),
        &format!("web:\n  allow_hosts: [127.0.0.1]\n{}", mcp_config(&script)),
    );
    std::fs::write(dir.path().join("piece.yaml"), TOOLBELT_PIECE).unwrap();
    let calls = toolbelt_calls(&web.url());
    let mut turns: Vec<Turn> = calls
        .iter()
        .map(|(tool, input, _)| Turn::tool_call(*tool, input.clone()))
        .collect();
    turns.push(Turn::tool_call(
        "complete",
        json!({"status": "success", "result": "Every tool answered."}),
    ));
    let server = ScriptedLlm::start(turns).await;

    let out = maestro(
        dir.path(),
        args(&[
            "run",
            "piece.yaml",
            "--task",
            "Try every tool",
            "--config",
            config.to_str().unwrap(),
            "--llm-base-url",
            &server.base_url(),
            "--model",
            "scripted-model",
            "--tool-mode",
            "native",
        ]),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert_eq!(server.remaining(), 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Every tool answered."),
        "{stderr}"
    );

    // Every call succeeded, in order, as the run record says.
    let runs = dir.path().join(".maestro/runs");
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let events: Vec<Value> = std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let results: Vec<(&str, bool)> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| (e["tool"].as_str().unwrap(), e["ok"].as_bool().unwrap()))
        .collect();
    let mut expected: Vec<(&str, bool)> = calls.iter().map(|(tool, _, _)| (*tool, true)).collect();
    expected.push(("complete", true));
    assert_eq!(results, expected, "stderr:\n{stderr}");
    assert_eq!(events.last().unwrap()["status"], "completed");

    // Each tool's output reached the model: request i+1 ends with the result of call i.
    let requests = server.requests();
    assert_eq!(requests.len(), calls.len() + 1);
    for (i, (tool, _, needle)) in calls.iter().enumerate() {
        let last = requests[i + 1]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap();
        assert_eq!(last["role"], "tool", "{tool}: {last}");
        let content = last["content"].as_str().unwrap();
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
    assert_eq!(web.hits(), 1);
    assert_eq!(processes_running(&script), Vec::<String>::new());
}

/// A throwaway OpenSSH server on a loopback port, with its own host and user keys.
struct Sshd {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sshd {
    fn start() -> Sshd {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(
            sshd.exists(),
            "/usr/sbin/sshd is missing: apt-get install openssh-server"
        );
        std::fs::create_dir_all("/run/sshd").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for key in ["host_key", "user_key"] {
            let status = std::process::Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "maestro-test", "-f"])
                .arg(d.join(key))
                .status()
                .expect("ssh-keygen (package openssh-client) is needed");
            assert!(status.success());
        }
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\nPermitRootLogin yes\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             Subsystem sftp internal-sftp\nLogLevel ERROR\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        let child = std::process::Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Sshd { dir, port, child }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self, id: &str) -> String {
        let user = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        let host_key = std::fs::read_to_string(self.path("host_key.pub")).unwrap();
        format!(
            "ssh:\n  connections:\n    - id: {id}\n      name: test-sshd\n      host: 127.0.0.1\n      \
             port: {}\n      user: {}\n      auth: {{key: \"{}\"}}\n      known_host_key: \"{}\"\n",
            self.port,
            String::from_utf8(user.stdout).unwrap().trim(),
            self.path("user_key").display(),
            host_key.trim()
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
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
