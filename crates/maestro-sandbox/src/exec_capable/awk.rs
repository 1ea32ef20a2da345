//! Reads an awk program far enough to find the ways it runs programs: `system()`, pipes to and
//! from commands (`print | "cmd"`, `"cmd" | getline`, gawk's `|&`), and `@` (gawk's `@load`,
//! `@include` and indirect calls, which can reach `system` by a name built at run time).
//! Strings, regular expressions and comments are skipped, so `/a|b/` is not taken for a pipe.

/// Why an awk program is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AwkRefusal {
    /// `system(...)`.
    System,
    /// `|` or `|&` outside `||`: output to, or input from, a command.
    Pipe,
    /// `@load`, `@include`, `@namespace` or an indirect call `@name(...)`.
    At,
    /// A string or regular expression that is never closed.
    Unclosed,
}

/// Words after which a `/` starts a regular expression rather than a division.
const REGEX_AFTER: &[&str] = &[
    "print", "printf", "return", "if", "while", "for", "do", "else", "in", "case",
];

/// Checks one awk program text.
pub(crate) fn check_program(program: &str) -> Result<(), AwkRefusal> {
    // A backslash before a newline only continues the line; dropping it first means a name
    // split across lines (`sys\<newline>tem`) is still seen whole.
    let chars: Vec<char> = program.replace("\\\n", "").chars().collect();
    let mut i = 0;
    // Whether the last token can end an operand (so a `/` after it divides).
    let mut after_operand = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                i = skip_delimited(&chars, i + 1, '"')?;
                after_operand = true;
            }
            '/' if !after_operand => {
                i = skip_regex(&chars, i + 1)?;
                after_operand = true;
            }
            '|' => {
                if chars.get(i + 1) == Some(&'|') {
                    i += 2;
                    after_operand = false;
                } else {
                    return Err(AwkRefusal::Pipe);
                }
            }
            '@' => return Err(AwkRefusal::At),
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                if word == "system" {
                    return Err(AwkRefusal::System);
                }
                after_operand = !REGEX_AFTER.contains(&word.as_str());
            }
            c if c.is_ascii_digit() || c == '.' => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
                after_operand = true;
            }
            '$' => {
                i += 1;
                after_operand = false;
            }
            ')' | ']' => {
                i += 1;
                after_operand = true;
            }
            '+' | '-' if chars.get(i + 1) == Some(&c) => {
                // `x++ / 2` divides; `++x` is followed by its operand anyway.
                i += 2;
                after_operand = true;
            }
            _ => {
                i += 1;
                after_operand = false;
            }
        }
    }
    Ok(())
}

/// Skips to just past the closing `delim`, honouring backslash escapes.
fn skip_delimited(chars: &[char], mut i: usize, delim: char) -> Result<usize, AwkRefusal> {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            c if c == delim => return Ok(i + 1),
            '\n' => return Err(AwkRefusal::Unclosed),
            _ => i += 1,
        }
    }
    Err(AwkRefusal::Unclosed)
}

/// Skips a regular expression: a `/` inside a bracket expression does not close it.
fn skip_regex(chars: &[char], mut i: usize) -> Result<usize, AwkRefusal> {
    let mut in_brackets = false;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '[' if !in_brackets => {
                in_brackets = true;
                i += 1;
                // `[]...]` and `[^]...]`: a leading `]` is literal.
                if chars.get(i) == Some(&'^') {
                    i += 1;
                }
                if chars.get(i) == Some(&']') {
                    i += 1;
                }
            }
            ']' if in_brackets => {
                in_brackets = false;
                i += 1;
            }
            '/' if !in_brackets => return Ok(i + 1),
            '\n' => return Err(AwkRefusal::Unclosed),
            _ => i += 1,
        }
    }
    Err(AwkRefusal::Unclosed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found() {
        for (program, refusal) in [
            ("BEGIN{system(\"id\")}", AwkRefusal::System),
            ("BEGIN { system (\"id\") }", AwkRefusal::System),
            ("BEGIN{sys\\\ntem(\"id\")}", AwkRefusal::System),
            ("{print | \"sh\"}", AwkRefusal::Pipe),
            ("BEGIN{\"id\" | getline x; print x}", AwkRefusal::Pipe),
            ("BEGIN{print \"id\" |& \"cat\"}", AwkRefusal::Pipe),
            ("@load \"x\"", AwkRefusal::At),
            ("BEGIN{f=\"system\"; @f(\"id\")}", AwkRefusal::At),
            ("x / 2; /a|b", AwkRefusal::Unclosed),
            ("{print $1 / 2 | \"sh\"}", AwkRefusal::Pipe),
            ("{a = b / c; system(\"id\"); d = e / f}", AwkRefusal::System),
        ] {
            assert_eq!(check_program(program), Err(refusal), "{program:?}");
        }
    }

    #[test]
    fn ordinary_programs_pass() {
        for program in [
            "{print $1}",
            "/a|b/ {print}",
            "$1 ~ /x|y/ || $2 == \"a|b\" {n++} END {print n / 2}",
            "BEGIN{FS=\",\"} {sum += $3} END {printf \"%.2f\\n\", sum}",
            "/[/|]/",
            "{print > \"output/x.txt\"}",
            "# system(\"id\") in a comment\n{print}",
            "{ if (x) print /y|z/ }",
        ] {
            assert_eq!(check_program(program), Ok(()), "{program:?}");
        }
    }
}
