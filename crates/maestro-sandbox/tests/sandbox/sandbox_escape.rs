//! Escape attempts against `Bash` in the real bubblewrap sandbox (`safety.bash_sandbox:
//! always`) and against the file tools: each attempt must be refused or contained.

use crate::support;

use std::time::{Duration, Instant};

use maestro_tools::BashSandboxMode;
use support::{Bench, processes_with};

fn bench() -> Bench {
    Bench::new(BashSandboxMode::Always)
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn bubblewrap_works_here_so_these_tests_test_it() {
    let out = bench().bash("echo inside").await;
    assert_eq!((out.ok, out.output.as_str()), (true, "inside\n"), "{out:?}");
}

#[tokio::test]
async fn etc_shadow_is_not_readable() {
    let host = std::fs::read_to_string("/etc/shadow").unwrap();
    let first = host.lines().next().unwrap().to_string();
    let b = bench();
    let out = b.bash("cat /etc/shadow").await;
    assert!(!out.ok, "{out:?}");
    assert!(out.output.contains("No such file"), "{out:?}");
    assert!(!out.output.contains(&first));
    let read = b
        .call("Read", serde_json::json!({"file_path": "/etc/shadow"}))
        .await;
    assert!(
        !read.ok && read.output.contains("outside the workspace"),
        "{read:?}"
    );
}

#[tokio::test]
async fn files_outside_the_workspace_are_invisible() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-CONTENT").unwrap();
    let b = bench().allow(&["cat", "ls", "find"]);
    let out = b.bash(&format!("cat {}", secret.display())).await;
    assert!(!out.ok && out.output.contains("No such file"), "{out:?}");
    assert!(!out.output.contains("TOP-SECRET-CONTENT"), "{out:?}");
    for cmd in [
        format!("ls {}", outside.path().display()),
        "find / -name secret.txt".to_string(),
    ] {
        let out = b.bash(&cmd).await;
        assert!(!out.output.contains("secret.txt"), "{cmd}: {out:?}");
    }
    let read = b
        .call(
            "Read",
            serde_json::json!({"file_path": secret.display().to_string()}),
        )
        .await;
    assert!(!read.ok, "{read:?}");
    let rel = format!(
        "../{}/secret.txt",
        outside.path().file_name().unwrap().to_string_lossy()
    );
    let read = b.call("Read", serde_json::json!({"file_path": rel})).await;
    assert!(!read.ok, "{read:?}");
}

#[tokio::test]
async fn writes_outside_the_workspace_fail() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("pwned");
    let b = bench().editing().allow(&["echo", "touch", "cp"]);
    for cmd in [
        format!("echo x > {}", target.display()),
        format!("touch {}", target.display()),
        "touch /usr/pwned".to_string(),
        "echo x > /etc/pwned".to_string(),
        "touch ../pwned".to_string(),
    ] {
        let out = b.bash(&cmd).await;
        assert!(!out.ok, "{cmd}: {out:?}");
    }
    assert!(!target.exists());
    assert!(!std::path::Path::new("/usr/pwned").exists());
    assert!(!std::path::Path::new("/etc/pwned").exists());
    assert!(!b.root().parent().unwrap().join("pwned").exists());
    let write = b
        .call(
            "Write",
            serde_json::json!({"file_path": target.display().to_string(), "content": "x"}),
        )
        .await;
    assert!(!write.ok, "{write:?}");
    assert!(!target.exists());
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn only_writable_dirs_of_editing_movements_are_writable() {
    let b = bench().allow(&["touch"]);
    assert!(!b.bash("touch output/a").await.ok);
    assert!(!b.path("output/a").exists());
    let b = b.editing();
    let out = b.bash("touch output/a").await;
    assert!(out.ok, "{out:?}");
    assert!(b.path("output/a").exists());
    assert!(!b.bash("touch input/a").await.ok);
    assert!(!b.path("input/a").exists());
    // /tmp is the sandbox's own scratch space.
    assert!(b.bash("touch /tmp/scratch").await.ok);
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn the_network_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let b = bench().allow(&["*"]);
    let py = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\""
    );
    let out = b.bash(&py).await;
    assert!(!out.ok && !out.output.contains("CONNECTED"), "{out:?}");
    assert!(
        out.output.contains("Errno") || out.output.contains("unreachable"),
        "{out:?}"
    );
    let out = b
        .bash(&format!("curl -sS -m 3 http://127.0.0.1:{port}/"))
        .await;
    assert!(!out.ok, "{out:?}");
    assert_eq!(
        listener.accept().map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock)
    );
}

