//! The table of programs that can run other programs, and how, for the Bash command policy.
//!
//! A program on a movement's allowlist is meant to do its own job. Many can also start any other
//! program: an interpreter whose whole input is code (`python3`, `sh`, `make`, `vi`), a wrapper
//! that runs the command in its arguments (`env`, `xargs`, `find -exec`), or a tool with an
//! option or script language that runs a command (`sort --compress-program`, `sed 's/x/y/e'`,
//! `tar --checkpoint-action=exec=`, `git -c alias.x=!cmd`, `sqlite3 .shell`, `awk system()`).
//! Listing such a program would allow everything, so:
//!
//! - [`Capability::AnyProgram`]: allowed only when the allowlist holds `*` (any program, any
//!   options); the command then still runs inside the kernel sandbox.
//! - [`Capability::Wrapper`]: the command it starts is parsed and checked against the allowlist
//!   in turn; forms that hide that command from the parser (`env -S`) are refused.
//! - [`Capability::Options`]: allowed, with the options and script constructs that run programs
//!   refused.
//! - [`Capability::Never`]: shell builtins that run strings or change who runs a command.
//!
//! For the last two, an argument whose value is not known before the shell runs (`$X`, a glob
//! that could expand to an option such as `*`) is refused too: it could be one of the refused
//! options. The policy is a layer on top of the sandbox, not the boundary: what it lets through
//! still runs confined.

mod awk;
mod getopt;
mod git;
mod options;
mod sed;
mod sqlite;
mod wrappers;

use getopt::{Arg, Spec, is_long};

use super::command_line::Word;

/// Why the exec-capable table refuses a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecRefusal {
    /// A shell builtin or privilege change that is never allowed.
    #[error("`{program}` is not allowed: {why}")]
    Never {
        /// The program as written on the command line.
        program: String,
        /// Why it can never be allowed.
        why: &'static str,
    },
    /// A program whose input is code: only `*` allows it.
    #[error(
        "`{program}` {how}, so an allowlist cannot limit what it does; it runs only when the \
         movement's allowed_commands contains `*` (any program, any options; the command still \
         runs inside the sandbox)"
    )]
    AnyProgram {
        /// The program as written on the command line.
        program: String,
        /// How it runs other programs (completes "`program` ...").
        how: &'static str,
    },
    /// An option or script construct that runs a program.
    #[error(
        "`{program} {form}` {how}; `{program}` is allowed without it. To allow any program and \
         option, put `*` in the movement's allowed_commands"
    )]
    Form {
        /// The program as written on the command line.
        program: String,
        /// The refused option or script construct, as written.
        form: String,
        /// What that form runs.
        how: &'static str,
    },
    /// An argument whose value the policy cannot see.
    #[error("`{program}`: the argument `{arg}` {why}")]
    Unchecked {
        /// The program as written on the command line.
        program: String,
        /// The argument as written (`$X`, `*`, ...).
        arg: String,
        /// Why its value could be a refused option.
        why: &'static str,
    },
    /// A variable that makes programs run other programs or load code.
    #[error(
        "setting `{name}` for a command is not allowed: it can make a program run other programs \
         or load code"
    )]
    Variable {
        /// The variable's name (`LD_PRELOAD`, `GIT_SSH_COMMAND`, ...).
        name: String,
    },
}

/// How a program can run other programs, and what the policy does about it.
pub(crate) enum Capability {
    /// Never allowed (short of `*`): the reason.
    Never(&'static str),
    /// Its input is code, or it runs commands in ways the policy does not read: how.
    AnyProgram(&'static str),
    /// Runs the command in its arguments; returns that command, to be checked in turn.
    Wrapper(Check),
    /// Options or script constructs that run programs are refused; may also return commands
    /// (`split --filter`) to check in turn.
    Options(Check),
}

/// Reads a program's arguments: the commands it would start, or why it is refused.
pub(crate) type Check = for<'w> fn(&'w [Word]) -> Result<Vec<Wrapped<'w>>, Found>;

/// A refused form found in the arguments: what was written and what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    form: String,
    how: &'static str,
}

