//! The wrappers of the exec-capable table: each returns the command it would start, read the
//! way the program's own option parser reads its arguments.

use super::getopt::{Arg, Spec, is_long};
use super::{
    ARGV0, Found, SETS_VARIABLE, STRING, Wrapped, argv, command_after, env_refusal, found,
    has_long, has_short, refused_long, refused_short, texts,
};
use crate::command_line::Word;

pub(super) fn env(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "uCSa",
        short_optional: "",
        long_valued: &["unset", "chdir", "split-string", "argv0"],
        stop_at_operand: true,
    };
    let scanned = spec.scan(args);
    refused_short(&scanned, &[('S', STRING), ('a', ARGV0)])?;
    refused_long(args, &[("split-string", STRING), ("argv0", ARGV0)])?;
    let Some(start) = spec.first_operand(args) else {
        return Ok(Vec::new());
    };
    let mut i = start;
    while let Some((name, _)) = args.get(i).and_then(|w| w.text.split_once('=')) {
        if env_refusal(name).is_some() {
            return found(format!("{name}=..."), SETS_VARIABLE);
        }
        i += 1;
    }
    Ok(argv(&args[i..]))
}

pub(super) fn xargs(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "adEILnPs",
        short_optional: "iel",
        long_valued: &[
            "arg-file",
            "delimiter",
            "max-args",
            "max-procs",
            "max-chars",
            "process-slot-var",
        ],
        stop_at_operand: true,
    };
    let scanned = spec.scan(args);
    let mut placeholders: Vec<&str> = Vec::new();
    for arg in &scanned {
        match arg {
            Arg::Short('I', Some(p)) => placeholders.push(p),
            Arg::Short('i', p) => placeholders.push(p.unwrap_or("{}")),
            Arg::Long(name, value) if is_long(name, "replace") => {
                placeholders.push(value.unwrap_or("{}"));
            }
            Arg::Long(name, Some(var))
                if is_long(name, "process-slot-var") && env_refusal(var).is_some() =>
            {
                return found(
                    format!("--process-slot-var={var}"),
                    "sets a variable that decides which program runs",
                );
            }
            _ => {}
        }
    }
    let Some(start) = spec.first_operand(args) else {
        return Ok(Vec::new());
    };
    let program = &args[start].text;
    if placeholders
        .iter()
        .any(|p| !p.is_empty() && program.contains(p))
    {
        return found(
            "-I with the placeholder in the program name",
            "runs a program named by its input",
        );
    }
    Ok(vec![Wrapped::Argv {
        words: &args[start..],
        input_args: true,
    }])
}

pub(super) fn find(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if matches!(
            args[i].text.as_str(),
            "-exec" | "-execdir" | "-ok" | "-okdir"
        ) {
            let start = i + 1;
            let len = args[start..]
                .iter()
                .position(|a| a.text == ";" || a.text == "+")
                .unwrap_or(args.len() - start);
            let words = &args[start..start + len];
            if words.first().is_some_and(|w| w.text.contains("{}")) {
                return found(
                    format!("{} {{}}", args[i].text),
                    "runs the files it finds as programs",
                );
            }
            out.extend(argv(words));
            i = start + len;
        }
        i += 1;
    }
    Ok(out)
}

pub(super) fn timeout(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "sk",
        short_optional: "",
        long_valued: &["signal", "kill-after"],
        stop_at_operand: true,
    };
    Ok(command_after(args, spec, 1))
}

pub(super) fn nice(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "n",
        short_optional: "",
        long_valued: &["adjustment"],
        stop_at_operand: true,
    };
    Ok(command_after(args, spec, 0))
}

pub(super) fn plain_wrapper(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    // `command -v ls` only looks a name up.
    if args
        .first()
        .is_some_and(|a| a.text == "-v" || a.text == "-V")
    {
        return Ok(Vec::new());
    }
    let spec = Spec {
        short_valued: "",
        short_optional: "",
        long_valued: &[],
        stop_at_operand: true,
    };
    Ok(command_after(args, spec, 0))
}

pub(super) fn time(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "fo",
        short_optional: "",
        long_valued: &["format", "output"],
        stop_at_operand: true,
    };
    Ok(command_after(args, spec, 0))
}

pub(super) fn stdbuf(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "ioe",
        short_optional: "",
        long_valued: &["input", "output", "error"],
        stop_at_operand: true,
    };
    Ok(command_after(args, spec, 0))
}

pub(super) fn ionice(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "cnpPu",
        short_optional: "",
        long_valued: &["class", "classdata", "pid", "pgid", "uid"],
        stop_at_operand: true,
    };
    let scanned = spec.scan(args);
    // With `-p`/`-P`/`-u` the operands are ids, not a command.
    if ['p', 'P', 'u'].iter().any(|c| has_short(&scanned, *c))
        || ["pid", "pgid", "uid"].iter().any(|l| has_long(&scanned, l))
    {
        return Ok(Vec::new());
    }
    Ok(command_after(args, spec, 0))
}

pub(super) fn taskset(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "",
        short_optional: "",
        long_valued: &[],
        stop_at_operand: true,
    };
    let scanned = spec.scan(args);
    if has_short(&scanned, 'p') || has_long(&scanned, "pid") {
        return Ok(Vec::new());
    }
    Ok(command_after(args, spec, 1))
}

pub(super) fn chrt(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "TPD",
        short_optional: "",
        long_valued: &["sched-runtime", "sched-period", "sched-deadline"],
        stop_at_operand: true,
    };
    let scanned = spec.scan(args);
    if has_short(&scanned, 'p') || has_long(&scanned, "pid") {
        return Ok(Vec::new());
    }
    Ok(command_after(args, spec, 1))
}

pub(super) fn flock(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "wE",
        short_optional: "",
        long_valued: &["timeout", "conflict-exit-code"],
        stop_at_operand: true,
    };
    let Some(file) = spec.first_operand(args) else {
        return Ok(Vec::new());
    };
    match args.get(file + 1).map(|w| w.text.as_str()) {
        Some("-c" | "--command") => Ok(args
            .get(file + 2)
            .map(|w| vec![Wrapped::Line(w.text.clone())])
            .unwrap_or_default()),
        _ => Ok(argv(args.get(file + 1..).unwrap_or(&[]))),
    }
}

pub(super) fn watch(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "nq",
        short_optional: "",
        long_valued: &["interval", "equexit"],
        stop_at_operand: true,
    };
    let scanned = spec.scan(args);
    let Some(start) = spec.first_operand(args) else {
        return Ok(Vec::new());
    };
    if has_short(&scanned, 'x') || has_long(&scanned, "exec") {
        return Ok(argv(&args[start..]));
    }
    // Without `-x`, watch joins its arguments and runs them with `sh -c`.
    Ok(vec![Wrapped::Line(texts(&args[start..]).join(" "))])
}

pub(super) fn chroot(args: &[Word]) -> Result<Vec<Wrapped<'_>>, Found> {
    let spec = Spec {
        short_valued: "",
        short_optional: "",
        long_valued: &["userspec", "groups"],
        stop_at_operand: true,
    };
    match spec.first_operand(args) {
        Some(root) if root + 1 < args.len() => Ok(argv(&args[root + 1..])),
        _ => found(
            "NEWROOT without a command",
            "runs an interactive shell, which reads commands from its input",
        ),
    }
}
