//! The roles + graph dialect: the load-time checks, each with path, line and message.

use crate::support;

use maestro_piece::{Condition, Dialect, Target};
use pretty_assertions::assert_eq;
use support::{edit, errors, f, valid};

const PIECE: &str = r#"name: debate
description: Two sides argue.
roles:
  against:
    goal: You argue against.
    procedure: Make your case.
    output: Put your argument in the frontmatter.
    frontmatter:
      type: object
      properties:
        $status: { enum: [continue, conceded] }
        argument: { type: string }
      required: [$status, argument]
  judge:
    goal: You judge.
    frontmatter:
      type: object
      properties:
        $status: { const: _ }
graph:
  $START:
    _: { role: against, prompt: "Open the debate." }
  against:
    continue: { role: judge, prompt: "Judge this: {{{argument}}}" }
    conceded: { role: $END, prompt: "Over." }
  judge:
    _: { role: $END, prompt: "Done." }
"#;

#[test]
fn roles_become_movements_and_edges_rules() {
    let piece = valid(PIECE).piece;
    assert_eq!(piece.dialect, Dialect::Graph);
    assert_eq!(piece.initial_movement, "against");
    assert_eq!(piece.start_prompt.as_deref(), Some("Open the debate."));
    assert_eq!(piece.max_movements, 50);
    let against = &piece.movements[0];
    assert_eq!(against.persona.as_ref().unwrap().text, "You argue against.");
    assert_eq!(
        against.instruction.as_ref().unwrap().text,
        "Make your case.\n\nPut your argument in the frontmatter."
    );
    assert_eq!(
        against.rules[0].condition,
        Condition::Status("continue".into())
    );
    assert_eq!(
        against.rules[0].next,
        Some(Target::Movement("judge".into()))
    );
    assert_eq!(
        against.rules[0].prompt.as_deref(),
        Some("Judge this: {{{argument}}}")
    );
    assert_eq!(against.rules[1].next, Some(Target::Complete));
    assert!(against.frontmatter_schema.is_some());
}

#[test]
fn edge_targets_must_exist() {
    assert_eq!(
        errors(&edit(
            PIECE,
            "continue: { role: judge,",
            "continue: { role: jury,"
        )),
        vec![
            f(
                "roles.judge",
                14,
                "role `judge` is not reachable from `$START`; add an edge to it in `graph`"
            ),
            f(
                "graph.against.continue.role",
                24,
                "unknown role `jury`; known: against, judge, $END"
            ),
        ]
    );
}

#[test]
fn every_role_is_reachable_from_start() {
    let src = edit(PIECE, "continue: { role: judge,", "continue: { role: $END,");
    assert_eq!(
        errors(&src),
        vec![f(
            "roles.judge",
            14,
            "role `judge` is not reachable from `$START`; add an edge to it in `graph`"
        )]
    );
}

#[test]
fn statuses_must_match_the_schema() {
    assert_eq!(
        errors(&edit(
            PIECE,
            "    conceded: { role: $END",
            "    gave_up: { role: $END"
        )),
        vec![
            f(
                "graph.against",
                23,
                "role `against` can answer `$status: conceded` but `graph.against` has no edge for it"
            ),
            f(
                "graph.against.gave_up",
                25,
                "`gave_up` is not a `$status` value of role `against`'s frontmatter schema; known: conceded, continue"
            ),
        ]
    );
}

#[test]
fn multi_exit_roles_need_a_status_schema() {
    let src = edit(
        PIECE,
        "        $status: { enum: [continue, conceded] }\n",
        "",
    );
    assert_eq!(
        errors(&src),
        vec![f(
            "graph.against",
            22,
            "role `against` has several exits, so its `frontmatter` schema must constrain `$status` (with `enum` or `const`) to: continue, conceded"
        )]
    );
}

#[test]
fn template_variables_must_be_schema_properties() {
    assert_eq!(
        errors(&edit(PIECE, "{{{argument}}}", "{{{argumnt}}}")),
        vec![f(
            "graph.against.continue.prompt",
            24,
            "`{{{argumnt}}}` is not a property of role `against`'s frontmatter schema; known: $status, argument"
        )]
    );
    assert_eq!(
        errors(&edit(PIECE, "Open the debate.", "Open {{topic}}.")),
        vec![f(
            "graph.$START._.prompt",
            22,
            "`{{{topic}}}`: the `$START` edge has no previous output to take fields from"
        )]
    );
}

#[test]
fn start_is_required_and_leads_to_a_role() {
    let src = edit(
        PIECE,
        "  $START:\n    _: { role: against, prompt: \"Open the debate.\" }\n",
        "",
    );
    let errs = errors(&src);
    assert_eq!(
        errs[0],
        f(
            "graph.$START",
            21,
            "missing `$START`; add `$START: { _: { role: <first role>, prompt: … } }`"
        )
    );
}

#[test]
fn unknown_graph_sources_are_errors() {
    let src = edit(
        PIECE,
        "  judge:\n    _:",
        "  judge:\n    _: { role: $END }\n  jury:\n    _:",
    );
    assert!(errors(&src).contains(&f(
        "graph.jury",
        28,
        "unknown role `jury`; known: $START, against, judge"
    )));
}

#[test]
fn frontmatter_must_be_a_valid_json_schema() {
    let src = edit(
        PIECE,
        "argument: { type: string }",
        "argument: { type: strung }",
    );
    let errs = errors(&src);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(
        (errs[0].0.as_str(), errs[0].1),
        ("roles.against.frontmatter", 9)
    );
    assert!(
        errs[0]
            .2
            .starts_with("invalid JSON Schema at `/properties/argument/type`: "),
        "{}",
        errs[0].2
    );
}
