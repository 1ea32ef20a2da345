//! Every rule of the maestro piece schema, each with a negative test asserting the message,
//! the field path and the line.

use crate::support;

use maestro_piece::{Dialect, Target};
use pretty_assertions::assert_eq;
use support::{edit, errors, f, valid, warnings};

const PIECE: &str = "\
name: demo
description: Plan, then execute.
max_movements: 10
initial_movement: plan
movements:
  - name: plan
    edit: false
    persona: You are a careful planner.
    instruction: Write a plan for the task.
    allowed_tools: [Read, Glob]
    rules:
      - condition: the plan is ready
        next: execute
  - name: execute
    edit: true
    persona: You are an engineer.
    instruction: Carry out the plan.
    allowed_tools: [Read, Write, 'mcp__*']
    rules: []
";

#[test]
fn the_base_piece_is_valid_and_maps_to_the_ir() {
    let loaded = valid(PIECE);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let piece = loaded.piece;
    assert_eq!(piece.dialect, Dialect::Maestro);
    assert_eq!(piece.movement_names(), vec!["plan", "execute"]);
    assert_eq!(piece.max_movements, 10);
    assert_eq!(piece.hash.len(), 64);
    let plan = &piece.movements[0];
    assert_eq!(
        plan.persona.as_ref().unwrap().text,
        "You are a careful planner."
    );
    assert_eq!(plan.rules[0].next, Some(Target::Movement("execute".into())));
    assert_eq!(
        piece.movements[1].allowed_tools,
        vec!["Read", "Write", "mcp__*"]
    );
}

#[test]
fn name_must_match_the_pattern() {
    assert_eq!(
        errors(&edit(PIECE, "name: demo", "name: Demo_1")),
        vec![f(
            "name",
            1,
            "invalid piece name `Demo_1`; use lowercase letters, digits and `-` (pattern [a-z0-9-]+)"
        )]
    );
}

#[test]
fn a_tool_that_changes_files_in_a_movement_that_may_not_edit_warns() {
    let src = edit(
        PIECE,
        "allowed_tools: [Read, Glob]",
        "allowed_tools: [Read, Write]",
    );
    let loaded = valid(&src);
    assert_eq!(
        warnings(&loaded),
        vec![f(
            "movements[0].allowed_tools[1]",
            10,
            "`Write` changes files, so it is offered only to a movement with `edit: true`, and \
             this one has `edit: false`; set `edit: true`, or drop `Write`"
        )]
    );
}

#[test]
fn the_name_auto_is_reserved_for_the_classifier() {
    assert_eq!(
        errors(&edit(PIECE, "name: demo", "name: auto")),
        vec![f(
            "name",
            1,
            "the piece name `auto` is reserved (`auto` asks the classifier to choose a piece); rename the piece"
        )]
    );
}

#[test]
fn top_level_fields_are_required() {
    for (line, key) in [
        ("name: demo\n", "name"),
        ("description: Plan, then execute.\n", "description"),
        ("max_movements: 10\n", "max_movements"),
        ("initial_movement: plan\n", "initial_movement"),
    ] {
        let src = edit(PIECE, line, "");
        let errs = errors(&src);
        assert_eq!(
            errs,
            vec![f(
                key,
                1,
                &format!("missing required field `{key}` in a maestro piece")
            )],
            "without {key}"
        );
    }
}

#[test]
fn movements_are_required_and_non_empty() {
    let without = PIECE.split("movements:\n").next().unwrap().to_owned();
    assert_eq!(
        errors(&without),
        vec![f(
            "movements",
            1,
            "missing required field `movements` in a maestro piece"
        )]
    );
    let empty = format!("{without}movements: []\n");
    assert_eq!(
        errors(&empty),
        vec![f("movements", 5, "a piece needs at least one movement")]
    );
}

