//! Prompt assembly: the parts, in the order `engine-semantics.md` fixes, for each dialect.

use crate::support;

use std::path::PathBuf;

use maestro_piece::prompt::{PromptContext, assemble};
use maestro_piece::{LoadOptions, load_file};
use support::valid;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures")
        .join(rel)
}

fn full_context() -> PromptContext {
    PromptContext {
        task: "Add a --verbose flag to the CLI.".into(),
        iteration: 4,
        max_movements: 10,
        movement_iteration: 2,
        previous_response: Some("I planned the change in three steps, ".repeat(4)),
        feedback: Some("The plan skipped the docs.".into()),
        lessons: vec!["Run the tests before transitioning.".into()],
        report_dir: "runs/42/reports".into(),
        loop_warning: Some(
            "You have returned here 3 times; change approach or end the run.".into(),
        ),
        max_carried_chars: 60,
        ..PromptContext::default()
    }
}

#[test]
fn maestro_prompt_with_every_carried_part() {
    let piece = valid(
        "\
name: demo
description: Plan, then execute.
max_movements: 10
initial_movement: plan
movements:
  - name: plan
    edit: false
    persona: You are a careful planner.
    instruction: Write a plan for {task} (movement {movement_iteration}).
    allowed_tools: [Read]
    rules:
      - condition: the plan is ready
        next: execute
      - condition: the work needs splitting
        next: WAIT_SUBTASKS
  - name: execute
    edit: true
    persona: You are an engineer.
    instruction: Carry out the plan.
    allowed_tools: [Read, Write]
    rules: []
",
    )
    .piece;
    let prompt = assemble(&piece, &piece.movements[0], &full_context());
    insta::assert_snapshot!("maestro_plan_system", prompt.system);
    insta::assert_snapshot!("maestro_plan_user", prompt.user);
}

#[test]
fn takt_prompt_lists_rule_tags_gates_and_reports() {
    let piece = load_file(
        &fixture("takt-v0.30/builtins/en/pieces/default.yaml"),
        &LoadOptions::default(),
    )
    .unwrap()
    .piece;
    let plan = piece.movement("plan").unwrap();
    let prompt = assemble(&piece, plan, &full_context());
    // Order of the user message parts.
    let at = |needle: &str| {
        prompt
            .user
            .find(needle)
            .unwrap_or_else(|| panic!("no `{needle}` in:\n{}", prompt.user))
    };
    assert!(at("## Task") < at("## Previous response"));
    assert!(at("## Previous response") < at("## Feedback from the previous movement"));
    assert!(at("## Lessons so far") < at("## Rules"));
    assert!(at("## Rules") < at("## Reports"));
    assert!(
        prompt
            .user
            .contains("- [PLAN:1] Requirements are clear and implementable\n")
    );
    assert!(
        prompt.user.contains(
            "- [PLAN:3] Requirements unclear, insufficient info\n  Clarifications needed:"
        )
    );
    assert!(prompt.user.contains(
        "[… cut after 60 of 147 characters; the full answer is kept in the run directory]"
    ));
    // System: persona, knowledge, then the frame.
    assert!(
        prompt.system.find("# Knowledge").unwrap()
            < prompt.system.find("# Piece `default`").unwrap()
    );
    assert!(prompt.system.contains("- plan  <- you are here\n"));
    assert!(
        prompt
            .system
            .contains("end the answer with the tag of the rule that applies, `[PLAN:N]`")
    );
}

#[test]
fn takt_interactive_only_rules_are_left_out_but_keep_their_numbers() {
    let piece = load_file(
        &fixture("takt-v0.30/builtins/en/pieces/default.yaml"),
        &LoadOptions::default(),
    )
    .unwrap()
    .piece;
    let prompt = assemble(
        &piece,
        piece.movement("write_tests").unwrap(),
        &PromptContext::default(),
    );
    assert!(
        prompt
            .user
            .contains("- [WRITE_TESTS:3] Cannot proceed with test writing\n")
    );
    assert!(!prompt.user.contains("[WRITE_TESTS:4]"));
}

#[test]
fn graph_prompt_starts_with_the_edge_and_asks_for_frontmatter() {
    let piece = load_file(
        &fixture("workflow-graph/debate.yaml"),
        &LoadOptions::default(),
    )
    .unwrap()
    .piece;
    let ctx = PromptContext {
        task: "Remote work is better than office work.".into(),
        ..PromptContext::default()
    };
    let first = assemble(&piece, piece.movement("against").unwrap(), &ctx);
    assert!(
        first
            .user
            .starts_with("Present your opening argument against the proposition.\n\n")
    );
    assert!(
        first
            .system
            .contains("valid values: `conceded`, `continue`.")
    );
    let later = PromptContext {
        iteration: 2,
        edge_prompt: Some("Counter the opposing argument: offices help juniors".into()),
        ..ctx
    };
    let second = assemble(&piece, piece.movement("for").unwrap(), &later);
    assert!(
        second
            .user
            .starts_with("Counter the opposing argument: offices help juniors\n\n")
    );
}
