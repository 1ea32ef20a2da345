//! The command policy: every program a command line would start must be on the movement's
//! allowlist, and programs that can run other programs are handled by the table in
//! [`super::exec_capable`]: interpreters need `*`, wrappers are looked through, exec-capable
//! options are refused. Runtime package installs are refused with a message of their own.
//!
//! The policy is a layer checked on the parsed command line in every sandbox mode; the kernel
//! sandbox around the command is the security boundary. Where the command runs without
//! bubblewrap, the arguments and redirection targets that name files must also pass the caller's
//! [`PathRules`] (for `Bash`, the workspace's).

use std::path::Path;

use super::command_line::{SimpleCommand, SyntaxError, Word, parse};
use super::exec_capable::{self, ExecRefusal, Wrapped};

/// Printed when a command would install packages at run time.
pub const INSTALL_REFUSED: &str = "runtime package installs are not allowed: the sandbox has no \
    network and its Python environment is read-only. Use the tools and Python packages already \
    installed, or ask the operator to add the package to the file `safety.python_requirements` \
    names and run `maestro sandbox setup`";

/// The programs `Bash` may run when neither the movement nor the configuration says otherwise:
/// reading, searching and transforming text, moving files around inside the workspace, archives,
/// `git` and `sqlite3`. Shells, interpreters (`python3`, `make`), `env`, `sudo`, network clients
/// and package managers are absent on purpose: a program that runs any code needs `*` (see
/// `docs/tools/Bash.md`).
pub const DEFAULT_ALLOWED_COMMANDS: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "find",
    "sed",
    "awk",
    "sort",
    "uniq",
    "cut",
    "tr",
    "diff",
    "cmp",
    "comm",
    "paste",
    "join",
    "fold",
    "nl",
    "column",
    "echo",
    "printf",
    "pwd",
    "mkdir",
    "cp",
    "mv",
    "rm",
    "rmdir",
    "touch",
    "ln",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "stat",
    "file",
    "du",
    "date",
    "true",
    "false",
    "test",
    "seq",
    "sleep",
    "tee",
    "xxd",
    "od",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "base64",
    "jq",
    "sqlite3",
    "tar",
    "gzip",
    "gunzip",
    "zcat",
    "unzip",
    "zip",
    "xargs",
    "git",
];

/// The allowlist entry that allows any program with any options.
pub const ANY_PROGRAM: &str = "*";

/// Shell keywords: each hides the commands it contains from a simple reading.
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "select", "!",
];

/// Where a program given by absolute path may live (its name is then checked like a bare name).
const SYSTEM_BIN_DIRS: &[&str] = &[
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
    "/usr/local/sbin",
    "/usr/sbin",
    "/sbin",
];

/// How deep wrappers may nest (`env nice timeout 5 ls`).
const MAX_WRAPPER_DEPTH: usize = 6;

/// Why a command line is refused. Each message says what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The line is empty or only whitespace.
    #[error("the command is empty")]
    Empty,
    /// The line installs packages (`pip install`, `npm i`, `apt-get install`, ...); refused
    /// even under `*`.
    #[error("{}", INSTALL_REFUSED)]
    PackageInstall,
    /// Wrappers nest deeper than six (`env nice timeout 5 ...`).
    #[error("too many nested wrapper commands")]
    TooDeep,
    /// The line uses shell syntax the policy cannot read.
    #[error(transparent)]
    Syntax(#[from] SyntaxError),
    /// A program, option or variable that runs other programs (see [`ExecRefusal`]).
    #[error(transparent)]
    ExecCapable(#[from] ExecRefusal),
    /// The program word holds an expansion or a glob (`$X`, `*`); holds the word.
    #[error(
        "the program name `{0}` comes from an expansion or a glob; write the program name literally"
    )]
    ExpandedProgram(String),
    /// A shell keyword (`if`, `for`, `while`, `case`, `!`, ...) in the program position; holds
    /// the keyword.
    #[error(
        "shell control structures (`{0}`) are not supported; run simple commands one after another"
    )]
    ControlStructure(String),
    /// The program is not on the movement's allowlist.
    #[error("`{name}` is not in this movement's allowed commands; allowed: {allowed}")]
    NotAllowed {
        /// The program's name.
        name: String,
        /// The allowlist, comma-separated (`none` when it is empty).
        allowed: String,
    },
    /// `xargs` runs a program from the exec-capable table, whose options could come from
    /// xargs' input; holds that program.
    #[error(
        "`xargs {0}` is not allowed: xargs adds arguments read from its input, and for `{0}` those could be options that run programs. Use `find ... -exec {0} ... {{}} +` or name the files directly"
    )]
    Xargs(String),
    /// The program is given by a path outside the system binary directories (`./x`,
    /// `/tmp/x`); holds the path.
    #[error("`{0}` runs a program by path; run allowed programs by name")]
    ProgramByPath(String),
    /// Without bubblewrap, a redirection target holds an expansion or a glob; holds the target.
    #[error("the redirection target `{0}` must be a literal path")]
    RedirectNotLiteral(String),
    /// Without bubblewrap, an argument or redirection target names a path under `~`; holds it.
    #[error("`{0}`: use paths relative to the workspace instead of `~`")]
    HomePath(String),
    /// Without bubblewrap, the line writes a file (a `>` redirection target) and the movement
    /// has no `edit: true`; holds the path.
    #[error("this movement cannot edit files, so it cannot write `{0}`")]
    CannotWrite(String),
    /// A path the command names is refused by the caller's [`PathRules`].
    #[error(transparent)]
    Path(Box<dyn std::error::Error + Send + Sync>),
}