#[test]
fn max_movements_must_be_a_positive_integer() {
    for (value, found) in [("0", "found `0`"), ("-3", "found `-3`")] {
        assert_eq!(
            errors(&edit(
                PIECE,
                "max_movements: 10",
                &format!("max_movements: {value}")
            )),
            vec![f(
                "max_movements",
                3,
                &format!("expected a positive integer (1 to 4294967295), {found}")
            )]
        );
    }
    assert_eq!(
        errors(&edit(PIECE, "max_movements: 10", "max_movements: ten")),
        vec![f(
            "max_movements",
            3,
            "expected a positive integer, found the string `ten`"
        )]
    );
    assert_eq!(
        errors(&edit(PIECE, "max_movements: 10", "max_movements: \"10\"")),
        vec![f(
            "max_movements",
            3,
            "expected a positive integer, found the string `10`"
        )]
    );
}

#[test]
fn initial_movement_must_name_a_movement() {
    assert_eq!(
        errors(&edit(
            PIECE,
            "initial_movement: plan",
            "initial_movement: start"
        )),
        vec![f(
            "initial_movement",
            4,
            "unknown movement `start`; known: plan, execute"
        )]
    );
}

#[test]
fn next_must_name_a_movement_or_wait_subtasks() {
    assert_eq!(
        errors(&edit(PIECE, "next: execute", "next: deploy")),
        vec![f(
            "movements[0].rules[0].next",
            13,
            "unknown movement `deploy`; known: plan, execute, WAIT_SUBTASKS"
        )]
    );
    let waiting = edit(PIECE, "next: execute", "next: WAIT_SUBTASKS");
    let loaded = valid(&waiting);
    assert_eq!(
        loaded.piece.movements[0].rules[0].next,
        Some(Target::WaitSubtasks)
    );
    // A movement that waits for subtasks it cannot start is told so.
    assert_eq!(
        warnings(&loaded),
        vec![f(
            "movements[0].rules",
            12,
            "a rule leads to `WAIT_SUBTASKS`, but this movement cannot start subtasks, so the wait always takes `default_next`; add `SpawnSubTask` to `allowed_tools`"
        )]
    );
    let spawning = edit(
        &waiting,
        "allowed_tools: [Read, Glob]",
        "allowed_tools: [Read, Glob, SpawnSubTask]",
    );
    assert_eq!(warnings(&valid(&spawning)), vec![]);
}

#[test]
fn terminal_sentinels_are_not_rule_targets() {
    for sentinel in ["COMPLETE", "ABORT", "ASK"] {
        let src = format!(
            "dialect: maestro\n{}",
            edit(PIECE, "next: execute", &format!("next: {sentinel}"))
        );
        assert_eq!(
            errors(&src),
            vec![f(
                "movements[0].rules[0].next",
                14,
                &format!(
                    "`{sentinel}` cannot be a rule's `next`: a movement ends the run by calling the `complete` tool; terminal sentinels are allowed only in `default_next`; known: plan, execute, WAIT_SUBTASKS; fix: point the rule at a movement, or remove it and set `default_next: {sentinel}` on the movement"
                )
            )]
        );
    }
}

/// `default_next` exists only in the maestro dialect, so it decides the dialect even though a
/// rule says `next: COMPLETE` the takt way; that value is then the error, at its line, with
/// the fix and why the file is read as maestro.
#[test]
fn a_maestro_field_decides_and_a_takt_style_next_is_an_error() {
    let src = edit(
        PIECE,
        "    rules: []\n",
        "    default_next: COMPLETE\n    rules:\n      - condition: done\n        next: COMPLETE\n",
    );
    assert_eq!(
        errors(&src),
        vec![f(
            "movements[1].rules[0].next",
            22,
            "`COMPLETE` cannot be a rule's `next`: a movement ends the run by calling the `complete` tool; terminal sentinels are allowed only in `default_next`; known: plan, execute, WAIT_SUBTASKS; fix: point the rule at a movement, or remove it and set `default_next: COMPLETE` on the movement (this file is read as maestro because `movements[1].default_next` is a maestro field; if it is a takt piece, add `dialect: takt` at the top)"
        )]
    );
}

