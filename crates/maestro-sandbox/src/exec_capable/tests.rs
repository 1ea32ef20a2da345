//! One case per row of the exec-capable table: the forms that run programs are refused with
//! only that program allowed (plus `extra`), and a harmless use still passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::{Capability, TABLE, lookup};
use crate::policy::{INSTALL_REFUSED, PathPolicy};

/// Why the policy refuses `line`, as the text the model reads; `None` when it passes.
fn check(line: &str, allowed: &[String], paths: Option<PathPolicy<'_>>) -> Option<String> {
    crate::policy::check(line, allowed, paths)
        .err()
        .map(|e| e.to_string())
}

/// A row's test: the program, other programs the lines use, refused lines with a fragment the
/// refusal must contain, and harmless lines.
struct Case {
    program: &'static str,
    extra: &'static [&'static str],
    refused: &'static [(&'static str, &'static str)],
    harmless: &'static [&'static str],
}

const OPTION_HINT: &str = "is allowed without it";

const CASES: &[Case] = &[
    Case {
        program: "env",
        extra: &["ls"],
        refused: &[
            ("env -iS\"head -2 /etc/passwd\"", "`env -S`"),
            ("env -S 'ls -l'", "`env -S`"),
            ("env --split-string='ls -l'", "`env --split-string`"),
            ("env --sp=ls", "`env --split-string`"),
            ("env -a sh ls", "`env -a`"),
            ("env LD_PRELOAD=output/x.so ls", "LD_PRELOAD"),
            ("env A=1 PATH=output ls", "PATH"),
            ("env -i sh -c ls", "`sh` is a shell"),
            ("env curl x", "`curl` is not in"),
        ],
        harmless: &["env", "env -i A=1 ls -l", "env -u HOME -- ls"],
    },
    Case {
        program: "xargs",
        extra: &["ls", "sed"],
        refused: &[
            ("xargs sh -c 'id'", "`sh` is a shell"),
            ("xargs -I{} {} x", "runs a program named by its input"),
            ("xargs -iX X", "runs a program named by its input"),
            ("xargs --replace=P P", "runs a program named by its input"),
            ("xargs sed s/a/b/", "`xargs sed` is not allowed"),
            ("xargs -n1 xargs ls", "`xargs xargs` is not allowed"),
            (
                "xargs --process-slot-var=PATH ls",
                "--process-slot-var=PATH",
            ),
            ("xargs -0 curl", "`curl` is not in"),
        ],
        harmless: &[
            "xargs",
            "xargs -n1 ls -l",
            "xargs -0 -P 2 ls",
            "xargs -I{} ls {}",
        ],
    },
    Case {
        program: "find",
        extra: &["ls"],
        refused: &[
            ("find . -exec sh -c id ';'", "`sh` is a shell"),
            (
                "find . -exec ls ';' -execdir curl x ';'",
                "`curl` is not in",
            ),
            ("find . -ok curl {} +", "`curl` is not in"),
            (
                "find output -name x -exec {} ';'",
                "runs the files it finds",
            ),
        ],
        harmless: &[
            "find . -name '*.rs' -fprint output/list",
            "find . -exec ls -l {} +",
        ],
    },
    Case {
        program: "timeout",
        extra: &["ls"],
        refused: &[
            ("timeout 5 sh x", "`sh` is a shell"),
            ("timeout -s KILL 5 curl x", "`curl` is not in"),
            ("timeout --kill-after 1 5 curl ls", "`curl` is not in"),
        ],
        harmless: &["timeout 5 ls", "timeout --signal KILL 5 ls -l"],
    },
    Case {
        program: "nice",
        extra: &["ls"],
        refused: &[
            ("nice -n 5 sh x", "`sh` is a shell"),
            ("nice -5 curl", "`curl` is not in"),
        ],
        harmless: &["nice", "nice -n 5 ls"],
    },
    Case {
        program: "nohup",
        extra: &["ls"],
        refused: &[("nohup sh x", "`sh` is a shell")],
        harmless: &["nohup ls"],
    },
    Case {
        program: "time",
        extra: &["ls"],
        refused: &[
            ("time -f %e sh x", "`sh` is a shell"),
            ("time -o output/t curl", "`curl`"),
        ],
        harmless: &["time -o output/t ls"],
    },
    Case {
        program: "stdbuf",
        extra: &["ls"],
        refused: &[
            ("stdbuf -oL sh x", "`sh` is a shell"),
            ("stdbuf -o L curl x", "`curl`"),
        ],
        harmless: &["stdbuf -o L ls"],
    },
    Case {
        program: "ionice",
        extra: &["ls"],
        refused: &[("ionice -c 3 sh x", "`sh` is a shell")],
        harmless: &["ionice -p 1", "ionice -c3 ls"],
    },
    Case {
        program: "taskset",
        extra: &["ls"],
        refused: &[
            ("taskset -c 0 curl ls", "`curl` is not in"),
            ("taskset 1 sh x", "`sh` is a shell"),
        ],
        harmless: &["taskset 1 ls", "taskset -p 1", "taskset -c 0-1 ls"],
    },
    Case {
        program: "chrt",
        extra: &["ls"],
        refused: &[
            ("chrt 0 sh x", "`sh` is a shell"),
            ("chrt -b 0 curl ls", "`curl`"),
        ],
        harmless: &["chrt -p 1", "chrt -o 0 ls"],
    },
    Case {
        program: "flock",
        extra: &["ls"],
        refused: &[
            ("flock output/l -c 'sh x'", "`sh` is a shell"),
            ("flock output/l -c 'ls; curl x'", "`curl` is not in"),
            ("flock -w 1 output/l sh", "`sh` is a shell"),
        ],
        harmless: &["flock output/l ls", "flock output/l -c 'ls -l'", "flock 3"],
    },
    Case {
        program: "watch",
        extra: &["ls"],
        refused: &[
            ("watch 'ls; curl x'", "`curl` is not in"),
            ("watch -n 1 ls '&&' curl", "`curl` is not in"),
            ("watch -x sh x", "`sh` is a shell"),
        ],
        harmless: &["watch -n 1 ls", "watch -x ls -l"],
    },
    Case {
        program: "chroot",
        extra: &["ls"],
        refused: &[
            ("chroot /", "runs an interactive shell"),
            ("chroot --userspec=1:1 / sh", "`sh` is a shell"),
        ],
        harmless: &["chroot / ls"],
    },
    Case {
        program: "split",
        extra: &["ls"],
        refused: &[
            ("split --filter='sh -c id' input/a", "`sh` is a shell"),
            ("split --fil=curl input/a", "`curl` is not in"),
        ],
        harmless: &[
            "split -l 10 input/a output/part",
            "split --filter='ls' input/a",
        ],
    },
    Case {
        program: "sort",
        extra: &[],
        refused: &[
            (
                "sort -S 16k --compress-program=sh",
                "`sort --compress-program`",
            ),
            ("sort --compress-prog=gzip x", "`sort --compress-program`"),
            ("sort x --compress-program sh", "`sort --compress-program`"),
            ("sort $X x", "is expanded by the shell"),
        ],
        harmless: &["sort -S 16k -k2,2n x", "sort --check x", "sort -u -- *"],
    },
    Case {
        program: "sed",
        extra: &[],
        refused: &[
            ("sed '1e touch output/pwned' x", "`sed e COMMAND`"),
            ("sed 's/.*/id/e' x", "`sed s///e`"),
            ("sed -n -e p -e '1e id' x", "`sed e COMMAND`"),
            ("sed --expression='s/x/id/e' x", "`sed s///e`"),
            ("sed -iex '1e id' x", "`sed e COMMAND`"),
            ("sed -f output/s.sed x", "`sed -f`"),
            ("sed --file=output/s.sed x", "`sed --file`"),
            ("sed 'k' x", "is not a script this policy can read"),
            ("sed {s/a/b/,e} x", "is expanded by the shell"),
            ("POSIXLY_CORRECT=1 sed '1e id' -e p", "POSIXLY_CORRECT"),
        ],
        harmless: &[
            "sed -n '1,5p' x",
            "sed -i.bak -e 's/a/b/g' x",
            "sed -E 's/(a|b)e/c/g;/^e/d' x",
            "sed --sandbox -f output/s.sed x",
        ],
    },
    Case {
        program: "awk",
        extra: &[],
        refused: &[
            ("awk 'BEGIN{system(\"id\")}'", "`awk system()`"),
            (
                "awk '{print | \"sh\"}' x",
                "pipes to or from a shell command",
            ),
            (
                "awk 'BEGIN{\"id\" | getline v}'",
                "pipes to or from a shell command",
            ),
            ("awk -f output/p.awk x", "`awk -f`"),
            ("awk --file=output/p.awk x", "`awk --file`"),
            ("awk -W exec output/p.awk", "`awk -W`"),
            ("awk -v x=1 -e 'BEGIN{system(\"id\")}'", "`awk system()`"),
            ("awk 'BEGIN{f=\"system\"; @f(\"id\")}'", "`awk @name`"),
            ("awk 'BEGIN{system(\"id\")}' -exec x", "`awk system()`"),
        ],
        harmless: &[
            "awk '{print $1}' x",
            "awk -F, '/a|b/ {n++} END {print n / 2}' x",
        ],
    },
    Case {
        program: "tar",
        extra: &[],
        refused: &[
            (
                "tar cf /dev/null x --checkpoint=1 --checkpoint-action=exec='touch output/pwned'",
                "`tar --checkpoint-action`",
            ),
            ("tar xf input/a.tar --to-command=sh", "`tar --to-command`"),
            ("tar -I sh -cf output/x.tar input", "`tar -I`"),
            ("tar -cI sh -f output/x.tar input", "`tar -I`"),
            ("tar cIf sh output/x.tar input", "`tar -I`"),
            (
                "tar --use-compress=sh -cf output/x.tar input",
                "`tar --use-compress-program`",
            ),
            ("tar -F sh -cf output/x.tar input", "`tar -F`"),
            ("tar --rsh-command=sh -cf h:x input", "`tar --rsh-command`"),
            ("tar cf host:x input", "names a remote archive"),
            ("tar cf output/x.tar *", "is a wildcard"),
        ],
        harmless: &[
            "tar czf output/x.tgz input",
            "tar -xzf input/a.tgz -C output",
            "tar tf input/a.tar",
            "tar cf output/x.tar -- *",
            "tar cf output/x.tar ./*",
        ],
    },
    Case {
        program: "git",
        extra: &[],
        refused: &[
            ("git -c alias.x='!touch output/pwned' x", "`git -c`"),
            ("git -c core.pager=sh log", "`git -c`"),
            (
                "git --config-env=core.pager=X log",
                "`git --config-env=core.pager=X`",
            ),
            ("git x", "is not a builtin git command"),
            ("git commit -a", "opens an editor"),
            ("git config core.pager sh", "writes configuration"),
            ("git difftool", "runs a diff tool program"),
            (
                "git rebase --exec id HEAD~1",
                "runs the command it is given",
            ),
            (
                "git clone 'ext::sh -c id' output/r",
                "runs a command as a remote transport",
            ),
        ],
        harmless: &[
            "git status",
            "git log --oneline -5",
            "git -C input/repo diff HEAD~1",
            "git commit -am 'fix'",
        ],
    },
    Case {
        program: "sqlite3",
        extra: &[],
        refused: &[
            (
                "sqlite3 :memory: '.shell touch output/pwned'",
                "`sqlite3 .shell`",
            ),
            ("sqlite3 :memory: '.system id'", "`sqlite3 .system`"),
            ("sqlite3 :memory: '.output |sh'", "runs a shell command"),
            (
                "sqlite3 :memory: '.once |sh' 'select 1'",
                "runs a shell command",
            ),
            ("sqlite3 :memory: '.import |id t'", "runs a shell command"),
            ("sqlite3 :memory: '.read output/x.sql'", "`sqlite3 .read`"),
            ("sqlite3 -cmd '.sh id' :memory: 'select 1'", "`sqlite3 .sh`"),
            (
                "sqlite3 -init output/x :memory: 'select 1'",
                "`sqlite3 -init FILE`",
            ),
            (
                "sqlite3 :memory: \"select edit('', 'sh')\"",
                "`sqlite3 edit()`",
            ),
            ("sqlite3 :memory: '.load output/x'", "`sqlite3 .load`"),
            (
                "sqlite3 input/a.db",
                "reads commands such as `.shell` from its input",
            ),
        ],
        harmless: &[
            "sqlite3 input/a.db 'select count(*) from t'",
            "sqlite3 -csv -header input/a.db '.tables' 'select * from t'",
            "sqlite3 -safe input/a.db",
        ],
    },
    Case {
        program: "zip",
        extra: &[],
        refused: &[
            (
                "zip -T -TT 'touch output/pwned #' output/x.zip input/a",
                "`zip -TT`",
            ),
            (
                "zip --unzip-command=sh -T output/x.zip input/a",
                "`zip --unzip-command`",
            ),
            ("zip -qTT sh output/x.zip input/a", "`zip -TT`"),
        ],
        harmless: &["zip -r output/x.zip input", "zip -T output/x.zip input/a"],
    },
    Case {
        program: "rg",
        extra: &[],
        refused: &[
            ("rg --pre sh x", "`rg --pre`"),
            ("rg --pre=cat x", "`rg --pre`"),
        ],
        harmless: &["rg -n x", "rg --pre-glob '*.gz' x"],
    },
    Case {
        program: "rsync",
        extra: &[],
        refused: &[
            ("rsync -e sh a b", "`rsync -e`"),
            ("rsync -ave sh a b", "`rsync -e`"),
            ("rsync --rsh=sh a b", "`rsync --rsh`"),
            ("rsync --rsync-path=sh a b", "`rsync --rsync-path`"),
        ],
        harmless: &["rsync -a input/ output/"],
    },
    Case {
        program: "dpkg",
        extra: &[],
        refused: &[
            ("dpkg --pre-invoke='touch x' -l", "`dpkg --pre-invoke`"),
            ("dpkg -r coreutils", "`dpkg -r`"),
            ("dpkg --purge coreutils", "`dpkg --purge`"),
        ],
        harmless: &["dpkg -l", "dpkg -L coreutils", "dpkg -S /bin/ls"],
    },
    Case {
        program: "apt-get",
        extra: &[],
        refused: &[
            (
                "apt-get -o APT::Update::Pre-Invoke::=sh update",
                "`apt-get -o`",
            ),
            ("apt-get changelog coreutils", "`apt-get changelog`"),
        ],
        harmless: &["apt-get --simulate upgrade"],
    },
    Case {
        program: "sdiff",
        extra: &[],
        refused: &[("sdiff --diff-program=sh a b", "`sdiff --diff-program`")],
        harmless: &["sdiff a b"],
    },
    Case {
        program: "install",
        extra: &[],
        refused: &[(
            "install -s --strip-program=sh a b",
            "`install --strip-program`",
        )],
        harmless: &["install -m 644 a output/b"],
    },
    Case {
        program: "cpio",
        extra: &[],
        refused: &[("cpio --rsh-command=sh -o", "`cpio --rsh-command`")],
        harmless: &["cpio -t"],
    },
    Case {
        program: "wget",
        extra: &[],
        refused: &[
            ("wget --use-askpass=sh x", "`wget --use-askpass`"),
            ("wget -e use_askpass=sh x", "`wget -e`"),
        ],
        harmless: &["wget -q -O output/x http://example.invalid/"],
    },
    Case {
        program: "openssl",
        extra: &[],
        refused: &[
            ("openssl req -engine output/x.so", "`openssl -engine`"),
            ("openssl engine x", "`openssl engine`"),
        ],
        harmless: &["openssl sha256 input/a"],
    },
    Case {
        program: "printf",
        extra: &[],
        refused: &[("printf -v PATH output", "`printf -v PATH`")],
        harmless: &["printf '%s\\n' a", "printf -v x %s a"],
    },
    Case {
        program: "export",
        extra: &[],
        refused: &[
            ("export PATH=output", "`export PATH=output`"),
            ("export -f x", "`export -f`"),
        ],
        harmless: &["export A=1"],
    },
];