fn found<T>(form: impl Into<String>, how: &'static str) -> Result<T, Found> {
    Err(Found {
        form: form.into(),
        how,
    })
}

/// A command a listed program would start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wrapped<'w> {
    /// An argument vector (`timeout 5 ls -l`). With `input_args`, the program also gets
    /// arguments read from its input (`xargs`), which no one can check.
    Argv { words: &'w [Word], input_args: bool },
    /// A command line run by `sh -c` (`watch`, `flock -c`, `split --filter`).
    Line(String),
}

/// One row of the table.
pub(crate) struct Entry {
    /// The program names the row covers.
    pub programs: &'static [&'static str],
    pub capability: Capability,
}

const NOT_READ: &str =
    "runs commands given to it in a way this policy does not read (an unmodelled wrapper)";
const CODE: &str = "runs code: its input is a program";
const BUILDS: &str = "runs code from the project it builds or the packages it handles";
const ESCAPES: &str = "runs commands through its shell escapes and configuration";
const STRING: &str = "runs a string the allowlist cannot check";
const PRIVILEGE: &str = "it changes who runs the command";
const GROUPING: &str = "it groups commands; write the commands one after another";

/// The table. Each row has a test of the forms it refuses and of a harmless use it allows.
#[rustfmt::skip]
pub(crate) const TABLE: &[Entry] = &[
    // Shell builtins and privilege changes.
    Entry {
        programs: &["eval", "trap"],
        capability: Capability::Never("it runs a string the allowlist cannot check"),
    },
    Entry {
        programs: &["source", "."],
        capability: Capability::Never("it runs a script the allowlist cannot check"),
    },
    Entry {
        programs: &["exec"],
        capability: Capability::Never("it is not needed; run the program directly"),
    },
    Entry {
        programs: &["builtin"],
        capability: Capability::Never("it is not needed; call the command directly"),
    },
    Entry {
        programs: &["enable"],
        capability: Capability::Never("it loads builtins from a shared library"),
    },
    Entry {
        programs: &["hash"],
        capability: Capability::Never("it can point a program name at another file"),
    },
    Entry {
        programs: &["alias"],
        capability: Capability::Never("aliases hide the command they run"),
    },
    Entry {
        programs: &["function", "coproc"],
        capability: Capability::Never("shell functions and coprocesses hide the commands they run"),
    },
    Entry { programs: &["{", "}"], capability: Capability::Never(GROUPING) },
    Entry {
        programs: &[
            "sudo", "sudoedit", "su", "doas", "run0", "pkexec", "runuser", "sg", "newgrp", "mount",
            "umount",
        ],
        capability: Capability::Never(PRIVILEGE),
    },
    // Interpreters: their whole input is code.
    Entry {
        programs: &[
            "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox",
            "toybox",
        ],
        capability: Capability::AnyProgram("is a shell: it runs any command"),
    },
    Entry {
        programs: &[
            "python", "python2", "python3", "pypy", "pypy3", "ipython", "perl", "ruby", "irb", "node",
            "nodejs", "deno", "php", "lua", "luajit", "tclsh", "wish", "expect", "R", "Rscript",
            "julia", "guile", "racket", "sbcl", "ocaml", "ghci", "runghc", "java", "jshell", "pwsh",
            "m4", "dc", "gnuplot", "gdb", "lldb", "mysql", "psql", "duckdb", "mlr", "octave", "nmap",
            "ts-node", "tsx", "erb", "git-shell",
        ],
        capability: Capability::AnyProgram(CODE),
    },
    Entry {
        programs: &[
            "make", "gmake", "cmake", "ninja", "meson", "cargo", "rustc", "go", "gcc", "g++", "cc",
            "c++", "clang", "clang++", "tcc", "npm", "yarn", "pnpm", "bun", "pip", "pip3", "pipx",
            "uv", "poetry", "pdm", "gem", "bundle", "rake", "composer", "mvn", "gradle", "ant", "rpm",
            "hg",
        ],
        capability: Capability::AnyProgram(BUILDS),
    },
    Entry {
        programs: &[
            "vi", "vim", "nvim", "view", "vimdiff", "rvim", "ex", "ed", "red", "emacs", "nano",
            "pico", "joe", "mc", "less", "more", "most", "pg", "man", "info", "w3m", "lynx", "ftp",
            "telnet", "mail", "mailx", "ssh", "scp", "sftp", "ssh-agent", "ssh-keygen", "nc", "ncat",
            "netcat", "socat", "tmux", "screen", "script", "crontab", "at", "batch", "xdg-open",
            "sensible-editor", "sensible-pager", "editor", "pager", "run-parts",
            "pydoc", "pydoc3", "perldoc", "vim.basic", "vim.tiny", "vim.nox", "systemctl",
            "gpg", "gpg2", "sensible-browser", "x-www-browser", "www-browser",
        ],
        capability: Capability::AnyProgram(ESCAPES),
    },
    Entry {
        programs: &[
            "parallel", "strace", "ltrace", "valgrind", "perf", "prlimit", "unshare", "nsenter",
            "setpriv", "capsh", "systemd-run", "systemd-nspawn", "firejail", "bwrap", "proot",
            "fakeroot", "fakechroot", "faketime", "numactl", "cpulimit", "eatmydata", "rlwrap",
            "unbuffer", "xvfb-run", "dbus-run-session", "torsocks", "proxychains", "docker", "podman",
            "sshpass", "machinectl", "chpst", "softlimit", "setlock", "setuidgid", "envdir",
            "envuidgid", "nsjail", "minijail0", "start-stop-daemon", "daemonize", "timelimit",
            "entr", "watchexec", "nocache", "catchsegv", "aria2c", "tcpdump", "git-receive-pack",
            "kubectl", "ip",
        ],
        capability: Capability::AnyProgram(NOT_READ),
    },
    // Wrappers: the command they start is checked in turn.
    Entry { programs: &["env"], capability: Capability::Wrapper(wrappers::env) },
    Entry { programs: &["xargs"], capability: Capability::Wrapper(wrappers::xargs) },
    Entry { programs: &["find"], capability: Capability::Wrapper(wrappers::find) },
    Entry { programs: &["timeout"], capability: Capability::Wrapper(wrappers::timeout) },
    Entry { programs: &["nice"], capability: Capability::Wrapper(wrappers::nice) },
    Entry {
        programs: &["nohup", "setsid", "command"],
        capability: Capability::Wrapper(wrappers::plain_wrapper),
    },
    Entry { programs: &["time"], capability: Capability::Wrapper(wrappers::time) },
    Entry { programs: &["stdbuf"], capability: Capability::Wrapper(wrappers::stdbuf) },
    Entry { programs: &["ionice"], capability: Capability::Wrapper(wrappers::ionice) },
    Entry { programs: &["taskset"], capability: Capability::Wrapper(wrappers::taskset) },
    Entry { programs: &["chrt"], capability: Capability::Wrapper(wrappers::chrt) },
    Entry { programs: &["flock"], capability: Capability::Wrapper(wrappers::flock) },
    Entry { programs: &["watch"], capability: Capability::Wrapper(wrappers::watch) },
    Entry { programs: &["chroot"], capability: Capability::Wrapper(wrappers::chroot) },
    // Programs with options or script constructs that run programs.
    Entry { programs: &["split"], capability: Capability::Options(options::split) },
    Entry { programs: &["sort"], capability: Capability::Options(options::sort) },
    Entry { programs: &["sed"], capability: Capability::Options(options::sed) },
    Entry {
        programs: &["awk", "gawk", "mawk", "nawk"],
        capability: Capability::Options(options::awk),
    },
    Entry { programs: &["tar", "bsdtar"], capability: Capability::Options(options::tar) },
    Entry { programs: &["git"], capability: Capability::Options(options::git) },
    Entry { programs: &["sqlite3"], capability: Capability::Options(options::sqlite3) },
    Entry { programs: &["zip"], capability: Capability::Options(options::zip) },
    Entry { programs: &["rg"], capability: Capability::Options(options::rg) },
    Entry { programs: &["rsync"], capability: Capability::Options(options::rsync) },
    Entry { programs: &["dpkg"], capability: Capability::Options(options::dpkg) },
    Entry {
        programs: &["apt", "apt-get", "apt-cache"],
        capability: Capability::Options(options::apt),
    },
    Entry { programs: &["diff3", "sdiff"], capability: Capability::Options(options::diff_program) },
    Entry { programs: &["install"], capability: Capability::Options(options::install) },
    Entry { programs: &["cpio"], capability: Capability::Options(options::cpio) },
    Entry { programs: &["wget"], capability: Capability::Options(options::wget) },
    Entry { programs: &["openssl"], capability: Capability::Options(options::openssl) },
    Entry { programs: &["printf"], capability: Capability::Options(options::printf) },
    Entry {
        programs: &[
            "export", "declare", "typeset", "readonly", "local", "read", "mapfile", "readarray",
            "getopts",
        ],
        capability: Capability::Options(options::variable_setters),
    },
];

