//! A real, throwaway PostgreSQL cluster for tests: a data directory made by `initdb` (once, then
//! copied) in a temporary directory, `pg_ctl start` on a free loopback port with trust authentication, stopped (and its files removed)
//! when the guard drops.
//!
//! The port is taken below the kernel's ephemeral range (`ip_local_port_range`), so no `bind` to
//! port 0 and no outgoing connection of another test can be handed it between the pick and the
//! server's `bind`, nor while a test has stopped the server to restart it. Clusters of every test
//! process keep their ports apart by holding a lock on a file named after the port for as long
//! as they live; a port something else holds anyway is given up for another one.
//!
//! The binaries come from `$MAESTRO_PG_BIN` or Debian's `/usr/lib/postgresql/<version>/bin`
//! (package `postgresql`). `initdb` refuses to run as root, so as root the cluster runs as the
//! `postgres` user (or `nobody` when that user does not exist) through `runuser`.

// Test support: a failure to set up the cluster should stop the test with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// A running PostgreSQL cluster; stopped on drop.
#[derive(Debug)]
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    run_as: Option<String>,
    /// The loopback port the server listens on (`127.0.0.1`).
    pub port: u16,
    /// The lock on the port's file, held while the cluster lives (see the module's text).
    _port: File,
}

/// The superuser the cluster is created with.
const SUPERUSER: &str = "maestro";

impl PgCluster {
    /// Where `initdb` and `pg_ctl` are, if PostgreSQL is installed: `$MAESTRO_PG_BIN`, else the
    /// newest `/usr/lib/postgresql/*/bin`.
    pub fn bin_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("MAESTRO_PG_BIN") {
            let dir = PathBuf::from(dir);
            return dir.join("initdb").exists().then_some(dir);
        }
        let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .filter_map(|entry| {
                let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
                let bin = entry.path().join("bin");
                bin.join("initdb").exists().then_some((version, bin))
            })
            .collect();
        found.sort();
        found.pop().map(|(_, bin)| bin)
    }

    /// Creates and starts a cluster, waiting until it accepts connections.
    pub fn start() -> PgCluster {
        let bin = PgCluster::bin_dir().expect(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb and no \
             MAESTRO_PG_BIN): apt-get install postgresql, or run scripts/prerequisites.sh",
        );
        let dir = tempfile::Builder::new()
            .prefix("maestro-pg-")
            .tempdir()
            .unwrap();
        let run_as = running_as_root().then(unprivileged_user);
        if let Some(user) = &run_as {
            let uid = id_of(user, "-u");
            let gid = id_of(user, "-g");
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let (port, lock) = reserve_port(0);
        let mut cluster = PgCluster {
            dir,
            bin,
            run_as,
            port,
            _port: lock,
        };
        let template = cluster.template();
        let copied = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(cluster.data_dir())
            .status()
            .unwrap();
        assert!(copied.success(), "cannot copy {}", template.display());
        for attempt in 1.. {
            match cluster.start_server() {
                Ok(()) => break,
                Err(Start::PortTaken(_)) if attempt < 5 => {
                    let (port, lock) = reserve_port(attempt);
                    cluster.port = port;
                    cluster._port = lock;
                }
                Err(Start::PortTaken(log) | Start::Failed(log)) => {
                    panic!("pg_ctl start failed: {log}")
                }
            }
        }
        cluster
    }

    /// A freshly initialised data directory to copy: `initdb` is by far the slowest step (tens of
    /// seconds on a busy machine), so it runs once per machine, PostgreSQL version and user, into
    /// a directory beside the system's temporary files. Built under a private name and renamed
    /// into place, so concurrent tests never see half of one.
    fn template(&self) -> PathBuf {
        let version = self
            .bin
            .parent()
            .and_then(Path::file_name)
            .and_then(|v| v.to_str())
            .unwrap_or("pg");
        let owner = self.run_as.as_deref().unwrap_or("self");
        let template = std::env::temp_dir().join(format!("maestro-pg-template-{version}-{owner}"));
        if template.join("PG_VERSION").exists() {
            return template;
        }
        let building = self.dir.path().join("template");
        self.run(
            "initdb",
            &[
                "-D",
                path_str(&building),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ],
        );
        // Another test may have won the race; its template is as good as ours.
        if std::fs::rename(&building, &template).is_err() {
            assert!(
                template.join("PG_VERSION").exists(),
                "cannot create the PostgreSQL template {}",
                template.display()
            );
        }
        template
    }

    /// Starts the server on the cluster's port, waiting until it accepts connections.
    fn start_server(&self) -> Result<(), Start> {
        let data = self.data_dir();
        let server_options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {socket} -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c max_connections=100",
            port = self.port,
            socket = self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        let started = self.output(
            "pg_ctl",
            &[
                "-D",
                path_str(&data),
                "-l",
                path_str(&log),
                "-o",
                &server_options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        if started.status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let taken = log.contains("Address already in use");
        let told = format!(
            "{}\n{}\nserver log:\n{log}",
            String::from_utf8_lossy(&started.stdout),
            String::from_utf8_lossy(&started.stderr)
        );
        // The next start appends to the same log; what this one said is in `told`.
        let _ = std::fs::remove_file(self.dir.path().join("server.log"));
        Err(if taken {
            Start::PortTaken(told)
        } else {
            Start::Failed(told)
        })
    }

    /// Stops the server (`pg_ctl stop -m fast`: clients are disconnected), as a restart or an
    /// outage would; [`PgCluster::restart`] starts it again on the same port.
    pub fn stop(&self) {
        let data = self.data_dir();
        self.run(
            "pg_ctl",
            &["-D", path_str(&data), "-m", "fast", "-w", "stop"],
        );
    }

    /// Starts a server that [`PgCluster::stop`] stopped, with the same data and port. The port
    /// must stay the same (the clients hold its URL), so a port that something else holds is
    /// waited for, for up to 10 s.
    pub fn restart(&self) {
        for attempt in 1.. {
            match self.start_server() {
                Ok(()) => return,
                Err(Start::PortTaken(_)) if attempt < 50 => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(Start::PortTaken(log) | Start::Failed(log)) => {
                    panic!("pg_ctl start (restart) failed: {log}")
                }
            }
        }
    }

    /// A URL for the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/postgres", self.port)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn output(&self, program: &str, args: &[&str]) -> Output {
        let program = self.bin.join(program);
        let mut command = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&program);
                c
            }
            None => Command::new(&program),
        };
        command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
    }

    fn run(&self, program: &str, args: &[&str]) {
        let out = self.output(program, args);
        assert!(
            out.status.success(),
            "{program} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.data_dir();
        let _ = self.output(
            "pg_ctl",
            &["-D", path_str(&data), "-m", "immediate", "-w", "stop"],
        );
    }
}