#[test]
fn default_next_accepts_movements_and_sentinels_only() {
    let with = |value: &str| {
        edit(
            PIECE,
            "    rules: []\n",
            &format!("    rules: []\n    default_next: {value}\n"),
        )
    };
    for (value, target) in [
        ("COMPLETE", Target::Complete),
        ("ABORT", Target::Abort),
        ("ASK", Target::Ask),
        ("plan", Target::Movement("plan".into())),
    ] {
        assert_eq!(
            valid(&with(value)).piece.movements[1].default_next,
            Some(target)
        );
    }
    assert_eq!(
        errors(&with("nowhere")),
        vec![f(
            "movements[1].default_next",
            20,
            "unknown movement `nowhere`; known: plan, execute, COMPLETE, ABORT, ASK, WAIT_SUBTASKS"
        )]
    );
}

#[test]
fn required_mcp_slugs_follow_the_pattern() {
    let src = edit(
        PIECE,
        "movements:\n",
        "required_mcp: [github, Bad Slug]\nmovements:\n",
    );
    assert_eq!(
        errors(&src),
        vec![f(
            "required_mcp[1]",
            5,
            "invalid MCP server slug `Bad Slug`; use 1 to 64 of lowercase letters, digits, `_` and `-`"
        )]
    );
    let ok = edit(
        PIECE,
        "movements:\n",
        "required_mcp: [github, my_db-2]\nmovements:\n",
    );
    assert_eq!(valid(&ok).piece.required_mcp, vec!["github", "my_db-2"]);
}

#[test]
fn movement_names_are_unique() {
    assert_eq!(
        errors(&edit(PIECE, "  - name: execute", "  - name: plan")),
        vec![
            f(
                "movements[0].rules[0].next",
                13,
                "unknown movement `execute`; known: plan, WAIT_SUBTASKS"
            ),
            f(
                "movements[1].name",
                14,
                "duplicate movement name `plan`; movements[0] already has it"
            ),
        ]
    );
}

#[test]
fn ssh_tools_require_allowed_ssh_connections() {
    let src = edit(
        PIECE,
        "allowed_tools: [Read, Glob]",
        "allowed_tools: [Read, SshExec]",
    );
    assert_eq!(
        errors(&src),
        vec![f(
            "movements[0].allowed_tools[1]",
            10,
            "`SshExec` needs `allowed_ssh_connections` on this movement: list connection ids, `['*']` for any, or `[]` to deny all"
        )]
    );
    for tool in ["SshUpload", "SshDownload"] {
        let src = edit(
            PIECE,
            "allowed_tools: [Read, Glob]",
            &format!("allowed_tools: [{tool}]"),
        );
        assert_eq!(errors(&src).len(), 1, "{tool}");
    }
    let deny_all = edit(
        PIECE,
        "allowed_tools: [Read, Glob]",
        "allowed_tools: [SshExec]\n    allowed_ssh_connections: []",
    );
    assert_eq!(
        valid(&deny_all).piece.movements[0].allowed_ssh_connections,
        Some(vec![])
    );
}

#[test]
fn ssh_connection_ids_are_star_or_lowercase_hex() {
    let src = edit(
        PIECE,
        "allowed_tools: [Read, Glob]",
        "allowed_tools: [SshExec]\n    allowed_ssh_connections: ['*', 6f9619ff-8b86-d011-b42d-00c04fc964ff, 6F9619FF, abc123]",
    );
    assert_eq!(
        errors(&src),
        vec![
            f(
                "movements[0].allowed_ssh_connections[2]",
                11,
                "invalid SSH connection id `6F9619FF`; use `*` or a connection id of 8 or more lowercase hex digits and `-`"
            ),
            f(
                "movements[0].allowed_ssh_connections[3]",
                11,
                "invalid SSH connection id `abc123`; use `*` or a connection id of 8 or more lowercase hex digits and `-`"
            ),
        ]
    );
}

