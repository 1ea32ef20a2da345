//! Picking a rule when some rules are `when(…)` predicates. First match wins in file order,
//! as in TAKT v0.60:
//!
//! - an aggregate (`all(…)` / `any(…)`, with its predicate if it has one) decides first;
//! - a label rule (`approved`, `approved && when(…)`) matches when the answer's tag or the
//!   judge picks its label and its predicate holds (the first such rule in file order);
//! - a rule that is only `when(…)` matches when its predicate holds.
//!
//! The label is picked once: by the answer's tag, else by one judge call over the distinct
//! labels, made only when no predicate-only rule holds. A step whose rules are all `when(…)`
//! makes no judge call.

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
    let label_of = |rule: &Rule| -> Option<String> {
        match &rule.condition {
            Condition::Text(t) => Some(t.clone()),
            Condition::When { base: Some(b), .. } => match &**b {
                Condition::Text(t) => Some(t.clone()),
                _ => None,
            },
            _ => None,
        }
    };
    let only_when = |rule: &Rule| matches!(rule.condition, Condition::When { base: None, .. });
    // The label the answer's tag picks costs nothing; without one, a predicate-only rule that
    // holds decides before the judge is asked.
    let tagged = last_tag(&movement.name, answer, movement.rules.len())
        .and_then(|n| rules.iter().find(|(i, _)| *i == n))
        .and_then(|(_, r)| label_of(r));
    let (label, via) = match tagged {
        Some(label) => (label, OutcomeSource::Tag),
        None => {
            for (index, rule) in &rules {
                if only_when(rule) {
                    match holds(rule) {
                        Ok(true) => return Ok(Decided::Rule(*index, OutcomeSource::When)),
                        Ok(false) => {}
                        Err(e) => return Ok(Decided::Error(e)),
                    }
                }
            }
            // Each label once, bare, numbered as the piece numbers its first rule.
            let mut labels: Vec<(usize, Rule)> = Vec::new();
            for (index, rule) in &rules {
                if let Some(label) = label_of(rule)
                    && !labels
                        .iter()
                        .any(|(_, r)| label_of(r).as_deref() == Some(&label))
                {
                    labels.push((
                        *index,
                        Rule {
                            condition: Condition::Text(label),
                            ..(*rule).clone()
                        },
                    ));
                }
            }
            let picked = match labels.as_slice() {
                [] => None,
                [(only, _)] => Some((*only, OutcomeSource::SingleRule)),
                _ => {
                    let refs: Vec<(usize, &Rule)> = labels.iter().map(|(i, r)| (*i, r)).collect();
                    judge_rule(run, movement, answer, &refs)
                        .await?
                        .map(|n| (n, OutcomeSource::Judge))
                }
            };
            let Some((index, via)) = picked else {
                return Ok(Decided::NoMatch);
            };
            let label = labels
                .iter()
                .find(|(i, _)| *i == index)
                .and_then(|(_, r)| label_of(r));
            match label {
                Some(label) => (label, via),
                None => return Ok(Decided::NoMatch),
            }
        }
    };
    // File order: the first rule with the chosen label whose predicate holds (or, after a
    // tag, a predicate-only rule before it that holds).
    for (index, rule) in &rules {
        let candidate = label_of(rule).as_deref() == Some(label.as_str())
            || (via == OutcomeSource::Tag && only_when(rule));
        if !candidate {
            continue;
        }
        match holds(rule) {
            Ok(true) if only_when(rule) => {
                return Ok(Decided::Rule(*index, OutcomeSource::When));
            }
            Ok(true) => return Ok(Decided::Rule(*index, via)),
            Ok(false) => {}
            Err(e) => return Ok(Decided::Error(e)),
        }
    }
    Ok(Decided::NoMatch)
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
