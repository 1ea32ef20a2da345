//! Marks the build `no_bwrap` when bubblewrap is not installed, so the tests of the bubblewrap
//! sandbox show as ignored (`bash scripts/prerequisites.sh` installs it).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    maestro_buildcheck::check_bubblewrap();
}
