//! Broken TAKT v0.60 workflows: each case is a builtin with one mistake TAKT's loader rejects,
//! made here from the fixture's text. The error must name the field at the line of the
//! mistake.

use crate::support;

use std::path::PathBuf;

use maestro_piece::{Diagnostic, Dialect, LoadOptions, load_str};

fn workflow(name: &str) -> (PathBuf, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/takt-v0.60/builtins/en/workflows")
        .join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

/// 1-based line of the first occurrence of `marker` in `text`.
fn line_of(text: &str, marker: &str) -> usize {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("`{marker}` is not in the text"));
    text[..at].matches('\n').count() + 1
}

/// The errors of `name` with `from` replaced by `to` once.
fn broken(name: &str, from: &str, to: &str) -> (String, Vec<Diagnostic>) {
    let (path, text) = workflow(name);
    let text = support::edit(&text, from, to);
    match load_str(&text, &path, &LoadOptions::default()) {
        Ok(_) => panic!("{name} with `{to}` still loads"),
        Err(failed) => {
            assert_eq!(failed.dialect, Some(Dialect::Takt));
            (text, failed.errors)
        }
    }
}

/// Asserts an error at `path` on the line of `marker` whose message contains `says`.
#[track_caller]
fn caught(name: &str, from: &str, to: &str, marker: &str, path: &str, says: &str) {
    let (text, errors) = broken(name, from, to);
    let line = line_of(&text, marker);
    assert!(
        errors
            .iter()
            .any(|e| e.path == path && e.line == line && e.message.contains(says)),
        "{name}: no error at {path} (line {line}) saying `{says}`; got:\n{}",
        errors
            .iter()
            .map(|e| format!("  {}:{} {}", e.path, e.line, e.message))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn an_unknown_top_level_key_is_an_error_the_top_level_is_strict() {
    caught(
        "default-mini",
        "max_steps: 21\n",
        "max_steps: 21\nretries: 3\n",
        "retries:",
        "retries",
        "unknown field `retries` in a TAKT workflow (the top level is strict)",
    );
}

/// A mistyped top-level key is one error that names the key meant, and no warning besides.
#[test]
fn a_mistyped_top_level_key_is_one_error_that_names_the_key_meant() {
    let (path, text) = workflow("default-mini");
    let text = support::edit(&text, "max_steps: 21\n", "max_step: 21\n");
    let failed = match load_str(&text, &path, &LoadOptions::default()) {
        Ok(_) => panic!("a mistyped top-level key still loads"),
        Err(failed) => failed,
    };
    let about = |d: &&Diagnostic| d.path == "max_step";
    let errors: Vec<&Diagnostic> = failed.errors.iter().filter(about).collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].message.contains("did you mean `max_steps`?"),
        "{}",
        errors[0].message
    );
    let warnings: Vec<&Diagnostic> = failed.warnings.iter().filter(about).collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}

/// A `next` on a parallel sub-step's rule routes nothing (the parent's rules do): it is said,
/// not taken silently.
#[test]
fn a_next_on_a_parallel_sub_step_rule_is_ignored_with_a_warning() {
    let (path, text) = workflow("compound-eye");
    let text = support::edit(
        &text,
        "          - condition: failed\n        output_contracts:\n          report:\n            - name: eye1-review.md\n",
        "          - condition: failed\n            next: COMPLETE\n        output_contracts:\n          report:\n            - name: eye1-review.md\n",
    );
    let loaded = load_str(&text, &path, &LoadOptions::default()).unwrap();
    assert!(
        loaded.warnings.iter().any(|w| w
            .message
            .starts_with("`next` is ignored: a parallel sub-step's rules")),
        "{:#?}",
        loaded.warnings
    );
}

/// A mistyped step name in `next` names the step meant.
#[test]
fn a_mistyped_next_names_the_step_meant() {
    caught(
        "compound-eye",
        "next: synthesize",
        "next: synthesise",
        "next: synthesise",
        "steps[0].rules[1].next",
        "unknown step `synthesise`; did you mean `synthesize`?",
    );
}

