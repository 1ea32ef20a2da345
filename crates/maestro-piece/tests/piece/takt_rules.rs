//! The takt dialect: what maps into the IR, what is an error (with path and line) and what is
//! only a warning.

use crate::support;

use maestro_piece::{Condition, Dialect, LoadOptions, SessionMode, Target};
use pretty_assertions::assert_eq;
use support::{edit, errors, f, valid, valid_at, warnings};

const PIECE: &str = r#"name: review-loop
max_movements: 8
initial_movement: implement
movements:
  - name: implement
    edit: true
    persona: You write code.
    instruction_template: |
      Implement {task}.
    allowed_tools: [Read]
    provider_options:
      claude:
        allowed_tools: [Read, Edit]
      codex:
        network_access: true
    session: refresh
    pass_previous_response: false
    quality_gates:
      - tests pass
    output_contracts:
      report:
        - name: scope.md
          format: |
            # Scope
        - Summary: summary.md
    rules:
      - condition: done
        next: reviewers
      - condition: ai("the task is impossible")
        next: ABORT
        requires_user_input: true
        interactive_only: true
        appendix: say why
  - name: reviewers
    parallel:
      - name: arch
        edit: false
        persona: You review architecture.
        instruction: Review the design.
        rules:
          - condition: approved
          - condition: needs_fix
      - name: qa
        edit: false
        persona: You review quality.
        instruction: Review the tests.
        rules:
          - condition: approved
          - condition: needs_fix
    rules:
      - condition: all("approved")
        next: COMPLETE
      - condition: any("needs_fix")
        next: implement
loop_monitors:
  - cycle: [implement, reviewers]
    threshold: 3
    judge:
      persona: You judge loops.
      instruction_template: The loop ran {cycle_count} times.
      rules:
        - condition: progressing
          next: implement
        - condition: stuck
          next: ABORT
"#;

#[test]
fn the_base_piece_maps_to_the_ir() {
    let loaded = valid(PIECE);
    let piece = &loaded.piece;
    assert_eq!(piece.dialect, Dialect::Takt);
    let implement = &piece.movements[0];
    assert_eq!(implement.allowed_tools, vec!["Read", "Edit"]);
    assert_eq!(implement.session, SessionMode::Refresh);
    assert!(!implement.pass_previous_response);
    assert_eq!(implement.quality_gates, vec!["tests pass"]);
    assert_eq!(implement.output_contracts[0].name, "scope.md");
    assert_eq!(
        implement.output_contracts[0].format.as_ref().unwrap().text,
        "# Scope\n"
    );
    assert_eq!(
        implement.output_contracts[1].label.as_deref(),
        Some("Summary")
    );
    assert_eq!(implement.output_contracts[1].name, "summary.md");
    let abort = &implement.rules[1];
    assert_eq!(
        abort.condition,
        Condition::Ai("the task is impossible".into())
    );
    assert_eq!(abort.next, Some(Target::Abort));
    assert!(abort.requires_user_input && abort.interactive_only);
    assert_eq!(abort.appendix.as_deref(), Some("say why"));
    let reviewers = &piece.movements[1];
    assert_eq!(reviewers.parallel.len(), 2);
    assert_eq!(reviewers.parallel[0].rules[0].next, None);
    assert_eq!(
        reviewers.rules[0].condition,
        Condition::All(vec!["approved".into()])
    );
    assert_eq!(reviewers.rules[0].next, Some(Target::Complete));
    let monitor = &piece.loop_monitors[0];
    assert_eq!(monitor.cycle, vec!["implement", "reviewers"]);
    assert_eq!(monitor.threshold, 3);
    assert_eq!(monitor.judge.rules[1].next, Some(Target::Abort));
    assert_eq!(
        warnings(&loaded),
        vec![f(
            "movements[0].provider_options.codex.network_access",
            15,
            "`provider_options.*.network_access` is ignored: provider-specific options other than `allowed_tools` have no meaning in maestro"
        )]
    );
}

#[test]
fn next_must_name_a_movement_complete_or_abort() {
    assert_eq!(
        errors(&edit(PIECE, "next: reviewers", "next: review")),
        vec![f(
            "movements[0].rules[0].next",
            28,
            "unknown movement `review`; known: implement, reviewers, COMPLETE, ABORT"
        )]
    );
}

