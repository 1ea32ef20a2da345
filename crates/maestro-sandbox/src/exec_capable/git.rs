//! The ways a `git` command line runs other programs: configuration given on the command line
//! (`-c core.pager=...`, `alias.x=!cmd`), aliases and external `git-*` programs (anything that
//! is not a builtin subcommand), the pager (`-p`), editors (`commit` without a message,
//! `rebase -i`), tool runners (`difftool`, `bisect run`, `rebase --exec`, `merge-index`), hooks
//! run on request (`hook run`), remote helpers (`ext::`) and transport programs
//! (`--upload-pack`). Configuration written into a repository is the one channel the command
//! line does not show; `git config` writes are refused, the rest is left to the sandbox.

/// A refused form: what was written, and what it runs.
pub(crate) type GitRefusal = (String, &'static str);

/// `git --list-cmds=builtins` (git 2.47), less the internal `*--*` helpers, which are refused.
#[rustfmt::skip]
const BUILTINS: &[&str] = &[
    "add", "am", "annotate", "apply", "archive", "bisect", "blame", "branch", "bugreport",
    "bundle", "cat-file", "check-attr", "check-ignore", "check-mailmap", "check-ref-format",
    "checkout", "checkout-index", "cherry", "cherry-pick", "clean", "clone", "column", "commit",
    "commit-graph", "commit-tree", "config", "count-objects", "describe", "diagnose", "diff",
    "diff-files", "diff-index", "diff-tree", "fast-export", "fast-import", "fetch",
    "fetch-pack", "fmt-merge-msg", "for-each-ref", "format-patch", "fsck", "fsck-objects", "gc",
    "get-tar-commit-id", "grep", "hash-object", "help", "index-pack", "init", "init-db",
    "interpret-trailers", "log", "ls-files", "ls-remote", "ls-tree", "mailinfo", "mailsplit",
    "maintenance", "merge", "merge-base", "merge-file", "merge-ours", "merge-recursive",
    "merge-recursive-ours", "merge-recursive-theirs", "merge-subtree", "merge-tree", "mktag",
    "mktree", "multi-pack-index", "mv", "name-rev", "notes", "pack-objects", "pack-redundant",
    "pack-refs", "patch-id", "pickaxe", "prune", "prune-packed", "pull", "push", "range-diff",
    "read-tree", "rebase", "reflog", "refs", "remote", "repack", "replace", "replay", "rerere",
    "reset", "restore", "rev-list", "rev-parse", "revert", "rm", "send-pack", "shortlog",
    "show", "show-branch", "show-index", "show-ref", "sparse-checkout", "stage", "stash",
    "status", "stripspace", "switch", "symbolic-ref", "tag", "unpack-file", "unpack-objects",
    "update-index", "update-ref", "update-server-info", "upload-archive", "upload-pack", "var",
    "verify-commit", "verify-pack", "verify-tag", "version", "whatchanged", "worktree",
    "write-tree",
];

/// Builtins that exist to run other programs or hooks.
const RUNNERS: &[(&str, &str)] = &[
    ("difftool", "runs a diff tool program"),
    ("hook", "runs repository hooks"),
    ("merge-index", "runs the merge program it is given"),
    (
        "for-each-repo",
        "runs git commands in repositories named by configuration",
    ),
    ("receive-pack", "runs repository hooks"),
    ("credential", "runs the configured credential helpers"),
];

/// Global options that take a value as the next word.
const GLOBAL_VALUED: &[&str] = &[
    "-C",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
];

const EDITOR: &str = "opens an editor, which runs commands it reads";
const MESSAGE: &[&str] = &["-m", "--message", "-F", "--file", "-C", "--reuse-message"];

/// Checks a `git` argument list (the words after `git`).
pub(crate) fn check(args: &[&str]) -> Result<(), GitRefusal> {
    if let Some(url) = args.iter().find(|a| a.contains("ext::")) {
        return Err((url.to_string(), "runs a command as a remote transport"));
    }
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        let refused = match a {
            "-c" => {
                Some("sets configuration, which can name programs to run (aliases, pagers, hooks)")
            }
            "-p" | "--paginate" => Some("runs the pager"),
            _ if a.starts_with("--config-env") => {
                Some("sets configuration, which can name programs to run (aliases, pagers, hooks)")
            }
            _ if a.starts_with("--exec-path") => {
                Some("chooses where git finds the programs it runs")
            }
            _ if a.starts_with("-c") && a.len() > 2 => {
                Some("sets configuration, which can name programs to run (aliases, pagers, hooks)")
            }
            _ => None,
        };
        if let Some(how) = refused {
            return Err((a.to_string(), how));
        }
        if GLOBAL_VALUED.contains(&a) {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return subcommand(a, &args[i + 1..]);
        }
    }
    Ok(())
}