/// The table row for `program`, if any. Versioned interpreter names (`python3.12`, `lua5.4`)
/// count as their base name.
pub(crate) fn lookup(program: &str) -> Option<&'static Entry> {
    let find = |name: &str| TABLE.iter().find(|e| e.programs.contains(&name));
    find(program).or_else(|| {
        let base = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        let base = base.strip_suffix('-').unwrap_or(base);
        (base != program)
            .then(|| find(base))
            .flatten()
            .filter(|e| matches!(e.capability, Capability::AnyProgram(_)))
    })
}

impl Entry {
    /// The refusal that applies whatever the arguments, before the allowlist is consulted.
    pub(crate) fn refuses_outright(&self, program: &str) -> Option<ExecRefusal> {
        match self.capability {
            Capability::Never(why) => Some(ExecRefusal::Never {
                program: program.to_string(),
                why,
            }),
            Capability::AnyProgram(how) => Some(ExecRefusal::AnyProgram {
                program: program.to_string(),
                how,
            }),
            Capability::Wrapper(_) | Capability::Options(_) => None,
        }
    }

    /// Checks the arguments of a listed program: the commands it would start, or why not.
    pub(crate) fn check<'w>(
        &self,
        program: &str,
        args: &'w [Word],
    ) -> Result<Vec<Wrapped<'w>>, ExecRefusal> {
        match self.capability {
            Capability::Wrapper(check) | Capability::Options(check) => {
                literal_arguments(program, args)?;
                check(args).map_err(|f| ExecRefusal::Form {
                    program: program.to_string(),
                    form: f.form,
                    how: f.how,
                })
            }
            Capability::Never(_) | Capability::AnyProgram(_) => {
                self.refuses_outright(program).map_or(Ok(Vec::new()), Err)
            }
        }
    }
}

