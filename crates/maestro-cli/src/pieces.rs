//! `maestro pieces`: list the pieces found in a directory with name, dialect, movement count
//! and description. Invalid pieces are listed too, marked, so nothing silently disappears.

use std::io::Write as _;

use crate::term::printable;
use std::path::PathBuf;

use maestro_piece::{discover, load_file};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to look (all *.yaml / *.yml below it). Default: the project's `.maestro/pieces`
    /// and the user's `~/.maestro/pieces`, those that exist, TAKT's workflow directories, and
    /// then the TAKT v0.60 builtin workflows Maestro ships.
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print one JSON object per piece per line.
    #[arg(long)]
    pub json: bool,
}

struct Row {
    name: String,
    dialect: String,
    movements: String,
    description: String,
    file: String,
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    let listing_defaults = args.dir.is_none();
    let dirs = match args.dir {
        Some(dir) => {
            if !dir.exists() {
                anyhow::bail!("{}: no such directory", dir.display());
            }
            vec![dir]
        }
        None => default_dirs(),
    };
    // The same judgement as `maestro validate`: a piece that names a tool that does not exist
    // here is listed as invalid.
    let opts = maestro_piece::LoadOptions {
        tools: Some(crate::common::tool_catalog(None)?),
        ..crate::common::load_options(None, &[])
    };
    let mut rows = Vec::new();
    for dir in &dirs {
        for file in discover(dir) {
            let stem = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let row = match load_file(&file, &opts) {
                Ok(loaded) => Row {
                    name: loaded.piece.name.clone(),
                    dialect: loaded.piece.dialect.to_string(),
                    movements: loaded.piece.movements.len().to_string(),
                    description: one_line(&loaded.piece.description),
                    file: file.display().to_string(),
                },
                Err(failed) => Row {
                    name: stem,
                    dialect: failed
                        .dialect
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| "-".into()),
                    movements: "-".into(),
                    description: format!(
                        "INVALID ({} error{}; run `maestro validate {}`)",
                        failed.errors.len(),
                        if failed.errors.len() == 1 { "" } else { "s" },
                        file.display()
                    ),
                    file: file.display().to_string(),
                },
            };
            rows.push(row);
        }
    }
    // TAKT's builtin workflows run by name after everything above: listed when no directory
    // was named, those a file of the same name does not hide.
    let builtins: Vec<Row> = if listing_defaults {
        maestro_piece::builtin_workflows()
            .into_iter()
            .filter(|w| !rows.iter().any(|r| r.name == w.name))
            .map(|w| Row {
                name: w.name.to_string(),
                dialect: "takt".into(),
                movements: w.steps.to_string(),
                description: one_line(&w.description),
                file: w.path.display().to_string(),
            })
            .collect()
    } else {
        Vec::new()
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        rows.extend(builtins);
        for r in &rows {
            let movements = r.movements.parse::<usize>().ok();
            writeln!(
                out,
                "{}",
                serde_json::json!({
                    "name": r.name,
                    "dialect": r.dialect,
                    "movements": movements,
                    "description": r.description,
                    "file": r.file,
                })
            )?;
        }
        return Ok(0);
    }
    if rows.is_empty() {
        let searched: Vec<String> = if listing_defaults {
            candidate_dirs()
        } else {
            dirs.clone()
        }
        .iter()
        .map(|d| d.display().to_string())
        .collect();
        writeln!(
            out,
            "no pieces of your own found (searched: {})",
            searched.join(", ")
        )?;
        if builtins.is_empty() {
            return Ok(0);
        }
    }
    let name_w = rows
        .iter()
        .chain(&builtins)
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let dialect_w = 7;
    let table = |out: &mut std::io::StdoutLock<'_>, rows: &[Row]| -> std::io::Result<()> {
        writeln!(
            out,
            "{:name_w$}  {:dialect_w$}  MOVEMENTS  DESCRIPTION",
            "NAME", "DIALECT"
        )?;
        for r in rows {
            writeln!(
                out,
                "{:name_w$}  {:dialect_w$}  {:>9}  {}",
                printable(&r.name),
                r.dialect,
                r.movements,
                printable(&r.description)
            )?;
        }
        Ok(())
    };
    if !rows.is_empty() {
        table(&mut out, &rows)?;
    }
    if !builtins.is_empty() {
        writeln!(
            out,
            "\nTAKT v0.60 builtin workflows, shipped with Maestro (`maestro run NAME --task …`):"
        )?;
        table(&mut out, &builtins)?;
    }
    Ok(0)
}

fn default_dirs() -> Vec<PathBuf> {
    candidate_dirs()
        .into_iter()
        .filter(|d| d.is_dir())
        .collect()
}

/// Where pieces of the user's own are looked for when no directory is named.
fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        dirs.push(cwd.join(".maestro").join("pieces"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".maestro").join("pieces"));
    }
    // TAKT's workflows (v0.36 and later), after Maestro's own pieces.
    dirs.extend(crate::common::load_options(None, &[]).takt_workflow_dirs());
    dirs
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
