//! Checks that build scripts share: whether PostgreSQL's `initdb` is installed, whether the
//! test OpenID Connect provider (node and its npm packages) can run, whether the browser tests
//! can (Chromium, chromedriver and axe-core), and likewise for bubblewrap, the OpenSSH server,
//! the reference MCP servers, the Python packages the tests make their files with, and
//! mounting.
//!
//! A crate whose tests run on a real PostgreSQL cluster calls [`check_postgres`] from its
//! build script (as a build dependency): when `initdb` is missing the build is marked
//! `no_postgres`, and the PostgreSQL tests (`#[cfg_attr(no_postgres, ignore = "…")]`) show as
//! ignored with the install command instead of failing or passing unseen.

use std::path::{Path, PathBuf};

/// Prints the cargo directives of the check: declares the `no_postgres` cfg, sets it when
/// neither `$MAESTRO_PG_BIN/initdb` nor Debian's `/usr/lib/postgresql/*/bin/initdb` exists (with
/// a build warning naming the package to install), and asks for a rerun when either changes.
pub fn check_postgres() {
    println!("cargo::rustc-check-cfg=cfg(no_postgres)");
    println!("cargo::rerun-if-env-changed=MAESTRO_PG_BIN");
    println!("cargo::rerun-if-changed=/usr/lib/postgresql");
    if !postgres_installed() {
        println!("cargo::rustc-cfg=no_postgres");
        println!(
            "cargo::warning=PostgreSQL is not installed: the PostgreSQL tests will be \
             ignored (apt-get install postgresql, or scripts/prerequisites.sh)"
        );
    }
}

/// True when `initdb` is found in `$MAESTRO_PG_BIN` or under `/usr/lib/postgresql/*/bin`.
pub fn postgres_installed() -> bool {
    let from_env = std::env::var_os("MAESTRO_PG_BIN")
        .is_some_and(|dir| Path::new(&dir).join("initdb").exists());
    let from_debian = std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
        versions
            .flatten()
            .any(|version| version.path().join("bin/initdb").exists())
    });
    from_env || from_debian
}

/// Prints the cargo directives of the OpenID Connect provider check: declares the
/// `no_oidc_provider` cfg and sets it, with a build warning naming the fix, when `node` is not on
/// `PATH`, is older than 20.12 (Debian 12's own `nodejs` is 18), or the npm packages of `crates/maestro-testkit/oidc` are not installed (`npm ci`
/// there). Tests that start `maestro_testkit::OidcProvider` carry
/// `#[cfg_attr(no_oidc_provider, ignore = "…")]`, so they show as ignored instead of failing.
pub fn check_oidc_provider() {
    println!("cargo::rustc-check-cfg=cfg(no_oidc_provider)");
    let installed = oidc_provider_package();
    // The whole directory, so that node_modules appearing or going away is seen (cargo
    // compares the newest time of modification in it with the last run's).
    println!(
        "cargo::rerun-if-changed={}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../maestro-testkit/oidc")
            .display()
    );
    let node = find_in_path("node");
    println!(
        "cargo::rerun-if-changed={}",
        node.as_deref()
            .unwrap_or(Path::new("/usr/bin/node"))
            .display()
    );
    let missing = if node.is_none() {
        "node is not on PATH (apt-get install nodejs npm, then scripts/prerequisites.sh)"
    } else if !node_has_crypto_hash() {
        "node is older than 20.12 (oidc-provider 9 needs crypto.hash): install node 20.12 or later"
    } else if !installed.exists() {
        "the npm packages of crates/maestro-testkit/oidc are not installed (npm ci there, or \
         scripts/prerequisites.sh)"
    } else {
        return;
    };
    println!("cargo::rustc-cfg=no_oidc_provider");
    println!("cargo::warning={missing}: the OpenID Connect tests will be ignored");
}

/// The file `npm ci` installs for the test OpenID Connect provider:
/// `crates/maestro-testkit/oidc/node_modules/oidc-provider/package.json`.
pub fn oidc_provider_package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../maestro-testkit/oidc/node_modules/oidc-provider/package.json")
}

