//! The app's build script: marks the build `no_postgres` when PostgreSQL is not installed, so
//! the PostgreSQL tests show as ignored (see `maestro-store/build_pg.rs`).

#[path = "../maestro-store/build_pg.rs"]
mod build_pg;

fn main() {
    build_pg::check_postgres();
}