fn subcommand(sub: &str, args: &[&str]) -> Result<(), GitRefusal> {
    let found = |option: &str| -> bool { has_option(args, option) };
    let refuse = |form: &str, how: &'static str| Err((format!("{sub} {form}"), how));
    if let Some((_, how)) = RUNNERS
        .iter()
        .find(|(name, _)| sub == *name || (*name == "credential" && sub.starts_with(name)))
    {
        return Err((sub.to_string(), how));
    }
    if !BUILTINS.contains(&sub) {
        return Err((
            sub.to_string(),
            "is not a builtin git command: an alias or an external git-* program runs other programs",
        ));
    }
    let has_message = MESSAGE.iter().any(|m| found(m));
    match sub {
        "commit" => {
            for option in [
                "-e",
                "--edit",
                "-c",
                "--reedit-message",
                "--interactive",
                "-p",
                "--patch",
            ] {
                if found(option) {
                    return refuse(option, EDITOR);
                }
            }
            if !(has_message || found("--no-edit")) {
                return refuse("without -m", EDITOR);
            }
        }
        "tag" => {
            if found("-e") || found("--edit") {
                return refuse("--edit", EDITOR);
            }
            let annotated = ["-a", "--annotate", "-s", "--sign", "-u", "--local-user"]
                .iter()
                .any(|o| found(o));
            if annotated && !has_message {
                return refuse("-a without -m", EDITOR);
            }
        }
        "merge" | "cherry-pick" | "revert" | "rebase" | "am" | "pull" => {
            for option in [
                "-e",
                "--edit",
                "--continue",
                "-i",
                "--interactive",
                "--edit-todo",
            ] {
                if found(option) {
                    return refuse(option, EDITOR);
                }
            }
            if sub == "revert" && !(found("--no-edit") || found("-n") || found("--no-commit")) {
                return refuse("without --no-edit", EDITOR);
            }
            if let Some(option) = ["-x", "--exec"]
                .into_iter()
                .find(|o| sub == "rebase" && found(o))
            {
                return refuse(option, "runs the command it is given");
            }
            if args
                .iter()
                .any(|a| a.starts_with("--rebase=i") || *a == "-ri")
            {
                return refuse("--rebase=interactive", EDITOR);
            }
        }
        "notes" => {
            let action = args.iter().find(|a| !a.starts_with('-')).copied();
            if action == Some("edit") || (matches!(action, Some("add" | "append")) && !has_message)
            {
                return refuse("without -m", EDITOR);
            }
        }
        "add" | "checkout" | "reset" | "restore" | "stash" | "switch" => {
            for option in ["-p", "--patch", "-i", "--interactive", "-e", "--edit"] {
                if sub != "add" && matches!(option, "-i" | "--interactive" | "-e" | "--edit") {
                    continue;
                }
                if found(option) {
                    return refuse(option, EDITOR);
                }
            }
        }
        "grep"
            if args
                .iter()
                .any(|a| a.starts_with("-O") || a.starts_with("--open-files-in-pager")) =>
        {
            return refuse(
                "--open-files-in-pager",
                "runs the pager program it is given",
            );
        }
        "config" => {
            let reads = [
                "--get",
                "--get-all",
                "--get-regexp",
                "--get-urlmatch",
                "-l",
                "--list",
                "get",
                "list",
                "--show-origin",
                "--show-scope",
            ];
            let read_only = args.iter().any(|a| reads.contains(a));
            if !read_only || args.iter().any(|a| a.starts_with("--edit") || *a == "-e") {
                return refuse(
                    "(writing)",
                    "writes configuration, which can name programs to run (aliases, pagers, hooks)",
                );
            }
        }
        "help" => {
            for option in ["-w", "--web", "-i", "--info"] {
                if found(option) {
                    return refuse(option, "runs a browser or viewer program");
                }
            }
        }
        "bisect" if args.first() == Some(&"run") => {
            return refuse("run", "runs the command it is given");
        }
        "init" | "init-db" | "clone" if args.iter().any(|a| a.starts_with("--template")) => {
            return refuse("--template", "installs hooks, which later git commands run");
        }
        _ => {}
    }
    if sub == "clone" {
        for option in ["-c", "--config", "-u"] {
            if found(option) {
                return refuse(
                    option,
                    "sets configuration or the program run on the remote side",
                );
            }
        }
    }
    for option in ["--upload-pack", "--receive-pack", "--exec"] {
        if found(option) {
            return refuse(option, "runs the program it is given");
        }
    }
    Ok(())
}

