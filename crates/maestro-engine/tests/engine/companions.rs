//! TAKT workflows' companion reviewers are validated but not run, as TAKT does by default; the
//! run says so in a warning and spends no model call on them.

use crate::support;

use std::path::Path;

use maestro_engine::RunEvent;
use maestro_piece::{LoadOptions, load_str};
use maestro_testkit::Turn;
use support::run;

#[tokio::test]
async fn a_step_with_companions_runs_without_them_and_says_so() {
    let piece = load_str(
        "\
name: reviewed
initial_step: implement
steps:
  - name: implement
    persona: coder
    edit: true
    instruction: Build it.
    companion:
      fixed: [testing-review-companion]
      moderator: review-companion-moderator
    rules:
      - condition: Done
        next: COMPLETE
",
        Path::new("reviewed.yaml"),
        &LoadOptions::default(),
    )
    .unwrap_or_else(|f| panic!("{f}"))
    .piece;
    assert_eq!(
        piece.movements[0].companions,
        vec!["testing-review-companion", "review-companion-moderator"]
    );
    let ran = run(piece, vec![Turn::text("Built it.\n[IMPLEMENT:1]")]).await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.requests().len(), 1, "no call is spent on companions");
    let warnings: Vec<&str> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::Warning { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("`testing-review-companion`, `review-companion-moderator`")
            && warnings[0].contains("companion.enabled"),
        "{}",
        warnings[0]
    );
}