/// True when `node` has `crypto.hash` (node 20.12 and later), which `oidc-provider` 9 uses.
fn node_has_crypto_hash() -> bool {
    std::process::Command::new("node")
        .args([
            "-e",
            "process.exit(typeof require('node:crypto').hash === 'function' ? 0 : 1)",
        ])
        .status()
        .is_ok_and(|status| status.success())
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Prints the cargo directives of the browser check: declares the `no_chromium` cfg and sets
/// it, with a build warning naming the fix, when Debian's `/usr/bin/chromium` or
/// `/usr/bin/chromedriver` is missing, or the npm package axe-core of
/// `crates/maestro-testkit/axe` is not installed (`npm ci` there). Tests that start
/// `maestro_testkit::Browser` carry `#[cfg_attr(no_chromium, ignore = "…")]`, so they show as
/// ignored instead of failing.
pub fn check_chromium() {
    println!("cargo::rustc-check-cfg=cfg(no_chromium)");
    for program in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        println!("cargo::rerun-if-changed={program}");
    }
    let axe = axe_core_script();
    println!(
        "cargo::rerun-if-changed={}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../maestro-testkit/axe")
            .display()
    );
    let missing = if !Path::new("/usr/bin/chromium").exists() {
        "/usr/bin/chromium is missing (apt-get install chromium, or scripts/prerequisites.sh)"
    } else if !Path::new("/usr/bin/chromedriver").exists() {
        "/usr/bin/chromedriver is missing (apt-get install chromium-driver, or \
         scripts/prerequisites.sh)"
    } else if !axe.exists() {
        "the npm package axe-core of crates/maestro-testkit/axe is not installed (npm ci there, \
         or scripts/prerequisites.sh)"
    } else {
        return;
    };
    println!("cargo::rustc-cfg=no_chromium");
    println!("cargo::warning={missing}: the browser tests will be ignored");
}

/// The script `npm ci` installs for the accessibility check:
/// `crates/maestro-testkit/axe/node_modules/axe-core/axe.min.js`.
pub fn axe_core_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../maestro-testkit/axe/node_modules/axe-core/axe.min.js")
}

/// Marks the build `no_mount` when this user cannot mount a size-limited tmpfs (not root, or no
/// `CAP_SYS_ADMIN` in a container), so the tests that fill or write-protect a file system show
/// as ignored with the reason. It mounts and unmounts a 64 KiB tmpfs under `OUT_DIR` to find
/// out.
pub fn check_mount() {
    println!("cargo::rustc-check-cfg=cfg(no_mount)");
    if !can_mount_tmpfs() {
        println!("cargo::rustc-cfg=no_mount");
        println!(
            "cargo::warning=cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): the tests \
             that fill or write-protect a file system will be ignored"
        );
    }
}

