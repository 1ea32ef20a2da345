//! The programs of the exec-capable table that have options or script constructs that run
//! programs: each refuses those and allows the rest.

use super::getopt::{Arg, Spec, is_long};
use super::{
    Found, RUNS_GIVEN, RUNS_SHELL, SETS_VARIABLE, UNREAD_SCRIPT, Wrapped, awk, env_refusal, found,
    git, has_long, refused_long, refused_short, sed, sqlite, texts,
};
use crate::command_line::Word;

pub(super) fn split(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "abClnt",
        short_optional: "",
        long_valued: &[
            "suffix-length",
            "additional-suffix",
            "bytes",
            "line-bytes",
            "lines",
            "number",
            "separator",
            "filter",
        ],
        stop_at_operand: false,
    };
    Ok(spec
        .scan(args)
        .into_iter()
        .filter_map(|a| match a {
            Arg::Long(name, Some(value)) if is_long(name, "filter") => {
                Some(Wrapped::Line(value.to_string()))
            }
            _ => None,
        })
        .collect())
}

pub(super) fn sort(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    refused_long(args, &[("compress-program", RUNS_GIVEN)])?;
    Ok(Vec::new())
}

pub(super) fn sed(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "efl",
        short_optional: "i",
        long_valued: &["expression", "file", "line-length"],
        stop_at_operand: false,
    };
    let scanned = spec.scan(args);
    // GNU sed's --sandbox refuses e, r and w itself.
    if args.iter().any(|a| a.text == "--sandbox") {
        return Ok(Vec::new());
    }
    refused_short(&scanned, &[('f', UNREAD_SCRIPT)])?;
    refused_long(args, &[("file", UNREAD_SCRIPT)])?;
    let mut scripts: Vec<&str> = scanned
        .iter()
        .filter_map(|a| match a {
            Arg::Short('e', value) => Some(value.unwrap_or("")),
            Arg::Long(name, value) if is_long(name, "expression") => Some(value.unwrap_or("")),
            _ => None,
        })
        .collect();
    if scripts.is_empty()
        && let Some(Arg::Operand(i)) = scanned.iter().find(|a| matches!(a, Arg::Operand(_)))
    {
        scripts.push(&args[*i].text);
    }
    // sed joins `-e` scripts with newlines; check them apart and joined.
    let joined = scripts.join("\n");
    for script in scripts.iter().copied().chain([joined.as_str()]) {
        match sed::check_script(script) {
            Ok(()) => {}
            Err(sed::SedRefusal::ExecCommand) => {
                return found("e COMMAND", "runs a command (the `e` command)");
            }
            Err(sed::SedRefusal::ExecFlag) => {
                return found("s///e", "runs the result of the substitution as a command");
            }
            Err(sed::SedRefusal::Unreadable(c)) => {
                return found(
                    format!("script at `{c}`"),
                    "is not a script this policy can read, so it could run commands; use s, y, p, d and the other common commands",
                );
            }
        }
    }
    Ok(Vec::new())
}

pub(super) fn awk(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "FvfeEilWD",
        short_optional: "dopL",
        long_valued: &[
            "field-separator",
            "assign",
            "file",
            "source",
            "exec",
            "include",
            "load",
        ],
        // awk options end at the program text: `-exec` after it is a file name.
        stop_at_operand: true,
    };
    let scanned = spec.scan(args);
    // Read as a permuting parser would too: an option after the program text counts as well
    // (a file name that looks like an option is refused, never a hidden program let through).
    let permuted = Spec {
        stop_at_operand: false,
        ..spec
    }
    .scan(args);
    refused_short(
        &permuted,
        &[
            ('f', UNREAD_SCRIPT),
            ('E', UNREAD_SCRIPT),
            ('i', UNREAD_SCRIPT),
            ('l', "loads native code"),
            (
                'W',
                "passes implementation options, some of which run script files",
            ),
            (
                'D',
                "starts the debugger, which runs awk code read from its input",
            ),
        ],
    )?;
    refused_long(
        args,
        &[
            ("file", UNREAD_SCRIPT),
            ("exec", UNREAD_SCRIPT),
            ("include", UNREAD_SCRIPT),
            ("load", "loads native code"),
            (
                "debug",
                "starts the debugger, which runs awk code read from its input",
            ),
        ],
    )?;
    let mut programs: Vec<&str> = permuted
        .iter()
        .filter_map(|a| match a {
            Arg::Short('e', value) => Some(value.unwrap_or("")),
            Arg::Long(name, value) if is_long(name, "source") => Some(value.unwrap_or("")),
            _ => None,
        })
        .collect();
    let program_before_operand = scanned.iter().any(|a| {
        matches!(a, Arg::Short('e', _)) || matches!(a, Arg::Long(n, _) if is_long(n, "source"))
    });
    if !program_before_operand
        && let Some(Arg::Operand(i)) = scanned.iter().find(|a| matches!(a, Arg::Operand(_)))
    {
        programs.push(&args[*i].text);
    }
    for program in programs {
        match awk::check_program(program) {
            Ok(()) => {}
            Err(awk::AwkRefusal::System) => return found("system()", "runs a shell command"),
            Err(awk::AwkRefusal::Pipe) => {
                return found("| \"command\"", "pipes to or from a shell command");
            }
            Err(awk::AwkRefusal::At) => {
                return found(
                    "@name",
                    "loads code or calls a function by a name built at run time",
                );
            }
            Err(awk::AwkRefusal::Unclosed) => {
                return found(
                    "program with an unclosed string or regex",
                    "is not a program this policy can read",
                );
            }
        }
    }
    Ok(Vec::new())
}

