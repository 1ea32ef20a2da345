//! Embeds every `docs/tools/<Tool>.md` of the repository into the library, so `ReadToolDoc`
//! works wherever the binary runs. A doc added by any tool module is picked up automatically.
//! Also marks the build `no_bwrap` when bubblewrap is not installed (see `maestro-buildcheck`).

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // And marks the build `no_bwrap` when bubblewrap is not installed, so the tests that run
    // commands under it show as ignored.
    maestro_buildcheck::check_bubblewrap();
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let docs = manifest.join("../../docs/tools");
    println!("cargo:rerun-if-changed={}", docs.display());
    let mut entries: Vec<(String, PathBuf)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir(&docs) {
        for entry in dir.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "md")
                && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
            {
                entries.push((stem.to_string(), std::fs::canonicalize(&path)?));
            }
        }
    }
    entries.sort();
    let mut code = String::from(
        "/// `(tool name, markdown)` for every embedded tool doc.\npub(crate) const TOOL_DOCS: &[(&str, &str)] = &[\n",
    );
    for (name, path) in entries {
        writeln!(
            code,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        )?;
    }
    code.push_str("];\n");
    std::fs::write(
        PathBuf::from(std::env::var("OUT_DIR")?).join("tool_docs.rs"),
        code,
    )?;
    Ok(())
}
