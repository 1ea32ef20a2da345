//! `maestro validate`: check piece files (or directories of them) and report every error with
//! its file, line, column and field path.
//!
//! Exit codes: 0 when every file is valid, 1 when any is invalid, 2 for usage or I/O errors
//! (a missing path, an unreadable file, a directory without pieces).

use std::io::Write as _;

use crate::term::printable;
use std::path::{Path, PathBuf};

use maestro_app::PieceError;
use maestro_config::Config;
use maestro_piece::{
    Diagnostic, Dialect, Failed, LoadOptions, Loaded, discover, load_bytes, render_diagnostics,
};

use crate::flags::{ConfigFlag, PiecesFlag, settings};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print one JSON object per file per line:
    /// {"file","valid","dialect","errors":[{"path","line","column","message"}],"warnings":[…]}.
    #[arg(long)]
    pub json: bool,
    /// Read every file as this dialect (maestro, takt or graph) instead of detecting it.
    #[arg(long, value_name = "DIALECT")]
    pub dialect: Option<Dialect>,
    /// An extra facet root, searched as DIR/<kind>/<name>.md after the built-in places.
    #[arg(long = "facets-dir", value_name = "DIR")]
    pub facets_dirs: Vec<PathBuf>,
    /// Hide warnings in the human output (they stay in --json).
    #[arg(long, short)]
    pub quiet: bool,
    /// Check tool names against this configuration file instead of `~/.maestro/config.yaml`
    /// and `.maestro/config.yaml` (which tools exist here: web search, SSH connections, …).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub pieces: PiecesFlag,
    /// Piece files, directories searched for *.yaml / *.yml, or piece names as `maestro run`
    /// takes them (the file a name resolves to is checked).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// One file's outcome.
enum Checked {
    Valid(Box<Loaded>),
    Invalid(Failed),
    /// Could not be read at all.
    Unreadable(String),
}