#[test]
fn removed_top_level_keys_say_where_the_setting_went() {
    caught(
        "default-mini",
        "max_steps: 21\n",
        "max_steps: 21\nauto_routing: {}\n",
        "auto_routing",
        "auto_routing",
        "configure the model in Maestro's configuration",
    );
}

#[test]
fn top_level_params_belong_under_subworkflow() {
    caught(
        "default-mini",
        "max_steps: 21\n",
        "max_steps: 21\nparams: {}\n",
        "params:",
        "params",
        "under `subworkflow.params`",
    );
}

#[test]
fn mixing_generations_names_the_keys_of_each() {
    caught(
        "default-mini",
        "max_steps: 21\n",
        "max_steps: 21\nmax_movements: 21\n",
        "max_movements",
        "max_movements",
        "`steps`, `initial_step`, `max_steps` belong to a TAKT workflow (v0.36 and later), `max_movements` to a TAKT piece",
    );
}

#[test]
fn ai_conditions_are_gone() {
    caught(
        "mini-core",
        "      - condition: any(\"REJECT\")",
        "      - condition: ai(\"the supervisor rejected\")",
        "ai(\"the supervisor",
        "steps[2].rules[5].condition",
        "`ai(…)` conditions were removed in TAKT v0.36",
    );
}

#[test]
fn a_parallel_aggregate_label_no_sub_step_defines_is_an_error() {
    caught(
        "mini-core",
        "any(\"BLOCKED\")",
        "any(\"BLOKED\")",
        "any(\"BLOKED\")",
        "steps[2].rules[1].condition",
        "the aggregate label \"BLOKED\" is not a rule condition of any sub-step",
    );
}

#[test]
fn a_positional_aggregate_label_the_sub_step_at_its_place_lacks_is_an_error() {
    caught(
        "mini-core",
        "all(\"No AI-specific issues\", \"APPROVE\")",
        "all(\"APPROVE\", \"No AI-specific issues\")",
        "all(\"APPROVE\"",
        "steps[2].rules[2].condition",
        "not a rule condition of the sub-step `ai-antipattern-review-2nd`",
    );
}

#[test]
fn a_dynamic_aggregate_label_must_be_defined_by_every_candidate() {
    caught(
        "review-backend",
        "            - name: security-review.md\n              format: security-review\n        rules:\n          - condition: approved\n",
        "            - name: security-review.md\n              format: security-review\n        rules:\n          - condition: fine\n",
        "all(\"approved\")",
        "steps[1].rules[1].condition",
        "`security-review` does not define it",
    );
}

#[test]
fn a_call_to_a_missing_workflow_is_an_error() {
    caught(
        "backend",
        "call: development-core",
        "call: development-kore",
        "call: development-kore",
        "steps[0].call",
        "no workflow `development-kore` to call",
    );
}

#[test]
fn a_call_to_a_workflow_that_is_not_callable_is_an_error() {
    caught(
        "backend",
        "call: development-core",
        "call: default-mini",
        "call: default-mini",
        "steps[0].call",
        "workflow `default-mini`",
    );
    let (_, errors) = broken("backend", "call: development-core", "call: default-mini");
    assert!(errors.iter().any(|e| e.message.contains("is not callable")));
}

#[test]
fn a_call_argument_the_called_workflow_does_not_declare_is_an_error() {
    caught(
        "backend",
        "      plan_policy: [design-planning, architecture, backend]\n",
        "      plan_policy: [design-planning, architecture, backend]\n      plan_polcy: [x]\n",
        "plan_polcy",
        "steps[0].args.plan_polcy",
        "the called workflow has no parameter `plan_polcy`",
    );
}

#[test]
fn a_call_routes_only_on_complete_abort_and_the_returned_labels() {
    caught(
        "backend",
        "      - condition: ABORT\n",
        "      - condition: approved\n",
        "condition: approved",
        "steps[0].rules[1].condition",
        "a workflow_call step routes on how the called workflow ended: COMPLETE, ABORT",
    );
}