#[test]
fn aggregates_only_work_on_parallel_movements() {
    assert_eq!(
        errors(&edit(PIECE, "condition: done", "condition: all(\"done\")")),
        vec![f(
            "movements[0].rules[0].condition",
            27,
            "`all(…)` and `any(…)` aggregate sub-movement results, so they only work in the rules of a movement with `parallel`"
        )]
    );
}

#[test]
fn aggregate_conditions_must_exist_in_the_sub_movements() {
    assert_eq!(
        errors(&edit(PIECE, "all(\"approved\")", "all(\"aproved\")")),
        vec![f(
            "movements[1].rules[0].condition",
            51,
            "condition \"aproved\" is not a rule condition of any sub-movement; known: approved, needs_fix, approved, needs_fix"
        )]
    );
    assert_eq!(
        errors(&edit(
            PIECE,
            "all(\"approved\")",
            "all(\"approved\", \"approved\", \"approved\")"
        )),
        vec![f(
            "movements[1].rules[0].condition",
            51,
            "3 conditions for 2 sub-movements; the positional form names one condition per sub-movement, in order"
        )]
    );
    assert_eq!(
        errors(&edit(
            PIECE,
            "all(\"approved\")",
            "all(\"approved\", \"done\")"
        )),
        vec![f(
            "movements[1].rules[0].condition",
            51,
            "condition \"done\" is not a rule condition of sub-movement `qa`; known: approved, needs_fix"
        )]
    );
}

#[test]
fn malformed_conditions_name_the_expected_form() {
    assert_eq!(
        errors(&edit(
            PIECE,
            "ai(\"the task is impossible\")",
            "ai(the task is impossible)"
        )),
        vec![f(
            "movements[0].rules[1].condition",
            29,
            "found `t` where a quoted string should start; expected `ai(\"condition\")`"
        )]
    );
}

#[test]
fn a_missing_edit_is_false_with_a_warning() {
    let loaded = valid(&edit(PIECE, "    edit: true\n", ""));
    assert!(!loaded.piece.movements[0].edit);
    assert!(warnings(&loaded).contains(&f(
        "movements[0].edit",
        5,
        "movement `implement` has no `edit`; read as `edit: false` (Write and Edit are not offered)"
    )));
}

#[test]
fn unknown_and_meaningless_keys_are_warnings_never_errors() {
    let src = edit(
        PIECE,
        "    session: refresh\n",
        "    session: refresh\n    provider: claude\n    team_leader:\n      max_parts: 2\n    mood: cheerful\n",
    );
    let loaded = valid(&src);
    let found = warnings(&loaded);
    assert!(
        found.contains(&f(
            "movements[0].provider",
            17,
            "`provider` is ignored: maestro runs every movement on the configured endpoint"
        )),
        "{found:#?}"
    );
    assert!(found.contains(&f("movements[0].team_leader", 18, "`team_leader` is ignored: team-leader decomposition is not supported; the movement runs as one agent")), "{found:#?}");
    assert!(
        found.iter().any(|w| w.0 == "movements[0].mood"
            && w.1 == 20
            && w.2.starts_with("unknown field `mood` in a movement")),
        "{found:#?}"
    );
}

#[test]
fn session_modes_are_checked() {
    assert_eq!(
        errors(&edit(PIECE, "session: refresh", "session: fresh")),
        vec![f(
            "movements[0].session",
            16,
            "unknown session mode `fresh`; known: continue, refresh"
        )]
    );
}

#[test]
fn loop_monitor_cycles_name_movements() {
    assert_eq!(
        errors(&edit(
            PIECE,
            "cycle: [implement, reviewers]",
            "cycle: [implement, review]"
        )),
        vec![f(
            "loop_monitors[0].cycle[1]",
            56,
            "unknown movement `review`; known: implement, reviewers"
        )]
    );
}

#[test]
fn section_map_files_must_exist() {
    let src = edit(
        PIECE,
        "movements:\n",
        "personas:\n  coder: ../personas/missing.md\nmovements:\n",
    );
    let errs = errors(&src);
    assert_eq!(errs.len(), 1);
    assert_eq!((errs[0].0.as_str(), errs[0].1), ("personas.coder", 5));
    assert!(
        errs[0]
            .2
            .starts_with("persona file `../personas/missing.md` not found"),
        "{}",
        errs[0].2
    );
}

