//! TAKT workflow steps the engine does not run yet: a run that reaches one ends with an error
//! naming the step kind, after the steps before it ran as usual.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use maestro_piece::{LoadOptions, load_str};
use maestro_testkit::Turn;
use support::run;

fn workflow(second: &str) -> maestro_piece::Piece {
    let source = format!(
        "\
name: plan-then-call
max_steps: 5
initial_step: plan
steps:
  - name: plan
    persona: planner
    edit: false
    instruction: Plan the change.
    rules:
      - condition: Plan ready
        next: develop
{second}"
    );
    load_str(
        &source,
        Path::new("plan-then-call.yaml"),
        &LoadOptions::default(),
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .piece
}

#[tokio::test]
async fn a_run_reaching_a_when_predicate_ends_naming_it() {
    let piece = workflow(
        "  - name: develop
    persona: coder
    edit: true
    instruction: Build it.
    rules:
      - condition: when(context.develop.ready == true)
        next: COMPLETE
",
    );
    let ran = run(piece, vec![Turn::text("Here is the plan.\n[PLAN:1]")]).await;
    assert_eq!(ran.requests().len(), 1);
    let reason = ran.status().1.unwrap();
    assert!(
        reason.contains("routes on `when(context.develop.ready == true)`"),
        "{reason}"
    );
}