#[test]
fn a_workflow_call_step_takes_no_agent_fields() {
    caught(
        "backend",
        "    call: development-core\n",
        "    call: development-core\n    persona: coder\n",
        "persona: coder",
        "steps[0].persona",
        "a workflow_call step does not allow `persona`",
    );
}

#[test]
fn a_dynamic_pool_item_without_a_description_is_an_error() {
    let (_, text) = workflow("review-backend");
    let description = text
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("description: Do not select by default")
        })
        .unwrap()
        .to_owned();
    caught(
        "review-backend",
        &format!("{description}\n"),
        "",
        "      - name: security-review\n",
        "steps[1].parallel.pool[0].description",
        "dynamic parallel pool sub-step `security-review` needs a non-empty `description`",
    );
}

#[test]
fn an_unknown_selection_mode_is_an_error() {
    caught(
        "review-backend",
        "      selection:\n        selector:",
        "      selection:\n        mode: all\n        selector:",
        "mode: all",
        "steps[1].parallel.selection.mode",
        "unknown selection mode the string `all`; known: replace, cumulative",
    );
}

#[test]
fn a_fragment_that_does_not_exist_cannot_expand() {
    caught(
        "review-backend",
        "uses: review-gather-to-reviewers",
        "uses: review-gather-to-reviewer",
        "uses: review-gather-to-reviewer",
        "steps[0].uses",
        "no step fragment `review-gather-to-reviewer`",
    );
}

#[test]
fn a_fragment_reached_by_a_path_cannot_expand() {
    caught(
        "review-backend",
        "uses: review-gather-to-reviewers",
        "uses: ../steps/review-gather-to-reviewers",
        "uses: ../steps",
        "steps[0].uses",
        "must be the bare name of a step fragment",
    );
}

#[test]
fn a_fragment_binding_the_fragment_does_not_declare_cannot_expand() {
    caught(
        "development-core",
        "      testing_policy:\n        $param: testing_policy\n",
        "      testing_policy:\n        $param: testing_policy\n      testing_polisy: [coding]\n",
        "testing_polisy",
        "steps[2].with.testing_polisy",
        "step fragment `development-core-write-tests` has no parameter `testing_polisy`",
    );
}

#[test]
fn a_fragment_parameter_left_unbound_cannot_expand() {
    caught(
        "development-core",
        "      testing_instruction:\n        $param: testing_instruction\n      testing_report_format:",
        "      testing_report_format:",
        "      testing_policy:\n        $param: testing_policy\n      testing_knowledge",
        "steps[2].with",
        "step fragment `development-core-write-tests` needs the parameter `testing_instruction`",
    );
}

#[test]
fn a_step_using_a_fragment_needs_its_own_rules() {
    caught(
        "review-backend",
        "    uses: review-synthesis-to-complete\n    rules:",
        "    uses: review-synthesis-to-complete\n    x-rules:",
        "uses: review-synthesis-to-complete",
        "steps[2].rules",
        "needs its own non-empty `rules`; fragments never bring routing",
    );
}

#[test]
fn an_undeclared_parameter_reference_is_an_error() {
    caught(
        "development-core",
        "    instruction:\n      $param: replan_instruction",
        "    instruction:\n      $param: replan_instructions",
        "$param: replan_instructions",
        "steps[1].instruction.$param",
        "`$param: replan_instructions` names no parameter of this workflow",
    );
}

#[test]
fn next_must_name_a_step_complete_or_abort() {
    caught(
        "review-backend",
        "        next: review-synthesis\n",
        "        next: review-synthesys\n",
        "next: review-synthesys",
        "steps[1].rules[1].next",
        "unknown step `review-synthesys`",
    );
}

#[test]
fn initial_step_must_name_a_step() {
    caught(
        "review-backend",
        "initial_step: gather",
        "initial_step: gathr",
        "initial_step: gathr",
        "initial_step",
        "unknown step `gathr`",
    );
}

#[test]
fn max_steps_is_a_positive_integer_or_infinite() {
    caught(
        "review-backend",
        "max_steps: 10",
        "max_steps: forever",
        "max_steps: forever",
        "max_steps",
        "expected a positive integer or `infinite`",
    );
}

