//! Marks the build `no_postgres` when PostgreSQL is not installed, so the PostgreSQL tests show
//! as ignored (see `maestro-buildcheck`).

fn main() {
    maestro_buildcheck::check_postgres();
}
