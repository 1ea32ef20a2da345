#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The SSH rules that protect a real server: `allowed_ssh_connections` as the piece schema
//! defines it, ownership, host key verification, and secrets that never reach the output.

mod ssh_support;

use maestro_protocol::Secret;
use maestro_tools_ssh::{SecretSource, SshAuth};
use serde_json::json;
use ssh_support::{CONN, Sshd, SshdExt, Tools, password};

const OTHER: &str = "7a8b9cde-1234-4567-89ab-cdef12345678";
const UNREGISTERED: &str = "11111111-2222-4333-8444-555555555555";

fn exec(id: &str) -> serde_json::Value {
    json!({"connection_id": id, "command": "echo reached"})
}

fn code(out: &maestro_tools::ToolOutput) -> &str {
    assert!(!out.ok, "expected a refusal, got {out:?}");
    [
        "no_allowed_connections_declared",
        "connection_not_allowed",
        "unknown_connection",
        "connection_not_owned",
    ]
    .into_iter()
    .find(|c| out.output.contains(c))
    .unwrap_or_else(|| panic!("no error code in {:?}", out.output))
}

#[tokio::test]
#[cfg_attr(
    no_sshd,
    ignore = "needs the OpenSSH server: apt-get install openssh-server, or scripts/prerequisites.sh"
)]
async fn allowlist_is_enforced_exactly() {
    let sshd = Sshd::start();
    let ws = tempfile::tempdir().unwrap();
    let mut owned = sshd.connection(OTHER);
    owned.owner = Some("alice".into());
    let tools = Tools::new(vec![sshd.connection(CONN), owned], Some("bob"));
    let w = ws.path();

    for name in ["SshExec", "SshUpload", "SshDownload"] {
        let input = json!({"connection_id": CONN, "local_path": "a", "remote_path": "/tmp/a"});
        let input = match name {
            "SshExec" => exec(CONN),
            "SshUpload" => input,
            _ => json!({"connection_id": CONN, "remote_path": "/tmp/a"}),
        };
        assert_eq!(
            code(&tools.call(name, w, None, true, input.clone()).await),
            "no_allowed_connections_declared",
            "{name}"
        );
        assert_eq!(
            code(&tools.call(name, w, Some(&[]), true, input).await),
            "no_allowed_connections_declared",
            "{name}"
        );
    }
    assert_eq!(
        code(
            &tools
                .call("SshExec", w, Some(&[OTHER]), false, exec(CONN))
                .await
        ),
        "connection_not_allowed"
    );
    assert_eq!(
        code(
            &tools
                .call("SshExec", w, Some(&[CONN]), false, exec(UNREGISTERED))
                .await
        ),
        "connection_not_allowed"
    );
    assert_eq!(
        code(
            &tools
                .call(
                    "SshExec",
                    w,
                    Some(&[UNREGISTERED]),
                    false,
                    exec(UNREGISTERED)
                )
                .await
        ),
        "unknown_connection"
    );
    assert_eq!(
        code(
            &tools
                .call("SshExec", w, Some(&["*"]), false, exec(UNREGISTERED))
                .await
        ),
        "unknown_connection"
    );
    // '*' still checks ownership: OTHER belongs to alice and this run is bob's.
    assert_eq!(
        code(
            &tools
                .call("SshExec", w, Some(&["*"]), false, exec(OTHER))
                .await
        ),
        "connection_not_owned"
    );
    assert_eq!(
        code(
            &tools
                .call("SshExec", w, Some(&[OTHER]), false, exec(OTHER))
                .await
        ),
        "connection_not_owned"
    );

    let out = tools
        .call("SshExec", w, Some(&["*"]), false, exec(CONN))
        .await;
    assert!(out.ok && out.output.contains("reached"), "{out:?}");
    let out = tools
        .call("SshExec", w, Some(&[OTHER, CONN]), false, exec(CONN))
        .await;
    assert!(out.ok && out.output.contains("reached"), "{out:?}");
    let alice = Tools::new(
        vec![sshd.connection(CONN), {
            let mut c = sshd.connection(OTHER);
            c.owner = Some("alice".into());
            c
        }],
        Some("alice"),
    );
    let out = alice
        .call("SshExec", w, Some(&["*"]), false, exec(OTHER))
        .await;
    assert!(out.ok && out.output.contains("reached"), "{out:?}");
}

