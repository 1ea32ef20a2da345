//! Allowlist bypass attempts through the `Bash` tool, under bubblewrap and in the fallback:
//! each is refused before anything runs, with a message saying why.

use crate::support;

use maestro_sandbox::PathPolicy;
use maestro_tools::BashSandboxMode;
use support::Bench;

const BYPASSES: &[&str] = &[
    "sh -c 'touch output/pwned'",
    "bash -c 'touch output/pwned'",
    "/bin/sh -c 'touch output/pwned'",
    "env touch output/pwned",
    "env -i touch output/pwned",
    "echo `touch output/pwned`",
    "echo $(touch output/pwned)",
    "echo \"$(touch output/pwned)\"",
    "ls | xargs touch",
    "ls && touch output/pwned",
    "ls; touch output/pwned",
    "ls || touch output/pwned",
    "ls & touch output/pwned",
    "ls\ntouch output/pwned",
    "find . -exec touch output/pwned ;",
    "eval 'touch output/pwned'",
    "exec touch output/pwned",
    "(touch output/pwned)",
    "t=touch; $t output/pwned",
    "to''uch output/pwned",
    "./touch output/pwned",
    "ls <(touch output/pwned)",
    "cat <<EOF\n$(touch output/pwned)\nEOF",
    "PATH=/workspace/output ls",
    "if true; then touch output/pwned; fi",
];

async fn assert_all_refused(mode: BashSandboxMode) {
    let b = Bench::new(mode)
        .editing()
        .allow(&["ls", "echo", "cat", "xargs", "find", "env"]);
    for attempt in BYPASSES {
        let out = b.bash(attempt).await;
        assert!(!out.ok, "{attempt:?} ran: {out:?}");
        assert!(
            out.output.starts_with("command refused: "),
            "{attempt:?}: {out:?}"
        );
        assert!(
            !b.path("output/pwned").exists(),
            "{attempt:?} created the file"
        );
    }
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn bypasses_are_refused_under_bubblewrap() {
    assert_all_refused(BashSandboxMode::Always).await;
}

#[tokio::test]
async fn bypasses_are_refused_in_the_fallback() {
    assert_all_refused(BashSandboxMode::Off).await;
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn refusals_say_what_to_do() {
    let b = Bench::new(BashSandboxMode::Always).allow(&["ls", "pip", "python3", "npm"]);
    let cases = [
        (
            "curl http://example.invalid",
            "command refused: `curl` is not in this movement's allowed commands; allowed: ls, pip, python3, npm",
        ),
        (
            "bash -c ls",
            "command refused: `bash` is a shell: it runs any command, so an allowlist cannot limit what it does; it runs only when the movement's allowed_commands contains `*` (any program, any options; the command still runs inside the sandbox)",
        ),
        (
            "pip install requests",
            &format!("command refused: {}", maestro_sandbox::INSTALL_REFUSED),
        ),
        (
            "python3 -m pip install requests",
            &format!("command refused: {}", maestro_sandbox::INSTALL_REFUSED),
        ),
        (
            "npm install left-pad",
            &format!("command refused: {}", maestro_sandbox::INSTALL_REFUSED),
        ),
    ];
    for (command, expected) in cases {
        let out = b.bash(command).await;
        assert_eq!((out.ok, out.output.as_str()), (false, expected));
    }
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn allowed_pipelines_run() {
    let b = Bench::new(BashSandboxMode::Always)
        .allow(&["printf", "sort", "uniq", "wc", "xargs", "echo"]);
    let out = b.bash("printf 'b\\na\\nb\\n' | sort | uniq | wc -l && echo done; printf 'x y' | xargs echo got").await;
    assert_eq!((out.ok, out.output.as_str()), (true, "2\ndone\ngot x y\n"));
}

fn allowed(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Why the policy refuses `line`, as the text the model reads; `None` when it passes.
fn check(line: &str, allowed: &[String], paths: Option<PathPolicy<'_>>) -> Option<String> {
    maestro_sandbox::check_command(line, allowed, paths)
        .err()
        .map(|e| e.to_string())
}

/// Without a kernel sandbox, the paths a command names are held to the workspace's rules.
#[test]
fn fallback_paths_stay_in_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    maestro_tools::prepare_workspace(dir.path()).unwrap();
    let ws = maestro_tools::Workspace::open(dir.path()).unwrap();
    let writable = allowed(&["output"]);
    let rules = maestro_tools::bash::WorkspacePaths {
        workspace: &ws,
        writable_dirs: &writable,
    };
    let policy = PathPolicy {
        rules: &rules,
        edit: true,
    };
    let a = allowed(&["cat", "echo", "grep", "awk"]);
    assert_eq!(
        check(
            "cat input/a.txt > output/b.txt 2>/dev/null",
            &a,
            Some(policy)
        ),
        None
    );
    assert_eq!(
        check("awk '/etcx/ {print}' input/a", &a, Some(policy)),
        None
    );
    for line in [
        "cat /etc/passwd",
        "cat ../x",
        "echo x > /tmp/x",
        "echo x > input/x",
        "grep --file=/etc/shadow x",
        "cat ~/.bashrc",
    ] {
        assert!(
            check(line, &a, Some(policy)).is_some(),
            "`{line}` should be refused"
        );
    }
    let read_only = PathPolicy {
        edit: false,
        ..policy
    };
    assert!(check("echo x > output/x", &a, Some(read_only)).is_some());
}
