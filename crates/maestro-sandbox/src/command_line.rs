//! A small POSIX-shell command-line parser, just deep enough to see every program a command line
//! would start: quotes and escapes, the list and pipe operators that separate commands, and
//! redirections. Constructs that could start a program the parser cannot see (command and
//! process substitution, subshells, here-documents) are refused outright.

/// One word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Word {
    /// The text with quotes and escapes removed.
    pub text: String,
    /// Contains a `$` expansion outside single quotes (its value is unknown here).
    pub expands: bool,
    /// Contains an unquoted glob character (`*`, `?`, `[`).
    pub globs: bool,
    /// Some part of it was quoted.
    pub quoted: bool,
    /// How far an unquoted brace expansion (`{a,b}`, `{1..3}`) has been seen; once complete,
    /// the word counts as expanding, since bash turns it into other words.
    pub(crate) brace: Brace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Brace {
    #[default]
    None,
    Open,
    Listed,
}

/// A redirection such as `> out.txt`, `2>&1` or `< in.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    /// The operator without its file descriptor number: `>`, `>>`, `<`, `&>`, `>&`, `<<<`, ...
    pub op: String,
    /// The target word; `None` for a descriptor duplication such as `2>&1` or `>&-`.
    pub target: Option<Word>,
}

impl Redirect {
    /// True for redirections that open their target for writing.
    pub(crate) fn writes(&self) -> bool {
        self.op.contains('>')
    }
}

/// One simple command: the words (assignments first, then the program and its arguments) and
/// its redirections.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SimpleCommand {
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
}

/// Splits a command line into simple commands (separated by `|`, `||`, `&&`, `;`, `&`, `|&` and
/// newlines), or explains which construct is not allowed.
pub(crate) fn parse(line: &str) -> Result<Vec<SimpleCommand>, SyntaxError> {
    Parser {
        chars: line.chars().collect(),
        pos: 0,
    }
    .parse()
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

/// Why a command line is not one the policy can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    /// A redirection operator (`>`, `<`, `2>`, ...) with no file after it; holds the operator.
    #[error("the redirection `{0}` has no target")]
    NoRedirectTarget(String),
    /// A `|` at the start of the line or right after another separator.
    #[error("a pipe `|` has no command before it")]
    PipeWithoutCommand,
    /// A subshell or group: `(` or `)` outside quotes.
    #[error(
        "subshells and grouping with `(`/`)` are not allowed; write the commands one after another"
    )]
    Grouping,
    /// `$(...)` or backticks, which would run a program the allowlist never sees.
    #[error(
        "command substitution (`$(...)` or backticks) is not allowed: the allowlist must see every program. Run the inner command on its own first, then use its output"
    )]
    Substitution,
    /// `<(...)` or `>(...)`, which would run a program the allowlist never sees.
    #[error(
        "process substitution (`<(...)`/`>(...)`) is not allowed: the allowlist must see every program"
    )]
    ProcessSubstitution,
    /// A here-document (`<<`); here-strings (`<<<`) are allowed.
    #[error(
        "here-documents (`<<`) are not allowed; write the text to a file with the Write tool (or `printf`) and redirect from it"
    )]
    HereDocument,
    /// The line ends inside single quotes.
    #[error("a single quote `'` is not closed")]
    UnclosedSingleQuote,
    /// The line ends inside double quotes.
    #[error("a double quote `\"` is not closed")]
    UnclosedDoubleQuote,
}

impl Parser {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn parse(mut self) -> Result<Vec<SimpleCommand>, SyntaxError> {
        let mut commands = Vec::new();
        let mut current = SimpleCommand::default();
        let mut word: Option<Word> = None;
        let mut pending_redirect: Option<String> = None;