fn list(programs: &[&str]) -> Vec<String> {
    programs.iter().map(|s| s.to_string()).collect()
}

#[test]
fn every_row_of_the_table_has_a_case() {
    for entry in TABLE {
        let covered = match entry.capability {
            // Checked name by name in `programs_that_run_anything_need_the_wildcard`.
            Capability::Never(_) | Capability::AnyProgram(_) => true,
            Capability::Wrapper(_) | Capability::Options(_) => entry
                .programs
                .iter()
                .any(|p| CASES.iter().any(|c| c.program == *p)),
        };
        assert!(covered, "no test case for the row of {:?}", entry.programs);
    }
}

#[test]
fn exec_forms_are_refused_and_harmless_uses_pass() {
    for case in CASES {
        let only = list(&[case.program]);
        let with_extra = list(&[&[case.program][..], case.extra].concat());
        for (line, fragment) in case.refused {
            // With only the program allowed, the line is refused; with the extra programs too,
            // the refusal is the specific one.
            assert!(
                check(line, &only, None).is_some(),
                "[{}] `{line}` passed",
                case.program
            );
            let err = check(line, &with_extra, None)
                .unwrap_or_else(|| panic!("[{}] `{line}` passed", case.program));
            assert!(
                err.contains(fragment),
                "[{}] `{line}`: expected `{fragment}` in: {err}",
                case.program
            );
        }
        for line in case.harmless {
            assert_eq!(
                check(line, &with_extra, None),
                None,
                "[{}] harmless `{line}`",
                case.program
            );
        }
    }
}

