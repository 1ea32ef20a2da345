//! Marks the build `no_sshd` when the OpenSSH server is not installed, so the tests against a
//! real `sshd` show as ignored (`bash scripts/prerequisites.sh` installs it).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    maestro_buildcheck::check_sshd();
}