/// How a `pg_ctl start` failed.
enum Start {
    /// The server could not bind its port: something else holds it.
    PortTaken(String),
    /// Any other failure, with what `pg_ctl` and the server said.
    Failed(String),
}

/// A free loopback port below the kernel's ephemeral range, with the lock that keeps every other
/// cluster off it. `salt` varies the pick between attempts.
fn reserve_port(salt: u64) -> (u16, File) {
    const LOWEST: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let locks = std::env::temp_dir().join("maestro-pg-ports");
    std::fs::create_dir_all(&locks).unwrap();
    if ephemeral <= LOWEST + 1_000 {
        // An unusual range leaves no room below it: take what the kernel hands out.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let lock = File::create(locks.join(format!("{port}"))).unwrap();
        return (port, lock);
    }
    let span = ephemeral - LOWEST;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let seed = u64::from(std::process::id()) * 7_919 + u64::from(nanos) + salt * 104_729;
    for i in 0..u64::from(span) {
        let offset = (seed + i * 7_919) % u64::from(span);
        let port = u16::try_from(u64::from(LOWEST) + offset).expect("below the ephemeral range");
        let Ok(lock) = File::create(locks.join(format!("{port}"))) else {
            continue;
        };
        if !locked(&lock) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return (port, lock);
        }
    }
    panic!(
        "no free loopback port between {LOWEST} and {ephemeral} for a PostgreSQL cluster \
         (locks in {})",
        locks.display()
    )
}

/// Takes an exclusive lock on the file without waiting (`flock`); the kernel lets go of it when
/// the file is closed, or its process dies. (`File::try_lock` is newer than the workspace's
/// `rust-version`.)
#[allow(unsafe_code)]
fn locked(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` on a descriptor the `File` owns and keeps open for the call.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// `postgres` (the Debian package's user) when it exists, else `nobody`.
fn unprivileged_user() -> String {
    let exists = |user: &str| {
        Command::new("id")
            .arg(user)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if exists("postgres") {
        "postgres"
    } else {
        "nobody"
    }
    .to_string()
}

fn id_of(user: &str, flag: &str) -> u32 {
    let out = Command::new("id").args([flag, user]).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let ephemeral: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(32_768);
        // The same salt, one after another: the lock keeps the second pick off the first's port.
        let held: Vec<(u16, File)> = (0..20).map(|_| reserve_port(0)).collect();
        let mut ports: Vec<u16> = held.iter().map(|(p, _)| *p).collect();
        assert!(ports.iter().all(|p| *p < ephemeral), "{ports:?}");
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), held.len(), "a port was reserved twice");
        // Once let go, a port can be reserved again.
        let (port, lock) = held.into_iter().next().unwrap();
        drop(lock);
        let again = File::create(
            std::env::temp_dir()
                .join("maestro-pg-ports")
                .join(format!("{port}")),
        )
        .unwrap();
        assert!(locked(&again));
    }
}