#[test]
fn piece_config_tools_are_the_default_for_movements_without_tools() {
    let src = edit(
        &edit(
            PIECE,
            "    allowed_tools: [Read]\n    provider_options:\n      claude:\n        allowed_tools: [Read, Edit]\n      codex:\n        network_access: true\n",
            "",
        ),
        "movements:\n",
        "piece_config:\n  provider_options:\n    claude:\n      allowed_tools: [Grep]\nmovements:\n",
    );
    let piece = valid_at(
        &src,
        std::path::Path::new("p.yaml"),
        &LoadOptions::default(),
    )
    .piece;
    assert_eq!(piece.movements[0].allowed_tools, vec!["Grep"]);
}

#[test]
fn top_level_fields_are_checked() {
    assert_eq!(
        errors(&edit(PIECE, "max_movements: 8", "max_movements: 0")),
        vec![f(
            "max_movements",
            2,
            "expected a positive integer (1 to 4294967295), found `0`"
        )]
    );
    assert_eq!(
        errors(&edit(
            PIECE,
            "initial_movement: implement",
            "initial_movement: plan"
        )),
        vec![f(
            "initial_movement",
            3,
            "unknown movement `plan`; known: implement, reviewers"
        )]
    );
    assert_eq!(
        errors(&edit(PIECE, "name: review-loop\n", "")),
        vec![f(
            "name",
            1,
            "missing required field `name` in a takt piece"
        )]
    );
}

#[test]
fn movement_names_are_unique_across_sub_movements() {
    assert_eq!(
        errors(&edit(PIECE, "      - name: qa", "      - name: implement")),
        vec![f(
            "movements[1].parallel[1].name",
            43,
            "duplicate movement name `implement`; `movements[0].name` already has it"
        )]
    );
}

#[test]
fn rules_need_a_next_except_in_sub_movements() {
    assert_eq!(
        errors(&edit(
            PIECE,
            "      - condition: done\n        next: reviewers\n",
            "      - condition: done\n"
        )),
        vec![f(
            "movements[0].rules[0].next",
            27,
            "missing required field `next` in a rule"
        )]
    );
    let loaded = valid(&edit(
        PIECE,
        "          - condition: approved\n          - condition: needs_fix\n      - name: qa",
        "          - condition: approved\n            next: COMPLETE\n          - condition: needs_fix\n      - name: qa",
    ));
    assert!(warnings(&loaded).contains(&f(
        "movements[1].parallel[0].rules[0].next",
        42,
        "`next` is ignored: a sub-movement's rules only classify its result; the parallel parent's rules pick the next movement"
    )));
}

#[test]
fn parallel_movements_cannot_nest() {
    let src = edit(
        PIECE,
        "      - name: qa\n",
        "      - name: qa\n        parallel: []\n",
    );
    assert_eq!(
        errors(&src),
        vec![f(
            "movements[1].parallel[1].parallel",
            43,
            "parallel movements cannot be nested"
        )]
    );
}

#[test]
fn report_names_must_be_plain_file_names() {
    let message = |name: &str| {
        format!(
            "report name `{name}` must be a plain file name inside the report directory (no `/`, `\\` or leading `.`, so no `..`); use e.g. `plan.md`"
        )
    };
    assert_eq!(
        errors(&edit(PIECE, "- name: scope.md", "- name: ../escape.md")),
        vec![f(
            "movements[0].output_contracts.report[0].name",
            22,
            &message("../escape.md")
        )]
    );
    assert_eq!(
        errors(&edit(
            PIECE,
            "- Summary: summary.md",
            "- Summary: sub/summary.md"
        )),
        vec![f(
            "movements[0].output_contracts.report[1].Summary",
            25,
            &message("sub/summary.md")
        )]
    );
    assert_eq!(
        errors(&edit(
            PIECE,
            "- Summary: summary.md",
            "- ..\n        - /etc/cron.d/x"
        )),
        vec![
            f(
                "movements[0].output_contracts.report[1]",
                25,
                &message("..")
            ),
            f(
                "movements[0].output_contracts.report[2]",
                26,
                &message("/etc/cron.d/x")
            ),
        ]
    );
}

/// What a movement may do: `edit`, `allowed_tools`, `allowed_commands`.
type Permissions = (bool, Vec<String>, Option<Vec<String>>);

