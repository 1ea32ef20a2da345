//! The takt dialect end to end over real HTTP: how an answer picks its rule (and which calls
//! that costs), parallel movements, loop monitors, reports and user input.

use crate::support;

use std::time::Duration;

use maestro_engine::{OutcomeSource, RunEvent};
use maestro_piece::{Condition, Dialect, LoopMonitor, OutputContract};
use maestro_testkit::Turn;
use serde_json::json;
use support::*;

fn via_of(ran: &Ran) -> Vec<(String, OutcomeSource, String)> {
    ran.events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement,
                via,
                next,
                ..
            } => Some((movement.clone(), *via, next.clone())),
            _ => None,
        })
        .collect()
}

fn contract(name: &str) -> OutputContract {
    OutputContract {
        name: name.into(),
        label: None,
        format: None,
    }
}

/// `plan` (reporting `plan.md`) then `write` (reporting `write_reports`).
fn plan_then_write(write_reports: &[&str]) -> maestro_piece::Piece {
    let mut plan = mv(
        "plan",
        vec![rule("planned", "write"), rule("unclear", "ABORT")],
    );
    plan.output_contracts = vec![contract("plan.md")];
    let mut write = mv(
        "write",
        vec![rule("written", "COMPLETE"), rule("blocked", "ABORT")],
    );
    write.output_contracts = write_reports.iter().map(|r| contract(r)).collect();
    piece(Dialect::Takt, vec![plan, write])
}

fn plan_then_done() -> maestro_piece::Piece {
    piece(
        Dialect::Takt,
        vec![
            mv(
                "plan",
                vec![
                    rule("Requirements are clear", "implement"),
                    rule("Requirements unclear", "ABORT"),
                ],
            ),
            mv(
                "implement",
                vec![rule("Done", "COMPLETE"), rule("Blocked", "ABORT")],
            ),
        ],
    )
}

