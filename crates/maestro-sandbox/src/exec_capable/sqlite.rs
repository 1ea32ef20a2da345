//! Reads the SQL and dot-commands given to the `sqlite3` shell for the ways they run programs:
//! `.shell`/`.system`, a `|command` target (`.output |cmd`, `.once |cmd`, `.import |cmd`,
//! `.read |cmd`), `.read` of an unchecked script, `.excel`/`.once -x` (open a viewer), `.load`
//! and `load_extension()` (native code), and the shell's `edit()` function (runs an editor).

/// Why a `sqlite3` command is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SqliteRefusal {
    /// A dot-command that runs a program or native code, by its name as written.
    DotCommand(String),
    /// A dot-command argument starting with `|`: the rest is a shell command.
    PipeTarget(String),
    /// An SQL function that runs a program or loads native code.
    Function(&'static str),
}

/// Dot-commands that run programs, read an unchecked script, or load native code. The shell
/// accepts any unambiguous prefix of a dot-command's name, so a prefix of one of these counts.
const DOT_COMMANDS: &[&str] = &["shell", "system", "read", "load", "excel"];

/// Dot-commands that open a viewer program with `-x`/`-e`.
const VIEWER_DOT_COMMANDS: &[&str] = &["once", "output"];

/// SQL functions that run a program (`edit`) or load native code.
const FUNCTIONS: &[&str] = &["edit", "load_extension"];

/// Checks one argument holding SQL or a dot-command, line by line.
pub(crate) fn check_text(text: &str) -> Result<(), SqliteRefusal> {
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(command) = line.strip_prefix('.') {
            check_dot_command(command)?;
        }
    }
    check_functions(text)
}

fn check_dot_command(command: &str) -> Result<(), SqliteRefusal> {
    let mut words = command.split_whitespace();
    let name = words.next().unwrap_or("");
    let is = |full: &&str| !name.is_empty() && full.starts_with(name);
    if DOT_COMMANDS.iter().any(is) {
        return Err(SqliteRefusal::DotCommand(format!(".{name}")));
    }
    let args: Vec<&str> = words.collect();
    // Quotes around the target do not change what it means.
    if let Some(target) = args
        .iter()
        .map(|a| a.trim_start_matches(['"', '\'']))
        .find(|a| a.starts_with('|'))
    {
        return Err(SqliteRefusal::PipeTarget(format!(".{name} {target}")));
    }
    if VIEWER_DOT_COMMANDS.iter().any(is)
        && args
            .iter()
            .any(|a| matches!(a.trim_start_matches('-'), "x" | "e" | "w"))
    {
        return Err(SqliteRefusal::DotCommand(format!(
            ".{name} {}",
            args.join(" ")
        )));
    }
    Ok(())
}

/// Finds one of [`FUNCTIONS`] as a whole word: quoting (`"edit"`) and comments between the name
/// and its `(` do not hide a call, so the name alone counts.
fn check_functions(text: &str) -> Result<(), SqliteRefusal> {
    let lower = text.to_ascii_lowercase();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    for function in FUNCTIONS {
        let called = lower.match_indices(function).any(|(at, _)| {
            let before = lower[..at].chars().next_back();
            let after = lower[at + function.len()..].chars().next();
            !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
        });
        if called {
            return Err(SqliteRefusal::Function(function));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_runners_are_found() {
        for (text, refusal) in [
            (".shell id", SqliteRefusal::DotCommand(".shell".into())),
            (".sh id", SqliteRefusal::DotCommand(".sh".into())),
            (".system id", SqliteRefusal::DotCommand(".system".into())),
            (
                "select 1;\n  .shell id",
                SqliteRefusal::DotCommand(".shell".into()),
            ),
            (".read x.sql", SqliteRefusal::DotCommand(".read".into())),
            (".load ./x", SqliteRefusal::DotCommand(".load".into())),
            (".excel", SqliteRefusal::DotCommand(".excel".into())),
            (".once -x", SqliteRefusal::DotCommand(".once -x".into())),
            (
                ".output |sh",
                SqliteRefusal::PipeTarget(".output |sh".into()),
            ),
            (
                ".once '|sh'",
                SqliteRefusal::PipeTarget(".once |sh'".into()),
            ),
            (
                ".import |id t",
                SqliteRefusal::PipeTarget(".import |id".into()),
            ),
            (
                "select edit('x', 'sh -c id')",
                SqliteRefusal::Function("edit"),
            ),
            (
                "SELECT \"EDIT\" ('x','id')",
                SqliteRefusal::Function("edit"),
            ),
            (
                "select load_extension('x')",
                SqliteRefusal::Function("load_extension"),
            ),
            ("select edit/**/('x','id')", SqliteRefusal::Function("edit")),
        ] {
            assert_eq!(check_text(text), Err(refusal), "{text:?}");
        }
    }

    #[test]
    fn queries_and_harmless_dot_commands_pass() {
        for text in [
            "select 1",
            "select * from edits where credit(x) > 1",
            ".tables",
            ".schema t",
            ".mode csv",
            ".headers on",
            ".output output/x.csv",
            ".import input/a.csv t",
        ] {
            assert_eq!(check_text(text), Ok(()), "{text:?}");
        }
    }
}