/// One takt movement with the given extra lines, loaded; its permissions and the warnings.
fn permissions(extra: &str) -> (Permissions, Vec<support::Finding>) {
    let src = format!(
        "name: p\nmax_movements: 3\ninitial_movement: work\nmovements:\n  - name: work\n    persona: You work.\n{extra}    rules:\n      - condition: done\n        next: COMPLETE\n"
    );
    let loaded = valid(&src);
    let m = &loaded.piece.movements[0];
    (
        (m.edit, m.allowed_tools.clone(), m.allowed_commands.clone()),
        warnings(&loaded),
    )
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `permission_mode` maps onto the sandbox: `readonly` drops Write and Edit (and leaves Bash
/// a read-only workspace, as `edit: false` does), `edit` is `edit: true`, `full` also lifts the
/// Bash allowlist (`["*"]`).
#[test]
fn permission_modes_map_onto_edit_tools_and_the_allowlist() {
    let listed = "    allowed_tools: [Read, Write, Edit, Bash]\n";
    assert_eq!(
        permissions(&format!("    permission_mode: readonly\n{listed}")),
        ((false, names(&["Read", "Bash"]), None), vec![])
    );
    assert_eq!(
        permissions(&format!("    permission_mode: edit\n{listed}")),
        (
            (true, names(&["Read", "Write", "Edit", "Bash"]), None),
            vec![]
        )
    );
    assert_eq!(
        permissions(&format!("    permission_mode: full\n{listed}")),
        (
            (
                true,
                names(&["Read", "Write", "Edit", "Bash"]),
                Some(names(&["*"]))
            ),
            vec![]
        )
    );
    // The mode wins over a disagreeing `edit`, and says so.
    let (got, found) = permissions(&format!(
        "    edit: true\n    permission_mode: readonly\n{listed}"
    ));
    assert_eq!(got, (false, names(&["Read", "Bash"]), None));
    assert_eq!(
        found,
        vec![support::f(
            "movements[0].permission_mode",
            8,
            "`permission_mode: readonly` and `edit: true` disagree; the permission mode decides (Write and Edit are not offered); make them agree"
        )]
    );
    assert_eq!(
        errors(
            "name: p\nmax_movements: 3\ninitial_movement: work\nmovements:\n  - name: work\n    edit: true\n    permission_mode: root\n    rules:\n      - condition: done\n        next: COMPLETE\n"
        ),
        vec![f(
            "movements[0].permission_mode",
            7,
            "unknown permission mode `root`; known: readonly, edit, full"
        )]
    );
}

/// TAKT v0.30's `required_permission_mode` is a floor: it raises what `edit` gives, never
/// lowers it.
#[test]
fn required_permission_mode_raises_the_mode() {
    let listed = "    allowed_tools: [Read, Bash]\n";
    assert_eq!(
        permissions(&format!(
            "    edit: true\n    required_permission_mode: full\n{listed}"
        ))
        .0,
        (true, names(&["Read", "Bash"]), Some(names(&["*"])))
    );
    assert_eq!(
        permissions(&format!(
            "    edit: true\n    required_permission_mode: readonly\n{listed}"
        ))
        .0,
        (true, names(&["Read", "Bash"]), None)
    );
    assert_eq!(
        permissions(&format!(
            "    edit: false\n    required_permission_mode: edit\n{listed}"
        ))
        .0,
        (true, names(&["Read", "Bash"]), None)
    );
}

/// TAKT's schema: `allowed_tools` is for reference and `edit` decides. A movement that names
/// no tools (nor does `piece_config`) gets the default set for its `edit`.
#[test]
fn a_movement_without_allowed_tools_gets_the_default_set_for_its_edit() {
    assert_eq!(
        permissions("    edit: false\n").0,
        (false, names(&["Read", "Glob", "Grep", "Bash"]), None)
    );
    assert_eq!(
        permissions("    edit: true\n").0,
        (
            true,
            names(&["Read", "Glob", "Grep", "Bash", "Write", "Edit"]),
            None
        )
    );
    assert_eq!(
        permissions("    permission_mode: full\n").0,
        (
            true,
            names(&["Read", "Glob", "Grep", "Bash", "Write", "Edit"]),
            Some(names(&["*"]))
        )
    );
    // Named tools are kept as they are.
    assert_eq!(
        permissions("    edit: true\n    allowed_tools: [Read]\n").0,
        (true, names(&["Read"]), None)
    );
}
