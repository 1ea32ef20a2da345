//! Reads a GNU sed script far enough to find the two ways it runs programs: the `e` command and
//! the `e` flag of `s///`. A script it cannot read is refused, never let through.

/// Why a sed script is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SedRefusal {
    /// The `e` command (`1e id`) runs its argument, or the pattern space, as a command.
    ExecCommand,
    /// The `e` flag of `s///` runs the result of the substitution as a command.
    ExecFlag,
    /// Something this reader does not understand.
    Unreadable(char),
}

/// Checks one sed script (an `-e` value or the script operand).
pub(crate) fn check_script(script: &str) -> Result<(), SedRefusal> {
    Reader {
        chars: script.chars().collect(),
        pos: 0,
    }
    .script()
}

struct Reader {
    chars: Vec<char>,
    pos: usize,
}

impl Reader {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek();
        self.pos += 1;
        c
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
    }

    fn skip_digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
    }

    /// Consumes up to (not including) the end of the line.
    fn skip_line(&mut self) {
        while let Some(c) = self.peek() {
            if c == '\n' {
                break;
            }
            self.pos += 1;
        }
    }

    /// Consumes a label or version: GNU sed ends it at a blank, a `;` or the end of the line,
    /// and reads what follows a blank as the next command (`:a e id` runs `id`).
    fn skip_label(&mut self) {
        self.skip_blanks();
        while let Some(c) = self.peek() {
            if matches!(c, '\n' | ';' | ' ' | '\t') {
                break;
            }
            self.pos += 1;
        }
    }

    /// Consumes text up to the unescaped `delim`, and the delimiter itself.
    fn delimited(&mut self, delim: char) -> Result<(), SedRefusal> {
        loop {
            match self.bump() {
                None => return Err(SedRefusal::Unreadable(delim)),
                Some('\\') => {
                    self.bump();
                }
                Some(c) if c == delim => return Ok(()),
                Some(_) => {}
            }
        }
    }

    fn script(mut self) -> Result<(), SedRefusal> {
        loop {
            while matches!(self.peek(), Some(' ' | '\t' | '\n' | ';')) {
                self.pos += 1;
            }
            let Some(_) = self.peek() else {
                return Ok(());
            };
            if self.peek() == Some('#') {
                self.skip_line();
                continue;
            }
            self.addresses()?;
            self.command()?;
        }
    }

    fn addresses(&mut self) -> Result<(), SedRefusal> {
        if self.address()? {
            self.skip_blanks();
            if self.peek() == Some(',') {
                self.pos += 1;
                self.skip_blanks();
                if matches!(self.peek(), Some('+' | '~')) {
                    self.pos += 1;
                    self.skip_digits();
                } else {
                    self.address()?;
                }
            }
        }
        self.skip_blanks();
        while self.peek() == Some('!') {
            self.pos += 1;
            self.skip_blanks();
        }
        Ok(())
    }

    /// One address, if there is one here.
    fn address(&mut self) -> Result<bool, SedRefusal> {
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                self.skip_digits();
                if self.peek() == Some('~') {
                    self.pos += 1;
                    self.skip_digits();
                }
                Ok(true)
            }
            Some('$') => {
                self.pos += 1;
                Ok(true)
            }
            Some('/') | Some('\\') => {
                let delim = if self.bump() == Some('\\') {
                    self.bump().ok_or(SedRefusal::Unreadable('\\'))?
                } else {
                    '/'
                };
                self.delimited(delim)?;
                while matches!(self.peek(), Some('I' | 'M')) {
                    self.pos += 1;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn command(&mut self) -> Result<(), SedRefusal> {
        let Some(c) = self.bump() else {
            return Ok(());
        };
        match c {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => Ok(()),
            'l' | 'L' | 'q' | 'Q' => {
                self.skip_blanks();
                self.skip_digits();
                Ok(())
            }
            'a' | 'i' | 'c' => {
                // The text runs to the end of the line; `\` escapes the next character,
                // a newline included, which continues the text.
                while let Some(c) = self.peek() {
                    match c {
                        '\n' => break,
                        '\\' => self.pos += 2,
                        _ => self.pos += 1,
                    }
                }
                Ok(())
            }
            ':' | 'b' | 't' | 'T' | 'v' => {
                self.skip_label();
                Ok(())
            }
            'r' | 'R' | 'w' | 'W' => {
                self.skip_line();
                Ok(())
            }
            'e' => Err(SedRefusal::ExecCommand),
            's' => {
                let delim = self.bump().ok_or(SedRefusal::Unreadable('s'))?;
                if matches!(delim, '\n' | '\\') {
                    return Err(SedRefusal::Unreadable('s'));
                }
                self.delimited(delim)?;
                self.delimited(delim)?;
                loop {
                    match self.peek() {
                        Some('e') => return Err(SedRefusal::ExecFlag),
                        Some('w') => {
                            self.skip_line();
                            return Ok(());
                        }
                        Some('g' | 'p' | 'i' | 'I' | 'm' | 'M' | ' ' | '\t') => self.pos += 1,
                        Some(d) if d.is_ascii_digit() => self.pos += 1,
                        _ => return Ok(()),
                    }
                }
            }
            'y' => {
                let delim = self.bump().ok_or(SedRefusal::Unreadable('y'))?;
                self.delimited(delim)?;
                self.delimited(delim)
            }
            other => Err(SedRefusal::Unreadable(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_commands_and_flags_are_found_anywhere() {
        for (script, refusal) in [
            ("1e touch x", SedRefusal::ExecCommand),
            ("e", SedRefusal::ExecCommand),
            ("/a/,$ !e id", SedRefusal::ExecCommand),
            ("p;1e id", SedRefusal::ExecCommand),
            ("1{\ne id\n}", SedRefusal::ExecCommand),
            ("s/x/id/e", SedRefusal::ExecFlag),
            ("s|x|id|ge", SedRefusal::ExecFlag),
            ("s/x/id/g e", SedRefusal::ExecFlag),
            ("s/a\\/b/c/2e", SedRefusal::ExecFlag),
            ("y/ab/cd/;s/.*/id/e", SedRefusal::ExecFlag),
            ("k", SedRefusal::Unreadable('k')),
            ("s/unclosed", SedRefusal::Unreadable('/')),
            ("a x\\\\\ne id", SedRefusal::ExecCommand),
            (":a e id", SedRefusal::ExecCommand),
            ("v 4.2 e id", SedRefusal::ExecCommand),
        ] {
            assert_eq!(check_script(script), Err(refusal), "{script:?}");
        }
    }

    #[test]
    fn ordinary_scripts_pass() {
        for script in [
            "s/a/b/g",
            "s/e/E/g",
            "/error/d",
            "1,10p",
            "$!N;P;D",
            "1~2d",
            "/x/I,+3{s/a/b/;p}",
            "a hello e world",
            "i\\\nline e\\\nmore",
            "a x\\\\",
            ":a;N;ba",
            "s/x/y/w output/changed.txt",
            "#n\n/e/p",
            "\\,e,d",
            "y/abc/xyz/",
            "q5",
        ] {
            assert_eq!(check_script(script), Ok(()), "{script:?}");
        }
    }
}