#[test]
fn return_needs_a_callable_workflow_and_a_declared_label() {
    caught(
        "review-backend",
        "        next: supervise\n",
        "        return: needs_fix\n",
        "return: needs_fix",
        "steps[1].rules[2].return",
        "this workflow is not callable",
    );
    caught(
        "experimental-review",
        "          return: needs_fix",
        "          return: needs_fixes",
        "return: needs_fixes",
        "steps[0].rules[2].return",
        "`return: needs_fixes` is not a label of `subworkflow.returns`",
    );
}

#[test]
fn reserved_results_cannot_be_returned_labels() {
    caught(
        "experimental-review",
        "returns: [needs_fix]",
        "returns: [needs_fix, COMPLETE]",
        "returns: [needs_fix, COMPLETE]",
        "subworkflow.returns[1]",
        "`COMPLETE` is a reserved result",
    );
}

#[test]
fn an_unknown_capability_preset_is_an_error() {
    caught(
        "mini-core",
        "        capabilities: readonly\n        tags:\n          - review\n          - supervise",
        "        capabilities: read-only\n        tags:\n          - review\n          - supervise",
        "capabilities: read-only",
        "steps[2].parallel[1].capabilities",
        "unknown capability preset `read-only`",
    );
}

#[test]
fn provider_options_on_a_step_were_removed() {
    caught(
        "review-backend",
        "  - name: reviewers\n    tags:",
        "  - name: reviewers\n    provider_options: {}\n    tags:",
        "provider_options",
        "steps[1].provider_options",
        "`provider_options` was removed in TAKT v0.60",
    );
}

#[test]
fn an_unknown_session_mode_is_an_error() {
    caught(
        "review-backend",
        "  - name: reviewers\n    tags:",
        "  - name: reviewers\n    session: forget\n    tags:",
        "session: forget",
        "steps[1].session",
        "`session` is only supported on normal agent steps",
    );
}

#[test]
fn team_leader_runs_at_most_three_parts_at_once() {
    caught(
        "development-implement-team",
        "      max_concurrency: 2",
        "      max_concurrency: 4",
        "max_concurrency: 4",
        "steps[0].team_leader.max_concurrency",
        "`max_concurrency` is at most 3, found 4",
    );
}

#[test]
fn loop_monitor_cycles_name_steps() {
    caught(
        "mini-core",
        "      - fix_both\n    threshold: 3",
        "      - fix_all\n    threshold: 3",
        "- fix_all",
        "loop_monitors[0].cycle[1]",
        "unknown step `fix_all`",
    );
}

#[test]
fn workflow_wide_rules_must_exist() {
    caught(
        "review-backend",
        "    - ref: plain-terminology",
        "    - ref: plain-words",
        "ref: plain-words",
        "all_steps.rules[3]",
        "no workflow rule `plain-words`",
    );
}

#[test]
fn an_external_facet_pool_must_exist() {
    caught(
        "review-backend",
        "    uses: security-review-facets",
        "    uses: security-facets",
        "uses: security-facets",
        "facet_pools.security-review-facets.uses",
        "no facet pool `security-facets`",
    );
}

#[test]
fn dynamic_facets_name_a_pool_of_the_workflow() {
    caught(
        "review-backend",
        "          pool: security-review-facets",
        "          pool: security-facets",
        "pool: security-facets",
        "steps[1].parallel.pool[0].dynamic_facets.pool",
        "unknown facet pool `security-facets`",
    );
}

#[test]
fn system_steps_take_no_agent_fields_and_each_effect_once() {
    caught(
        "auto-improvement-loop",
        "  - name: route_context\n    mode: system\n",
        "  - name: route_context\n    mode: system\n    persona: supervisor\n",
        "persona: supervisor",
        "steps[0].persona",
        "a system step does not allow `persona`",
    );
    caught(
        "auto-improvement-loop",
        "      - type: merge_pr\n",
        "      - type: merge_pr\n        pr: 1\n      - type: merge_pr # again\n",
        "merge_pr # again",
        "steps[11].effects[1].type",
        "the effect `merge_pr` appears twice in this step",
    );
}