#[tokio::test]
#[cfg_attr(
    no_sshd,
    ignore = "needs the OpenSSH server: apt-get install openssh-server, or scripts/prerequisites.sh"
)]
async fn host_keys_are_verified() {
    let sshd = Sshd::start();
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    let fingerprint = sshd.host_fingerprint();

    let mut by_fingerprint = sshd.connection(CONN);
    by_fingerprint.known_host_key = Some(fingerprint.clone());
    let out = Tools::new(vec![by_fingerprint], None)
        .call("SshExec", w, Some(&[CONN]), false, exec(CONN))
        .await;
    assert!(out.ok, "{out:?}");

    // Another key than the server's: refused before authenticating.
    let mut wrong = sshd.connection(CONN);
    wrong.known_host_key = Some(std::fs::read_to_string(sshd.path("other_key.pub")).unwrap());
    let out = Tools::new(vec![wrong], None)
        .call("SshExec", w, Some(&[CONN]), false, exec(CONN))
        .await;
    assert!(!out.ok, "{out:?}");
    assert!(
        out.output.contains("host key verification failed"),
        "{}",
        out.output
    );
    assert!(!out.output.contains("reached"));

    let mut wrong_fp = sshd.connection(CONN);
    wrong_fp.known_host_key = Some("SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into());
    let out = Tools::new(vec![wrong_fp], None)
        .call("SshExec", w, Some(&[CONN]), false, exec(CONN))
        .await;
    assert!(
        !out.ok && out.output.contains("host key verification failed"),
        "{out:?}"
    );

    // Nothing configured: no silent trust; the error shows the fingerprint to pin.
    let mut unknown = sshd.connection(CONN);
    unknown.known_host_key = None;
    let out = Tools::new(vec![unknown.clone()], None)
        .call("SshExec", w, Some(&[CONN]), false, exec(CONN))
        .await;
    assert!(!out.ok, "{out:?}");
    assert!(
        out.output.contains("has no known_host_key"),
        "{}",
        out.output
    );
    assert!(
        out.output.contains(&format!("ssh-ed25519 {fingerprint}")),
        "{} vs {fingerprint}",
        out.output
    );

    unknown.insecure_accept_any_host_key = true;
    let out = Tools::new(vec![unknown], None)
        .call("SshExec", w, Some(&[CONN]), false, exec(CONN))
        .await;
    assert!(out.ok, "{out:?}");
}

#[tokio::test]
#[cfg_attr(
    no_sshd,
    ignore = "needs the OpenSSH server: apt-get install openssh-server, or scripts/prerequisites.sh"
)]
async fn secrets_never_reach_the_output() {
    let sshd = Sshd::start();
    let ws = tempfile::tempdir().unwrap();
    let secret = "Tr0ub4dor-and-3-horses";
    let mut conn = sshd.connection(CONN);
    conn.auth = password(secret);
    assert!(!format!("{conn:?}").contains(secret));
    let tools = Tools::new(vec![conn], None);
    let out = tools
        .call("SshExec", ws.path(), Some(&[CONN]), false, exec(CONN))
        .await;
    assert!(!out.ok, "{out:?}");
    assert!(out.output.contains("was rejected"), "{}", out.output);
    assert!(!out.output.contains(secret), "{}", out.output);

    // A passphrase-protected key: the right passphrase works, a wrong one is not echoed.
    let phrase = "correct-horse-battery-staple";
    let locked = sshd.path("locked_key");
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", phrase, "-f"])
        .arg(&locked)
        .status()
        .unwrap();
    assert!(status.success());
    let mut authorized = std::fs::read_to_string(sshd.path("authorized_keys")).unwrap();
    authorized.push_str(&std::fs::read_to_string(sshd.path("locked_key.pub")).unwrap());
    std::fs::write(sshd.path("authorized_keys"), authorized).unwrap();
    let with_phrase = |p: &str| {
        let mut conn = sshd.connection(CONN);
        conn.auth = SshAuth::Key {
            path: locked.clone(),
            passphrase: Some(SecretSource::Inline(Secret::new(p))),
        };
        Tools::new(vec![conn], None)
    };
    let out = with_phrase(phrase)
        .call("SshExec", ws.path(), Some(&[CONN]), false, exec(CONN))
        .await;
    assert!(out.ok && out.output.contains("reached"), "{out:?}");
    let wrong = "not-the-right-phrase";
    let out = with_phrase(wrong)
        .call("SshExec", ws.path(), Some(&[CONN]), false, exec(CONN))
        .await;
    assert!(
        !out.ok && out.output.contains("cannot load the private key"),
        "{out:?}"
    );
    assert!(
        !out.output.contains(wrong) && !out.output.contains(phrase),
        "{}",
        out.output
    );
}
