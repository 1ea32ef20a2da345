//! Reading a movement's outcome without I/O: takt tags, `all()`/`any()` aggregates, graph
//! frontmatter and the graph router `(role, frontmatter) -> edge`.
//!
//! Everything here is a pure function so each rule of engine-semantics.md is testable alone.

use maestro_piece::{Condition, Movement, Rule};

/// The rules a run may take: `interactive_only` ones are dropped outside interactive use.
/// Indices stay those of the piece (1-based in tags), so a returned index is the rule's place.
pub fn eligible_rules(movement: &Movement, interactive: bool) -> Vec<(usize, &Rule)> {
    movement
        .rules
        .iter()
        .enumerate()
        .filter(|(_, rule)| interactive || !rule.interactive_only)
        .map(|(i, rule)| (i + 1, rule))
        .collect()
}

/// The last `[MOVEMENT_NAME:N]` tag in `answer` (case-insensitive, the name as written in the
/// piece, upper-cased), as the 1-based rule number. Tags outside `1..=rule_count` are ignored.
pub fn last_tag(movement_name: &str, answer: &str, rule_count: usize) -> Option<usize> {
    let name: Vec<char> = maestro_piece::prompt::tag_name(movement_name)
        .chars()
        .collect();
    answer
        .match_indices('[')
        .rev()
        .filter_map(|(at, _)| tag_number(&name, &answer[at + 1..]))
        .find(|n| (1..=rule_count).contains(n))
}

/// The `N` of `NAME:N]` at the start of `rest`, `name` upper-cased and matched regardless of
/// case. A scan, not a regex: it runs on every answer, and building a regex per movement name
/// cost more than the match.
fn tag_number(name: &[char], rest: &str) -> Option<usize> {
    let mut wanted = name.iter();
    let mut chars = rest.char_indices();
    let mut after = 0;
    if !name.is_empty() {
        loop {
            let (at, c) = chars.next()?;
            for upper in c.to_uppercase() {
                if wanted.next() != Some(&upper) {
                    return None;
                }
            }
            if wanted.len() == 0 {
                after = at + c.len_utf8();
                break;
            }
        }
    }
    let tail = rest[after..].strip_prefix(':')?;
    let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || !tail[digits..].starts_with(']') {
        return None;
    }
    tail[..digits].parse().ok()
}

/// The first `all()` / `any()` rule (1-based) that the sub-results satisfy. `sub_results[i]` is
/// the condition text sub-movement `i` matched (`None` when it matched nothing).
///
/// As in TAKT v0.30:
/// - `all("X")`: every sub-movement matched `X`;
/// - `all("A", "B")`: positional, sub-movement 1 matched `A` and sub-movement 2 matched `B`
///   (a different number of sub-movements never holds);
/// - `any("X")` / `any("A", "B")`: at least one sub-movement matched one of the listed
///   conditions, wherever it stands.
///
/// A sub-movement that matched no rule fails `all()` and is skipped by `any()`; with no
/// sub-movements neither holds. A TAKT sub-step that failed (the engine ended its visit:
/// iterations or context used up, an invalid structured answer, …) stands in `sub_results` as
/// [`FAILED_SUB_LABEL`], so `any("error")` / `all("error")` read it like any other label.
pub fn aggregate(rules: &[(usize, &Rule)], sub_results: &[Option<String>]) -> Option<usize> {
    rules
        .iter()
        .find(|(_, rule)| aggregate_matches(&rule.condition, sub_results))
        .map(|(i, _)| *i)
}

/// TAKT's label for a parallel sub-step that failed: the runner puts it in place of a matched
/// condition, so a parent's `any("error")` / `all("error")` aggregates count the failure.
pub const FAILED_SUB_LABEL: &str = "error";

fn aggregate_matches(condition: &Condition, subs: &[Option<String>]) -> bool {
    let matched =
        |sub: &Option<String>, want: &str| sub.as_deref().is_some_and(|s| same_condition(s, want));
    match condition {
        Condition::All(args) if args.len() == 1 => {
            !subs.is_empty() && subs.iter().all(|s| matched(s, &args[0]))
        }
        Condition::All(args) => {
            args.len() == subs.len() && subs.iter().zip(args).all(|(s, a)| matched(s, a))
        }
        Condition::Any(args) => subs.iter().any(|s| args.iter().any(|a| matched(s, a))),
        Condition::Text(_) | Condition::Ai(_) | Condition::Status(_) | Condition::When { .. } => {
            false
        }
    }
}

