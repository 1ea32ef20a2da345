//! Checks that build scripts share: whether PostgreSQL's `initdb` is installed.
//!
//! A crate whose tests run on a real PostgreSQL cluster calls [`check_postgres`] from its
//! build script (as a build dependency): when `initdb` is missing the build is marked
//! `no_postgres`, and the PostgreSQL tests (`#[cfg_attr(no_postgres, ignore = "…")]`) show as
//! ignored with the install command instead of failing or passing unseen.

use std::path::Path;

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
