//! Marks the build `no_postgres` when PostgreSQL's `initdb` is not installed, so the PostgreSQL
//! tests show as ignored (with the install command) instead of failing or passing unseen. Shared
//! by the build scripts of `maestro-store` and `maestro-cli`, whose job command tests run on
//! PostgreSQL too.

use std::path::Path;

pub fn check_postgres() {
    println!("cargo::rustc-check-cfg=cfg(no_postgres)");
    println!("cargo::rerun-if-env-changed=MAESTRO_PG_BIN");
    println!("cargo::rerun-if-changed=/usr/lib/postgresql");
    let from_env = std::env::var_os("MAESTRO_PG_BIN")
        .is_some_and(|dir| Path::new(&dir).join("initdb").exists());
    let from_debian = std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
        versions
            .flatten()
            .any(|version| version.path().join("bin/initdb").exists())
    });
    if !(from_env || from_debian) {
        println!("cargo::rustc-cfg=no_postgres");
        println!(
            "cargo::warning=PostgreSQL is not installed: the PostgreSQL tests will be \
             ignored (apt-get install postgresql, or scripts/prerequisites.sh)"
        );
    }
}
