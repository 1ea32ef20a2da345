#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SshExec, SshUpload and SshDownload against a real OpenSSH server on a loopback port.

mod ssh_support;

use pretty_assertions::assert_eq;
use serde_json::json;
use ssh_support::{CONN, Sshd, SshdExt, Tools};

#[tokio::test]
#[cfg_attr(
    no_sshd,
    ignore = "needs the OpenSSH server: apt-get install openssh-server, or scripts/prerequisites.sh"
)]
async fn exec_reports_exit_code_and_both_streams() {
    let sshd = Sshd::start();
    let ws = tempfile::tempdir().unwrap();
    let tools = Tools::new(vec![sshd.connection(CONN)], None);
    let allowed: &[&str] = &[CONN];
    let out = tools
        .call(
            "SshExec",
            ws.path(),
            Some(allowed),
            false,
            json!({"connection_id": CONN, "command": "echo hello; echo oops >&2; exit 3"}),
        )
        .await;
    let header = format!(
        "connection: test-sshd ({CONN}) {}@127.0.0.1:{}",
        ssh_support::current_user(),
        sshd.port
    );
    assert_eq!(
        out,
        maestro_tools::ToolOutput::error(format!(
            "{header}\nexit_code: 3\n--- stdout ---\nhello\n--- stderr ---\noops\n"
        ))
    );
    let out = tools
        .call(
            "SshExec",
            ws.path(),
            Some(allowed),
            false,
            json!({"connection_id": CONN, "command": "printf 'ok'"}),
        )
        .await;
    assert_eq!(
        out,
        maestro_tools::ToolOutput::ok(format!("{header}\nexit_code: 0\n--- stdout ---\nok\n"))
    );
}

#[tokio::test]
#[cfg_attr(
    no_sshd,
    ignore = "needs the OpenSSH server: apt-get install openssh-server, or scripts/prerequisites.sh"
)]
async fn exec_stops_at_its_timeout() {
    let sshd = Sshd::start();
    let ws = tempfile::tempdir().unwrap();
    let tools = Tools::new(vec![sshd.connection(CONN)], None);
    let out = tools
        .call(
            "SshExec",
            ws.path(),
            Some(&["*"]),
            false,
            json!({"connection_id": CONN, "command": "echo started; sleep 30", "timeout": 1}),
        )
        .await;
    assert!(!out.ok, "{out:?}");
    assert!(
        out.output.contains("timed out after 1s") && out.output.contains("started"),
        "{}",
        out.output
    );
}

#[tokio::test]
#[cfg_attr(
    no_sshd,
    ignore = "needs the OpenSSH server: apt-get install openssh-server, or scripts/prerequisites.sh"
)]
async fn upload_and_download_over_sftp() {
    let sshd = Sshd::start();
    let ws = tempfile::tempdir().unwrap();
    let tools = Tools::new(vec![sshd.connection(CONN)], None);
    let allowed: &[&str] = &[CONN];
    std::fs::create_dir_all(ws.path().join("output")).unwrap();
    std::fs::write(ws.path().join("output/report.txt"), "report body\n").unwrap();
    let remote = sshd.path("uploaded.txt");
    let out = tools
        .call(
            "SshUpload",
            ws.path(),
            Some(allowed),
            false,
            json!({"connection_id": CONN, "local_path": "output/report.txt", "remote_path": remote}),
        )
        .await;
    assert!(out.ok, "{out:?}");
    assert!(
        out.output.ends_with(&format!(
            "uploaded output/report.txt (12 bytes) to {}",
            remote.display()
        )),
        "{}",
        out.output
    );
    assert_eq!(std::fs::read_to_string(&remote).unwrap(), "report body\n");

    std::fs::write(sshd.path("server.log"), "line 1\nline 2\n").unwrap();
    let out = tools
        .call(
            "SshDownload",
            ws.path(),
            Some(allowed),
            false,
            json!({"connection_id": CONN, "remote_path": sshd.path("server.log")}),
        )
        .await;
    assert!(
        out.ok && out.output.ends_with("(14 bytes) to input/server.log"),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("input/server.log")).unwrap(),
        "line 1\nline 2\n"
    );

    // Outside input/ only when the movement may edit.
    let input = json!({"connection_id": CONN, "remote_path": sshd.path("server.log"), "local_path": "output/copy.log"});
    let out = tools
        .call(
            "SshDownload",
            ws.path(),
            Some(allowed),
            false,
            input.clone(),
        )
        .await;
    assert!(!out.ok && out.output.contains("edit: false"), "{out:?}");
    let out = tools
        .call("SshDownload", ws.path(), Some(allowed), true, input)
        .await;
    assert!(out.ok, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("output/copy.log")).unwrap(),
        "line 1\nline 2\n"
    );

    // Never outside the workspace.
    let out = tools
        .call(
            "SshUpload",
            ws.path(),
            Some(allowed),
            true,
            json!({"connection_id": CONN, "local_path": "/etc/hostname", "remote_path": "/tmp/x"}),
        )
        .await;
    assert!(
        !out.ok && out.output.contains("outside the workspace"),
        "{out:?}"
    );
    let out = tools
        .call("SshDownload", ws.path(), Some(allowed), true, json!({"connection_id": CONN, "remote_path": sshd.path("server.log"), "local_path": "../escape.log"}))
        .await;
    assert!(
        !out.ok && out.output.contains("outside the workspace"),
        "{out:?}"
    );
    let out = tools
        .call(
            "SshDownload",
            ws.path(),
            Some(allowed),
            false,
            json!({"connection_id": CONN, "remote_path": sshd.path("missing.txt")}),
        )
        .await;
    assert!(!out.ok && out.output.contains("cannot stat"), "{out:?}");
}
