//! Link flags for the `maestro` binary, and the store's PostgreSQL check for the job tests.
//!
//! A run's resident set is mostly the binary's code pages it touches (docs/benchmarks.md,
//! "Footprint of a run"), so on GNU/Linux:
//! - the binary's relative relocations are packed (`DT_RELR`, glibc 2.36 or newer): the dynamic
//!   loader otherwise reads about 1.2 MB of relocation entries at every start, and those pages
//!   stay resident. `MAESTRO_NO_RELR=1` turns it off, for a linker or a target glibc without
//!   `DT_RELR`.
//! - in optimised builds on x86-64, the linker (rust-lld, rustc's default there) lays out the
//!   functions a run executes together, in the order `code-order.txt` lists them
//!   (`scripts/code-order.sh` writes it from a `--profile dist` build), instead of spreading them
//!   over the whole code. Names the list has that the build lacks are skipped. An older rustc,
//!   or a linker set in the configuration, links without it.
//!   `MAESTRO_NO_CODE_ORDER=1` turns it off, for a linker without `--symbol-ordering-file`.
//! - with the code order, the constants a run reads (`.rodata`'s input sections that
//!   `data-order.txt` names, taken by the same script) are laid out together at the head of
//!   `.rodata`, through a linker script written here (`INSERT`, so the linker's own layout
//!   stays as it is otherwise). Without it a run reads about 70 KB of constants spread over 2 MiB
//!   of pages. `MAESTRO_NO_CODE_ORDER=1` turns this off too.
//! - `MAESTRO_LINK_MAP=path` has the linker write its map there (what `scripts/code-order.sh`
//!   reads the sections' places from).

fn main() {
    // The PostgreSQL job tests show as ignored when initdb is missing.
    maestro_buildcheck::check_postgres();
    // The store fault tests mount size-limited or read-only file systems.
    maestro_buildcheck::check_mount();
    // The login tests start a real OpenID provider (node and the oidc-provider package).
    maestro_buildcheck::check_oidc_provider();
    // The web UI tests drive a real Chromium (and inject axe-core).
    maestro_buildcheck::check_chromium();
    // `maestro sandbox setup` needs a python3 the sandbox sees, with venv.
    maestro_buildcheck::check_python_venv();
    // The knowledge base's PDF and Office tests make their files with the Python writers.
    maestro_buildcheck::check_document_writers();
    maestro_buildcheck::check_pdf_programs();
    // The tools' end-to-end tests run Bash under bubblewrap, and SSH and MCP tools against
    // real servers.
    maestro_buildcheck::check_bubblewrap();
    maestro_buildcheck::check_sshd();
    maestro_buildcheck::check_mcp_servers();
    println!("cargo:rerun-if-env-changed=MAESTRO_NO_RELR");
    println!("cargo:rerun-if-env-changed=MAESTRO_NO_CODE_ORDER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    if std::env::var_os("MAESTRO_NO_RELR").is_none() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-env-changed=MAESTRO_LINK_MAP");
    if let Some(map) = std::env::var_os("MAESTRO_LINK_MAP") {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,-Map={}",
            std::path::Path::new(&map).display()
        );
    }
    let order = listed("MAESTRO_CODE_ORDER", "code-order.txt");
    let data = listed("MAESTRO_DATA_ORDER", "data-order.txt");
    if var("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && var("PROFILE") == "release"
        && order.is_file()
        && std::env::var_os("MAESTRO_NO_CODE_ORDER").is_none()
        && links_with_rust_lld()
    {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
        if let Some(script) = std::fs::read_to_string(&data)
            .ok()
            .and_then(|list| data_order_script(&list))
        {
            let path = std::path::Path::new(&var("OUT_DIR")).join("data-order.ld");
            if std::fs::write(&path, script).is_ok() {
                println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", path.display());
            }
        }
    }
}

/// The list that `env` names (scripts/dist.sh names the ones it took from its own first pass,
/// kept under target/, so a release build leaves the checkout clean), else the committed `file`.
fn listed(env: &str, file: &str) -> std::path::PathBuf {
    println!("cargo:rerun-if-env-changed={env}");
    let path = std::env::var_os(env)
        .map(std::path::PathBuf::from)
        .filter(|path| path.is_file())
        .unwrap_or_else(|| {
            std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default())
                .join(file)
        });
    println!("cargo:rerun-if-changed={}", path.display());
    path
}

/// A linker script that puts the listed `.rodata` input sections first in `.rodata`, in the
/// list's order; every other one follows as the linker places it. `INSERT` keeps the rest of the
/// linker's layout. Names that are not plain section names (letters, digits, `_`, `.`, `$`) are
/// skipped, so nothing in the list is read as script syntax. `None` for an empty list.
fn data_order_script(list: &str) -> Option<String> {
    let plain = |name: &&str| {
        name.starts_with(".rodata")
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'$'))
    };
    let names: Vec<&str> = list.lines().map(str::trim).filter(plain).collect();
    if names.is_empty() {
        return None;
    }
    let mut script = String::from("SECTIONS {\n  .rodata : {\n");
    for name in names {
        script.push_str("    *(");
        script.push_str(name);
        script.push_str(")\n");
    }
    // `.gcc_except_table` follows `.rodata` in lld's layout, and a build that unwinds (the
    // dist profile does: Cargo.toml) always has one.
    script.push_str("  }\n} INSERT BEFORE .gcc_except_table;\n");
    Some(script)
}

/// True when the binary is linked by rust-lld, which takes `--symbol-ordering-file`: rustc 1.90
/// or newer links x86-64 GNU/Linux with it by default, unless a linker is configured (GNU ld,
/// the default before, refuses the flag).
fn links_with_rust_lld() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let version = std::process::Command::new(rustc)
        .arg("-V")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    minor >= 90
        && !flags.contains("linker")
        && std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_none()
}
