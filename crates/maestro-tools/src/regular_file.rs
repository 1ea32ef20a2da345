//! The one way tools open a file they read or write: only regular files, never blocking, never
//! through a symlink in the last component.
//!
//! Opening a FIFO for reading blocks until a writer appears, and opening a device can have side
//! effects, so a model that plants `mkfifo output/p` could hang any tool that opens it. Every
//! function here checks the path's kind first (`lstat`), opens it with `O_NONBLOCK | O_NOFOLLOW`,
//! then checks the opened descriptor again (`fstat`), so a file swapped in between is caught too.
//! A path whose last component is a symlink is refused: callers resolve and confine paths first
//! (see [`Workspace::resolve`](crate::Workspace::resolve) and [`ensure_inside`]), so a link left
//! at that point is one planted to lead elsewhere.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// What a path is, for messages that say why it was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file: the one kind tools open.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link (seen by `lstat`, not followed).
    Symlink,
    /// A FIFO (named pipe): opening it for reading would block until a writer appears.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device (`/dev/zero`, a terminal, ...).
    CharDevice,
    /// A block device (a disk).
    BlockDevice,
    /// A type the operating system reports but none of the above.
    Unknown,
}

impl FileKind {
    /// The kind of a file type as `lstat` or `fstat` reports it.
    pub fn of(file_type: FileType) -> FileKind {
        if file_type.is_file() {
            FileKind::Regular
        } else if file_type.is_dir() {
            FileKind::Directory
        } else if file_type.is_symlink() {
            FileKind::Symlink
        } else if file_type.is_fifo() {
            FileKind::Fifo
        } else if file_type.is_socket() {
            FileKind::Socket
        } else if file_type.is_char_device() {
            FileKind::CharDevice
        } else if file_type.is_block_device() {
            FileKind::BlockDevice
        } else {
            FileKind::Unknown
        }
    }

    /// "a FIFO (named pipe)", "a symbolic link", …
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Symlink => "a symbolic link",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Unknown => "a special file",
        }
    }
}

/// Why a file could not be opened as a regular file.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Nothing is at the path (or a directory on the way is missing).
    #[error("does not exist")]
    NotFound,
    /// Something is at the path, but not a regular file (a symlink in the last component
    /// included).
    #[error("is {}, not a regular file", kind.describe())]
    NotRegular {
        /// What is there.
        kind: FileKind,
    },
    /// The file's directory, resolved through symlinks, is not inside the directory it must
    /// stay in ([`ensure_inside`]).
    #[error("lies outside `{}`", dir.display())]
    Outside {
        /// The directory the file must stay inside.
        dir: PathBuf,
    },
    /// Any other failure of the operating system (permissions, a full disk, invalid UTF-8 for
    /// [`read_to_string`], an existing file for [`Create::New`]).
    #[error("{0}")]
    Io(#[source] io::Error),
}

/// Whether the caller reads or writes the file; only changes the wording of messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The caller reads the file ("Read only reads regular files").
    Read,
    /// The caller writes the file ("Write only writes regular files").
    Write,
}

impl OpenError {
    /// The message a person or model reads, e.g. "`p` is a FIFO (named pipe), not a regular
    /// file; Read only reads regular files".
    pub fn explain(&self, shown: &str, tool: &str, access: Access) -> String {
        let verb = match access {
            Access::Read => "reads",
            Access::Write => "writes",
        };
        match self {
            OpenError::NotRegular { .. } => {
                format!("`{shown}` {self}; {tool} only {verb} regular files")
            }
            OpenError::Outside { .. } => {
                format!(
                    "`{shown}` {self} (through a symbolic link); {tool} does not follow links out"
                )
            }
            OpenError::NotFound | OpenError::Io(_) => format!("`{shown}` {self}"),
        }
    }

    fn from_io(e: io::Error) -> OpenError {
        match e.kind() {
            io::ErrorKind::NotFound => OpenError::NotFound,
            _ if e.raw_os_error() == Some(libc::ELOOP) => OpenError::NotRegular {
                kind: FileKind::Symlink,
            },
            _ => OpenError::Io(e),
        }
    }
}

/// How [`open_write`] treats an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Create {
    /// Create the file, or empty an existing regular file.
    OrTruncate,
    /// Create the file; an existing file (or a dangling symlink) is an error.
    New,
}

/// Refuses anything at `path` that is not a regular file, without opening it.
fn check_kind(path: &Path) -> Result<bool, OpenError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => match FileKind::of(meta.file_type()) {
            FileKind::Regular => Ok(true),
            kind => Err(OpenError::NotRegular { kind }),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(OpenError::Io(e)),
    }
}

/// Checks the opened descriptor: the path may have been swapped after [`check_kind`].
fn check_opened(file: File) -> Result<File, OpenError> {
    let meta = file.metadata().map_err(OpenError::Io)?;
    match FileKind::of(meta.file_type()) {
        FileKind::Regular => Ok(file),
        kind => Err(OpenError::NotRegular { kind }),
    }
}

const FLAGS: i32 = libc::O_NONBLOCK | libc::O_NOFOLLOW;