#[test]
fn system_inputs_read_their_fixed_source_and_bind_unique_names() {
    caught(
        "auto-improvement-loop",
        "      - type: task_queue_context\n        source: current_project\n        as: active_queue",
        "      - type: task_queue_context\n        source: current_task\n        as: active_queue",
        "source: current_task\n        as: active_queue",
        "steps[0].system_inputs[2].source",
        "a `task_queue_context` input reads `source: current_project`",
    );
}

#[test]
fn kind_and_mode_cannot_both_say_the_kind() {
    caught(
        "auto-improvement-loop",
        "  - name: route_context\n    mode: system\n",
        "  - name: route_context\n    kind: system\n    mode: system\n",
        "kind: system",
        "steps[0].kind",
        "either `kind` or `mode`, not both",
    );
}

#[test]
fn an_unknown_schema_is_an_error() {
    caught(
        "auto-improvement-loop",
        "  followup-task: followup-task",
        "  followup-task: follow-up-task",
        "followup-task: follow-up-task",
        "schemas.followup-task",
        "no schema `follow-up-task`",
    );
}

#[test]
fn instruction_template_was_removed() {
    caught(
        "review-backend",
        "  - name: reviewers\n    tags:",
        "  - name: reviewers\n    instruction_template: x\n    tags:",
        "instruction_template",
        "steps[1].instruction_template",
        "`instruction_template` was removed; use `instruction`",
    );
}

#[test]
fn the_refused_effects_load_with_a_warning_naming_each() {
    let (path, text) = workflow("auto-improvement-loop");
    let loaded = support::valid_at(&text, &path, &LoadOptions::default());
    let warned: Vec<(String, usize)> = loaded
        .warnings
        .iter()
        .map(|w| (w.message.clone(), w.line))
        .collect();
    for effect in ["merge_pr", "close_pr"] {
        let line = line_of(&text, &format!("type: {effect}"));
        assert!(
            warned.iter().any(|(m, l)| *l == line
                && m.starts_with(&format!("the effect `{effect}` needs a Git host"))),
            "{effect}: {warned:?}"
        );
    }
    assert_eq!(loaded.warnings.len(), 2, "{warned:?}");
}

#[test]
fn step_names_are_unique() {
    caught(
        "review-backend",
        "  - name: supervise\n",
        "  - name: gather # again\n",
        "gather # again",
        "steps[3].name",
        "duplicate step name `gather`; `steps[0].name` already has it",
    );
}

#[test]
fn the_workflow_default_capabilities_must_resolve() {
    caught(
        "review-backend",
        "max_steps: 10\n",
        "max_steps: 10\ncapabilities: [readonly, web]\n",
        "capabilities: [readonly, web]",
        "capabilities[1]",
        "unknown capability preset `web`",
    );
}

#[test]
fn a_command_gate_whose_cwd_leaves_the_workspace_is_an_error_and_a_good_one_is_kept() {
    let text = "\
name: gated
initial_step: implement
steps:
  - name: implement
    persona: coder
    instruction: Build it.
    quality_gates:
      - Keep it small.
      - type: command
        name: tests
        command: cargo test
        cwd: ../elsewhere
        timeout_ms: 60000
    rules:
      - condition: Done
        next: COMPLETE
";
    let path = PathBuf::from("gated.yaml");
    let errors = load_str(text, &path, &LoadOptions::default())
        .unwrap_err()
        .errors;
    let line = line_of(text, "cwd: ../elsewhere");
    assert!(
        errors
            .iter()
            .any(|e| e.path == "steps[0].quality_gates[1].cwd"
                && e.line == line
                && e.message.contains("leaves the workspace")),
        "{errors:?}"
    );
    let good = text.replace("cwd: ../elsewhere", "cwd: crates/app");
    let piece = load_str(&good, &path, &LoadOptions::default())
        .unwrap()
        .piece;
    let step = &piece.movements[0];
    assert_eq!(step.quality_gates, vec!["Keep it small.".to_string()]);
    assert_eq!(
        step.command_gates,
        vec![maestro_piece::CommandGate {
            name: "tests".into(),
            command: "cargo test".into(),
            cwd: "crates/app".into(),
            timeout_ms: 60_000,
        }]
    );
}

