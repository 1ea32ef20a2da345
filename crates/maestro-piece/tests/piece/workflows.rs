//! TAKT v0.60 workflows: every builtin loads without an error or a warning (but for the
//! effects Maestro refuses, named), from the fixtures and from a project that has nothing but
//! the workflow file (the builtin layer is inside Maestro).

use std::path::{Path, PathBuf};

use maestro_piece::{Dialect, LoadOptions, discover, load_file, render_diagnostics};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
}

fn workflows_dir() -> PathBuf {
    fixtures().join("takt-v0.60/builtins/en/workflows")
}

/// The warnings every builtin may have: the refused effects, each naming its effect.
fn allowed_warning(message: &str) -> bool {
    ["comment_pr", "merge_pr", "close_pr"]
        .iter()
        .any(|e| message.starts_with(&format!("the effect `{e}` needs a Git host")))
}

fn check_all(
    load: impl Fn(&Path) -> Result<maestro_piece::Loaded, maestro_piece::Failed>,
) -> usize {
    let files: Vec<PathBuf> = discover(&workflows_dir())
        .into_iter()
        .filter(|f| f.parent() == Some(workflows_dir().as_path()))
        .collect();
    let mut report = String::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        match load(file) {
            Ok(loaded) => {
                assert_eq!(loaded.piece.dialect, Dialect::Takt);
                assert!(!loaded.piece.movements.is_empty());
                let bad: Vec<_> = loaded
                    .warnings
                    .iter()
                    .filter(|w| !allowed_warning(&w.message))
                    .cloned()
                    .collect();
                if !bad.is_empty() {
                    report.push_str(&render_diagnostics(&source, &bad));
                }
            }
            Err(failed) => {
                report.push_str(&render_diagnostics(&source, &failed.errors));
                report.push_str(&render_diagnostics(&source, &failed.warnings));
            }
        }
    }
    assert!(report.is_empty(), "{report}");
    files.len()
}

#[test]
fn every_v060_builtin_workflow_validates_without_errors_or_warnings() {
    let n = check_all(|file| load_file(file, &LoadOptions::default()));
    assert_eq!(n, 64);
}

/// A project that has nothing but the workflow file in `.takt/workflows/`: everything else
/// (facets, fragments, pools, rules, called workflows) comes from the builtins inside Maestro.
fn isolated(
    file: &Path,
) -> (
    tempfile::TempDir,
    Result<maestro_piece::Loaded, maestro_piece::Failed>,
) {
    let project = tempfile::tempdir().unwrap();
    let dir = project.path().join(".takt/workflows");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(file.file_name().unwrap());
    std::fs::copy(file, &copy).unwrap();
    let opts = LoadOptions {
        project_dir: Some(project.path().to_owned()),
        ..LoadOptions::default()
    };
    let loaded = load_file(&copy, &opts);
    (project, loaded)
}

#[test]
fn every_v060_builtin_workflow_validates_with_only_the_embedded_builtins() {
    let n = check_all(|file| isolated(file).1);
    assert_eq!(n, 64);
}

#[test]
fn a_workflow_steps_prompt_is_assembled_from_the_builtin_facets() {
    use maestro_piece::prompt::{PromptContext, assemble};
    let (_project, loaded) = isolated(&workflows_dir().join("review-backend.yaml"));
    let piece = loaded.unwrap().piece;
    let ctx = PromptContext {
        task: "Review the change to the login handler.".into(),
        iteration: 1,
        max_movements: 10,
        movement_iteration: 1,
        report_dir: "runs/7/reports".into(),
        ..PromptContext::default()
    };
    // `gather` comes from the step fragment `review-gather-to-reviewers`, with the workflow's
    // `all_steps.rules` before its instruction.
    let gather = piece.movement("gather").unwrap();
    let prompt = assemble(&piece, gather, &ctx);
    insta::assert_snapshot!("review_backend_gather_system", prompt.system);
    insta::assert_snapshot!("review_backend_gather_user", prompt.user);
}

/// A directory laid out as TAKT keeps its builtins or a project's `.takt/`: only `workflows/`
/// (and `pieces/`) hold pieces; step fragments, facet pools, companions, provider options and
/// the settings files beside them are not offered as pieces, wherever the walk starts.
#[test]
fn below_a_takt_root_only_workflows_and_pieces_are_discovered() {
    let builtins = fixtures().join("takt-v0.60/builtins/en");
    let found = discover(&builtins);
    assert_eq!(found.len(), 64, "{found:#?}");
    assert!(
        found
            .iter()
            .all(|f| f.parent() == Some(workflows_dir().as_path())),
        "{found:#?}"
    );
    let project = tempfile::tempdir().unwrap();
    let takt = project.path().join(".takt");
    for dir in ["workflows", "pieces", "steps", "facets/personas"] {
        std::fs::create_dir_all(takt.join(dir)).unwrap();
    }
    for file in [
        "workflows/mine.yaml",
        "pieces/old.yaml",
        "steps/final-check.yaml",
        "config.yaml",
    ] {
        std::fs::write(takt.join(file), "name: x\n").unwrap();
    }
    std::fs::write(project.path().join("other.yaml"), "name: y\n").unwrap();
    let names = |found: Vec<PathBuf>| -> Vec<String> {
        found
            .iter()
            .map(|f| {
                f.strip_prefix(project.path())
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(
        names(discover(project.path())),
        [
            ".takt/pieces/old.yaml",
            ".takt/workflows/mine.yaml",
            "other.yaml"
        ]
    );
    assert_eq!(
        names(discover(&takt)),
        [".takt/pieces/old.yaml", ".takt/workflows/mine.yaml"]
    );
    // A pieces directory of Maestro's own with a `workflows/` folder in it is walked whole.
    let own = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(own.path().join("workflows")).unwrap();
    std::fs::create_dir_all(own.path().join("team")).unwrap();
    std::fs::write(own.path().join("workflows/a.yaml"), "name: a\n").unwrap();
    std::fs::write(own.path().join("team/b.yaml"), "name: b\n").unwrap();
    assert_eq!(discover(own.path()).len(), 2);
}