#[tokio::test]
#[allow(unsafe_code)]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn the_parent_environment_is_not_inherited() {
    // SAFETY: nextest runs every test in its own process; nothing else reads the environment
    // concurrently at this point.
    unsafe { std::env::set_var("MAESTRO_API_KEY", "sk-secret-value-123") };
    let b = bench().allow(&["cat", "echo", "tr"]);
    let out = b.bash("echo \"key=$MAESTRO_API_KEY\"; cat /proc/self/environ /proc/1/environ | tr '\\0' '\\n'").await;
    assert!(out.ok, "{out:?}");
    assert!(out.output.contains("key=\n"), "{out:?}");
    assert!(!out.output.contains("sk-secret-value-123"), "{out:?}");
    assert!(out.output.contains("HOME=/workspace"), "{out:?}");
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn the_sandbox_has_its_own_pid_namespace_and_no_capabilities() {
    let b = bench().allow(&["ls", "grep", "wc", "id"]);
    let out = b.bash("ls /proc | grep -c '^[0-9]'").await;
    let count: usize = out.output.trim().parse().unwrap_or(usize::MAX);
    assert!(count < 10, "{out:?}");
    let out = b.bash("grep CapEff /proc/self/status; id -u").await;
    assert_eq!(out.output, "CapEff:\t0000000000000000\n65534\n", "{out:?}");
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn a_fork_bomb_is_contained() {
    let b = bench().allow(&["*"]);
    let marker = format!("forkbomb-{}.sh", std::process::id());
    // The script stays alive while the bomb multiplies, so only the limits can end it.
    b.write(&marker, "f(){ f | f & }; f; sleep 30\n");
    let start = Instant::now();
    let out = b
        .call(
            "Bash",
            serde_json::json!({"command": format!("bash {marker}"), "timeout": 3000}),
        )
        .await;
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "took {:?}",
        start.elapsed()
    );
    assert!(!out.ok, "{out:?}");
    assert!(
        out.output.contains("[timed out after 3000 ms")
            || out.output.contains("[stopped: the command wrote more than"),
        "{:?}",
        &out.output[out.output.len().saturating_sub(300)..]
    );
    // Nothing of it survives the call.
    let mut left = processes_with(&marker);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = processes_with(&marker);
    }
    assert_eq!(left, Vec::<String>::new());
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn a_time_limit_kills_the_command_and_its_children() {
    let b = bench().allow(&["sleep"]);
    let out = b
        .call(
            "Bash",
            serde_json::json!({"command": "sleep 4242 & sleep 4243", "timeout": 500}),
        )
        .await;
    assert!(!out.ok);
    assert!(out.output.contains("[timed out after 500 ms"), "{out:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(processes_with("sleep 4242"), Vec::<String>::new());
    assert_eq!(processes_with("sleep 4243"), Vec::<String>::new());
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn runaway_output_is_capped_and_marked() {
    let b = bench().allow(&["yes", "seq"]);
    let out = b.bash("yes").await;
    assert!(
        out.truncated && !out.ok,
        "{:?}",
        &out.output[out.output.len().saturating_sub(300)..]
    );
    assert!(out.output.len() < 31_000);
    assert!(
        out.output
            .contains("[output truncated: showing the first 30000 of")
    );
    // A long but finite output is cut the same way and still succeeds.
    let out = b.bash("seq 1 20000").await;
    assert!(
        out.ok && out.truncated,
        "{:?}",
        &out.output[out.output.len().saturating_sub(300)..]
    );
    assert!(out.output.starts_with("1\n2\n3\n"));
    assert!(
        out.output
            .contains("[output truncated: showing the first 30000 of 108894 bytes]")
    );
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn symlinks_out_of_the_workspace_lead_nowhere() {
    let b = bench().editing().allow(&["cat", "echo", "ln", "ls"]);
    std::os::unix::fs::symlink("/etc", b.path("output/etc")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", b.path("input/shadow")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("x"), "OUTSIDE").unwrap();
    std::os::unix::fs::symlink(outside.path(), b.path("output/out")).unwrap();

    for (tool, input) in [
        ("Read", serde_json::json!({"file_path": "input/shadow"})),
        (
            "Read",
            serde_json::json!({"file_path": "output/etc/passwd"}),
        ),
        ("Read", serde_json::json!({"file_path": "output/out/x"})),
        (
            "Write",
            serde_json::json!({"file_path": "output/out/y", "content": "x"}),
        ),
        (
            "Write",
            serde_json::json!({"file_path": "output/etc/pwned", "content": "x"}),
        ),
        (
            "Edit",
            serde_json::json!({"file_path": "output/out/x", "old_string": "OUT", "new_string": "IN"}),
        ),
    ] {
        let out = b.call(tool, input.clone()).await;
        assert!(
            !out.ok && out.output.contains("outside the workspace"),
            "{tool} {input}: {out:?}"
        );
    }
    assert!(!outside.path().join("y").exists());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("x")).unwrap(),
        "OUTSIDE"
    );

    // In Bash the links point into the sandbox's own view, which holds neither target.
    let out = b.bash("cat input/shadow").await;
    assert!(!out.ok && out.output.contains("No such file"), "{out:?}");
    let out = b.bash("cat output/out/x").await;
    assert!(!out.ok && !out.output.contains("OUTSIDE"), "{out:?}");
    let out = b.bash("echo x > output/etc/pwned").await;
    assert!(!out.ok, "{out:?}");
    assert!(!std::path::Path::new("/etc/pwned").exists());
    // A link made inside the sandbox is just as harmless to the file tools.
    assert!(b.bash("ln -s /etc/hostname output/host").await.ok);
    let out = b
        .call("Read", serde_json::json!({"file_path": "output/host"}))
        .await;
    assert!(!out.ok, "{out:?}");
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn cancellation_stops_the_command_and_everything_it_started() {
    let b = bench().allow(&["sleep"]);
    let cancel = b.ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        cancel.cancel();
    });
    let out = b
        .call(
            "Bash",
            serde_json::json!({"command": "sleep 4545 & sleep 4546", "timeout": 60_000}),
        )
        .await;
    assert_eq!(
        out,
        maestro_tools::ToolOutput::error("`Bash` was cancelled")
    );
    let mut left = processes_with("sleep 454");
    for _ in 0..30 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = processes_with("sleep 454");
    }
    assert_eq!(left, Vec::<String>::new());
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn file_tools_wait_for_a_running_command_so_it_cannot_swap_paths_under_them() {
    let b = std::sync::Arc::new(bench().editing().allow(&["sleep", "echo"]));
    let runner = std::sync::Arc::clone(&b);
    let bash = tokio::spawn(async move { runner.bash("sleep 1 && echo done > output/flag").await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let read = b
        .call("Read", serde_json::json!({"file_path": "output/flag"}))
        .await;
    assert_eq!(read, maestro_tools::ToolOutput::ok("     1\tdone\n"));
    assert!(bash.await.unwrap().ok);
}