/// `option` among `args` before `--`: exactly, with `=value`, or (for a short option) with its
/// value attached or inside a cluster such as `-am`.
fn has_option(args: &[&str], option: &str) -> bool {
    args.iter().take_while(|a| **a != "--").any(|a| {
        if *a == option
            || a.strip_prefix(option)
                .is_some_and(|rest| rest.starts_with('='))
        {
            return true;
        }
        match option.strip_prefix('-') {
            Some(letter) if letter.len() == 1 => {
                a.len() > 1 && a.starts_with('-') && !a.starts_with("--") && a[1..].contains(letter)
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_runners_are_refused() {
        for line in [
            "-c alias.x=!id x",
            "-calias.x=!id x",
            "--config-env=core.pager=X log",
            "--exec-path=output log",
            "-p log",
            "x",
            "difftool",
            "hook run pre-commit",
            "merge-index sh -a",
            "commit",
            "commit -a",
            "commit -m x -e",
            "tag -a v1",
            "rebase -i HEAD~2",
            "rebase --exec id HEAD~1",
            "revert HEAD",
            "config core.pager id",
            "config alias.x !id",
            "grep -Oid x",
            "bisect run id",
            "clone --upload-pack=id a b",
            "clone -u id a b",
            "clone 'ext::sh -c id' x",
            "push --receive-pack=id origin",
            "add -p",
            "help -w log",
            "init --template=output/t r",
            "credential-store get",
            "submodule--helper foreach id",
        ] {
            let args: Vec<&str> = line.split(' ').collect();
            assert!(check(&args).is_err(), "git {line} should be refused");
        }
    }

    #[test]
    fn everyday_commands_pass() {
        for line in [
            "status",
            "log --oneline -5",
            "-C input/repo log -p",
            "diff HEAD~1 -- src",
            "show HEAD:README.md",
            "commit -am x",
            "commit -m x --allow-empty",
            "tag v1",
            "tag -a v1 -m release",
            "config --get user.name",
            "config --list",
            "revert --no-edit HEAD",
            "init output/r",
            "clone input/repo output/r",
            "grep -n TODO",
            "branch -a",
            "--version",
        ] {
            let args: Vec<&str> = line.split(' ').collect();
            assert_eq!(check(&args), Ok(()), "git {line}");
        }
    }
}
