//! A real, throwaway PostgreSQL cluster for tests: a data directory made by `initdb` (once, then
//! copied) in a temporary directory, `pg_ctl start` on a free loopback port with trust authentication, stopped (and its files removed)
//! when the guard drops.
//!
//! The binaries come from `$MAESTRO_PG_BIN` or Debian's `/usr/lib/postgresql/<version>/bin`
//! (package `postgresql`). `initdb` refuses to run as root, so as root the cluster runs as the
//! `postgres` user (or `nobody` when that user does not exist) through `runuser`.

// Test support: a failure to set up the cluster should stop the test with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A running PostgreSQL cluster; stopped on drop.
#[derive(Debug)]
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    run_as: Option<String>,
    /// The loopback port the server listens on (`127.0.0.1`).
    pub port: u16,
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
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = PgCluster {
            dir,
            bin,
            run_as,
            port,
        };
        let template = cluster.template();
        let copied = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(cluster.data_dir())
            .status()
            .unwrap();
        assert!(copied.success(), "cannot copy {}", template.display());
        cluster.start_server();
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
    fn start_server(&self) {
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
        if !started.status.success() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!(
                "pg_ctl start failed: {}\n{}\nserver log:\n{log}",
                String::from_utf8_lossy(&started.stdout),
                String::from_utf8_lossy(&started.stderr)
            );
        }
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

    /// Starts a server that [`PgCluster::stop`] stopped, with the same data and port.
    pub fn restart(&self) {
        self.start_server();
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
