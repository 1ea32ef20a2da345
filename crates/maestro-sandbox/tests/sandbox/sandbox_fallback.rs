//! The landlock fallback (`safety.bash_sandbox: off`, or `auto` without bubblewrap): the kernel
//! keeps commands to the system directories and the workspace, with a scrubbed environment and
//! the time limit; and `unsafe_no_sandbox`, where only the allowlist and its path checks stand.

use crate::support;

use maestro_tools::BashSandboxMode;
use support::{Bench, processes_with};

#[tokio::test]
async fn commands_run_in_the_workspace_with_a_clean_environment() {
    let b = Bench::new(BashSandboxMode::Off).allow(&["cat", "pwd", "echo"]);
    b.write("input/a.txt", "hello\n");
    let out = b
        .bash("cat input/a.txt; echo \"[$MAESTRO_API_KEY][$CARGO_HOME]\"")
        .await;
    assert_eq!((out.ok, out.output.as_str()), (true, "hello\n[][]\n"));
    let out = b.bash("pwd").await;
    assert_eq!(
        out.output.trim(),
        std::fs::canonicalize(b.root())
            .unwrap()
            .display()
            .to_string()
    );
}

#[tokio::test]
async fn paths_outside_the_workspace_are_unreachable() {
    let b = Bench::new(BashSandboxMode::Off)
        .editing()
        .allow(&["cat", "echo", "cp", "ls", "head"]);
    b.write("input/a", "a\n");
    for command in [
        "cat /etc/shadow",
        "cat ../x",
        "ls /",
        "ls /root",
        "cp input/a /tmp/maestro-fallback-pwned",
        "echo x > /tmp/maestro-fallback-pwned",
        "echo x > input/x",
        "cat ~/.profile",
    ] {
        let out = b.bash(command).await;
        assert!(!out.ok, "{command}: {out:?}");
        assert!(
            out.output.contains("Permission denied") || out.output.contains("No such file"),
            "{command}: {out:?}"
        );
    }
    assert!(!std::path::Path::new("/tmp/maestro-fallback-pwned").exists());
    assert!(!b.path("input/x").exists());
    let out = b
        .bash("cat /etc/passwd | head -c 5; echo ok > output/x && cat output/x")
        .await;
    assert_eq!((out.ok, out.output.as_str()), (true, "root:ok\n"));
}

#[tokio::test]
async fn without_a_sandbox_literal_paths_outside_are_refused() {
    let b = Bench::new(BashSandboxMode::UnsafeNoSandbox)
        .editing()
        .allow(&["cat", "echo"]);
    for command in [
        "cat /etc/shadow",
        "echo x > /tmp/maestro-unsafe-pwned",
        "echo x > input/x",
    ] {
        let out = b.bash(command).await;
        assert!(
            !out.ok && out.output.starts_with("command refused: "),
            "{command}: {out:?}"
        );
    }
    assert!(!std::path::Path::new("/tmp/maestro-unsafe-pwned").exists());
}

#[tokio::test]
async fn the_time_limit_kills_the_process_group() {
    let b = Bench::new(BashSandboxMode::Off).allow(&["sleep"]);
    let out = b
        .call(
            "Bash",
            serde_json::json!({"command": "sleep 4343 & sleep 4344", "timeout": 300}),
        )
        .await;
    assert!(out.output.contains("[timed out after 300 ms"), "{out:?}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(processes_with("sleep 4343"), Vec::<String>::new());
    assert_eq!(processes_with("sleep 4344"), Vec::<String>::new());
}

/// Programs that can run other programs are handled by the policy the same way in every mode,
/// so the fallback uses the same default list: `awk` runs, `awk system()` does not.
#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn the_default_allowlist_is_the_same_in_the_fallback() {
    for mode in [BashSandboxMode::Off, BashSandboxMode::Always] {
        let b = Bench::new(mode);
        let out = b.bash("awk 'BEGIN { print 1 }'").await;
        assert_eq!((out.ok, out.output.as_str()), (true, "1\n"), "{mode:?}");
        let out = b.bash("awk 'BEGIN { system(\"id\") }'").await;
        assert!(
            out.output
                .starts_with("command refused: `awk system()` runs a shell command"),
            "{mode:?}: {out:?}"
        );
    }
}