#[tokio::test]
async fn a_tag_decides_without_a_judge_call() {
    let ran = run(
        plan_then_done(),
        vec![
            Turn::text("Plan: bake.\n\n[PLAN:2] no wait [plan:1]"),
            Turn::text("Implemented.\n[IMPLEMENT:1]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.requests().len(), 2, "a tag must not cost a judge call");
    assert!(
        ran.requests()
            .iter()
            .all(|r| r.get("response_format").is_none())
    );
    assert_eq!(
        via_of(&ran),
        vec![
            ("plan".into(), OutcomeSource::Tag, "implement".into()),
            ("implement".into(), OutcomeSource::Tag, "COMPLETE".into())
        ]
    );
    assert_eq!(ran.report.result, "Implemented.\n[IMPLEMENT:1]");
    // the previous answer is carried into the next movement
    assert!(ran.request_text(1).contains("Plan: bake."));
}

#[tokio::test]
async fn without_a_tag_one_judge_call_picks_the_rule() {
    let ran = run(
        plan_then_done(),
        vec![
            Turn::text("The requirements are clear."),
            Turn::json(json!({"rule": 1})),
            Turn::text("[IMPLEMENT:1]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let judge = &ran.requests()[1];
    assert_eq!(judge["response_format"]["type"], "json_schema");
    assert!(
        judge.get("tools").is_none() || judge["tools"].as_array().is_some_and(|t| t.is_empty())
    );
    let text = messages_text(judge);
    assert!(
        text.contains("1. Requirements are clear") && text.contains("2. Requirements unclear"),
        "{text}"
    );
    assert_eq!(via_of(&ran)[0].1, OutcomeSource::Judge);
    assert_eq!(ran.count("judge_request"), 1);
}

#[tokio::test]
async fn a_judge_that_picks_nothing_aborts_with_no_rule_matched() {
    let ran = run(
        plan_then_done(),
        vec![Turn::text("Hmm."), Turn::text("I cannot decide")],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        ("aborted".into(), Some("no_rule_matched".into()))
    );
}

#[tokio::test]
async fn ai_conditions_are_judged_in_one_structured_call() {
    let p = piece(
        Dialect::Takt,
        vec![mv(
            "review",
            vec![
                rule_if(Condition::Ai("the code has problems".into()), Some("ABORT")),
                rule_if(Condition::Ai("the code is fine".into()), Some("COMPLETE")),
            ],
        )],
    );
    let ran = run(
        p,
        vec![
            Turn::text("Looks good to me."),
            Turn::json(json!({"results": [false, true]})),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.requests().len(), 2);
    let call = &ran.requests()[1];
    assert_eq!(call["response_format"]["type"], "json_schema");
    assert!(
        messages_text(call).contains("the code has problems")
            && messages_text(call).contains("the code is fine")
    );
    assert_eq!(via_of(&ran)[0].1, OutcomeSource::AiCondition);
}

#[tokio::test]
async fn a_single_eligible_rule_needs_no_call_and_interactive_only_rules_do_not_count() {
    let mut ask = rule("User input needed", "write");
    ask.interactive_only = true;
    ask.requires_user_input = true;
    let p = piece(
        Dialect::Takt,
        vec![mv("write", vec![ask, rule("Written", "COMPLETE")])],
    );
    let ran = run(p, vec![Turn::text("All written.")]).await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.requests().len(), 1);
    assert_eq!(via_of(&ran)[0].1, OutcomeSource::SingleRule);
}

#[tokio::test]
async fn a_rule_requiring_user_input_ends_the_run_asking() {
    let mut ask = rule("User input needed", "plan");
    ask.requires_user_input = true;
    let p = piece(
        Dialect::Takt,
        vec![mv("plan", vec![rule("Clear", "COMPLETE"), ask])],
    );
    let ran = run(p, vec![Turn::text("Which cuisine do you want? [PLAN:2]")]).await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        (
            "needs_user_input".into(),
            Some("requires_user_input".into())
        )
    );
    assert_eq!(ran.report.result, "Which cuisine do you want? [PLAN:2]");
}

fn reviewers(parent_rules: Vec<maestro_piece::Rule>) -> maestro_piece::Piece {
    let mut parent = mv("reviewers", parent_rules);
    parent.parallel = vec![
        mv(
            "arch-review",
            vec![
                rule_if(Condition::Text("approved".into()), None),
                rule_if(Condition::Text("needs_fix".into()), None),
            ],
        ),
        mv(
            "supervise",
            vec![
                rule_if(Condition::Text("All checks passed".into()), None),
                rule_if(Condition::Text("Requirements unmet".into()), None),
            ],
        ),
    ];
    let fix = mv("fix", vec![rule("Fixed", "COMPLETE")]);
    piece(Dialect::Takt, vec![parent, fix])
}

fn aggregate_rules() -> Vec<maestro_piece::Rule> {
    vec![
        rule_if(
            Condition::All(vec!["approved".into(), "All checks passed".into()]),
            Some("COMPLETE"),
        ),
        rule_if(
            Condition::Any(vec!["needs_fix".into(), "Requirements unmet".into()]),
            Some("fix"),
        ),
    ]
}

#[tokio::test]
async fn parallel_sub_movements_overlap_and_all_aggregates() {
    let delay = Duration::from_millis(300);
    let ran = run(
        reviewers(aggregate_rules()),
        vec![
            Turn::when_contains(
                "Perform the arch-review step",
                Turn::text("Architecture fine. [ARCH-REVIEW:1]").with_delay(delay),
            ),
            Turn::when_contains(
                "Perform the supervise step",
                Turn::text("Checks pass. [SUPERVISE:1]").with_delay(delay),
            ),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.requests().len(), 2, "aggregates and tags need no judge");
    // both sub-movements started before either finished: they ran concurrently
    let kinds: Vec<String> = ran
        .events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::MovementStarted {
                movement,
                parent: Some(_),
                ..
            } => Some(format!("start {movement}")),
            RunEvent::MovementFinished {
                movement,
                parent: Some(_),
                ..
            } => Some(format!("end {movement}")),
            _ => None,
        })
        .collect();
    assert!(
        kinds[0].starts_with("start") && kinds[1].starts_with("start"),
        "{kinds:?}"
    );
    let parent = via_of(&ran)
        .into_iter()
        .find(|(m, _, _)| m == "reviewers")
        .unwrap();
    assert_eq!(
        parent,
        (
            "reviewers".into(),
            OutcomeSource::Aggregate,
            "COMPLETE".into()
        )
    );
    assert!(
        ran.report.result.contains("Architecture fine.")
            && ran.report.result.contains("Checks pass.")
    );
}

#[tokio::test]
async fn any_aggregate_sends_the_run_to_fix() {
    let ran = run(
        reviewers(aggregate_rules()),
        vec![
            Turn::when_contains(
                "Perform the arch-review step",
                Turn::text("[ARCH-REVIEW:1]"),
            ),
            Turn::when_contains(
                "Perform the supervise step",
                Turn::text("Tests fail. [SUPERVISE:2]"),
            ),
            Turn::when_contains("Perform the fix step", Turn::text("Fixed it.")),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let flow: Vec<(String, String)> = via_of(&ran).into_iter().map(|(m, _, n)| (m, n)).collect();
    assert!(
        flow.contains(&("reviewers".into(), "fix".into())),
        "{flow:?}"
    );
    assert!(
        flow.contains(&("supervise".into(), "Requirements unmet".into())),
        "{flow:?}"
    );
}

/// `reviewers` with one model call per visit: a sub-step that calls a tool instead of
/// answering is cut off by `max_iterations_per_movement` and fails.
async fn reviewers_with_a_failing_sub_step(
    parent_rules: Vec<maestro_piece::Rule>,
    supervise: Turn,
) -> Ran {
    let config = maestro_engine::EngineConfig {
        max_iterations_per_movement: 1,
        ..engine_config()
    };
    run_with(
        reviewers(parent_rules),
        vec![
            Turn::when_contains(
                "Perform the arch-review step",
                Turn::tool_call("Read", json!({"file_path": "input/notes.txt"})),
            ),
            Turn::when_contains("Perform the supervise step", supervise),
            Turn::when_contains("Perform the fix step", Turn::text("Fixed it. [FIX:1]")),
        ],
        config,
        None,
    )
    .await
}

fn warnings(ran: &Ran) -> Vec<String> {
    ran.events
        .iter()
        .filter_map(|r| match &r.event {
            RunEvent::Warning { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_failed_sub_step_takes_the_parents_any_error_rule() {
    let rules = vec![
        rule_if(Condition::Any(vec!["error".into()]), Some("fix")),
        rule_if(Condition::All(vec!["approved".into()]), Some("COMPLETE")),
    ];
    let ran =
        reviewers_with_a_failing_sub_step(rules, Turn::text("Checks pass. [SUPERVISE:1]")).await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    // The sub-step's own end says why it failed; the parent routed by its aggregate.
    let arch = ran
        .events
        .iter()
        .find_map(|r| match &r.event {
            RunEvent::MovementFinished {
                movement, reason, ..
            } if movement == "arch-review" => Some(reason.as_ref().map(ToString::to_string)),
            _ => None,
        })
        .unwrap();
    assert_eq!(arch, Some("max_iterations".to_string()));
    let flow = via_of(&ran);
    assert!(
        flow.contains(&("reviewers".into(), OutcomeSource::Aggregate, "fix".into())),
        "{flow:?}"
    );
    assert!(
        flow.contains(&("fix".into(), OutcomeSource::Tag, "COMPLETE".into())),
        "{flow:?}"
    );
    assert_eq!(
        warnings(&ran),
        vec![
            "sub-step `arch-review` failed (max_iterations): it counts as `error` for the aggregate rules of `reviewers`"
                .to_string()
        ]
    );
}

#[tokio::test]
async fn all_error_needs_every_sub_step_to_fail() {
    let rules = vec![
        rule_if(Condition::All(vec!["error".into()]), Some("COMPLETE")),
        rule_if(Condition::Any(vec!["error".into()]), Some("fix")),
    ];
    let ran =
        reviewers_with_a_failing_sub_step(rules, Turn::text("Checks pass. [SUPERVISE:1]")).await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    let flow = via_of(&ran);
    assert!(
        flow.contains(&("reviewers".into(), OutcomeSource::Aggregate, "fix".into())),
        "only one of two sub-steps failed, so `all(\"error\")` is not taken: {flow:?}"
    );
}

#[tokio::test]
async fn a_sub_step_that_matched_no_rule_is_not_an_error() {
    let rules = vec![
        rule_if(Condition::Any(vec!["error".into()]), Some("fix")),
        rule_if(
            Condition::All(vec!["All checks passed".into()]),
            Some("COMPLETE"),
        ),
    ];
    // `supervise` answers with a tag outside its rules and the judge picks none of them: it
    // matched nothing, which `any("error")` skips, so no rule of the parent holds.
    let ran = run(
        reviewers(rules),
        vec![
            Turn::when_contains(
                "Perform the arch-review step",
                Turn::text("Architecture fine. [ARCH-REVIEW:1]"),
            ),
            Turn::when_contains(
                "Perform the supervise step",
                Turn::text("Hmm. [SUPERVISE:7]"),
            ),
            Turn::text("none of them"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(
        ran.status(),
        ("aborted".into(), Some("no_rule_matched".into()))
    );
    assert!(
        warnings(&ran)
            .iter()
            .all(|w| !w.contains("counts as `error`"))
    );
}

#[tokio::test]
async fn a_loop_monitor_runs_its_judge_at_the_threshold() {
    let mut p = piece(
        Dialect::Takt,
        vec![
            mv(
                "review",
                vec![rule("issues", "fix"), rule("clean", "COMPLETE")],
            ),
            mv("fix", vec![rule("fixed", "review")]),
        ],
    );
    let mut judge = mv(
        "loop-judge",
        vec![rule("healthy", "review"), rule("unproductive", "ABORT")],
    );
    judge.instruction = Some(facet("The loop ran {cycle_count} times. Judge it."));
    p.loop_monitors = vec![LoopMonitor {
        cycle: vec!["review".into(), "fix".into()],
        threshold: 2,
        judge,
    }];
    let ran = run(
        p,
        vec![
            Turn::text("[REVIEW:1]"),
            Turn::text("fixed"),
            Turn::text("[REVIEW:1]"),
            Turn::text("fixed"),
            Turn::text("Same findings again. [LOOP-JUDGE:2]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("aborted".into(), Some("abort_rule".into())));
    assert_eq!(ran.count("loop_monitor_triggered"), 1);
    assert!(
        ran.request_text(4).contains("The loop ran 2 times"),
        "{}",
        ran.request_text(4)
    );
    assert_eq!(
        ran.report.state.history,
        vec!["review", "fix", "review", "fix", "loop-judge"]
    );
}

#[tokio::test]
async fn reports_are_written_by_tool_and_asked_for_once_when_missing() {
    let p = plan_then_write(&["summary.md"]);
    let ran = run(
        p,
        vec![
            Turn::tool_call(
                "write_report",
                json!({"name": "plan.md", "content": "# Plan\nBake."}),
            ),
            Turn::text("Planned. [PLAN:1]"),
            Turn::text("Written. [WRITE:1]"),
            Turn::tool_call(
                "write_report",
                json!({"name": "summary.md", "content": "# Summary\nDone."}),
            ),
            Turn::text("Report written."),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(
        ran.requests().len(),
        5,
        "a complying movement needs no extra call; a missing report costs one"
    );
    assert_eq!(ran.count("reminder"), 1);
    let reports = ran.report.run_dir.join("reports");
    assert_eq!(
        std::fs::read_to_string(reports.join("plan.md")).unwrap(),
        "# Plan\nBake."
    );
    assert_eq!(
        std::fs::read_to_string(reports.join("summary.md")).unwrap(),
        "# Summary\nDone."
    );
    assert!(last_user_text(&ran.requests()[3]).contains("summary.md"));
    assert_eq!(ran.report.state.reports.len(), 2);
}

#[tokio::test]
async fn reports_and_the_tag_in_one_turn_end_the_movement_in_one_call() {
    let p = plan_then_write(&["scope.md", "summary.md"]);
    let ran = run(
        p,
        vec![
            Turn::tool_call(
                "write_report",
                json!({"name": "plan.md", "content": "# Plan\nBake."}),
            )
            .with_text("Planned. [PLAN:1]"),
            // A Read alongside the reports: every report is written and the tag is there.
            Turn::tool_calls([
                ("Read", json!({"file_path": "input/notes.txt"})),
                (
                    "write_report",
                    json!({"name": "scope.md", "content": "the cookbook"}),
                ),
                (
                    "write_report",
                    json!({"name": "summary.md", "content": "Done."}),
                ),
            ])
            .with_text("Written. [WRITE:1]"),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.requests().len(), 2, "one call per movement");
    assert_eq!(
        via_of(&ran),
        vec![
            ("plan".into(), OutcomeSource::Tag, "write".into()),
            ("write".into(), OutcomeSource::Tag, "COMPLETE".into())
        ]
    );
    assert_eq!(ran.report.state.reports.len(), 3);
    assert_eq!(ran.report.result, "Written. [WRITE:1]");
}

#[tokio::test]
async fn a_tag_with_reports_still_missing_gets_the_report_reminder() {
    let mut plan = mv("plan", vec![rule("planned", "COMPLETE")]);
    plan.output_contracts = vec![contract("plan.md"), contract("risks.md")];
    let ran = run(
        piece(Dialect::Takt, vec![plan]),
        vec![
            Turn::tool_call("write_report", json!({"name": "plan.md", "content": "p"}))
                .with_text("Planned. [PLAN:1]"),
            Turn::tool_call("write_report", json!({"name": "risks.md", "content": "r"})),
            Turn::text("Both written."),
        ],
    )
    .await;
    ran.assert_record_is_sound();
    assert_eq!(ran.status(), ("completed".into(), None));
    assert_eq!(ran.requests().len(), 3);
    assert_eq!(ran.count("reminder"), 1);
    assert!(last_user_text(&ran.requests()[1]).contains("risks.md"));
}
