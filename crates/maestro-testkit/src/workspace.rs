//! [`TempWorkspace`]: a throwaway directory tree for tests that touch files.

use std::path::{Path, PathBuf};

/// A temporary directory, removed when dropped, with helpers to lay out and read files.
///
/// ```
/// let ws = maestro_testkit::TempWorkspace::new();
/// ws.write("src/main.rs", "fn main() {}");
/// assert_eq!(ws.read("src/main.rs"), "fn main() {}");
/// ```
#[derive(Debug)]
pub struct TempWorkspace {
    dir: tempfile::TempDir,
}

impl Default for TempWorkspace {
    fn default() -> Self {
        TempWorkspace::new()
    }
}

// Test support: an I/O failure here should fail the test at once, with the path in the message.
#[allow(clippy::expect_used)]
impl TempWorkspace {
    /// Creates an empty temporary directory.
    pub fn new() -> TempWorkspace {
        TempWorkspace {
            dir: tempfile::tempdir().expect("create a temporary workspace directory"),
        }
    }

    /// The workspace root.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `relative` under the root.
    pub fn join(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// Writes `contents` to `relative`, creating parent directories; returns the full path.
    pub fn write(&self, relative: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("create {}: {e}", parent.display()));
        }
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// Reads `relative` as UTF-8 text.
    pub fn read(&self, relative: impl AsRef<Path>) -> String {
        let path = self.join(relative);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    }

    /// Whether `relative` exists.
    pub fn exists(&self, relative: impl AsRef<Path>) -> bool {
        self.join(relative).exists()
    }
}
