//! Link flags for the `maestro` binary, and the store's PostgreSQL check for the job tests.
//!
//! On GNU/Linux the binary's relative relocations are packed (`DT_RELR`, glibc 2.36 or newer):
//! the dynamic loader otherwise reads about 1.2 MB of relocation entries at every start, and
//! those pages stay in the process's resident set (docs/benchmarks.md, "Footprint of a run").
//! `MAESTRO_NO_RELR=1` turns it off, for a linker or a target glibc without `DT_RELR`.

#[path = "../maestro-store/build_pg.rs"]
mod build_pg;

fn main() {
    // The PostgreSQL job tests show as ignored when initdb is missing.
    build_pg::check_postgres();
    println!("cargo:rerun-if-env-changed=MAESTRO_NO_RELR");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if target_os == "linux" && target_env == "gnu" && std::env::var_os("MAESTRO_NO_RELR").is_none()
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