pub(super) fn tar(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    const COMPRESS: &str = "runs the compression program it is given";
    const SCRIPT: &str = "runs the script it is given at the end of each volume";
    refused_long(
        args,
        &[
            (
                "checkpoint-action",
                "runs an action, which can be `exec=COMMAND`, at each checkpoint",
            ),
            (
                "to-command",
                "pipes each extracted file into the command it is given",
            ),
            ("use-compress-program", COMPRESS),
            ("info-script", SCRIPT),
            ("new-volume-script", SCRIPT),
            ("rsh-command", RUNS_GIVEN),
            ("rmt-command", RUNS_GIVEN),
        ],
    )?;
    const VALUED: &str = "bCfFgHIKLNTVX";
    let mut shorts: Vec<(char, Option<&str>)> = Vec::new();
    let mut rest = args;
    // Old style: `tar cIf PROG archive` takes each option's value from the following words.
    if let Some((first, tail)) = args.split_first().filter(|(f, _)| !f.text.starts_with('-')) {
        let mut values = tail.iter();
        for c in first.text.chars() {
            let value = VALUED
                .contains(c)
                .then(|| values.next().map(|w| w.text.as_str()))
                .flatten();
            shorts.push((c, value));
        }
        rest = values.as_slice();
    }
    let spec = Spec {
        short_valued: VALUED,
        short_optional: "",
        long_valued: &["file"],
        stop_at_operand: false,
    };
    let scanned = spec.scan(rest);
    shorts.extend(scanned.iter().filter_map(|a| match a {
        Arg::Short(c, v) => Some((*c, *v)),
        _ => None,
    }));
    for (c, _) in &shorts {
        match c {
            'I' => return found("-I", COMPRESS),
            'F' => return found("-F", SCRIPT),
            _ => {}
        }
    }
    let force_local = has_long(&scanned, "force-local");
    let archives = shorts
        .iter()
        .filter(|(c, _)| *c == 'f')
        .filter_map(|(_, v)| *v)
        .chain(scanned.iter().filter_map(|a| match a {
            Arg::Long(name, v) if is_long(name, "file") => *v,
            _ => None,
        }));
    for archive in archives {
        if archive.contains(':') && !force_local {
            return found(
                format!("-f {archive}"),
                "names a remote archive, which tar reaches by running rsh; add --force-local for a local file",
            );
        }
    }
    Ok(Vec::new())
}

pub(super) fn git(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    match git::check(&texts(args)) {
        Ok(()) => Ok(Vec::new()),
        Err((form, how)) => found(form, how),
    }
}

pub(super) fn sqlite3(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    const VALUED: &[&str] = &[
        "cmd",
        "init",
        "separator",
        "newline",
        "nullvalue",
        "vfs",
        "maxsize",
        "mmap",
        "escape",
    ];
    let mut texts_to_check: Vec<&str> = Vec::new();
    let mut operands = 0;
    let mut safe = false;
    let mut i = 0;
    while i < args.len() {
        let text = args[i].text.as_str();
        match text.strip_prefix("--").or_else(|| text.strip_prefix('-')) {
            Some("init") => return found("-init FILE", UNREAD_SCRIPT),
            Some("safe") => safe = true,
            Some(name) if VALUED.contains(&name) => {
                i += 1;
                if name == "cmd" {
                    texts_to_check.extend(args.get(i).map(|w| w.text.as_str()));
                }
            }
            Some(name) if !name.is_empty() => {}
            _ => {
                texts_to_check.push(text);
                operands += 1;
            }
        }
        i += 1;
    }
    for text in texts_to_check {
        match sqlite::check_text(text) {
            Ok(()) => {}
            Err(sqlite::SqliteRefusal::DotCommand(form)) => {
                return found(form, "runs a program, an unchecked script or native code");
            }
            Err(sqlite::SqliteRefusal::PipeTarget(form)) => {
                return found(form, "runs a shell command");
            }
            Err(sqlite::SqliteRefusal::Function(name)) => {
                return found(
                    format!("{name}()"),
                    "runs a program or loads native code from SQL",
                );
            }
        }
    }
    // With no SQL argument the shell reads commands, dot-commands included, from its input.
    if operands < 2 && !safe {
        return found(
            "without SQL arguments",
            "reads commands such as `.shell` from its input, which the allowlist cannot check; pass the SQL as an argument, or add -safe",
        );
    }
    Ok(Vec::new())
}