#[test]
fn only_mcp_wildcards_are_allowed() {
    let ok = edit(
        PIECE,
        "allowed_tools: [Read, Glob]",
        "allowed_tools: ['mcp__*', 'mcp__github__*']",
    );
    valid(&ok);
    assert_eq!(
        errors(&edit(
            PIECE,
            "allowed_tools: [Read, Glob]",
            "allowed_tools: ['Re*']"
        )),
        vec![f(
            "movements[0].allowed_tools[0]",
            10,
            "invalid tool pattern `Re*`; the only wildcards are `mcp__*` and `mcp__<server>__*`"
        )]
    );
}

#[test]
fn movement_fields_are_required() {
    for (line, key, at) in [
        ("    edit: false\n", "edit", 6),
        ("    persona: You are a careful planner.\n", "persona", 6),
        (
            "    instruction: Write a plan for the task.\n",
            "instruction",
            6,
        ),
        ("    allowed_tools: [Read, Glob]\n", "allowed_tools", 6),
    ] {
        assert_eq!(
            errors(&edit(PIECE, line, "")),
            vec![f(
                &format!("movements[0].{key}"),
                at,
                &format!("missing required field `{key}` in a movement")
            )],
            "without {key}"
        );
    }
    assert_eq!(
        errors(&edit(PIECE, "    rules: []\n", "")),
        vec![f(
            "movements[1].rules",
            14,
            "missing required field `rules` in a movement"
        )]
    );
}

#[test]
fn rule_fields_are_required() {
    assert_eq!(
        errors(&edit(
            PIECE,
            "      - condition: the plan is ready\n        next: execute\n",
            "      - next: execute\n"
        )),
        vec![f(
            "movements[0].rules[0].condition",
            12,
            "missing required field `condition` in a rule"
        )]
    );
}

#[test]
fn unknown_keys_are_errors() {
    assert_eq!(
        errors(&edit(
            PIECE,
            "    edit: true\n",
            "    edit: true\n    colour: red\n"
        )),
        vec![f(
            "movements[1].colour",
            16,
            "unknown field `colour` in a movement; known: name, edit, persona, instruction, allowed_tools, allowed_commands, allowed_ssh_connections, rules, default_next, max_consecutive_revisits"
        )]
    );
    assert_eq!(
        errors(&edit(
            PIECE,
            "max_movements: 10\n",
            "max_movements: 10\nmax_iterations: 3\n"
        )),
        vec![f(
            "max_iterations",
            4,
            "unknown field `max_iterations` in a maestro piece; known: name, description, max_movements, initial_movement, triggers, required_mcp, model, budget, movements, dialect"
        )]
    );
}

/// A key a typing mistake away from a known one names it.
#[test]
fn a_mistyped_key_is_answered_with_the_known_one() {
    assert_eq!(
        errors(&edit(
            PIECE,
            "    edit: true\n",
            "    edit: true\n    instrution: Do it.\n"
        )),
        vec![f(
            "movements[1].instrution",
            16,
            "unknown field `instrution` in a movement; did you mean `instruction`?; known: name, edit, persona, instruction, allowed_tools, allowed_commands, allowed_ssh_connections, rules, default_next, max_consecutive_revisits"
        )]
    );
    assert!(
        errors(&edit(PIECE, "max_movements: 10\n", "max_movemnts: 10\n"))
            .iter()
            .any(|e| e.2.starts_with(
                "unknown field `max_movemnts` in a maestro piece; did you mean `max_movements`?"
            )),
    );
}

#[test]
fn wrong_types_say_what_was_found() {
    assert_eq!(
        errors(&edit(PIECE, "edit: true", "edit: yes")),
        vec![f(
            "movements[1].edit",
            15,
            "expected `true` or `false`, found the string `yes`"
        )]
    );
    assert_eq!(
        errors(&edit(
            PIECE,
            "allowed_tools: [Read, Glob]",
            "allowed_tools: Read"
        )),
        vec![f(
            "movements[0].allowed_tools",
            10,
            "expected a list of strings, found the string `Read`"
        )]
    );
    assert_eq!(
        errors(&edit(
            PIECE,
            "description: Plan, then execute.",
            "description: 42"
        )),
        vec![f(
            "description",
            2,
            "expected a string, found the integer `42`; quote it (\"42\") to use it as text"
        )]
    );
}