/// The caller's rules for the paths a command line names, checked where no kernel sandbox
/// keeps the command in (`safety.bash_sandbox: unsafe_no_sandbox`). The error says what to
/// name instead.
pub trait PathRules: std::fmt::Debug {
    /// Whether `path`, as written on the command line, may be read.
    fn check_read(&self, path: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
    /// Whether `path` may be written.
    fn check_write(&self, path: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// What the policy checks besides program names.
#[derive(Debug, Clone, Copy)]
pub struct PathPolicy<'a> {
    /// Where the arguments and redirections may lead (fallback mode).
    pub rules: &'a dyn PathRules,
    /// Whether the command may write at all.
    pub edit: bool,
}

/// Checks a command line against `allowed` program names. With `paths`, file arguments and
/// redirection targets must also pass its [`PathRules`] (writes only with `edit`).
///
/// An allowlist holding [`ANY_PROGRAM`] (`*`) allows any command line; only runtime package
/// installs are still refused, because they cannot work in the sandbox.
pub fn check(
    line: &str,
    allowed: &[String],
    paths: Option<PathPolicy<'_>>,
) -> Result<(), PolicyError> {
    if line.trim().is_empty() {
        return Err(PolicyError::Empty);
    }
    if allowed.iter().any(|a| a == ANY_PROGRAM) {
        return refuse_installs(line);
    }
    check_line(line, allowed, paths, 0)
}

/// With `*`, the one check left: package installs that are visible on the command line.
fn refuse_installs(line: &str) -> Result<(), PolicyError> {
    let Ok(commands) = parse(line) else {
        return Ok(());
    };
    for command in &commands {
        let words: Vec<&str> = command
            .words
            .iter()
            .skip_while(|w| assignment_name(w).is_some())
            .map(|w| w.text.as_str())
            .collect();
        if let Some((program, args)) = words.split_first() {
            let name = program.rsplit('/').next().unwrap_or(program);
            if is_package_install(name, args) {
                return Err(PolicyError::PackageInstall);
            }
        }
    }
    Ok(())
}

fn check_line(
    line: &str,
    allowed: &[String],
    paths: Option<PathPolicy<'_>>,
    depth: usize,
) -> Result<(), PolicyError> {
    if depth > MAX_WRAPPER_DEPTH {
        return Err(PolicyError::TooDeep);
    }
    for command in &parse(line)? {
        check_simple(command, allowed, paths, depth)?;
    }
    Ok(())
}

fn check_simple(
    command: &SimpleCommand,
    allowed: &[String],
    paths: Option<PathPolicy<'_>>,
    depth: usize,
) -> Result<(), PolicyError> {
    let mut words = command.words.as_slice();
    while let Some((first, rest)) = words.split_first() {
        match assignment_name(first) {
            Some(name) => {
                if let Some(refusal) = exec_capable::env_refusal(name) {
                    return Err(refusal.into());
                }
                words = rest;
            }
            None => break,
        }
    }
    if let Some(policy) = paths {
        for redirect in &command.redirects {
            if let Some(target) = &redirect.target {
                if redirect.op == "<<<" {
                    continue;
                }
                check_path_word(target, redirect.writes(), policy, true)?;
            }
        }
        for word in words.iter().skip(1) {
            check_path_word(word, false, policy, false)?;
        }
    }
    if words.is_empty() {
        return Ok(());
    }
    check_program(words, allowed, paths, depth, false)
}

/// `NAME=value` at the start of a command.
fn assignment_name(word: &Word) -> Option<&str> {
    let (name, _) = word.text.split_once('=')?;
    let valid = !name.is_empty()
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(name)
}

/// Checks `words[0]` (the program) and, through the exec-capable table, what it would start.
/// `input_args`: the program also gets arguments read from its input (under `xargs`).
fn check_program(
    words: &[Word],
    allowed: &[String],
    paths: Option<PathPolicy<'_>>,
    depth: usize,
    input_args: bool,
) -> Result<(), PolicyError> {
    let Some((program, args)) = words.split_first() else {
        return Ok(());
    };
    if depth > MAX_WRAPPER_DEPTH {
        return Err(PolicyError::TooDeep);
    }
    if program.expands || program.globs {
        return Err(PolicyError::ExpandedProgram(program.text.clone()));
    }
    let name = program_name(&program.text)?;
    let arg_texts: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
    if is_package_install(name, &arg_texts) {
        return Err(PolicyError::PackageInstall);
    }
    if KEYWORDS.contains(&name) {
        return Err(PolicyError::ControlStructure(name.to_string()));
    }
    let entry = exec_capable::lookup(name);
    if let Some(refusal) = entry.and_then(|e| e.refuses_outright(name)) {
        return Err(refusal.into());
    }
    if !allowed.iter().any(|a| a == name) {
        return Err(PolicyError::NotAllowed {
            name: name.to_string(),
            allowed: if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            },
        });
    }
    let Some(entry) = entry else {
        return Ok(());
    };
    if input_args {
        return Err(PolicyError::Xargs(name.to_string()));
    }
    for wrapped in entry.check(name, args)? {
        match wrapped {
            Wrapped::Argv { words, input_args } => {
                check_program(words, allowed, paths, depth + 1, input_args)?;
            }
            Wrapped::Line(line) => check_line(&line, allowed, paths, depth + 1)?,
        }
    }
    Ok(())
}

/// The name a program word runs: bare names as they are, absolute paths in system binary
/// directories by their file name.
fn program_name(text: &str) -> Result<&str, PolicyError> {
    if !text.contains('/') {
        return Ok(text);
    }
    let path = Path::new(text);
    let in_system_dir = path
        .parent()
        .is_some_and(|dir| SYSTEM_BIN_DIRS.iter().any(|d| Path::new(d) == dir));
    match path.file_name().and_then(|n| n.to_str()) {
        Some(name) if in_system_dir => Ok(name),
        _ => Err(PolicyError::ProgramByPath(text.to_string())),
    }
}

/// `pip install`, `npm i`, `apt-get install`, `python -m pip install`, ...
pub fn is_package_install(name: &str, args: &[&str]) -> bool {
    let sub = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .copied()
        .unwrap_or("");
    match name {
        "pip" | "pip3" | "pipx" | "easy_install" => {
            matches!(sub, "install" | "download") || name == "easy_install"
        }
        "uv" => sub == "pip" && args.contains(&"install") || matches!(sub, "add" | "tool"),
        "poetry" | "pdm" | "rye" | "yarn" | "pnpm" | "bun" => {
            matches!(sub, "add" | "install" | "i")
        }
        "npm" => matches!(sub, "install" | "i" | "add" | "ci" | "isntall" | "in"),
        "npx" | "pnpx" | "bunx" => true,
        "apt" | "apt-get" | "aptitude" | "yum" | "dnf" | "apk" | "zypper" | "brew" | "snap"
        | "conda" | "mamba" | "micromamba" => {
            matches!(sub, "install" | "add" | "reinstall")
        }
        "dpkg" | "rpm" => args
            .iter()
            .any(|a| matches!(*a, "-i" | "--install" | "-U" | "--upgrade")),
        "cargo" | "gem" | "go" | "composer" | "cpan" | "cpanm" | "luarocks" | "R" => {
            matches!(sub, "install" | "get" | "require") || matches!(name, "cpanm")
        }
        _ if name.starts_with("python") => {
            args.windows(3).any(|w| {
                w[0] == "-m" && matches!(w[1], "pip" | "ensurepip" | "uv") && w[2] == "install"
            }) || args.windows(2).any(|w| w[0] == "-m" && w[1] == "ensurepip")
        }
        _ => false,
    }
}

/// In the fallback, a word that names a file outside the workspace is refused.
fn check_path_word(
    word: &Word,
    writes: bool,
    policy: PathPolicy<'_>,
    is_redirect: bool,
) -> Result<(), PolicyError> {
    let text = word.text.as_str();
    if is_redirect && (word.expands || word.globs) {
        return Err(PolicyError::RedirectNotLiteral(text.to_string()));
    }
    if matches!(text, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "-") {
        return Ok(());
    }
    // `--file=/etc/passwd` names a path after the `=` too.
    let candidates = [Some(text), text.split_once('=').map(|(_, v)| v)];
    for candidate in candidates.into_iter().flatten() {
        if !(is_redirect || looks_like_path(candidate)) {
            continue;
        }
        if candidate.starts_with('~') {
            return Err(PolicyError::HomePath(candidate.to_string()));
        }
        let resolved = if writes {
            if !policy.edit {
                return Err(PolicyError::CannotWrite(candidate.to_string()));
            }
            policy.rules.check_write(candidate)
        } else {
            policy.rules.check_read(candidate)
        };
        resolved.map_err(PolicyError::Path)?;
    }
    Ok(())
}

/// An argument that names a file outside the current directory: an absolute path whose first
/// component exists (so `/pattern/` regexes are not mistaken for paths), `~`, or `..`.
fn looks_like_path(text: &str) -> bool {
    if text.starts_with('~') {
        return true;
    }
    if text.split('/').any(|c| c == "..") {
        return true;
    }
    match text.strip_prefix('/') {
        Some(rest) => {
            let first = rest.split('/').next().unwrap_or("");
            first.is_empty() || Path::new("/").join(first).exists()
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Why `check` refuses `line`, as the text the model reads; `None` when it passes.
    fn check(line: &str, allowed: &[String], paths: Option<PathPolicy<'_>>) -> Option<String> {
        super::check(line, allowed, paths)
            .err()
            .map(|e| e.to_string())
    }

    fn allowed(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn allowed_programs_pass_in_every_position() {
        let a = allowed(&[
            "ls", "grep", "wc", "echo", "xargs", "find", "env", "timeout",
        ]);
        for line in [
            "ls -la | grep x | wc -l",
            "echo a && ls; echo b || echo c & ls",
            "find . -name '*.rs' -exec grep -l fn {} ;",
            "find . -type f | xargs -n 1 grep x",
            "env A=1 ls",
            "timeout 5 ls",
            "FOO=bar ls > output/x.txt 2>&1",
            "/usr/bin/ls",
        ] {
            assert_eq!(check(line, &a, None), None, "{line}");
        }
    }

    #[test]
    fn bypass_attempts_are_refused() {
        let a = allowed(&[
            "ls", "echo", "env", "xargs", "find", "timeout", "nice", "python3",
        ]);
        for line in [
            "curl http://x",
            "ls | curl x",
            "ls && curl x",
            "ls; curl x",
            "ls\ncurl x",
            "ls & curl x",
            "sh -c 'ls'",
            "bash -c ls",
            "bash -lc ls",
            "env curl x",
            "env -i curl x",
            "env PATH=/tmp ls",
            "env -S 'curl x'",
            "xargs curl",
            "xargs -I{} sh -c 'curl {}'",
            "find . -exec curl x ;",
            "timeout 5 curl x",
            "nice -n 5 curl x",
            "echo `curl x`",
            "echo $(curl x)",
            "$CMD x",
            "c\"url\" x",
            "./curl",
            "/tmp/curl",
            "eval ls",
            "exec ls",
            "PATH=/tmp ls",
            "LD_PRELOAD=/x.so ls",
            "for i in 1; do curl x; done",
            "sudo ls",
            "l* x",
            // `1#` is one word (a file name): the `#` starts no comment, so `curl` runs.
            "echo a 2>&1# | curl x",
            "ls >&1#x; curl x",
        ] {
            assert!(
                check(line, &a, None).is_some(),
                "`{line}` should be refused"
            );
        }
    }

    #[test]
    fn package_installs_are_refused_with_the_install_message() {
        let a = allowed(&[
            "pip", "pip3", "npm", "python3", "apt-get", "cargo", "yarn", "go", "gem",
        ]);
        for line in [
            "pip install requests",
            "pip3 install -U x",
            "python3 -m pip install x",
            "npm install left-pad",
            "npm i x",
            "yarn add x",
            "apt-get install -y curl",
            "cargo install ripgrep",
            "go install x@latest",
            "gem install rails",
        ] {
            assert_eq!(
                check(line, &a, None),
                Some(INSTALL_REFUSED.to_string()),
                "{line}"
            );
        }
        let any = allowed(&["*"]);
        assert_eq!(check("pip list", &any, None), None);
        assert_eq!(
            check("pip install x", &any, None),
            Some(INSTALL_REFUSED.to_string())
        );
    }
}
