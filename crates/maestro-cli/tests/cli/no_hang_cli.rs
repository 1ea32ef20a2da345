//! The `maestro` process ends when its work ends: a tool pointed at a FIFO answers with an
//! error within its deadline, and `maestro tools call` and `maestro run` then exit. Each child
//! runs under a wall-clock guard that fails the test instead of hanging it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use maestro_testkit::{ScriptedLlm, Turn};
use serde_json::{Value, json};

/// Far above what any of these runs needs; reaching it means the process hung.
const GUARD: Duration = Duration::from_secs(60);

struct Finished {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` to its end, with stdout and stderr in files under `dir`; kills it and fails the
/// test when it outlives [`GUARD`].
fn run_guarded(mut cmd: Command, dir: &Path) -> Finished {
    let out_path = dir.join("stdout.txt");
    let err_path = dir.join("stderr.txt");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > GUARD {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the process did not exit within {GUARD:?}; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Finished {
        code: status.code(),
        stdout: std::fs::read_to_string(&out_path).unwrap(),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
    }
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn tools_call_read_on_a_fifo_fails_and_the_process_exits() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    mkfifo(&ws.join("p"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir.path())
        .args(["tools", "call", "Read", "--timeout", "5", "--workspace"])
        .arg(&ws)
        .args(["--input", r#"{"file_path":"p"}"#])
        .env("HOME", dir.path());
    let done = run_guarded(cmd, dir.path());
    assert_eq!(done.code, Some(1), "stderr:\n{}", done.stderr);
    let printed: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(
        printed,
        json!({
            "ok": false,
            "output": null,
            "error": "`p` is a FIFO (named pipe), not a regular file; Read only reads regular files"
        })
    );
}

#[test]
fn tools_call_refuses_a_zero_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir.path())
        .args(["tools", "call", "Read", "--timeout", "0", "--workspace"])
        .arg(dir.path().join("ws"))
        .env("HOME", dir.path());
    let done = run_guarded(cmd, dir.path());
    assert_eq!(done.code, Some(2), "stderr:\n{}", done.stderr);
    assert!(done.stderr.contains("--timeout"), "{}", done.stderr);
}

const PIECE: &str = "name: read-a-pipe
description: Reads a file the task names
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: false
    persona: You read files.
    instruction: Read input/p and report what it says.
    allowed_tools: [Read]
    rules: []
";

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_movement_reads_a_fifo_ends_and_the_process_exits() {
    let server = ScriptedLlm::start([
        Turn::tool_call("Read", json!({"file_path": "input/p"})),
        Turn::tool_call(
            "complete",
            json!({"status": "success", "result": "input/p is a pipe, not a file"}),
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("input")).unwrap();
    mkfifo(&ws.join("input/p"));
    let piece = dir.path().join("read-a-pipe.yaml");
    std::fs::write(&piece, PIECE).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir.path())
        .arg("run")
        .arg(&piece)
        .args(["--task", "What does input/p say?", "--workspace"])
        .arg(&ws)
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
    let run_dir = dir.path().to_path_buf();
    let done = tokio::task::spawn_blocking(move || run_guarded(cmd, &run_dir))
        .await
        .unwrap();
    assert_eq!(done.code, Some(0), "stderr:\n{}", done.stderr);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1].to_string().contains(
            "`input/p` is a FIFO (named pipe), not a regular file; Read only reads regular files"
        ),
        "{}",
        requests[1]
    );
}

/// A loopback listener that takes every connection and never says a word: an endpoint that is
/// stuck, or something else listening on its port. Lives while the returned thread runs.
fn silent_endpoint() -> (String, std::net::TcpListener) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let accepting = listener.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in accepting.incoming() {
            match conn {
                Ok(conn) => held.push(conn),
                Err(_) => return,
            }
        }
    });
    (url, listener)
}

fn run_against(url: &str, dir: &Path) -> Command {
    std::fs::write(
        dir.join("piece.yaml"),
        "name: quiet\ndescription: answers\nmax_movements: 2\ninitial_movement: ask\nmovements:\n  - name: ask\n    \
         edit: false\n    persona: You answer.\n    instruction: \"{task}\"\n    \
         allowed_tools: []\n    rules: []\n    default_next: ABORT\n",
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_maestro"));
    cmd.current_dir(dir)
        .env("HOME", dir)
        .env_remove("MAESTRO_LLM_BASE_URL")
        .env_remove("MAESTRO_MODEL")
        .args([
            "run",
            "piece.yaml",
            "--task",
            "say hi",
            "--llm-base-url",
            url,
        ])
        .args(["--model", "m"]);
    cmd
}

/// An endpoint that takes the connection and says nothing is not waited for through the idle
/// timeout (120 s) and the context-length probes: the run says what the endpoint did once its
/// model list goes unanswered (10 s), and records no call.
#[test]
fn a_run_against_a_silent_endpoint_says_so_instead_of_waiting() {
    let (url, _listener) = silent_endpoint();
    let dir = tempfile::tempdir().unwrap();
    let done = run_guarded(run_against(&url, dir.path()), dir.path());
    assert_eq!(done.code, Some(2), "{}", done.stderr);
    assert!(
        done.stderr
            .contains("took the connection but did not answer in time"),
        "{}",
        done.stderr
    );
}

/// Ctrl-C while the run is still being prepared (its endpoint checked) ends it there, recorded
/// as cancelled, and the process exits at once rather than after the endpoint's timeouts.
#[test]
fn ctrl_c_while_a_run_is_prepared_ends_it_at_once() {
    let (url, _listener) = silent_endpoint();
    let dir = tempfile::tempdir().unwrap();
    let mut child = run_against(&url, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("stderr.txt")).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let signalled = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if signalled.elapsed() > Duration::from_secs(8) {
            let _ = child.kill();
            panic!("the process went on for 8 s after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("run cancelled before it started"),
        "{stderr}"
    );
    let listed = Command::new(env!("CARGO_BIN_EXE_maestro"))
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .args(["jobs", "list", "--json"])
        .output()
        .unwrap();
    let jobs = String::from_utf8_lossy(&listed.stdout);
    let job: Value = serde_json::from_str(jobs.lines().next().unwrap()).unwrap();
    assert_eq!(job["status"], "failed", "{jobs}");
    assert_eq!(job["reason"], "cancelled", "{jobs}");
}
