//! Diagnostics: errors and warnings that point at a file, a line and column, and a field path.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How serious a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The piece is invalid and does not load until this is fixed.
    Error,
    /// The piece loads, but something in it is probably not what its author meant.
    Warning,
}

/// One finding about a piece file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// Whether the finding stops the piece from loading.
    pub severity: Severity,
    /// The file the finding is about.
    pub file: PathBuf,
    /// Field path, e.g. `movements[1].rules[0].next`; empty for the document itself.
    pub path: String,
    /// 1-based line; 0 when the finding has no position (e.g. an unreadable file).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// Byte range in the source, for snippets.
    pub span: (usize, usize),
    /// What is wrong and what would be valid.
    pub message: String,
}

/// Renders diagnostics rustc-style, with a source snippet and the field path under the caret:
///
/// ```text
/// error: unknown movement `deploy`; known: plan, execute
///   --> piece.yaml:12:15
///    |
/// 12 |         next: deploy
///    |               ^^^^^^ movements[1].rules[0].next
/// ```
///
/// Diagnostics without a position (an unreadable file) get the header and the file name only.
pub fn render_diagnostics(source: &str, diagnostics: &[Diagnostic]) -> String {
    use codespan_reporting::diagnostic::{Diagnostic as Report, Label};
    use codespan_reporting::files::SimpleFile;
    use codespan_reporting::term;

    let mut out = String::new();
    let config = term::Config {
        chars: term::Chars::ascii(),
        ..term::Config::default()
    };
    // One line index per file, not one per diagnostic: building it reads the whole source.
    let mut file: Option<(&std::path::Path, SimpleFile<String, &str>)> = None;
    for d in diagnostics {
        let name = d.file.display().to_string();
        let report = match d.severity {
            Severity::Error => Report::error(),
            Severity::Warning => Report::warning(),
        }
        .with_message(&d.message);
        if d.line == 0 {
            out.push_str(&format!(
                "{}: {}\n  --> {name}\n\n",
                severity_word(d.severity),
                d.message
            ));
            continue;
        }
        let file = match &mut file {
            Some((path, file)) if *path == d.file.as_path() => file,
            slot => {
                &slot
                    .insert((d.file.as_path(), SimpleFile::new(name, source)))
                    .1
            }
        };
        let range = snippet_range(source, d.span);
        let label = Label::primary((), range).with_message(&d.path);
        match term::emit_into_string(&config, file, &report.with_labels(vec![label])) {
            Ok(text) => out.push_str(&text),
            Err(_) => out.push_str(&format!(
                "{}: {}\n  --> {}:{}:{}\n\n",
                severity_word(d.severity),
                d.message,
                d.file.display(),
                d.line,
                d.column
            )),
        }
    }
    out
}

fn severity_word(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

/// A byte range inside `source` on character boundaries, widened to one character when empty
/// and cut at the first line end, so the caret line stays readable.
fn snippet_range(source: &str, (start, end): (usize, usize)) -> std::ops::Range<usize> {
    let clamp = |mut i: usize| {
        i = i.min(source.len());
        while !source.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let start = clamp(start);
    let mut end = clamp(end.max(start));
    if let Some(nl) = source[start..end].find('\n')
        && nl > 0
    {
        end = start + nl;
    }
    if end == start
        && let Some(c) = source[start..].chars().next()
        && c != '\n'
    {
        end = start + c.len_utf8();
    }
    start..end
}
