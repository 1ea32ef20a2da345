//! Text from outside (a model endpoint's answers, a job's reason, a person's answer) made safe
//! to print on a terminal.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Writes `args` to stdout ([`print!`] and [`println!`] in this crate): see [`write_to`].
pub(crate) fn write_out(args: std::fmt::Arguments<'_>) {
    write_to(&mut std::io::stdout().lock(), args, "stdout");
}

/// Writes `args` to stderr ([`eprint!`] and [`eprintln!`] in this crate): see [`write_to`].
pub(crate) fn write_err(args: std::fmt::Arguments<'_>) {
    write_to(&mut std::io::stderr().lock(), args, "stderr");
}

/// Writes `args` to `to`. A closed pipe (the reader went away) drops the text quietly; any
/// other error ends the process as the standard `println!` does, rather than losing output
/// silently (a full disk under `maestro jobs list > file`).
fn write_to(to: &mut impl std::io::Write, args: std::fmt::Arguments<'_>, name: &str) {
    if let Err(e) = to.write_fmt(args)
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        #[allow(clippy::panic)]
        {
            panic!("failed printing to {name}: {e}");
        }
    }
}

/// `s` with every control character escaped except newline and tab: the C0 controls
/// (U+0000–U+001F), DEL (U+007F) and the C1 controls (U+0080–U+009F). A terminal would act on
/// them (an escape sequence can retitle the window, clear the screen or rewrite what is shown;
/// a carriage return can overwrite a line with another), so a model endpoint's text must never
/// reach it raw. Escapes are written as Rust writes them: `\0`, `\r`, `\x1b`, `\x7f`, `\u{9b}`;
/// a backslash already in the text is left alone. Text without controls is returned as is.
pub(crate) fn printable(s: &str) -> Cow<'_, str> {
    escape_controls(s, |c| c == '\n' || c == '\t')
}

/// A formatted log line made printable: [`printable`], except that with `colours` the colour
/// codes (SGR sequences, `ESC [ digits and semicolons m`) are kept, since the log formatter
/// writes its own with them. The formatter escapes ESC and other controls in the message, but
/// not in fields written with `%` or `?`, where an endpoint's error text goes: every other
/// escape sequence and control character there is escaped here. An SGR sequence from outside
/// can still colour the rest of its line, but cannot move the cursor, clear the screen or
/// retitle the window.
pub(crate) fn printable_log(s: &str, colours: bool) -> Cow<'_, str> {
    if !colours {
        return printable(s);
    }
    let sgr_len = |rest: &str| {
        let body = rest.strip_prefix("\u{1b}[")?;
        let digits = body.find(|c: char| !c.is_ascii_digit() && c != ';')?;
        (body[digits..].starts_with('m')).then_some(2 + digits + 1)
    };
    if !s.contains(|c: char| c.is_control() && c != '\n' && c != '\t' && c != '\u{1b}')
        && s.match_indices('\u{1b}')
            .all(|(at, _)| sgr_len(&s[at..]).is_some())
    {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut rest = s;
    while let Some(at) = rest.find('\u{1b}') {
        out.push_str(&printable(&rest[..at]));
        let len = match sgr_len(&rest[at..]) {
            Some(len) => {
                out.push_str(&rest[at..at + len]);
                len
            }
            None => {
                out.push_str("\\x1b");
                1
            }
        };
        rest = &rest[at + len..];
    }
    out.push_str(&printable(rest));
    Cow::Owned(out)
}

fn escape_controls(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    let escaped = |c: char| c.is_control() && !keep(c);
    let Some(first) = s.find(escaped) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if !escaped(c) {
            out.push(c);
            continue;
        }
        let _ = match c {
            '\0' => write!(out, "\\0"),
            '\r' => write!(out, "\\r"),
            c if u32::from(c) < 0x80 => write!(out, "\\x{:02x}", u32::from(c)),
            c => write!(out, "\\u{{{:x}}}", u32::from(c)),
        };
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_newlines_and_tabs_kept() {
        assert_eq!(
            printable("\u{1b}]0;pwned\u{7}\u{1b}[2J"),
            "\\x1b]0;pwned\\x07\\x1b[2J"
        );
        assert_eq!(printable("a\0b\rc"), "a\\0b\\rc");
        assert_eq!(
            printable("del\u{7f} csi\u{9b}31m"),
            "del\\x7f csi\\u{9b}31m"
        );
        assert_eq!(printable("\u{80}\u{9f}\u{a0}"), "\\u{80}\\u{9f}\u{a0}");
        assert_eq!(printable("two\nlines\tand a tab"), "two\nlines\tand a tab");
        assert_eq!(printable("\u{8}\u{c}\u{b}"), "\\x08\\x0c\\x0b");
    }

    #[test]
    fn a_log_line_keeps_its_colour_codes_and_nothing_else() {
        let coloured = "\u{1b}[33m WARN\u{1b}[0m \u{1b}[2mretrying\u{1b}[0m\n";
        assert!(matches!(printable_log(coloured, true), Cow::Borrowed(t) if t == coloured));
        assert_eq!(
            printable_log(coloured, false),
            "\\x1b[33m WARN\\x1b[0m \\x1b[2mretrying\\x1b[0m\n"
        );
        assert_eq!(
            printable_log(
                "\u{1b}[33m WARN\u{1b}[0m error=busy\u{1b}[2J\u{1b}]0;pwned\u{7}a\rb\0c\u{1b}\n",
                true
            ),
            "\u{1b}[33m WARN\u{1b}[0m error=busy\\x1b[2J\\x1b]0;pwned\\x07a\\rb\\0c\\x1b\n"
        );
        assert_eq!(printable_log("plain\tline\n", true), "plain\tline\n");
    }

    #[test]
    fn text_without_controls_is_borrowed_unchanged() {
        for text in ["", "plain", "naïve – ünïcode ✓ 日本語", "back\\slash"] {
            assert!(matches!(printable(text), Cow::Borrowed(t) if t == text));
        }
    }

    #[test]
    fn every_control_but_newline_and_tab_is_escaped() {
        for code in (0u32..0x20).chain(0x7f..0xa0) {
            let c = char::from_u32(code).unwrap_or_default();
            let shown = printable(&c.to_string()).into_owned();
            if c == '\n' || c == '\t' {
                assert_eq!(shown, c.to_string());
            } else {
                assert!(
                    shown.starts_with('\\') && !shown.chars().any(char::is_control),
                    "U+{code:04X} shown as {shown:?}"
                );
            }
        }
    }
}