fn can_mount_tmpfs() -> bool {
    let Some(out) = std::env::var_os("OUT_DIR") else {
        return false;
    };
    let probe = Path::new(&out).join("mount-probe");
    if std::fs::create_dir_all(&probe).is_err() {
        return false;
    }
    let run = |program: &str, args: &[&std::ffi::OsStr]| {
        std::process::Command::new(program)
            .args(args)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    let mounted = run(
        "mount",
        &[
            "-t".as_ref(),
            "tmpfs".as_ref(),
            "-o".as_ref(),
            "size=64k".as_ref(),
            "tmpfs".as_ref(),
            probe.as_os_str(),
        ],
    );
    mounted && run("umount", &[probe.as_os_str()])
}

/// Prints the cargo directives of the check for the official `openai` Python package: declares
/// the `no_openai_python` cfg and sets it, with a build warning naming the fix, when `python3`
/// cannot import `openai`. Tests that drive the gateway with it carry
/// `#[cfg_attr(no_openai_python, ignore = "…")]`, so they show as ignored instead of failing.
pub fn check_openai_python() {
    println!("cargo::rustc-check-cfg=cfg(no_openai_python)");
    watched_program("python3");
    if !python_imports("openai") {
        println!("cargo::rustc-cfg=no_openai_python");
        println!(
            "cargo::warning=the Python package openai is not installed (python3 -m pip install \
             openai==3.51.0, or scripts/prerequisites.sh): the gateway's client tests will be \
             ignored"
        );
    }
}

/// Prints the cargo directives of the check for `maestro sandbox setup`: declares the
/// `no_python_venv` cfg and sets it, with a build warning naming the fix, when no `python3` the
/// sandbox can see (`/usr/local/bin`, `/usr/bin`) can make a virtual environment with pip
/// (Debian's python3-venv). Tests that build the sandbox's Python environment carry
/// `#[cfg_attr(no_python_venv, ignore = "…")]`, so they show as ignored instead of failing.
pub fn check_python_venv() {
    println!("cargo::rustc-check-cfg=cfg(no_python_venv)");
    let candidates = ["/usr/local/bin/python3", "/usr/bin/python3"];
    for program in candidates {
        println!("cargo::rerun-if-changed={program}");
    }
    let usable = candidates
        .iter()
        .find(|p| Path::new(p).is_file())
        .is_some_and(|python| {
            std::process::Command::new(python)
                .args(["-c", "import ensurepip, venv"])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        });
    if !usable {
        println!("cargo::rustc-cfg=no_python_venv");
        println!(
            "cargo::warning=no python3 with venv in /usr/bin or /usr/local/bin (apt-get install \
             python3-venv, or scripts/prerequisites.sh): the sandbox Python tests will be ignored"
        );
    }
}

/// Marks the build `no_document_writers` when `python3` cannot import the writers the document
/// tests make their files with (python-docx, openpyxl, python-pptx, reportlab,
/// msoffcrypto-tool, xlwt, odfpy, pypandoc-binary), so those tests show as ignored
/// (`bash scripts/prerequisites.sh` installs them).
pub fn check_document_writers() {
    println!("cargo::rustc-check-cfg=cfg(no_document_writers)");
    println!("cargo::rerun-if-env-changed=PATH");
    if !python_imports("docx, openpyxl, pptx, reportlab, msoffcrypto, xlwt, odf, pypandoc") {
        println!("cargo::rustc-cfg=no_document_writers");
        println!(
            "cargo::warning=the Python document writers are not installed \
             (scripts/prerequisites.sh): the document tests will be ignored"
        );
    }
}

/// Marks the build `no_pdf_programs` when poppler-utils or qpdf are missing, so the PDF tests
/// show as ignored (`bash scripts/prerequisites.sh` installs them).
pub fn check_pdf_programs() {
    println!("cargo::rustc-check-cfg=cfg(no_pdf_programs)");
    println!("cargo::rerun-if-env-changed=PATH");
    let programs = ["pdftotext", "pdfinfo", "pdftoppm", "qpdf"]
        .iter()
        .all(|p| {
            std::process::Command::new(p)
                .arg("-v")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok()
        });
    if !programs {
        println!("cargo::rustc-cfg=no_pdf_programs");
        println!(
            "cargo::warning=poppler-utils or qpdf is not installed (scripts/prerequisites.sh): \
             the PDF tests will be ignored"
        );
    }
}

/// `program` on `PATH`, with the directives that rerun the build script when `PATH` changes or
/// the program appears, changes or goes away (under `/usr/bin` when it is not found).
fn watched_program(program: &str) -> Option<PathBuf> {
    println!("cargo::rerun-if-env-changed=PATH");
    let found = find_in_path(program);
    let watched = found
        .clone()
        .unwrap_or_else(|| Path::new("/usr/bin").join(program));
    println!("cargo::rerun-if-changed={}", watched.display());
    found
}

/// True when `python3` on `PATH` imports `modules` (one name, or several separated by commas).
fn python_imports(modules: &str) -> bool {
    find_in_path("python3").is_some()
        && std::process::Command::new("python3")
            .args(["-c", &format!("import {modules}")])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
}

/// Prints the cargo directives of the bubblewrap check: declares the `no_bwrap` cfg and sets
/// it, with a build warning naming the package, when `bwrap` is not on `PATH`. Tests that run
/// commands under bubblewrap (`safety.bash_sandbox: always`) carry
/// `#[cfg_attr(no_bwrap, ignore = "…")]`, so they show as ignored instead of failing. Where
/// `bwrap` is installed but cannot start (no unprivileged user namespaces), they run and fail
/// with the sandbox's own reason.
pub fn check_bubblewrap() {
    println!("cargo::rustc-check-cfg=cfg(no_bwrap)");
    if watched_program("bwrap").is_none() {
        println!("cargo::rustc-cfg=no_bwrap");
        println!(
            "cargo::warning=bubblewrap is not installed (apt-get install bubblewrap, or \
             scripts/prerequisites.sh): the tests of the bubblewrap sandbox will be ignored"
        );
    }
}

/// Prints the cargo directives of the OpenSSH check: declares the `no_sshd` cfg and sets it,
/// with a build warning naming the package, when `/usr/sbin/sshd` or `ssh-keygen` is missing.
/// Tests that start `maestro_testkit::Sshd` carry `#[cfg_attr(no_sshd, ignore = "…")]`, so they
/// show as ignored instead of failing.
pub fn check_sshd() {
    println!("cargo::rustc-check-cfg=cfg(no_sshd)");
    println!("cargo::rerun-if-env-changed=PATH");
    println!("cargo::rerun-if-changed=/usr/sbin/sshd");
    let installed = Path::new("/usr/sbin/sshd").is_file() && find_in_path("ssh-keygen").is_some();
    if !installed {
        println!("cargo::rustc-cfg=no_sshd");
        println!(
            "cargo::warning=the OpenSSH server is not installed (apt-get install \
             openssh-server, or scripts/prerequisites.sh): the SSH tests will be ignored"
        );
    }
}

/// Prints the cargo directives of the MCP servers check: declares the
/// `no_mcp_filesystem_server` cfg and sets it when the reference filesystem server
/// (`$MAESTRO_TEST_MCP_FS_SERVER`, by default
/// `/opt/maestro-test/node_modules/.bin/mcp-server-filesystem`) is missing, and
/// `no_python_mcp` when `python3` cannot import the official MCP SDK (`mcp`), each with a build
/// warning naming the fix. The tests that start those servers carry the matching
/// `#[cfg_attr(…, ignore = "…")]`, so they show as ignored instead of failing.
pub fn check_mcp_servers() {
    println!("cargo::rustc-check-cfg=cfg(no_mcp_filesystem_server)");
    println!("cargo::rustc-check-cfg=cfg(no_python_mcp)");
    println!("cargo::rerun-if-env-changed=MAESTRO_TEST_MCP_FS_SERVER");
    println!("cargo::rerun-if-env-changed=PATH");
    let server = std::env::var_os("MAESTRO_TEST_MCP_FS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from("/opt/maestro-test/node_modules/.bin/mcp-server-filesystem")
        });
    println!("cargo::rerun-if-changed={}", server.display());
    if !server.exists() {
        println!("cargo::rustc-cfg=no_mcp_filesystem_server");
        println!(
            "cargo::warning={} is missing (npm install --prefix /opt/maestro-test \
             @modelcontextprotocol/server-filesystem@2026.8.31, or scripts/prerequisites.sh): \
             the tests with the reference MCP filesystem server will be ignored",
            server.display()
        );
    }
    if !python_imports("mcp") {
        println!("cargo::rustc-cfg=no_python_mcp");
        println!(
            "cargo::warning=the Python MCP SDK is not installed (python3 -m pip install \
             mcp==2.3.0, or scripts/prerequisites.sh): the tests with the Python MCP server \
             will be ignored"
        );
    }
}

/// Prints the cargo directives of the Pillow check: declares the `no_pillow` cfg and sets it,
/// with a build warning naming the fix, when `python3` cannot import `PIL`. Tests that make
/// their images with Pillow carry `#[cfg_attr(no_pillow, ignore = "…")]`, so they show as
/// ignored instead of failing.
pub fn check_pillow() {
    println!("cargo::rustc-check-cfg=cfg(no_pillow)");
    println!("cargo::rerun-if-env-changed=PATH");
    if !python_imports("PIL") {
        println!("cargo::rustc-cfg=no_pillow");
        println!(
            "cargo::warning=Pillow is not installed (python3 -m pip install pillow, or \
             scripts/prerequisites.sh): the tests with Pillow's images will be ignored"
        );
    }
}