#[test]
fn a_when_predicate_takt_cannot_parse_is_an_error_at_its_condition() {
    // Single quotes: TAKT's strings are double-quoted.
    caught(
        "auto-improvement-loop",
        "when(structured.plan_from_issue.action == \"enqueue_new_task\")",
        "when(structured.plan_from_issue.action == 'enqueue_new_task')",
        "'enqueue_new_task'",
        "steps[1].rules[0].condition",
        "strings in `when(…)` are written in double quotes",
    );
    // `!` is no operator of TAKT's predicates.
    caught(
        "auto-improvement-loop",
        "when(context.route_context.selected_pr.exists == true)",
        "when(!context.route_context.selected_pr.exists)",
        "when(!context",
        "steps[0].rules[1].condition",
        "is not a value or a state reference",
    );
    // An ordering operator needs numbers.
    caught(
        "auto-improvement-loop",
        "when(context.route_context.selected_pr.exists == true)",
        "when(context.route_context.selected_pr.exists > true)",
        "exists > true",
        "steps[0].rules[1].condition",
        "needs numbers on both sides",
    );
    // An effect reference names the effect type and a field.
    caught(
        "auto-improvement-loop",
        "when(effect.merge_pr.merge_pr.success == true)",
        "when(effect.merge_pr.success == true)",
        "when(effect.merge_pr.success",
        "steps[11].rules[0].condition",
        "effect.<step>.<type>.<field>",
    );
}

/// A `when(…)` predicate reads the state of a step of its own workflow: a step name that is
/// not one is an error at the condition, with the closest step name.
#[test]
fn a_when_predicate_naming_an_unknown_step_is_an_error_with_a_suggestion() {
    let (file, text) = workflow("auto-improvement-loop");
    for (to, name, near) in [
        (
            "when(structured.plan_from_isue.action == \"enqueue_new_task\")",
            "plan_from_isue",
            Some("plan_from_issue"),
        ),
        ("when(structured.other.x == 1)", "other", None),
    ] {
        let broken = support::edit(
            &text,
            "when(structured.plan_from_issue.action == \"enqueue_new_task\")",
            to,
        );
        let errors = match load_str(&broken, &file, &LoadOptions::default()) {
            Ok(_) => panic!("`{to}` still loads"),
            Err(failed) => failed.errors,
        };
        assert_eq!(errors.len(), 1, "{errors:?}");
        let e = &errors[0];
        assert_eq!(e.file, file);
        assert_eq!(e.path, "steps[1].rules[0].condition");
        assert_eq!(e.line, line_of(&broken, to));
        assert!(
            e.message.starts_with(&format!("`structured.{name}.",))
                && e.message
                    .contains(&format!("names the unknown step `{name}`")),
            "{}",
            e.message
        );
        match near {
            Some(near) => assert!(
                e.message.contains(&format!("did you mean `{near}`?")),
                "{}",
                e.message
            ),
            None => assert!(!e.message.contains("did you mean"), "{}", e.message),
        }
        assert!(
            e.message.contains("known: route_context, "),
            "{}",
            e.message
        );
    }
    // `context.` and `effect.` references are checked the same way.
    for (from, to) in [
        (
            "when(context.route_context.selected_pr.exists == true)",
            "when(context.route_contxt.selected_pr.exists == true)",
        ),
        (
            "when(effect.merge_pr.merge_pr.success == true)",
            "when(effect.merge_p.merge_pr.success == true)",
        ),
    ] {
        let (_, errors) = broken("auto-improvement-loop", from, to);
        assert!(
            errors.iter().any(|e| e.message.contains("did you mean")),
            "{errors:?}"
        );
    }
}
