//! Picking a rule when some rules are `when(…)` predicates. First match wins in file order,
//! as in TAKT v0.60:
//!
//! - an aggregate (`all(…)` / `any(…)`, with its predicate if it has one) decides first;
//! - a label rule (`approved`, `approved && when(…)`) matches when the answer's tag picks it,
//!   or when the judge picks it, and its predicate holds;
//! - a rule that is only `when(…)` matches when its predicate holds.
//!
//! The judge is asked at most once, only for the label rules, and only when no tag chose one
//! and no predicate-only rule holds: a step whose rules are all `when(…)` makes no judge call.

use maestro_piece::{Condition, Movement, Rule};
use maestro_protocol::RunStatus;

use crate::end_reason::EndReason;
use crate::movement::{Ended, Step};

use crate::ctx::RunCtx;
use crate::error::EngineError;
use crate::event::OutcomeSource;
use crate::judge::{decide_rule, judge_rule};
use crate::outcome::{aggregate, eligible_rules, last_tag};

use super::when;

/// How the rules of a step decided.
pub(crate) enum Decided {
    /// The 1-based rule, and how it was chosen.
    Rule(usize, OutcomeSource),
    /// No rule matched.
    NoMatch,
    /// A predicate could not be evaluated; the problem.
    Error(String),
}

/// True when any rule of the movement carries a `when(…)` predicate.
pub(crate) fn has_when(movement: &Movement) -> bool {
    movement
        .rules
        .iter()
        .any(|r| matches!(r.condition, Condition::When { .. }))
}

/// Decides the rule of `movement` for `answer` (and its sub-movements' results, for a
/// parallel parent), reading the predicates from the run's recorded workflow state.
pub(crate) async fn decide(
    run: &RunCtx,
    movement: &Movement,
    answer: &str,
    sub_results: Option<&[Option<String>]>,
) -> Result<Decided, EngineError> {
    if !has_when(movement) {
        return Ok(
            match decide_rule(run, movement, answer, sub_results).await? {
                Some((index, via)) => Decided::Rule(index, via),
                None => Decided::NoMatch,
            },
        );
    }
    let state = run.journal.state().workflow;
    let holds = |rule: &Rule| -> Result<bool, String> {
        match &rule.condition {
            Condition::When { predicate, .. } => when::holds(predicate, &state),
            _ => Ok(true),
        }
    };
    let rules = eligible_rules(movement, run.config.interactive);
    // Aggregates, with their predicates.
    if let Some(subs) = sub_results {
        for (index, rule) in &rules {
            let base = match &rule.condition {
                Condition::When { base: Some(b), .. } => (**b).clone(),
                other => other.clone(),
            };
            if !matches!(base, Condition::All(_) | Condition::Any(_)) {
                continue;
            }
            let bare = Rule {
                condition: base,
                ..(*rule).clone()
            };
            if aggregate(&[(*index, &bare)], subs).is_some() {
                match holds(rule) {
                    Ok(true) => return Ok(Decided::Rule(*index, OutcomeSource::Aggregate)),
                    Ok(false) => {}
                    Err(e) => return Ok(Decided::Error(e)),
                }
            }
        }
    }
    let labelled = |rule: &Rule| match &rule.condition {
        Condition::Text(_) => true,
        Condition::When { base: Some(b), .. } => matches!(**b, Condition::Text(_)),
        _ => false,
    };
    let only_when = |rule: &Rule| matches!(rule.condition, Condition::When { base: None, .. });
    // The label the answer's tag picks costs nothing: file order decides between it and the
    // predicate-only rules before it.
    let tagged = last_tag(&movement.name, answer, movement.rules.len())
        .filter(|n| rules.iter().any(|(i, r)| i == n && labelled(r)));
    for (index, rule) in &rules {
        if tagged == Some(*index) {
            match holds(rule) {
                Ok(true) => return Ok(Decided::Rule(*index, OutcomeSource::Tag)),
                Ok(false) => continue,
                Err(e) => return Ok(Decided::Error(e)),
            }
        }
        if only_when(rule) {
            match holds(rule) {
                Ok(true) => return Ok(Decided::Rule(*index, OutcomeSource::When)),
                Ok(false) => {}
                Err(e) => return Ok(Decided::Error(e)),
            }
        }
    }
    if tagged.is_some() {
        return Ok(Decided::NoMatch);
    }
    // No predicate-only rule holds: the judge picks among the labels, once.
    let labels: Vec<(usize, Rule)> = rules
        .iter()
        .filter(|(_, r)| labelled(r))
        .map(|(i, r)| {
            let condition = match &r.condition {
                Condition::When { base: Some(b), .. } => (**b).clone(),
                other => other.clone(),
            };
            (
                *i,
                Rule {
                    condition,
                    ..(*r).clone()
                },
            )
        })
        .collect();
    if labels.is_empty() {
        return Ok(Decided::NoMatch);
    }
    let picked = if let [(only, _)] = labels.as_slice() {
        Some((*only, OutcomeSource::SingleRule))
    } else {
        let refs: Vec<(usize, &Rule)> = labels.iter().map(|(i, r)| (*i, r)).collect();
        judge_rule(run, movement, answer, &refs)
            .await?
            .map(|n| (n, OutcomeSource::Judge))
    };
    Ok(match picked {
        Some((index, via)) => match rules.iter().find(|(i, _)| *i == index) {
            Some((_, rule)) => match holds(rule) {
                Ok(true) => Decided::Rule(index, via),
                Ok(false) => Decided::NoMatch,
                Err(e) => Decided::Error(e),
            },
            None => Decided::NoMatch,
        },
        None => Decided::NoMatch,
    })
}

/// The visit's end for a decision.
pub(crate) fn ended(movement: &Movement, response: String, decided: Decided) -> Ended {
    match decided {
        Decided::Rule(index, via) => Ended::by_rule(movement, response, via, index),
        Decided::NoMatch => Ended::no_rule_matched(response),
        Decided::Error(problem) => {
            let mut ended = Ended::no_rule_matched(response);
            ended.step = Step::Finish {
                status: RunStatus::Failed,
                result: None,
                reason: Some(EndReason::WhenError(format!(
                    "step `{}`: {problem}",
                    movement.name
                ))),
            };
            ended
        }
    }
}
