//! Marks the build `no_chromium` when Debian's Chromium (`/usr/bin/chromium`) is missing, so the
//! tests that drive it show as ignored with the fix instead of failing.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(no_chromium)");
    println!("cargo::rerun-if-changed=/usr/bin/chromium");
    if !std::path::Path::new("/usr/bin/chromium").exists() {
        println!("cargo::rustc-cfg=no_chromium");
        println!(
            "cargo::warning=/usr/bin/chromium is missing (apt-get install chromium, or \
             scripts/prerequisites.sh): the BrowseWeb tests will be ignored"
        );
    }
}