/// Refuses arguments whose value only the shell knows: an expansion could be a refused option,
/// and so could a glob that starts with a wildcard (a file named `--to-command=sh` matches `*`).
fn literal_arguments(program: &str, args: &[Word]) -> Result<(), ExecRefusal> {
    let mut options_ended = false;
    for word in args {
        let unchecked = |why| ExecRefusal::Unchecked {
            program: program.to_string(),
            arg: word.text.clone(),
            why,
        };
        if word.expands {
            return Err(unchecked(
                "is expanded by the shell, so its value cannot be checked; write the value literally",
            ));
        }
        if !options_ended && word.globs && word.text.starts_with(['*', '?', '[']) {
            return Err(unchecked(
                "is a wildcard that a file name starting with `-` could turn into an option; quote it if the program should see the pattern, write `./*` for file names, or put `--` before it",
            ));
        }
        options_ended |= word.text == "--";
    }
    Ok(())
}

/// Refuses setting a variable that makes programs run other programs or load code.
pub(crate) fn env_refusal(name: &str) -> Option<ExecRefusal> {
    const NAMES: &[&str] = &[
        "PATH",
        "IFS",
        "ENV",
        "BASH_ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "SHELL",
        "HOME",
        "ZDOTDIR",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "MANPAGER",
        "MANOPT",
        "BROWSER",
        "TAR_OPTIONS",
        "ZIPOPT",
        "ZIP",
        "UNZIP",
        "RIPGREP_CONFIG_PATH",
        "RSYNC_RSH",
        "RSYNC_CONNECT_PROG",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "OPENSSL_MODULES",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "MAKEFLAGS",
        "MAKEFILES",
        "GNUMAKEFLAGS",
        "AWKPATH",
        "AWKLIBPATH",
        "SUDO_ASKPASS",
        // Stops option parsing at the first operand, which changes which word is a script.
        "POSIXLY_CORRECT",
    ];
    const PREFIXES: &[&str] = &[
        "LD_",
        "GIT_",
        "PYTHON",
        "PERL",
        "RUBY",
        "NODE_",
        "LUA_",
        "BASH_FUNC",
        "XDG_",
        "LESS",
        "SSH_",
        "DYLD_",
        "SYSTEMD_",
    ];
    // Programs read their pager, editor, browser, password prompt and extra options from
    // variables named like these (`SYSTEMD_PAGER`, `GIT_EDITOR`, `SSH_ASKPASS`, `GREP_OPTIONS`).
    const SUFFIXES: &[&str] = &["PAGER", "EDITOR", "BROWSER", "ASKPASS", "_OPTIONS"];
    let refused = NAMES.contains(&name)
        || PREFIXES.iter().any(|p| name.starts_with(p))
        || SUFFIXES.iter().any(|x| name.ends_with(x));
    refused.then(|| ExecRefusal::Variable {
        name: name.to_string(),
    })
}