#[test]
fn option_refusals_say_how_to_allow_everything() {
    let err = check("sort --compress-program=sh", &list(&["sort"]), None).unwrap();
    assert_eq!(
        err,
        "`sort --compress-program` runs the program it is given; `sort` is allowed without it. \
         To allow any program and option, put `*` in the movement's allowed_commands"
    );
    assert!(err.contains(OPTION_HINT));
}

#[test]
fn programs_that_run_anything_need_the_wildcard() {
    for entry in TABLE {
        for program in entry.programs {
            let line = format!("{program} x");
            match entry.capability {
                Capability::AnyProgram(_) => {
                    let err = check(&line, &list(&[program]), None).unwrap();
                    assert!(
                        err.starts_with(&format!("`{program}` "))
                            && err
                                .contains("only when the movement's allowed_commands contains `*`"),
                        "[{program}] {err}"
                    );
                    assert_eq!(
                        check(&line, &list(&["*"]), None),
                        None,
                        "[{program}] with `*`"
                    );
                }
                Capability::Never(_) => {
                    let err = check(&line, &list(&[program]), None).unwrap();
                    assert!(err.contains("is not allowed"), "[{program}] {err}");
                }
                Capability::Wrapper(_) | Capability::Options(_) => {}
            }
        }
    }
}