        // Finishes the word being read: it becomes a redirection target or a command word.
        fn finish(
            word: &mut Option<Word>,
            pending: &mut Option<String>,
            current: &mut SimpleCommand,
        ) {
            if let Some(w) = word.take() {
                match pending.take() {
                    Some(op) => current.redirects.push(Redirect {
                        op,
                        target: Some(w),
                    }),
                    None => current.words.push(w),
                }
            }
        }

        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' => {
                    finish(&mut word, &mut pending_redirect, &mut current);
                    self.pos += 1;
                }
                '#' if word.is_none() => {
                    while let Some(c) = self.peek(0) {
                        if c == '\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                '\n' | ';' | '&' | '|' => {
                    if c == '&' && self.peek(1) == Some('>') {
                        finish(&mut word, &mut pending_redirect, &mut current);
                        self.pos += 2;
                        let op = if self.peek(0) == Some('>') {
                            self.pos += 1;
                            "&>>"
                        } else {
                            "&>"
                        };
                        self.start_redirect(op.to_string(), &mut pending_redirect, &mut current)?;
                        continue;
                    }
                    finish(&mut word, &mut pending_redirect, &mut current);
                    if let Some(op) = pending_redirect.take() {
                        return Err(SyntaxError::NoRedirectTarget(op.to_string()));
                    }
                    self.pos += 1;
                    if matches!(
                        (c, self.peek(0)),
                        ('&', Some('&')) | ('|', Some('|')) | ('|', Some('&')) | (';', Some(';'))
                    ) {
                        self.pos += 1;
                    }
                    if !current.words.is_empty() || !current.redirects.is_empty() {
                        commands.push(std::mem::take(&mut current));
                    } else if c == '|' {
                        return Err(SyntaxError::PipeWithoutCommand);
                    }
                }
                '(' | ')' => {
                    return Err(SyntaxError::Grouping);
                }
                '`' => return Err(SyntaxError::Substitution),
                '<' | '>' => {
                    if self.peek(1) == Some('(') {
                        return Err(SyntaxError::ProcessSubstitution);
                    }
                    // A word made only of digits right before the operator is a descriptor number.
                    match &word {
                        Some(w)
                            if !w.quoted
                                && !w.text.is_empty()
                                && w.text.chars().all(|d| d.is_ascii_digit()) =>
                        {
                            word = None;
                        }
                        _ => finish(&mut word, &mut pending_redirect, &mut current),
                    }
                    let op = self.redirect_operator(c)?;
                    self.start_redirect(op, &mut pending_redirect, &mut current)?;
                }
                _ => {
                    let w = word.get_or_insert_with(Word::default);
                    self.read_word_part(w)?;
                }
            }
        }
        finish(&mut word, &mut pending_redirect, &mut current);
        if let Some(op) = pending_redirect {
            return Err(SyntaxError::NoRedirectTarget(op.to_string()));
        }
        if !current.words.is_empty() || !current.redirects.is_empty() {
            commands.push(current);
        }
        Ok(commands)
    }

    fn redirect_operator(&mut self, first: char) -> Result<String, SyntaxError> {
        self.pos += 1;
        let mut op = first.to_string();
        match (first, self.peek(0)) {
            ('<', Some('<')) => {
                if self.peek(1) == Some('<') {
                    self.pos += 2;
                    return Ok("<<<".to_string());
                }
                return Err(SyntaxError::HereDocument);
            }
            ('>', Some('>')) | ('>', Some('|')) | ('<', Some('>')) => {
                op.push(self.chars[self.pos]);
                self.pos += 1;
            }
            _ => {}
        }
        if self.peek(0) == Some('&') {
            op.push('&');
            self.pos += 1;
        }
        Ok(op)
    }

    fn start_redirect(
        &mut self,
        op: String,
        pending: &mut Option<String>,
        current: &mut SimpleCommand,
    ) -> Result<(), SyntaxError> {
        if let Some(prev) = pending.take() {
            return Err(SyntaxError::NoRedirectTarget(prev.to_string()));
        }
        if op.ends_with('&') {
            // `>&2`, `2>&1`, `>&-`: a descriptor, not a file, when digits or `-` follow and the
            // token ends there. Anything else joined to them (`>&1x`, `>&1#`) makes one word,
            // a file name, as the shell reads it (a `#` inside a word starts no comment).
            let start = self.pos;
            let mut digits = String::new();
            while let Some(c) = self.peek(0) {
                if c.is_ascii_digit() || (c == '-' && digits.is_empty()) {
                    digits.push(c);
                    self.pos += 1;
                } else {
                    break;
                }
            }
            let token_ends = matches!(
                self.peek(0),
                None | Some(' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')')
            );
            if !digits.is_empty() && token_ends {
                current.redirects.push(Redirect { op, target: None });
                return Ok(());
            }
            self.pos = start;
        }
        // Skip blanks between the operator and its target.
        while matches!(self.peek(0), Some(' ' | '\t')) {
            self.pos += 1;
        }
        *pending = Some(op);
        Ok(())
    }

    /// Reads one unquoted character, escape, quoted string or expansion into `w`.
    fn read_word_part(&mut self, w: &mut Word) -> Result<(), SyntaxError> {
        let Some(c) = self.peek(0) else { return Ok(()) };
        self.pos += 1;
        match c {
            '\\' => match self.peek(0) {
                Some('\n') => self.pos += 1,
                Some(next) => {
                    w.text.push(next);
                    w.quoted = true;
                    self.pos += 1;
                }
                None => {}
            },
            '\'' => {
                w.quoted = true;
                loop {
                    match self.peek(0) {
                        Some('\'') => {
                            self.pos += 1;
                            break;
                        }
                        Some(ch) => {
                            w.text.push(ch);
                            self.pos += 1;
                        }
                        None => return Err(SyntaxError::UnclosedSingleQuote),
                    }
                }
            }
            '"' => {
                w.quoted = true;
                loop {
                    match self.peek(0) {
                        Some('"') => {
                            self.pos += 1;
                            break;
                        }
                        Some('\\') => {
                            match self.peek(1) {
                                Some(e @ ('"' | '\\' | '$' | '`')) => w.text.push(e),
                                Some('\n') => {}
                                Some(other) => {
                                    w.text.push('\\');
                                    w.text.push(other);
                                }
                                None => return Err(SyntaxError::UnclosedDoubleQuote),
                            }
                            self.pos += 2;
                        }
                        Some('`') => return Err(SyntaxError::Substitution),
                        Some('$') => {
                            self.pos += 1;
                            self.dollar(w)?;
                        }
                        Some(ch) => {
                            w.text.push(ch);
                            self.pos += 1;
                        }
                        None => return Err(SyntaxError::UnclosedDoubleQuote),
                    }
                }
            }
            '$' => self.dollar(w)?,
            '*' | '?' | '[' => {
                w.globs = true;
                w.text.push(c);
            }
            '{' => {
                w.brace = Brace::Open;
                w.text.push(c);
            }
            ',' if w.brace == Brace::Open => {
                w.brace = Brace::Listed;
                w.text.push(c);
            }
            '.' if w.brace == Brace::Open && self.peek(0) == Some('.') => {
                w.brace = Brace::Listed;
                w.text.push(c);
            }
            '}' if w.brace == Brace::Listed => {
                w.expands = true;
                w.text.push(c);
            }
            _ => w.text.push(c),
        }
        Ok(())
    }

    /// After a `$`: refuses `$(`, notes a parameter expansion.
    fn dollar(&mut self, w: &mut Word) -> Result<(), SyntaxError> {
        match self.peek(0) {
            Some('(') => Err(SyntaxError::Substitution),
            Some(c)
                if c == '{' || c == '_' || c.is_ascii_alphanumeric() || "@*#?$!-".contains(c) =>
            {
                w.expands = true;
                w.text.push('$');
                Ok(())
            }
            // `$'...'` decodes escapes (`$'\x2d'` is `-`) in shells that support it, and
            // `$"..."` translates: either way the value is not the text seen here.
            Some('\'') | Some('"') => {
                w.expands = true;
                Ok(())
            }
            _ => {
                w.text.push('$');
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn programs(line: &str) -> Vec<Vec<String>> {
        parse(line)
            .unwrap()
            .into_iter()
            .map(|c| c.words.into_iter().map(|w| w.text).collect())
            .collect()
    }

    #[test]
    fn splits_lists_and_pipes() {
        assert_eq!(
            programs("ls -la | grep 'a b' && echo \"x;y\" ; wc -l || true & sort\nuniq |& cat"),
            vec![
                vec!["ls", "-la"],
                vec!["grep", "a b"],
                vec!["echo", "x;y"],
                vec!["wc", "-l"],
                vec!["true"],
                vec!["sort"],
                vec!["uniq"],
                vec!["cat"],
            ]
        );
    }

    #[test]
    fn redirections_are_separated_from_words() {
        let cmds = parse("grep x a.txt 2>&1 >out/r.txt 2> err.log < in.txt &>all.log").unwrap();
        assert_eq!(cmds.len(), 1);
        let words: Vec<&str> = cmds[0].words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(words, ["grep", "x", "a.txt"]);
        let redirects: Vec<(String, Option<String>)> = cmds[0]
            .redirects
            .iter()
            .map(|r| (r.op.clone(), r.target.as_ref().map(|t| t.text.clone())))
            .collect();
        assert_eq!(
            redirects,
            vec![
                (">&".to_string(), None),
                (">".to_string(), Some("out/r.txt".to_string())),
                (">".to_string(), Some("err.log".to_string())),
                ("<".to_string(), Some("in.txt".to_string())),
                ("&>".to_string(), Some("all.log".to_string())),
            ]
        );
    }

    #[test]
    fn hidden_programs_are_refused() {
        for line in [
            "echo $(id)",
            "echo `id`",
            "echo \"$(id)\"",
            "echo \"`id`\"",
            "(id)",
            "cat <(id)",
            "cat <<EOF\nx\nEOF",
            "tee >(sh)",
        ] {
            assert!(parse(line).is_err(), "{line} should be refused");
        }
    }

    #[test]
    fn quotes_and_expansions_are_tracked() {
        let cmds = parse(r#"$X a\ b 'c$d' "e$f" g*"#).unwrap();
        let w = &cmds[0].words;
        assert!(w[0].expands);
        assert_eq!(w[1].text, "a b");
        assert!(!w[2].expands);
        assert_eq!(w[2].text, "c$d");
        assert!(w[3].expands);
        assert!(w[4].globs);
    }

    #[test]
    fn brace_expansion_and_ansi_c_quotes_count_as_expansions() {
        let cmds = parse(r"x {a,b} {1..3} {} a{b}c '{a,b}' $'\x2d'").unwrap();
        let expands: Vec<bool> = cmds[0].words.iter().map(|w| w.expands).collect();
        assert_eq!(expands, [false, true, true, false, false, false, true]);
    }
}
