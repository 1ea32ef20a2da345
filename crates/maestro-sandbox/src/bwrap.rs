//! Wrapping a command into a bubblewrap (`bwrap`) argv.
//!
//! The sandbox sees: `/usr` and the Debian `/bin`, `/lib*` links read-only; a handful of
//! harmless `/etc` files (never `/etc/shadow`, never the host's credentials); fresh `/proc`,
//! `/dev` and `/tmp`; and the workspace at `/workspace`, read-only except the writable
//! directories of a movement that may edit. It runs as an unprivileged user in new user, PID,
//! network, IPC, UTS and cgroup namespaces, with every capability dropped and an empty
//! environment.

use std::ffi::OsString;
use std::path::Path;

use crate::SANDBOX_WORKSPACE;

/// The `bwrap` program's name.
pub(crate) const BWRAP: &str = "bwrap";

static BWRAP_PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Where `bwrap` is: the first match in the sandbox `PATH`, then in this process's `PATH`
/// (so the probe and the real calls run the same binary).
pub(crate) fn bwrap_path() -> &'static Path {
    BWRAP_PATH.get_or_init(|| {
        let inherited = std::env::var("PATH").unwrap_or_default();
        SANDBOX_PATH
            .split(':')
            .chain(inherited.split(':'))
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join(BWRAP))
            .find(|p| p.is_file())
            .unwrap_or_else(|| std::path::PathBuf::from(BWRAP))
    })
}

/// `PATH` inside the sandbox (and in the fallback).
pub(crate) const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `/etc` entries bound read-only into the sandbox: what dynamic linking, user-name lookups,
/// `update-alternatives` links (e.g. `awk`), Python and `file` need. Anything else — `shadow`,
/// host keys, credentials — stays invisible.
pub(crate) const ETC_ENTRIES: &[&str] = &[
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "mime.types",
    "magic",
    "magic.mime",
    "os-release",
    "debian_version",
    "ssl",
    "fonts",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
];

/// Top-level entries that are symlinks into `/usr` on merged-`/usr` systems (or real
/// directories elsewhere).
pub(crate) const ROOT_LINKS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// The user the command runs as inside the sandbox's user namespace (`nobody`); outside, it is
/// the user that started bubblewrap (the sandbox user when Maestro runs as root).
const SANDBOX_UID: &str = "65534";

/// Per-call settings of the bubblewrap sandbox beyond the mounts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Extras<'a> {
    /// Size of the `/tmp` tmpfs, in bytes (`None`: bubblewrap's default, half of RAM).
    pub tmp_size: Option<u64>,
    /// Descriptors holding seccomp programs for `--add-seccomp-fd`.
    pub seccomp_fds: &'a [std::os::fd::RawFd],
    /// A Python environment bound read-only at its own path, its `bin/` first on `PATH`.
    pub python_env: Option<&'a Path>,
}

/// The argv that runs `program_argv` in the sandbox with `root` mounted at `/workspace`.
/// `writable` are directories (already resolved inside `root`) mounted read-write.
/// bubblewrap mounts everything `nosuid`, so a set-id file never takes effect inside.
pub(crate) fn argv(
    root: &Path,
    writable: &[&Path],
    program_argv: &[OsString],
    extras: Extras<'_>,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![bwrap_path().into()];
    let mut push = |parts: &[&str]| a.extend(parts.iter().map(OsString::from));
    push(&[
        "--unshare-all",
        "--unshare-user",
        "--uid",
        SANDBOX_UID,
        "--gid",
        SANDBOX_UID,
    ]);
    push(&[
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]);
    push(&["--ro-bind", "/usr", "/usr"]);
    for name in ROOT_LINKS {
        let host = Path::new("/").join(name);
        match std::fs::read_link(&host) {
            Ok(target) => {
                let target = target.to_string_lossy().into_owned();
                let host = host.to_string_lossy().into_owned();
                push(&["--symlink", &target, &host]);
            }
            Err(_) if host.is_dir() => {
                let host = host.to_string_lossy().into_owned();
                push(&["--ro-bind", &host, &host]);
            }
            Err(_) => {}
        }
    }
    push(&["--dir", "/etc"]);
    for entry in ETC_ENTRIES {
        let path = format!("/etc/{entry}");
        push(&["--ro-bind-try", &path, &path]);
    }
    push(&["--proc", "/proc", "--dev", "/dev"]);
    if let Some(size) = extras.tmp_size {
        push(&["--size", &size.to_string()]);
    }
    push(&["--tmpfs", "/tmp"]);
    if let Some(env) = extras.python_env {
        let env = env.to_string_lossy().into_owned();
        push(&["--ro-bind", &env, &env]);
    }
    for fd in extras.seccomp_fds {
        push(&["--add-seccomp-fd", &fd.to_string()]);
    }
    a.push("--ro-bind".into());
    a.push(root.into());
    a.push(SANDBOX_WORKSPACE.into());
    for dir in writable {
        if let Ok(rel) = dir.strip_prefix(root) {
            a.push("--bind".into());
            a.push(dir.into());
            a.push(Path::new(SANDBOX_WORKSPACE).join(rel).into());
        }
    }
    let mut push = |parts: &[&str]| a.extend(parts.iter().map(OsString::from));
    // The sandbox's root is a tmpfs bwrap builds; make it read-only so nothing but `/tmp` and
    // the writable workspace directories takes writes.
    push(&["--remount-ro", "/", "--chdir", SANDBOX_WORKSPACE]);
    for (k, v) in sandbox_env(SANDBOX_WORKSPACE, "/tmp", extras.python_env) {
        push(&["--setenv", &k, &v]);
    }
    push(&["--"]);
    a.extend(program_argv.iter().cloned());
    a
}

/// The whole environment a command gets: no API keys, tokens or host paths. With a Python
/// environment, its `bin/` comes first on `PATH` and matplotlib keeps its cache in `/tmp` (the
/// home directory is read-only).
pub(crate) fn sandbox_env(
    home: &str,
    tmp: &str,
    python_env: Option<&Path>,
) -> Vec<(String, String)> {
    let path = match python_env {
        Some(env) => format!("{}:{SANDBOX_PATH}", env.join("bin").display()),
        None => SANDBOX_PATH.to_string(),
    };
    let mut env = vec![
        ("PATH".to_string(), path),
        ("HOME".to_string(), home.to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
        ("TMPDIR".to_string(), tmp.to_string()),
        // Font and other caches (matplotlib's fontconfig) in the writable temporary directory.
        ("XDG_CACHE_HOME".to_string(), format!("{tmp}/.cache")),
        ("TERM".to_string(), "dumb".to_string()),
        ("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string()),
    ];
    if let Some(env_dir) = python_env {
        env.push((
            "VIRTUAL_ENV".to_string(),
            env_dir.to_string_lossy().into_owned(),
        ));
        env.push(("MPLCONFIGDIR".to_string(), format!("{tmp}/.matplotlib")));
    }
    env
}
