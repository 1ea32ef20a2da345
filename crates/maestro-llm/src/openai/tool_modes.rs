//! What [`ToolMode::Auto`] settled on, per endpoint and model, kept in a small JSON file so that
//! the next client (the next `maestro run`) starts with the right mode instead of finding out
//! again:
//!
//! ```json
//! {"http://127.0.0.1:8088/v1": {"smollm2": "json", "qwen3": "native"}}
//! ```
//!
//! The file is a cache: an unreadable one counts as empty, and a failed write only costs the
//! next run one request.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::ToolMode;

type Modes = BTreeMap<String, BTreeMap<String, ToolMode>>;

/// The tool-mode cache file, or none.
#[derive(Debug, Clone)]
pub(crate) struct ToolModeFile {
    path: Option<PathBuf>,
}

impl ToolModeFile {
    pub(crate) fn new(path: Option<PathBuf>) -> Self {
        ToolModeFile { path }
    }

    /// The mode remembered for `model` at `base_url`.
    pub(crate) fn get(&self, base_url: &str, model: &str) -> Option<ToolMode> {
        let path = self.path.as_deref()?;
        read(path).get(base_url)?.get(model).copied()
    }

    /// Remembers `mode` for `model` at `base_url` (written to a temporary file, then renamed,
    /// so a concurrent reader never sees half a file).
    pub(crate) fn set(&self, base_url: &str, model: &str, mode: ToolMode) {
        let Some(path) = self.path.as_deref() else {
            return;
        };
        let mut modes = read(path);
        modes
            .entry(base_url.to_string())
            .or_default()
            .insert(model.to_string(), mode);
        if let Err(e) = write(path, &modes) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remember the tool mode");
        }
    }
}

fn read(path: &Path) -> Modes {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

fn write(path: &Path, modes: &Modes) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(modes).map_err(std::io::Error::other)?;
    let temporary = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&temporary, text + "\n")?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn modes_are_kept_per_endpoint_and_model_and_garbage_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache/tool-modes.json");
        let file = ToolModeFile::new(Some(path.clone()));
        assert_eq!(file.get("http://a/v1", "m"), None);
        file.set("http://a/v1", "m", ToolMode::Json);
        file.set("http://a/v1", "n", ToolMode::Native);
        file.set("http://b/v1", "m", ToolMode::Native);
        let again = ToolModeFile::new(Some(path.clone()));
        assert_eq!(
            (
                again.get("http://a/v1", "m"),
                again.get("http://a/v1", "n"),
                again.get("http://b/v1", "m")
            ),
            (
                Some(ToolMode::Json),
                Some(ToolMode::Native),
                Some(ToolMode::Native)
            )
        );
        std::fs::write(&path, "{not json").unwrap();
        assert_eq!(again.get("http://a/v1", "m"), None);
        assert_eq!(ToolModeFile::new(None).get("http://a/v1", "m"), None);
    }
}
