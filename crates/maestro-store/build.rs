//! The store's build script: see `build_pg.rs`.

#[path = "build_pg.rs"]
mod build_pg;

fn main() {
    build_pg::check_postgres();
}
