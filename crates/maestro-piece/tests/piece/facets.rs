//! Facet resolution order: section map, path relative to the piece, `<piece dir>/../facets`,
//! the project's `.maestro/facets`, the user's `~/.maestro/facets`, the project's
//! `.takt/facets`, the user's `~/.takt/facets`, extra dirs, inline text.

use crate::support;

use std::fs;
use std::path::Path;

use maestro_piece::LoadOptions;
use pretty_assertions::assert_eq;
use support::{valid_at, warnings};

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

const PIECE: &str = "\
name: facets
max_movements: 3
initial_movement: a
personas:
  mapped: sec/mapped.md
movements:
  - name: a
    edit: false
    persona: mapped
    policy: [proj, shared]
    knowledge: usr
    instruction: ext
    rules:
      - condition: done
        next: b
  - name: b
    edit: false
    persona: local/relative.md
    instruction: shared
    rules:
      - condition: done
        next: c
  - name: c
    edit: false
    persona: nowhere
    instruction: Write the summary in full sentences.
    rules:
      - condition: done
        next: COMPLETE
";

#[test]
fn names_resolve_in_order_and_fall_back_to_inline_text() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let piece = root.join("repo/pieces/p.yaml");
    write(&piece, PIECE);
    write(
        &root.join("repo/pieces/sec/mapped.md"),
        "from the section map",
    );
    write(
        &root.join("repo/pieces/local/relative.md"),
        "relative to the piece",
    );
    // `shared` exists in several places: the earliest wins.
    write(
        &root.join("repo/facets/policies/shared.md"),
        "piece facets policy",
    );
    write(
        &root.join("repo/facets/instructions/shared.md"),
        "piece facets instruction",
    );
    write(
        &root.join("project/.maestro/facets/policies/shared.md"),
        "project copy (shadowed)",
    );
    write(
        &root.join("project/.maestro/facets/policies/proj.md"),
        "project policy",
    );
    write(&root.join("user/facets/knowledge/usr.md"), "user knowledge");
    write(&root.join("extra/instructions/ext.md"), "extra instruction");
    let opts = LoadOptions {
        facet_dirs: vec![root.join("extra")],
        project_dir: Some(root.join("project")),
        user_dir: Some(root.join("user")),
        ..LoadOptions::default()
    };
    let loaded = valid_at(&fs::read_to_string(&piece).unwrap(), &piece, &opts);
    let m = &loaded.piece.movements;
    let text = |f: &Option<maestro_piece::Facet>| f.as_ref().unwrap().text.clone();
    assert_eq!(text(&m[0].persona), "from the section map");
    assert_eq!(
        m[0].policies
            .iter()
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>(),
        vec!["project policy", "piece facets policy"]
    );
    assert_eq!(m[0].knowledge[0].text, "user knowledge");
    assert_eq!(text(&m[0].instruction), "extra instruction");
    assert_eq!(text(&m[1].persona), "relative to the piece");
    assert_eq!(text(&m[1].instruction), "piece facets instruction");
    assert_eq!(
        m[1].instruction.as_ref().unwrap().path,
        Some(root.join("repo/pieces/../facets/instructions/shared.md"))
    );
    // Prose is inline text without a warning; a bare name found nowhere warns.
    assert_eq!(
        text(&m[2].instruction),
        "Write the summary in full sentences."
    );
    assert_eq!(text(&m[2].persona), "nowhere");
    let found = warnings(&loaded);
    let nowhere = found
        .iter()
        .find(|w| w.0 == "movements[2].persona")
        .unwrap();
    assert_eq!(nowhere.1, 25);
    assert!(nowhere.2.starts_with("persona `nowhere` names no facet file, so the text `nowhere` itself is used; looked in: "), "{}", nowhere.2);
    assert!(
        nowhere.2.contains("extra/personas/nowhere.md"),
        "{}",
        nowhere.2
    );
    assert_eq!(
        found.iter().filter(|w| w.0.ends_with(".edit")).count(),
        0,
        "{found:#?}"
    );
}

#[test]
fn facet_names_cannot_climb_out_of_facet_dirs() {
    let tmp = tempfile::tempdir().unwrap();
    let piece = tmp.path().join("pieces/p.yaml");
    write(&tmp.path().join("secret.md"), "secret");
    let src = PIECE.replace("persona: nowhere", "persona: ..secret");
    write(&piece, &src);
    write(&tmp.path().join("pieces/sec/mapped.md"), "m");
    write(&tmp.path().join("pieces/local/relative.md"), "r");
    let loaded = valid_at(&src, &piece, &LoadOptions::default());
    assert_eq!(
        loaded.piece.movements[2].persona.as_ref().unwrap().text,
        "..secret"
    );
}

/// Pieces written by a model or an API load with `confine_facets`: a facet path that climbs out
/// of the piece's directory and the facet roots is an error, not a file read into a prompt.
#[test]
fn confined_loading_refuses_facet_files_outside_the_allowed_directories() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("secret.md"), "host secret");
    write(&root.join("pieces/own.md"), "own persona");
    let piece = root.join("pieces/p.yaml");
    let source = "\
name: p
description: d
max_movements: 3
initial_movement: a
movements:
  - name: a
    edit: false
    persona: ../secret.md
    instruction: own.md
    allowed_tools: []
    rules: []
