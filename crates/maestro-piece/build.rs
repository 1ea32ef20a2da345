//! Embeds TAKT v0.60's builtin workflows, step fragments, facets, facet pools, companions,
//! workflow rules and schemas (`takt-builtins/v0.60/`, MIT, license beside them) into the
//! library: the built-in layer that TAKT workflows resolve against after the project's and
//! the user's, wherever the binary runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            let rel = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((rel, std::fs::canonicalize(&path)?));
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.join("takt-builtins/v0.60");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    walk(&root, &root, &mut files)?;
    files.sort();
    let mut code = String::from(
        "/// `(path below takt-builtins/v0.60, text)` for every embedded TAKT v0.60 builtin file.\npub(crate) const FILES: &[(&str, &str)] = &[\n",
    );
    for (rel, path) in files {
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            code,
            "    ({rel:?}, include_str!({:?})),",
            path.display().to_string()
        )?;
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("takt_builtins.rs");
    std::fs::write(out, code)?;
    Ok(())
}
