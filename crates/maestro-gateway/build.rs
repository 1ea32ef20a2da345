//! Marks the build `no_openai_python` when `python3` cannot import the official `openai`
//! package, so the tests that use it as the gateway's client show as ignored (see
//! `maestro-buildcheck`).

fn main() {
    maestro_buildcheck::check_openai_python();
}
