//! Property tests of the command-line policy against a real shell: whatever line the policy
//! lets through with only `echo` allowed, `/bin/sh` must never start any other program; and with
//! programs that have exec-capable options allowed (`sort`, `sed`, `awk`, `find`, `xargs`,
//! `env`, `timeout`, `tar`, `git`, `sqlite3`, `zip`), no accepted line may run the marker
//! program `x`.

use std::os::unix::fs::PermissionsExt;

use maestro_sandbox::check_command;
use proptest::prelude::*;

/// Fragments that combine into tricky command lines: programs, operators, quotes, expansions,
/// substitutions, redirections.
const FRAGMENTS: &[&str] = &[
    "echo ",
    "echo ",
    "echo ",
    " x",
    " x",
    "; ",
    " | ",
    " && ",
    "echo",
    "trap",
    "curl",
    " ",
    " ",
    "x",
    "'",
    "\"",
    "\\",
    "|",
    "||",
    "&&",
    ";",
    "&",
    "\n",
    "$(",
    ")",
    "(",
    "`",
    "$X",
    "${X}",
    "=",
    "X=",
    "PATH=.",
    ">",
    "<",
    "2>&1",
    "<<",
    "{",
    "}",
    "*",
    "#",
    "-c",
    "sh",
    "env",
    "eval",
    "c'u'rl",
    "\\curl",
    "$'\\x63url'",
    "\"curl\"",
];

fn line() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 1..12).prop_map(|parts| parts.concat())
}

/// A PATH holding fake programs that leave a mark when run.
fn marker_path() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    for program in ["curl", "sh", "env", "x"] {
        let path = dir.path().join(program);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho {program} >> {}\n", mark.display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (dir, mark)
}

/// Fragments for lines that use exec-capable programs; `x` is the marker program.
const EXEC_FRAGMENTS: &[&str] = &[
    "sort ",
    "sed ",
    "awk ",
    "find . ",
    "xargs ",
    "env ",
    "timeout 5 ",
    "echo ",
    " ",
    " ",
    "x",
    "x ",
    "--compress-program=x ",
    "--compress-prog x ",
    "-S 1k ",
    "-e ",
    "-n ",
    "-i",
    "-f ",
    "-S",
    "-iS",
    "'1e x' ",
    "'s/a/x/e' ",
    "e",
    "'BEGIN{system(\"x\")}' ",
    "'BEGIN{print | \"x\"}' ",
    "'{print}' ",
    "-exec x ';' ",
    "-exec ",
    "';' ",
    "-I{} ",
    "{} ",
    "-- ",
    "| ",
    "; ",
    "'",
    "\"",
    "=",
    "A=1 ",
    "PATH=. ",
    "tar ",
    "cf /dev/null a ",
    "--checkpoint=1 ",
    "--checkpoint-action=exec=x ",
    "-I x ",
    "--to-command=x ",
    "git ",
    "-c alias.y='!x' y ",
    "-c core.pager=x ",
    "sqlite3 :memory: ",
    "'.shell x' ",
    "'.system x' ",
    "'select 1' ",
    "zip ",
    "-T -TT x ",
    "output.zip a ",
];

fn exec_line() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(EXEC_FRAGMENTS), 1..10)
        .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn the_parser_never_panics(line in ".{0,200}") {
        let _ = check_command(&line, &["echo".to_string()], None);
    }

    #[test]
    fn accepted_lines_start_only_allowed_programs(line in line()) {
        let allowed = vec!["echo".to_string()];
        if check_command(&line, &allowed, None).is_ok() {
            let (dir, mark) = marker_path();
            let work = tempfile::tempdir().unwrap();
            let status = std::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(&line)
                .current_dir(work.path())
                .env_clear()
                .env("PATH", dir.path())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            let _ = status;
            let ran = std::fs::read_to_string(&mark).unwrap_or_default();
            prop_assert!(ran.is_empty(), "{line:?} was accepted but started: {ran}");
        }
    }

    #[test]
    fn accepted_lines_never_run_the_marker_through_exec_capable_options(line in exec_line()) {
        let allowed: Vec<String> = [
            "sort", "sed", "awk", "find", "xargs", "env", "timeout", "echo", "tar", "git", "sqlite3",
            "zip",
        ]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if check_command(&line, &allowed, None).is_ok() {
            let (dir, mark) = marker_path();
            let work = tempfile::tempdir().unwrap();
            std::fs::write(work.path().join("a"), "a\n").unwrap();
            let path = format!("{}:/usr/bin:/bin", dir.path().display());
            let _ = std::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(&line)
                .current_dir(work.path())
                .env_clear()
                .env("PATH", path)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            let ran = std::fs::read_to_string(&mark).unwrap_or_default();
            prop_assert!(!ran.contains('x'), "{line:?} was accepted but ran: {ran}");
        }
    }
}