#[test]
fn the_interpreter_refusal_reads_well() {
    assert_eq!(
        check("python3 -c 'print(1)'", &list(&["python3"]), None).unwrap(),
        "`python3` runs code: its input is a program, so an allowlist cannot limit what it does; \
         it runs only when the movement's allowed_commands contains `*` (any program, any \
         options; the command still runs inside the sandbox)"
    );
    assert!(lookup("python3.12").is_some());
    assert!(lookup("lua5.4").is_some());
    assert!(lookup("sha256sum").is_none());
}

#[test]
fn the_wildcard_allows_everything_but_package_installs() {
    let any = list(&["*"]);
    for line in [
        "python3 -c 'import os; os.system(\"id\")'",
        "sh -c 'echo $(id)'",
        "make -f output/Makefile",
        "sort --compress-program=sh x",
        "for f in a b; do echo $f; done",
    ] {
        assert_eq!(check(line, &any, None), None, "{line}");
    }
    assert_eq!(
        check("pip install requests", &any, None),
        Some(INSTALL_REFUSED.to_string())
    );
}

/// The issue's reproductions, at the policy level, under the default allowlist.
#[test]
fn the_reported_reproductions_are_refused_under_the_default_allowlist() {
    let default = list(crate::policy::DEFAULT_ALLOWED_COMMANDS);
    for line in [
        "seq -f \"touch /tmp/outside/PWNED #%g\" 1 3000 | sort -S 16k --compress-program=sh",
        "sed '1e touch output/pwned' input/a",
        "tar cf /dev/null input --checkpoint=1 --checkpoint-action=exec='touch output/pwned'",
        "git -c alias.x='!touch output/pwned' x",
        "sqlite3 :memory: '.shell touch output/pwned'",
        "zip -T -TT 'touch output/pwned #' output/x.zip input/a",
        "awk 'BEGIN{system(\"touch output/pwned\")}'",
        "make -f output/Makefile",
        "python3 -c 'print(1)'",
        "xargs sort --compress-program=sh",
        "find . -exec sed 1e {} +",
        "TAR_OPTIONS=--to-command=sh tar xf input/a.tar",
        "HOME=output sqlite3 :memory: 'select 1'",
        "sort --compress-program={sh,x} x",
        "sort $'\\x2d-compress-program=sh' x",
    ] {
        assert!(check(line, &default, None).is_some(), "`{line}` passed");
    }
    // `env` is not in the default list; with it alone, `env -S` is refused.
    assert!(check("env -iS\"head -2 /etc/passwd\"", &list(&["env"]), None).is_some());
}