#[test]
fn every_error_is_reported_not_only_the_first() {
    let src = edit(
        &edit(
            &edit(PIECE, "name: demo", "name: X"),
            "next: execute",
            "next: nope",
        ),
        "edit: true",
        "edit: 1",
    );
    assert_eq!(errors(&src).len(), 3);
}

#[test]
fn a_bad_dialect_key_is_an_error() {
    assert_eq!(
        errors(&format!("dialect: yaml\n{PIECE}")),
        vec![f(
            "dialect",
            1,
            "unknown dialect `yaml`; known: maestro, takt, graph"
        )]
    );
}

#[test]
fn triggers_and_model_map_to_the_ir() {
    let src = edit(
        PIECE,
        "movements:\n",
        "triggers:\n  keywords: [plan, build]\nmodel: qwen3\nmovements:\n",
    );
    let piece = valid(&src).piece;
    assert_eq!(piece.keywords, vec!["plan", "build"]);
    assert_eq!(piece.model.as_deref(), Some("qwen3"));
}

#[test]
fn x_keys_hold_anchors_that_movements_merge_in() {
    let source = "\
name: merge-demo
description: Movements share defaults through a YAML merge key.
max_movements: 4
initial_movement: look
x-defaults: &reader
  edit: false
  persona: You are a careful reader.
  allowed_tools: [Read, Glob]
movements:
  - <<: *reader
    name: look
    instruction: Look around, then transition to report.
    rules:
      - condition: looked
        next: report
  - <<: *reader
    name: report
    instruction: Report what you saw and complete.
    allowed_tools: [Read]
    rules: []
";
    let loaded = valid(source);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let m = &loaded.piece.movements;
    assert_eq!(m[0].allowed_tools, vec!["Read", "Glob"]);
    assert_eq!(
        m[1].allowed_tools,
        vec!["Read"],
        "explicit keys win over merged ones"
    );
    assert_eq!(
        m[1].persona.as_ref().map(|p| p.text.as_str()),
        Some("You are a careful reader.")
    );
}

#[test]
fn a_budget_is_read_and_each_bad_cap_is_named() {
    let base = "name: p\ndescription: d\nmax_movements: 2\ninitial_movement: a\n";
    let tail = "movements:\n  - name: a\n    edit: false\n    persona: p\n    instruction: i\n    allowed_tools: []\n    rules: []\n";
    let loaded = valid(&format!(
        "{base}budget: {{max_total_tokens: 200000, max_cost_usd: 2.5}}\n{tail}"
    ));
    assert_eq!(
        loaded.piece.budget,
        Some(maestro_piece::PieceBudget {
            max_total_tokens: Some(200_000),
            max_cost_usd: Some(2.5),
        })
    );
    for (budget, path, says) in [
        (
            "{max_cost_usd: 0}",
            "budget.max_cost_usd",
            "positive amount of US dollars",
        ),
        (
            "{max_total_tokens: -5}",
            "budget.max_total_tokens",
            "positive whole number",
        ),
        (
            "{max_total_tokens: lots}",
            "budget.max_total_tokens",
            "positive whole number",
        ),
        ("{max_usd: 3}", "budget.max_usd", "max_usd"),
        ("{}", "budget", "sets no cap"),
    ] {
        let found = errors(&format!("{base}budget: {budget}\n{tail}"));
        let (_, line, message) = found
            .iter()
            .find(|(p, _, _)| p == path)
            .unwrap_or_else(|| panic!("{budget}: no error at {path}: {found:?}"));
        assert_eq!(*line, 5, "{budget}: {found:?}");
        assert!(message.contains(says), "{budget}: {message}");
    }
}