/// The words of `args` as text.
fn texts(args: &[Word]) -> Vec<&str> {
    args.iter().map(|w| w.text.as_str()).collect()
}

/// Options in their own right whose names are also abbreviations of a refused option: an exact
/// match wins in getopt (`tar --checkpoint=1` is not `--checkpoint-action`).
const OPTIONS_THAT_PREFIX_REFUSED: &[&str] = &["checkpoint"];

/// The first refused long option among `args` (abbreviations included), before `--`.
fn refused_long(args: &[Word], refused: &[(&str, &'static str)]) -> Result<(), Found> {
    for word in args {
        if word.text == "--" {
            break;
        }
        let Some(long) = word.text.strip_prefix("--") else {
            continue;
        };
        let name = long.split_once('=').map_or(long, |(n, _)| n);
        if OPTIONS_THAT_PREFIX_REFUSED.contains(&name) {
            continue;
        }
        if let Some((full, how)) = refused.iter().find(|(full, _)| is_long(name, full)) {
            return found(format!("--{full}"), how);
        }
    }
    Ok(())
}

/// The first refused short option among the scanned arguments.
fn refused_short(scanned: &[Arg<'_>], refused: &[(char, &'static str)]) -> Result<(), Found> {
    for arg in scanned {
        if let Arg::Short(c, _) = arg
            && let Some((_, how)) = refused.iter().find(|(r, _)| r == c)
        {
            return found(format!("-{c}"), how);
        }
    }
    Ok(())
}

fn has_long(scanned: &[Arg<'_>], full: &str) -> bool {
    scanned
        .iter()
        .any(|a| matches!(a, Arg::Long(name, _) if is_long(name, full)))
}

fn has_short(scanned: &[Arg<'_>], c: char) -> bool {
    scanned
        .iter()
        .any(|a| matches!(a, Arg::Short(s, _) if *s == c))
}

fn argv(words: &[Word]) -> Vec<Wrapped<'_>> {
    if words.is_empty() {
        Vec::new()
    } else {
        vec![Wrapped::Argv {
            words,
            input_args: false,
        }]
    }
}

/// The command after the options and `skip` operands (a duration, a CPU mask, a lock file).
fn command_after(args: &[Word], spec: Spec, skip: usize) -> Vec<Wrapped<'_>> {
    match spec.first_operand(args) {
        Some(i) => argv(args.get(i + skip..).unwrap_or(&[])),
        None => Vec::new(),
    }
}

const ARGV0: &str =
    "sets the name a program sees, which multi-call programs use to choose what to run";
const SETS_VARIABLE: &str =
    "sets a variable that can make a program run other programs or load code";
const RUNS_GIVEN: &str = "runs the program it is given";
const RUNS_SHELL: &str = "runs its value as a shell command";
const UNREAD_SCRIPT: &str = "runs a script file the allowlist cannot read";

#[cfg(test)]
mod tests;