fn same_condition(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// The text a judge sees for a rule's condition.
pub(crate) fn condition_text(condition: &Condition) -> String {
    match condition {
        Condition::Text(t) | Condition::Ai(t) | Condition::Status(t) => t.clone(),
        Condition::All(args) => format!("all({})", args.join(", ")),
        Condition::Any(args) => format!("any({})", args.join(", ")),
        Condition::When {
            base: None,
            predicate,
        } => format!("when({predicate})"),
        Condition::When {
            base: Some(base),
            predicate,
        } => format!("{} && when({predicate})", condition_text(base)),
    }
}

/// Why an answer's frontmatter was refused; the text goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontmatterError(pub String);

/// Splits a leading `---` … `---` YAML block off `answer` and parses it to JSON. A wrapping
/// code fence (```` ```yaml ````) before the first `---` is tolerated.
pub fn extract_frontmatter(answer: &str) -> Result<serde_json::Value, FrontmatterError> {
    let mut text = answer.trim_start();
    // A constrained retry answers with the fields as one JSON object instead of `---` fences.
    if text.starts_with('{')
        && let Ok(value @ serde_json::Value::Object(_)) =
            serde_json::from_str::<serde_json::Value>(text.trim_end())
    {
        return Ok(value);
    }
    if text.starts_with("```") {
        text = text
            .split_once('\n')
            .map(|(_, rest)| rest.trim_start())
            .unwrap_or("");
    }
    let Some(rest) = text.strip_prefix("---") else {
        return Err(FrontmatterError(
            "the answer must start with YAML frontmatter: a line `---`, the fields, then a line `---`".into(),
        ));
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    let rest = rest
        .strip_prefix("\r\n")
        .or_else(|| rest.strip_prefix('\n'))
        .unwrap_or(rest);
    let end = closing_fence(rest).ok_or_else(|| {
        FrontmatterError(
            "the frontmatter is not closed: end it with a line containing only `---`".into(),
        )
    })?;
    let yaml = &rest[..end];
    let value: serde_json::Value = serde_saphyr::from_str(yaml)
        .map_err(|e| FrontmatterError(format!("the frontmatter is not valid YAML: {e}")))?;
    match value {
        serde_json::Value::Object(_) => Ok(value),
        serde_json::Value::Null => Err(FrontmatterError("the frontmatter is empty".into())),
        other => Err(FrontmatterError(format!(
            "the frontmatter must be a mapping of fields, not {other}"
        ))),
    }
}

/// Byte offset of the line that closes the frontmatter.
fn closing_fence(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed == "..." {
            return Some(offset);
        }
        offset += line.len();
    }
    None
}

/// Checks `frontmatter` against the role's JSON Schema, listing every problem with its path.
pub fn validate_frontmatter(
    schema: &serde_json::Value,
    frontmatter: &serde_json::Value,
) -> Result<(), FrontmatterError> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| FrontmatterError(format!("the role's frontmatter schema is invalid: {e}")))?;
    let problems: Vec<String> = validator
        .iter_errors(frontmatter)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                format!("- {e}")
            } else {
                format!("- at `{path}`: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(FrontmatterError(format!(
            "the frontmatter does not match the schema:\n{}",
            problems.join("\n")
        )))
    }
}

