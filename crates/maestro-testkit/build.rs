//! Marks the build `no_oidc_provider` when node or the npm packages of `oidc/` are missing, so
//! the OpenID Connect tests show as ignored (see `maestro-buildcheck`).

fn main() {
    maestro_buildcheck::check_oidc_provider();
}
