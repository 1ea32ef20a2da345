//! Programs that can run other programs, through the real `Bash` tool: each reported form is
//! refused before anything runs, under bubblewrap and in the fallback, and its side effect does
//! not happen. With `*` the same command runs (inside the sandbox), which shows the side-effect
//! checks can see it.

use crate::support;

use maestro_tools::BashSandboxMode;
use support::Bench;

/// (the only program allowed, the command), each of which would create `output/pwned`.
const REPRODUCTIONS: &[(&str, &str)] = &[
    ("env", "env -iS\"touch output/pwned\""),
    (
        "sort",
        "printf 'touch output/pwned #\\n' | sort --compress-program=sh",
    ),
    ("sed", "sed '1e touch output/pwned' input/a.txt"),
    (
        "tar",
        "tar cf /dev/null input --checkpoint=1 --checkpoint-action=exec='touch output/pwned'",
    ),
    ("git", "git -c alias.x='!touch output/pwned' x"),
    ("sqlite3", "sqlite3 :memory: '.shell touch output/pwned'"),
    (
        "zip",
        "zip -T -TT 'touch output/pwned #' output/x.zip input/a.txt",
    ),
    ("awk", "awk 'BEGIN{system(\"touch output/pwned\")}'"),
    ("make", "make -f input/Makefile"),
    (
        "find",
        "find input -name a.txt -exec sh -c 'touch output/pwned' ';'",
    ),
    ("xargs", "printf 'output/pwned' | xargs -I{} {}"),
];

fn bench(mode: BashSandboxMode, allowed: &[&str]) -> Bench {
    let b = Bench::new(mode).editing().allow(allowed);
    b.write("input/a.txt", "hello\n");
    b.write("input/Makefile", "all:\n\ttouch output/pwned\n");
    b
}

async fn assert_refused_without_effect(mode: BashSandboxMode) {
    for (program, command) in REPRODUCTIONS {
        let b = bench(mode, &[program, "printf", "seq"]);
        let out = b.bash(command).await;
        assert!(
            !out.ok && out.output.starts_with("command refused: "),
            "[{program}] {command:?}: {out:?}"
        );
        assert!(
            !b.path("output/pwned").exists(),
            "[{program}] {command:?} created the file"
        );
    }
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn exec_capable_forms_are_refused_under_bubblewrap() {
    assert_refused_without_effect(BashSandboxMode::Always).await;
}

#[tokio::test]
async fn exec_capable_forms_are_refused_in_the_fallback() {
    assert_refused_without_effect(BashSandboxMode::Off).await;
}

/// The reported reproduction: under the default allowlist, `sort --compress-program=sh` ran
/// `touch` outside the workspace.
async fn assert_sort_reproduction_refused(mode: BashSandboxMode) {
    let outside = tempfile::tempdir().unwrap();
    let pwned = outside.path().join("PWNED");
    let b = Bench::new(mode).editing();
    let command = format!(
        "seq -f \"touch {} #%g\" 1 3000 | sort -S 16k --compress-program=sh",
        pwned.display()
    );
    let out = b.bash(&command).await;
    assert_eq!(
        (out.ok, out.output.as_str()),
        (
            false,
            "command refused: `sort --compress-program` runs the program it is given; `sort` is \
             allowed without it. To allow any program and option, put `*` in the movement's \
             allowed_commands"
        )
    );
    assert!(!pwned.exists(), "{} was created", pwned.display());
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn the_sort_reproduction_is_refused_under_bubblewrap() {
    assert_sort_reproduction_refused(BashSandboxMode::Always).await;
}

#[tokio::test]
async fn the_sort_reproduction_is_refused_in_the_fallback() {
    assert_sort_reproduction_refused(BashSandboxMode::Off).await;
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn interpreters_run_only_with_the_wildcard() {
    let b = bench(BashSandboxMode::Always, &["python3"]);
    let out = b.bash("python3 -c 'print(6 * 7)'").await;
    assert!(
        out.output
            .starts_with("command refused: `python3` runs code")
            && out.output.contains("allowed_commands contains `*`"),
        "{out:?}"
    );
    let b = bench(BashSandboxMode::Always, &["*"]);
    let out = b.bash("python3 -c 'print(6 * 7)'").await;
    assert_eq!((out.ok, out.output.as_str()), (true, "42\n"));
}

/// With `*`, the forms run, so the absence of `output/pwned` above is the refusal's doing.
#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn with_the_wildcard_the_same_forms_run_inside_the_sandbox() {
    for command in [
        "sed '1e touch output/pwned' input/a.txt",
        "make -f input/Makefile",
        "awk 'BEGIN{system(\"touch output/pwned\")}'",
    ] {
        let b = bench(BashSandboxMode::Always, &["*"]);
        let out = b.bash(command).await;
        assert!(out.ok, "{command:?}: {out:?}");
        assert!(b.path("output/pwned").exists(), "{command:?} did not run");
    }
}

#[tokio::test]
#[cfg_attr(
    no_bwrap,
    ignore = "needs bubblewrap: apt-get install bubblewrap, or scripts/prerequisites.sh"
)]
async fn harmless_uses_of_the_same_programs_still_run() {
    let b = bench(
        BashSandboxMode::Always,
        &["sed", "awk", "sort", "tar", "sqlite3"],
    );
    for (command, expected) in [
        ("sed -n 's/hello/bye/p' input/a.txt", "bye\n"),
        ("awk '{print toupper($0)}' input/a.txt", "HELLO\n"),
        ("sort -S 16k input/a.txt", "hello\n"),
        (
            "tar cf output/a.tar input/a.txt && tar tf output/a.tar",
            "input/a.txt\n",
        ),
        ("sqlite3 :memory: 'select 6 * 7'", "42\n"),
    ] {
        let out = b.bash(command).await;
        assert_eq!(
            (out.ok, out.output.as_str()),
            (true, expected),
            "{command:?}"
        );
    }
}