/// Opens an existing regular file for reading.
pub fn open_read(path: &Path) -> Result<File, OpenError> {
    if !check_kind(path)? {
        return Err(OpenError::NotFound);
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(FLAGS)
        .open(path)
        .map_err(OpenError::from_io)?;
    check_opened(file)
}

/// The whole content of a regular file.
pub fn read(path: &Path) -> Result<Vec<u8>, OpenError> {
    let mut bytes = Vec::new();
    open_read(path)?
        .read_to_end(&mut bytes)
        .map_err(OpenError::Io)?;
    Ok(bytes)
}

/// The whole content of a regular file holding UTF-8 text.
pub fn read_to_string(path: &Path) -> Result<String, OpenError> {
    String::from_utf8(read(path)?)
        .map_err(|e| OpenError::Io(io::Error::new(io::ErrorKind::InvalidData, e)))
}

/// Opens a regular file for writing, creating it (mode 0666 minus the umask) when missing.
pub fn open_write(path: &Path, create: Create) -> Result<File, OpenError> {
    let exists = check_kind(path)?;
    if exists && create == Create::New {
        return Err(OpenError::Io(io::Error::from(io::ErrorKind::AlreadyExists)));
    }
    let mut options = OpenOptions::new();
    options.write(true).custom_flags(FLAGS);
    match create {
        // O_EXCL also refuses a dangling symlink planted after the check.
        Create::New => options.create_new(true),
        Create::OrTruncate => options.create(true),
    };
    let file = options.open(path).map_err(|e| match e.raw_os_error() {
        // A FIFO without a reader, or a socket, swapped in after the check.
        Some(libc::ENXIO) | Some(libc::EOPNOTSUPP) => OpenError::NotRegular {
            kind: std::fs::symlink_metadata(path)
                .map(|m| FileKind::of(m.file_type()))
                .unwrap_or(FileKind::Unknown),
        },
        _ => OpenError::from_io(e),
    })?;
    let file = check_opened(file)?;
    // Truncate only once the descriptor is known to be a regular file.
    file.set_len(0).map_err(OpenError::Io)?;
    Ok(file)
}

/// Writes `bytes` as the whole content of a regular file (see [`open_write`]).
pub fn write(path: &Path, bytes: &[u8], create: Create) -> Result<(), OpenError> {
    open_write(path, create)?
        .write_all(bytes)
        .map_err(OpenError::Io)
}

/// Checks that `file`'s parent directory, resolved through symlinks, lies inside `dir` (also
/// resolved): a symlinked directory cannot carry a write or read out of `dir`.
pub fn ensure_inside(dir: &Path, file: &Path) -> Result<(), OpenError> {
    let outside = || OpenError::Outside {
        dir: dir.to_path_buf(),
    };
    let root = std::fs::canonicalize(dir).map_err(OpenError::from_io)?;
    let parent = file.parent().ok_or_else(outside)?;
    let parent = std::fs::canonicalize(parent).map_err(OpenError::from_io)?;
    if parent.starts_with(&root) {
        Ok(())
    } else {
        Err(outside())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::process::Command;

    fn mkfifo(path: &Path) {
        let status = Command::new("mkfifo").arg(path).status().unwrap();
        assert!(status.success());
    }

    #[test]
    fn fifos_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("p");
        mkfifo(&fifo);
        let err = read(&fifo).unwrap_err();
        assert_eq!(
            err.explain("p", "Read", Access::Read),
            "`p` is a FIFO (named pipe), not a regular file; Read only reads regular files"
        );
        let err = write(&fifo, b"x", Create::OrTruncate).unwrap_err();
        assert_eq!(
            err.explain("p", "Write", Access::Write),
            "`p` is a FIFO (named pipe), not a regular file; Write only writes regular files"
        );
    }

    #[test]
    fn devices_sockets_and_directories_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for (path, kind) in [
            (Path::new("/dev/null"), FileKind::CharDevice),
            (socket.as_path(), FileKind::Socket),
            (dir.path(), FileKind::Directory),
        ] {
            assert!(matches!(
                read(path),
                Err(OpenError::NotRegular { kind: k }) if k == kind
            ));
            assert!(matches!(
                write(path, b"x", Create::OrTruncate),
                Err(OpenError::NotRegular { kind: k }) if k == kind
            ));
        }
    }

    #[test]
    fn a_final_symlink_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.txt");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let dangling = dir.path().join("dangling.txt");
        std::os::unix::fs::symlink(dir.path().join("created.txt"), &dangling).unwrap();
        assert!(matches!(
            read(&link),
            Err(OpenError::NotRegular {
                kind: FileKind::Symlink
            })
        ));
        for create in [Create::OrTruncate, Create::New] {
            assert!(write(&link, b"x", create).is_err());
            assert!(write(&dangling, b"x", create).is_err());
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(!dir.path().join("created.txt").exists());
    }

    #[test]
    fn regular_files_are_read_written_and_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        write(&path, b"longer text", Create::New).unwrap();
        write(&path, b"short", Create::OrTruncate).unwrap();
        assert_eq!(read_to_string(&path).unwrap(), "short");
        assert!(write(&path, b"x", Create::New).is_err());
        assert!(matches!(
            read(&dir.path().join("missing")),
            Err(OpenError::NotFound)
        ));
    }

    #[test]
    fn ensure_inside_follows_directory_links() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        assert!(ensure_inside(dir.path(), &dir.path().join("a.yaml")).is_ok());
        assert!(matches!(
            ensure_inside(dir.path(), &dir.path().join("out/a.yaml")),
            Err(OpenError::Outside { .. })
        ));
    }
}