pub(super) fn zip(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    const UNZIP: &str = "runs the command it is given to test the archive";
    refused_long(args, &[("unzip-command", UNZIP)])?;
    if args
        .iter()
        .take_while(|a| a.text != "--")
        .any(|a| a.text.starts_with('-') && !a.text.starts_with("--") && a.text.contains("TT"))
    {
        return found("-TT", UNZIP);
    }
    Ok(Vec::new())
}

pub(super) fn rg(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    refused_long(
        args,
        &[(
            "pre",
            "runs the preprocessor program it is given on every file",
        )],
    )?;
    Ok(Vec::new())
}

pub(super) fn rsync(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "eBfTM",
        short_optional: "",
        long_valued: &[
            "rsh",
            "rsync-path",
            "filter",
            "block-size",
            "temp-dir",
            "remote-option",
        ],
        stop_at_operand: false,
    };
    refused_short(
        &spec.scan(args),
        &[
            ('e', RUNS_GIVEN),
            (
                'M',
                "passes options, such as --rsync-path, to the other side",
            ),
        ],
    )?;
    refused_long(
        args,
        &[
            ("rsh", RUNS_GIVEN),
            ("rsync-path", RUNS_GIVEN),
            (
                "remote-option",
                "passes options, such as --rsync-path, to the other side",
            ),
            (
                "daemon",
                "runs a daemon whose configuration can run commands",
            ),
            (
                "config",
                "reads a daemon configuration, which can run commands",
            ),
        ],
    )?;
    Ok(Vec::new())
}

pub(super) fn dpkg(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    const SCRIPTS: &str = "runs package maintainer scripts";
    refused_long(
        args,
        &[
            ("pre-invoke", RUNS_SHELL),
            ("post-invoke", RUNS_SHELL),
            ("status-logger", RUNS_SHELL),
            ("configure", SCRIPTS),
            ("unpack", SCRIPTS),
            ("remove", SCRIPTS),
            ("purge", SCRIPTS),
            ("triggers-only", SCRIPTS),
        ],
    )?;
    let spec = Spec {
        short_valued: "",
        short_optional: "",
        long_valued: &[],
        stop_at_operand: false,
    };
    refused_short(&spec.scan(args), &[('r', SCRIPTS), ('P', SCRIPTS)])?;
    Ok(Vec::new())
}

pub(super) fn apt(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    const OPTION: &str =
        "sets configuration, which can name commands to run (hooks such as Pre-Invoke)";
    refused_long(args, &[("option", OPTION), ("config-file", OPTION)])?;
    let spec = Spec {
        short_valued: "oct",
        short_optional: "",
        long_valued: &[],
        stop_at_operand: false,
    };
    refused_short(&spec.scan(args), &[('o', OPTION), ('c', OPTION)])?;
    if let Some(sub) = args
        .iter()
        .find(|a| matches!(a.text.as_str(), "source" | "build-dep" | "changelog"))
    {
        return found(sub.text.clone(), "runs a pager or a package build");
    }
    Ok(Vec::new())
}

pub(super) fn diff_program(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    refused_long(args, &[("diff-program", RUNS_GIVEN)])?;
    Ok(Vec::new())
}

pub(super) fn install(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    refused_long(args, &[("strip-program", RUNS_GIVEN)])?;
    Ok(Vec::new())
}

pub(super) fn cpio(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    refused_long(args, &[("rsh-command", RUNS_GIVEN)])?;
    Ok(Vec::new())
}

pub(super) fn wget(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    const COMMANDS: &str = "runs wgetrc commands, which can name a program to run";
    refused_long(
        args,
        &[
            ("use-askpass", RUNS_GIVEN),
            ("execute", COMMANDS),
            ("config", COMMANDS),
        ],
    )?;
    let spec = Spec {
        short_valued: "eoaOPTtwQUBiDIXAR",
        short_optional: "",
        long_valued: &[],
        stop_at_operand: false,
    };
    refused_short(&spec.scan(args), &[('e', COMMANDS)])?;
    Ok(Vec::new())
}

pub(super) fn openssl(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    if let Some(word) = args.iter().find(|a| {
        matches!(
            a.text.trim_start_matches('-'),
            "engine" | "provider" | "provider-path" | "config" | "conf"
        )
    }) {
        return found(
            word.text.clone(),
            "loads native code (an engine or provider)",
        );
    }
    Ok(Vec::new())
}

pub(super) fn printf(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    // bash's `printf -v NAME` assigns a variable, PATH included.
    if let Some(pair) = args.windows(2).find(|w| w[0].text == "-v")
        && env_refusal(&pair[1].text).is_some()
    {
        return found(
            format!("-v {}", pair[1].text),
            "sets a variable that decides which program runs",
        );
    }
    Ok(Vec::new())
}

pub(super) fn variable_setters(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    for word in args {
        if word.text == "-f" || (word.text.starts_with('-') && word.text.contains('f')) {
            return found(word.text.clone(), "exports or defines shell functions");
        }
        let name = word
            .text
            .split_once('=')
            .map_or(word.text.as_str(), |(n, _)| n);
        if env_refusal(name).is_some() {
            return found(word.text.clone(), SETS_VARIABLE);
        }
    }
    Ok(Vec::new())
}
