//! What the loader hands the engine for TAKT's run-time selections: a dynamic parallel step's
//! fixed and pool items (`Movement::dynamic.participants`) and a step's facet pool with every
//! candidate's facets resolved to text (`Movement::dynamic.facets`), from the builtins Maestro
//! ships.

use crate::support;

use std::path::{Path, PathBuf};

use maestro_piece::{LoadOptions, Piece, SelectionMode, load_file};

/// The embedded builtin `name`, loaded as the root workflow of a project holding nothing else.
fn builtin(name: &str) -> (tempfile::TempDir, Piece) {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("takt-builtins/v0.60/en/workflows")
        .join(format!("{name}.yaml"));
    let project = tempfile::tempdir().unwrap();
    let dir = project.path().join(".takt/workflows");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(format!("{name}.yaml"));
    std::fs::copy(&source, &copy).unwrap();
    let opts = LoadOptions {
        project_dir: Some(project.path().to_owned()),
        ..LoadOptions::default()
    };
    let piece = load_file(&copy, &opts)
        .unwrap_or_else(|f| panic!("{f}"))
        .piece;
    (project, piece)
}

#[test]
fn a_param_pool_resolves_to_the_external_pools_candidates_with_their_facet_texts() {
    let (_project, piece) = builtin("development-implement-dynamic");
    let implement = piece.movement("implement").unwrap();
    let facets = implement
        .dynamic
        .as_ref()
        .and_then(|d| d.facets.as_ref())
        .unwrap();
    // `pool: {$param: implementation_pool}`, whose default is `coding-facets`
    assert_eq!(facets.pool, "coding-facets");
    assert_eq!(facets.max_selected, None);
    let ids: Vec<&str> = facets.candidates.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["frontend", "backend", "testing", "security"]);
    let frontend = &facets.candidates[0];
    assert!(frontend.description.starts_with("Handle UI, components"));
    let policies: Vec<&str> = frontend.policies.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(policies, ["design-fidelity"]);
    let knowledge: Vec<&str> = frontend.knowledge.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(knowledge, ["frontend", "react"], "declaration order");
    assert!(frontend.knowledge[1].text.starts_with("# React Knowledge"));
    // the pool's files name the same resource as a step's fixed facet does
    let fixed_architecture = implement
        .knowledge
        .iter()
        .find(|f| f.name == "architecture")
        .unwrap();
    assert_eq!(
        fixed_architecture.path.as_deref(),
        Some(Path::new(
            "builtin:takt-v0.60/en/facets/knowledge/architecture.md"
        ))
    );
    assert_eq!(
        facets.candidates[1].knowledge[0].path.as_deref(),
        Some(Path::new(
            "builtin:takt-v0.60/en/facets/knowledge/backend.md"
        ))
    );
}

#[test]
fn a_dynamic_parallel_step_keeps_its_fixed_count_pool_descriptions_mode_and_selector() {
    let (_project, piece) = builtin("review-backend");
    let reviewers = piece.movement("reviewers").unwrap();
    let participants = reviewers
        .dynamic
        .as_ref()
        .and_then(|d| d.participants.as_ref())
        .unwrap();
    let names: Vec<&str> = reviewers.parallel.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["arch-review", "coding-review", "security-review"]);
    assert_eq!(participants.fixed, 2);
    assert_eq!(participants.descriptions.len(), 1);
    assert!(participants.descriptions[0].starts_with("Do not select by default."));
    assert_eq!(participants.mode, SelectionMode::Replace);
    let selector = participants.selector.as_ref().unwrap();
    assert_eq!(selector.instruction.name, "select-applicable-candidates");
    assert!(!selector.instruction.text.trim().is_empty());
    // the pool item's own facet pool, for after it is chosen
    let security = &reviewers.parallel[2];
    let facets = security
        .dynamic
        .as_ref()
        .and_then(|d| d.facets.as_ref())
        .unwrap();
    assert_eq!(facets.pool, "security-review-facets");
    let ids: Vec<&str> = facets.candidates.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["web", "cli"]);
}

#[test]
fn max_selected_above_the_pools_candidate_count_is_an_error() {
    let source = "\
name: fix-with-facets
initial_step: fix
facet_pools:
  fix:
    candidates:
      - id: backend
        description: Handle API code
        knowledge: backend
steps:
  - name: fix
    persona: coder
    dynamic_facets:
      pool: fix
      max_selected: 2
    instruction: implement
    rules:
      - condition: Fixed
        next: COMPLETE
";
    assert_eq!(
        support::errors(source),
        vec![support::f(
            "steps[0].dynamic_facets.max_selected",
            14,
            "`max_selected` is 2, more than the 1 candidate(s) of pool `fix`"
        )]
    );
}
