//! TAKT workflow steps the engine does not run yet: a run that reaches one ends with an error
//! naming the step kind, after the steps before it ran as usual. (`when(…)` rules run; see
//! also `system_steps.rs`.)

use crate::support;

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
async fn a_when_predicate_runs_and_a_missing_path_fails_the_run_naming_it() {
    // `develop` records no state, so its predicate cannot be evaluated: TAKT fails the step.
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
    let ran = run(
        piece,
        vec![
            Turn::text("Here is the plan.\n[PLAN:1]"),
            Turn::text("Built."),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.requests().len(), 2, "no judge call for a when(…) rule");
    let (status, reason) = ran.status();
    assert_eq!(status, "failed");
    let reason = reason.unwrap();
    assert!(
        reason.contains("`when(context.develop.ready == true)`")
            && reason.contains("step `develop`, which has read no `system_inputs`"),
        "{reason}"
    );
}