pub(crate) fn run(args: Args) -> anyhow::Result<u8> {
    crate::common::block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<u8> {
    let config = settings(
        &ConfigFlag {
            config: args.config.clone(),
        },
        &[&args.pieces],
    )?;
    let opts = LoadOptions {
        tools: Some(maestro_app::tool_catalog(&config)),
        ..crate::common::load_options(args.dialect, &args.facets_dirs)
    };
    let mut usage_error = false;
    let mut invalid = 0usize;
    let mut valid = 0usize;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for root in &args.paths {
        let items = if root.exists() {
            let files = discover(root);
            if files.is_empty() {
                usage_error = true;
                report_unreadable(&mut out, args.json, root, "no *.yaml or *.yml files here")?;
                continue;
            }
            files.into_iter().map(Item::File).collect()
        } else {
            match by_name(root, &config, &opts).await {
                Ok(items) => {
                    if !args.json {
                        for item in &items {
                            eprintln!(
                                "note: `{}` is {}",
                                printable(&root.display().to_string()),
                                printable(&item.path().display().to_string())
                            );
                        }
                    }
                    items
                }
                Err(why) => {
                    usage_error = true;
                    report_unreadable(&mut out, args.json, root, &why)?;
                    continue;
                }
            }
        };
        for item in items {
            let (file, (source, checked)) = match item {
                Item::File(file) => {
                    let checked = check(&file, &opts);
                    (file, checked)
                }
                Item::Checked(file, source, checked) => (file, (source, *checked)),
            };
            match &checked {
                Checked::Valid(_) => valid += 1,
                Checked::Invalid(_) => invalid += 1,
                Checked::Unreadable(_) => usage_error = true,
            }
            if args.json {
                writeln!(out, "{}", json_line(&file, &checked))?;
            } else {
                human(&mut out, &file, &source, &checked, args.quiet)?;
            }
        }
    }
    if !args.json {
        writeln!(
            out,
            "{} file{}: {valid} valid, {invalid} invalid",
            valid + invalid,
            if valid + invalid == 1 { "" } else { "s" }
        )?;
    }
    Ok(if usage_error {
        2
    } else if invalid > 0 {
        1
    } else {
        0
    })
}

/// What a path given to `validate` stands for.
enum Item {
    /// A piece file, to check.
    File(PathBuf),
    /// A piece that has no file of its own (a builtin workflow, a stored piece), checked.
    Checked(PathBuf, String, Box<Checked>),
}

impl Item {
    fn path(&self) -> &Path {
        match self {
            Item::File(path) | Item::Checked(path, ..) => path,
        }
    }
}

/// The piece `given` names when it is no path that exists, found as `maestro run` finds it;
/// else why not (`run`'s "not found" error, listing the pieces that are known). A piece file
/// of that name that does not load is checked, to show why.
async fn by_name(given: &Path, config: &Config, opts: &LoadOptions) -> Result<Vec<Item>, String> {
    let name = given.to_string_lossy();
    match crate::common::find_piece(&name, config, opts).await {
        Ok(found) if found.path.is_file() => Ok(vec![Item::File(found.path)]),
        Ok(found) => {
            // A builtin workflow is checked from its text, for its warnings too.
            if let Some(builtin) = maestro_piece::builtin_workflows()
                .into_iter()
                .find(|w| w.path == found.path)
            {
                let checked = match load_bytes(builtin.text.as_bytes(), &builtin.path, opts) {
                    Ok(loaded) => Checked::Valid(Box::new(loaded)),
                    Err(failed) => Checked::Invalid(failed),
                };
                return Ok(vec![Item::Checked(
                    builtin.path,
                    builtin.text.to_owned(),
                    Box::new(checked),
                )]);
            }
            let loaded = Loaded {
                piece: found.piece,
                warnings: Vec::new(),
            };
            Ok(vec![Item::Checked(
                found.path,
                String::new(),
                Box::new(Checked::Valid(Box::new(loaded))),
            )])
        }
        Err(PieceError::Invalid {
            path,
            source_text,
            diagnostics,
        }) => Ok(vec![Item::Checked(
            path,
            source_text,
            Box::new(Checked::Invalid(*diagnostics)),
        )]),
        Err(PieceError::NotFound { skipped, .. })
            if skipped.iter().any(|s| named(&s.path, given)) =>
        {
            Ok(skipped
                .into_iter()
                .filter(|s| named(&s.path, given))
                .map(|s| Item::File(s.path))
                .collect())
        }
        Err(PieceError::NotFound { .. }) if looks_like_a_file(given) => {
            Err("no such file or directory".to_owned())
        }
        Err(e) => {
            if let PieceError::NotFound { skipped, .. } = &e {
                crate::common::note_skipped(skipped);
            }
            Err(maestro_app::error_chain(&e))
        }
    }
}

/// Whether `file` is the piece file `name` would find, were it valid (its stem).
fn named(file: &Path, name: &Path) -> bool {
    file.file_stem()
        .is_some_and(|stem| stem == name.as_os_str())
}

/// A path with a directory or a piece file's extension, not a piece name.
fn looks_like_a_file(given: &Path) -> bool {
    given.components().count() > 1 || given.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

fn check(file: &Path, opts: &LoadOptions) -> (String, Checked) {
    match std::fs::read(file) {
        Ok(bytes) => {
            let checked = match load_bytes(&bytes, file, opts) {
                Ok(loaded) => Checked::Valid(Box::new(loaded)),
                Err(failed) => Checked::Invalid(failed),
            };
            // Text up to the first bad byte is the same in the lossy copy, so spans hold.
            (String::from_utf8_lossy(&bytes).into_owned(), checked)
        }
        Err(e) => (String::new(), Checked::Unreadable(e.to_string())),
    }
}

fn report_unreadable(
    out: &mut impl std::io::Write,
    json: bool,
    path: &Path,
    why: &str,
) -> std::io::Result<()> {
    if json {
        writeln!(
            out,
            "{}",
            json_line(path, &Checked::Unreadable(why.to_owned()))
        )
    } else {
        eprintln!("error: {}: {why}", path.display());
        Ok(())
    }
}

fn human(
    out: &mut impl std::io::Write,
    file: &Path,
    source: &str,
    checked: &Checked,
    quiet: bool,
) -> std::io::Result<()> {
    match checked {
        Checked::Valid(loaded) => {
            if !quiet {
                eprint!(
                    "{}",
                    printable(&render_diagnostics(source, &loaded.warnings))
                );
            }
            let warnings = match loaded.warnings.len() {
                0 => String::new(),
                1 => ", 1 warning".to_owned(),
                n => format!(", {n} warnings"),
            };
            let count = loaded.piece.movements.len();
            writeln!(
                out,
                "valid    {} ({}, {count} movement{}{warnings})",
                file.display(),
                loaded.piece.dialect,
                if count == 1 { "" } else { "s" }
            )
        }
        Checked::Invalid(failed) => {
            let mut all: Vec<Diagnostic> = failed.errors.clone();
            if !quiet {
                all.extend(failed.warnings.iter().cloned());
            }
            all.sort_by_key(|d| (d.line, d.column));
            eprint!("{}", printable(&render_diagnostics(source, &all)));
            let dialect = failed.dialect.map(|d| format!("{d}, ")).unwrap_or_default();
            writeln!(
                out,
                "invalid  {} ({dialect}{} error{})",
                file.display(),
                failed.errors.len(),
                if failed.errors.len() == 1 { "" } else { "s" }
            )
        }
        Checked::Unreadable(why) => {
            eprintln!("error: cannot read {}: {why}", file.display());
            Ok(())
        }
    }
}

fn json_line(file: &Path, checked: &Checked) -> serde_json::Value {
    // The same objects the server's piece validation gives, from the one function.
    let list = |diags: &[Diagnostic]| -> Vec<serde_json::Value> {
        diags
            .iter()
            .map(|d| maestro_app::PieceDiagnostic::from_diagnostic(d).to_json())
            .collect()
    };
    let (valid, dialect, errors, warnings) = match checked {
        Checked::Valid(l) => (true, Some(l.piece.dialect), Vec::new(), list(&l.warnings)),
        Checked::Invalid(f) => (false, f.dialect, list(&f.errors), list(&f.warnings)),
        Checked::Unreadable(why) => (
            false,
            None,
            vec![serde_json::json!({"path": "", "line": 0, "column": 0, "message": why})],
            Vec::new(),
        ),
    };
    serde_json::json!({
        "file": file.display().to_string(),
        "valid": valid,
        "dialect": dialect.map(|d| d.as_str()),
        "errors": errors,
        "warnings": warnings,
    })
}
