//! Marks the build `no_oidc_provider` when node or the npm packages of `oidc/` are missing, so
//! the OpenID Connect tests show as ignored, and `no_chromium` when Chromium, chromedriver or
//! axe-core is (see `maestro-buildcheck`).

fn main() {
    maestro_buildcheck::check_oidc_provider();
    maestro_buildcheck::check_chromium();
}