/// The graph router: the edge (1-based rule) the frontmatter's `$status` selects, or the
/// unconditional `_` edge.
pub fn route(role: &Movement, frontmatter: &serde_json::Value) -> Result<usize, FrontmatterError> {
    let status = frontmatter.get("$status").and_then(|s| match s {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(_) | serde_json::Value::Number(_) => Some(s.to_string()),
        _ => None,
    });
    let edge = |wanted: &str| {
        role.rules
            .iter()
            .position(|r| matches!(&r.condition, Condition::Status(s) if s == wanted))
            .map(|i| i + 1)
    };
    if let Some(found) = status.as_deref().and_then(edge) {
        return Ok(found);
    }
    if let Some(found) = edge("_") {
        return Ok(found);
    }
    let known: Vec<String> = role
        .rules
        .iter()
        .map(|r| condition_text(&r.condition))
        .collect();
    Err(FrontmatterError(match status {
        Some(s) => format!(
            "`$status: {s}` has no edge from `{}`; valid values: {}",
            role.name,
            known.join(", ")
        ),
        None => format!(
            "the frontmatter needs `$status`, one of: {}",
            known.join(", ")
        ),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use maestro_piece::{SessionMode, Target};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    pub(crate) fn rule(condition: Condition, next: Option<&str>) -> Rule {
        Rule {
            condition,
            next: next.map(|n| Target::Movement(n.into())),
            requires_user_input: false,
            interactive_only: false,
            appendix: None,
            prompt: None,
        }
    }

    fn movement(name: &str, rules: Vec<Rule>) -> Movement {
        Movement {
            name: name.into(),
            persona: None,
            policies: vec![],
            knowledge: vec![],
            instruction: None,
            edit: false,
            allowed_tools: vec![],
            allowed_commands: None,
            allowed_ssh_connections: None,
            rules,
            default_next: None,
            max_consecutive_revisits: None,
            pass_previous_response: true,
            session: SessionMode::Continue,
            output_contracts: vec![],
            quality_gates: vec![],
            command_gates: Vec::new(),
            companions: Vec::new(),
            parallel: vec![],
            frontmatter_schema: None,
            kind: Default::default(),
            dynamic: None,
            structured_output: None,
            delay_before_ms: None,
            completion_retry: None,
        }
    }

    #[test]
    fn failed_sub_steps_count_as_the_error_label() {
        let any = rule(Condition::Any(vec![FAILED_SUB_LABEL.into()]), Some("retry"));
        let all = rule(Condition::All(vec![FAILED_SUB_LABEL.into()]), Some("stop"));
        let rules = [(1, &all), (2, &any)];
        let failed = || Some(FAILED_SUB_LABEL.to_string());
        assert_eq!(aggregate(&rules, &[failed(), failed()]), Some(1));
        assert_eq!(aggregate(&rules, &[failed(), Some("done".into())]), Some(2));
        assert_eq!(aggregate(&rules, &[None, Some("done".into())]), None);
    }

    #[test]
    fn the_last_valid_tag_wins_case_insensitively() {
        let answer = "I considered [AI_REVIEW:2] but in the end [ai_review:1]. Also [AI_REVIEW:9] and [PLAN:2].";
        assert_eq!(last_tag("ai_review", answer, 2), Some(1));
        assert_eq!(last_tag("arch-review", "ok [ARCH-REVIEW:2]", 2), Some(2));
        assert_eq!(last_tag("plan", "no tag here", 3), None);
        assert_eq!(last_tag("plan", "[PLAN:0]", 3), None);
        assert_eq!(
            last_tag("plan", "[PLAN:2 ] [PLANS:1] [PLAN:] [PLAN:x1] [PLAN:1", 3),
            None
        );
        assert_eq!(
            last_tag("plan", "[[Plan:3]] [plan:99999999999999999999999]", 3),
            Some(3)
        );
        assert_eq!(last_tag("straße", "[STRASSE:1]", 1), Some(1));
        assert_eq!(last_tag("a.b", "[AXB:1]", 1), None);
    }

    #[test]
    fn interactive_only_rules_are_skipped_but_keep_their_numbers() {
        let mut ask = rule(Condition::Text("ask".into()), Some("x"));
        ask.interactive_only = true;
        let m = movement(
            "m",
            vec![ask, rule(Condition::Text("go".into()), Some("y"))],
        );
        let numbers: Vec<usize> = eligible_rules(&m, false).iter().map(|(i, _)| *i).collect();
        assert_eq!(numbers, vec![2]);
        assert_eq!(eligible_rules(&m, true).len(), 2);
    }

    #[test]
    fn aggregates_match_uniformly_and_positionally() {
        let all = rule(Condition::All(vec!["approved".into()]), Some("done"));
        let all_pos = rule(
            Condition::All(vec!["approved".into(), "All checks passed".into()]),
            Some("done"),
        );
        let any_pos = rule(
            Condition::Any(vec!["needs_fix".into(), "failing".into()]),
            Some("fix"),
        );
        let subs = |a: &str, b: &str| vec![Some(a.to_string()), Some(b.to_string())];
        let rules = [(1, &all), (2, &all_pos), (3, &any_pos)];
        assert_eq!(aggregate(&rules, &subs("approved", "approved")), Some(1));
        assert_eq!(
            aggregate(&rules, &subs("approved", "all checks passed")),
            Some(2)
        );
        assert_eq!(aggregate(&rules, &subs("approved", "failing")), Some(3));
        assert_eq!(
            aggregate(&rules, &subs("needs_fix", "All checks passed")),
            Some(3)
        );
        // `all` is positional: the right conditions in the wrong slots do not hold
        assert_eq!(
            aggregate(&rules[1..2], &subs("all checks passed", "approved")),
            None
        );
        assert_eq!(aggregate(&rules, &[Some("approved".into()), None]), None);
    }

    /// TAKT v0.30 (`AggregateEvaluator`): `any("A", "B")` holds when any sub-movement matched
    /// any listed condition, whatever its place; a sub-movement that matched nothing is skipped
    /// by `any` and fails `all`. Three sub-movements and two conditions, where a positional
    /// reading gives the opposite answers.
    #[test]
    fn any_with_several_conditions_is_not_positional() {
        let any = rule(
            Condition::Any(vec!["needs_fix".into(), "failing".into()]),
            Some("fix"),
        );
        let rules = [(1, &any)];
        let three = |a: Option<&str>, b: Option<&str>, c: Option<&str>| {
            [a, b, c].map(|s| s.map(str::to_owned)).to_vec()
        };
        // The third sub-movement matched `needs_fix`: it has no positional argument at all.
        assert_eq!(
            aggregate(
                &rules,
                &three(Some("approved"), Some("approved"), Some("needs_fix"))
            ),
            Some(1)
        );
        // The first matched the second condition, the second the first: crossed places hold.
        assert_eq!(
            aggregate(
                &rules,
                &three(Some("failing"), Some("needs_fix"), Some("approved"))
            ),
            Some(1)
        );
        // Sub-movements that matched nothing are skipped, not failed.
        assert_eq!(
            aggregate(&rules, &three(None, None, Some("FAILING"))),
            Some(1)
        );
        // None of the listed conditions anywhere.
        assert_eq!(
            aggregate(&rules, &three(Some("approved"), None, Some("approved"))),
            None
        );
        assert_eq!(aggregate(&rules, &[]), None);

        let all = rule(Condition::All(vec!["approved".into()]), Some("done"));
        let all_rules = [(1, &all)];
        assert_eq!(
            aggregate(&all_rules, &three(Some("approved"), None, Some("approved"))),
            None
        );
        assert_eq!(aggregate(&all_rules, &[]), None);
        // Positional `all` with a count that differs from the sub-movements never holds.
        let all_two = rule(
            Condition::All(vec!["approved".into(), "approved".into()]),
            Some("done"),
        );
        assert_eq!(
            aggregate(
                &[(1, &all_two)],
                &three(Some("approved"), Some("approved"), Some("approved"))
            ),
            None
        );
    }

    #[test]
    fn frontmatter_is_extracted_validated_and_routed() {
        let answer = "---\n$status: continue\nargument: |\n  Cats are better.\n---\nBody text.";
        let fm = extract_frontmatter(answer).unwrap();
        assert_eq!(
            fm,
            json!({"$status": "continue", "argument": "Cats are better.\n"})
        );
        let schema = json!({"type": "object", "properties": {"$status": {"enum": ["continue", "conceded"]},
            "argument": {"type": "string"}}, "required": ["$status", "argument"]});
        assert_eq!(validate_frontmatter(&schema, &fm), Ok(()));
        let bad = extract_frontmatter("---\n$status: maybe\n---\n").unwrap();
        let err = validate_frontmatter(&schema, &bad).unwrap_err().0;
        assert!(err.contains("argument") && err.contains("$status"), "{err}");

        let mut conceded = rule(Condition::Status("conceded".into()), None);
        conceded.next = Some(Target::Complete);
        let role = movement(
            "against",
            vec![
                conceded,
                rule(Condition::Status("continue".into()), Some("for")),
            ],
        );
        assert_eq!(route(&role, &fm), Ok(2));
        assert!(
            route(&role, &json!({"$status": "other"}))
                .unwrap_err()
                .0
                .contains("valid values: conceded, continue")
        );
        let single = movement(
            "start",
            vec![rule(Condition::Status("_".into()), Some("x"))],
        );
        assert_eq!(route(&single, &json!({"a": 1})), Ok(1));
    }

    #[test]
    fn missing_or_unclosed_frontmatter_says_what_to_do() {
        assert!(
            extract_frontmatter("Just prose")
                .unwrap_err()
                .0
                .contains("must start with YAML frontmatter")
        );
        assert!(
            extract_frontmatter("---\na: 1\n")
                .unwrap_err()
                .0
                .contains("not closed")
        );
        assert_eq!(
            extract_frontmatter("```yaml\n---\na: 1\n---\n```").unwrap(),
            json!({"a": 1})
        );
    }

    proptest::proptest! {
        #[test]
        fn readers_never_panic_and_tags_stay_in_range(answer in ".{0,200}", n in 0usize..5) {
            let tag = last_tag("step-one", &answer, n);
            proptest::prop_assert!(tag.is_none_or(|t| (1..=n).contains(&t)));
            let _ = extract_frontmatter(&answer);
            let tagged = format!("{answer}[STEP-ONE:{n}]");
            proptest::prop_assert_eq!(last_tag("step-one", &tagged, n), (n >= 1).then_some(n));
        }
    }
}