#[test]
fn the_default_allowlist_holds_no_program_that_runs_anything() {
    for program in crate::policy::DEFAULT_ALLOWED_COMMANDS {
        if let Some(entry) = lookup(program) {
            assert!(
                matches!(
                    entry.capability,
                    Capability::Wrapper(_) | Capability::Options(_)
                ),
                "`{program}` in the default list needs `*`"
            );
        }
    }
}

/// Arguments that exercise the option readers: clusters, abbreviations, values, scripts.
const FRAGMENTS: &[&str] = &[
    "-", "--", "-e", "-f", "-S", "-I", "-i", "-c", "-TT", "--c", "--to", "=", "'", "\"", "\\",
    "{}", "{", "}", ",", "..", "e", "s/x/y/", "/", "|", "||", "@", "system(", ".shell", "\n", ";",
    " ", " ", " ", "x", "1", "$", "*", "ext::", "$'", "(", ")",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_table_never_panics_on_any_arguments(
        row in 0..TABLE.len(),
        parts in prop::collection::vec(prop::sample::select(FRAGMENTS), 0..16),
    ) {
        let program = TABLE[row].programs[0];
        let line = format!("{program} {}", parts.concat());
        let _ = check(&line, &list(&[program, "ls"]), None);
    }

    #[test]
    fn the_script_readers_never_panic(text in "\\PC{0,120}") {
        let _ = super::sed::check_script(&text);
        let _ = super::awk::check_program(&text);
        let _ = super::sqlite::check_text(&text);
        let words: Vec<&str> = text.split(' ').collect();
        let _ = super::git::check(&words);
    }
}
