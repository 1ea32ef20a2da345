//! Diagnostics from every crate (`tracing` events) go to stderr, filtered by `MAESTRO_LOG`, else
//! `RUST_LOG`, else `warn`. Stdout stays the command's own output (`--events jsonl` included).
//! While live progress is on screen, a log line is printed above it rather than through it.

use std::io::Write;
use std::sync::{Mutex, PoisonError};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The filter used when neither variable is set.
/// Warnings, plus which sandbox `Bash` chose (logged once per process), which an operator must
/// always be able to see. The CDP client under BrowseWeb warns of every browser event newer than
/// its protocol tables; only its errors are shown.
const DEFAULT_FILTER: &str = "warn,maestro::sandbox=info,chromiumoxide=error";

/// The live progress display, while one is drawn: log lines are printed through it.
static DISPLAY: Mutex<Option<indicatif::MultiProgress>> = Mutex::new(None);

/// Installs the subscriber; a filter that does not parse is reported once and `warn` is used.
pub(crate) fn install() {
    let (source, spec) = match (std::env::var("MAESTRO_LOG"), std::env::var("RUST_LOG")) {
        (Ok(spec), _) if !spec.trim().is_empty() => ("MAESTRO_LOG", spec),
        (_, Ok(spec)) if !spec.trim().is_empty() => ("RUST_LOG", spec),
        _ => ("", DEFAULT_FILTER.to_string()),
    };
    let filter = EnvFilter::try_new(&spec).unwrap_or_else(|e| {
        eprintln!("warning: {source}={spec:?} is not a log filter ({e}); using `{DEFAULT_FILTER}`");
        EnvFilter::new(DEFAULT_FILTER)
    });
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Stderr { colours })
        .with_ansi(colours)
        .with_target(false)
        .try_init();
}

/// Routes log lines above `display` until [`release_display`].
pub(crate) fn attach_display(display: indicatif::MultiProgress) {
    *DISPLAY.lock().unwrap_or_else(PoisonError::into_inner) = Some(display);
}

pub(crate) fn release_display() {
    *DISPLAY.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

/// Stderr, or the progress display's own line printer while one is drawn.
struct Stderr {
    /// The formatter writes colour codes.
    colours: bool,
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine(Vec::new(), self.colours)
    }
}

/// One formatted log event, written out whole when dropped; with colour codes or not.
struct LogLine(Vec<u8>, bool);

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        // A log line may carry an endpoint's words: no control character of theirs reaches the
        // terminal.
        let text = String::from_utf8_lossy(&self.0);
        let text = crate::term::printable_log(&text, self.1);
        let display = DISPLAY.lock().unwrap_or_else(PoisonError::into_inner);
        match display.as_ref() {
            Some(display) => {
                let _ = display.println(text.trim_end_matches('\n'));
            }
            None => {
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
            }
        }
    }
}
