//! Text from outside (a model endpoint's answers, a job's task, a person's comment) on the
//! terminal: control characters are shown escaped, so that no such text can move the cursor,
//! retitle the window or clear the screen of the operator who reads it.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every control character but newline and tab escaped (`\x1b`, `\r`, `\0`,
/// `\u{9b}`): what reaches the terminal is what was said, never a command to the terminal.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !needs_escape(c) => out.push(c),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_text_is_kept() {
        assert!(matches!(printable("plain text\n\tok"), Cow::Borrowed(_)));
        assert_eq!(
            printable("a\u{1b}]0;pwned\u{7}\u{1b}[2J\r\0b\u{9b}c\u{7f}"),
            "a\\x1b]0;pwned\\x07\\x1b[2J\\r\\0b\\u{9b}c\\x7f"
        );
        assert_eq!(printable("naïve — ok"), "naïve — ok");
    }
}