";
    let confined = LoadOptions {
        confine_facets: true,
        ..LoadOptions::default()
    };
    let failed = maestro_piece::load_str(source, &piece, &confined).unwrap_err();
    let found: Vec<(String, usize, bool)> = failed
        .errors
        .iter()
        .map(|d| (d.path.clone(), d.line, d.message.contains("lies outside")))
        .collect();
    assert_eq!(found, vec![("movements[0].persona".to_string(), 8, true)]);
    assert!(
        failed
            .errors
            .iter()
            .all(|d| !d.message.contains("host secret"))
    );

    // the same piece on disk, loaded by its author, may use the file
    let loaded = valid_at(source, &piece, &LoadOptions::default());
    let m = &loaded.piece.movements[0];
    assert_eq!(m.persona.as_ref().unwrap().text, "host secret");
    assert_eq!(m.instruction.as_ref().unwrap().text, "own persona");
}

/// A TAKT project keeps its facets in `.takt/facets/<kind>/` and `~/.takt/facets/<kind>/`
/// (TAKT v0.30's project and user layers); its pieces load unchanged. Maestro's own
/// directories come first, and the `--facets-dir` extras after.
#[test]
fn takt_project_and_user_facet_directories_are_searched_after_maestros() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let project = root.join("project");
    // Not under `.takt/pieces/`, whose `../facets` would be found as `<piece dir>/../facets`.
    let piece = project.join("pieces/review.yaml");
    let source = "\
name: review
max_movements: 3
initial_movement: review
movements:
  - name: review
    edit: false
    persona: takt-reviewer
    policy: [review, shared]
    knowledge: domain
    instruction: review-code
    output_contracts:
      report:
        - name: review.md
          format: review-report
    rules:
      - condition: done
        next: COMPLETE
";
    write(&piece, source);
    write(
        &project.join(".takt/facets/personas/takt-reviewer.md"),
        "project takt persona",
    );
    write(
        &project.join(".takt/facets/policies/review.md"),
        "project takt policy",
    );
    write(
        &project.join(".takt/facets/instructions/review-code.md"),
        "project takt instruction",
    );
    write(
        &project.join(".takt/facets/output-contracts/review-report.md"),
        "project takt report format",
    );
    write(
        &root.join("home/.takt/facets/knowledge/domain.md"),
        "user takt knowledge",
    );
    // `shared` is in Maestro's project directory and in TAKT's: Maestro's wins.
    write(
        &project.join(".maestro/facets/policies/shared.md"),
        "maestro project policy",
    );
    write(
        &project.join(".takt/facets/policies/shared.md"),
        "takt copy (shadowed)",
    );
    // A user TAKT facet shadows an extra `--facets-dir` one.
    write(
        &root.join("extra/knowledge/domain.md"),
        "extra copy (shadowed)",
    );
    let opts = LoadOptions {
        project_dir: Some(project.clone()),
        user_dir: Some(root.join("home/.maestro")),
        takt_user_dir: Some(root.join("home/.takt")),
        facet_dirs: vec![root.join("extra")],
        ..LoadOptions::default()
    };
    let loaded = valid_at(source, &piece, &opts);
    let m = &loaded.piece.movements[0];
    let texts = |facets: &[maestro_piece::Facet]| -> Vec<String> {
        facets.iter().map(|f| f.text.clone()).collect()
    };
    assert_eq!(m.persona.as_ref().unwrap().text, "project takt persona");
    assert_eq!(
        m.persona.as_ref().unwrap().path,
        Some(project.join(".takt/facets/personas/takt-reviewer.md"))
    );
    assert_eq!(
        texts(&m.policies),
        vec!["project takt policy", "maestro project policy"]
    );
    assert_eq!(texts(&m.knowledge), vec!["user takt knowledge"]);
    assert_eq!(
        m.instruction.as_ref().unwrap().text,
        "project takt instruction"
    );
    assert_eq!(
        m.output_contracts[0].format.as_ref().unwrap().text,
        "project takt report format"
    );
    assert_eq!(warnings(&loaded), vec![]);

    // Without the TAKT directories the same piece falls back to inline text, with warnings.
    let without = LoadOptions {
        project_dir: None,
        takt_user_dir: None,
        ..opts
    };
    let loaded = valid_at(source, &piece, &without);
    assert_eq!(
        loaded.piece.movements[0].persona.as_ref().unwrap().text,
        "takt-reviewer"
    );
}

/// A facet written as a path (`./personas/coder.md`, `../policies/x.md`) whose file is not there
/// is a mistake, not prose: the piece still loads (the text is used, as TAKT does), with a
/// warning that names the file looked for. Prose with a slash in it stays prose, unwarned.
#[test]
fn a_facet_path_that_names_no_file_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let piece = tmp.path().join("pieces/p.yaml");
    write(
        &piece,
        "\
name: paths
max_movements: 2
initial_movement: a
movements:
  - name: a
    edit: false
    persona: ./personas/missing.md
    policy: ../nowhere/policy.md
    instruction: Compare the API/CLI output.
    rules:
      - condition: done
        next: COMPLETE
",
    );
    let opts = LoadOptions {
        project_dir: Some(tmp.path().join("project")),
        user_dir: Some(tmp.path().join("user")),
        ..LoadOptions::default()
    };
    let loaded = valid_at(&fs::read_to_string(&piece).unwrap(), &piece, &opts);
    let found = warnings(&loaded);
    let about = |field: &str| {
        found
            .iter()
            .find(|w| w.0 == field)
            .map(|w| w.2.clone())
            .unwrap_or_else(|| panic!("no warning at {field}: {found:#?}"))
    };
    let persona = about("movements[0].persona");
    assert!(
        persona.starts_with("persona `./personas/missing.md` looks like a file path, but ")
            && persona.contains("pieces/./personas/missing.md does not exist"),
        "{persona}"
    );
    assert!(about("movements[0].policy").contains("nowhere/policy.md does not exist"));
    assert!(
        !found.iter().any(|w| w.0 == "movements[0].instruction"),
        "{found:#?}"
    );
}
