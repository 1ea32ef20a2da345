//! Evaluating `when(…)` predicates over the run's [`WorkflowState`], as TAKT v0.60 does: `||`
//! of `&&` of clauses; `==` / `!=` compare type and value (numbers by value), the ordering
//! operators need numbers; a path the state does not hold is an error, not `false` (TAKT
//! fails the step the same way), so a typo cannot silently route a run.

use maestro_piece::when::{Clause, CompareOp, Operand, StateRef, StateRoot, WhenExpr};
use serde_json::Value;

use super::WorkflowState;

/// Parses and evaluates `predicate`; the error names the predicate and what is missing.
pub(crate) fn holds(predicate: &str, state: &WorkflowState) -> Result<bool, String> {
    let expr = WhenExpr::parse(predicate).map_err(|e| format!("`when({predicate})`: {e}"))?;
    evaluate(&expr, state).map_err(|e| format!("`when({predicate})`: {e}"))
}

/// Evaluates a parsed predicate.
pub(crate) fn evaluate(expr: &WhenExpr, state: &WorkflowState) -> Result<bool, String> {
    for alternative in &expr.alternatives {
        let mut all = true;
        for clause in alternative {
            if !clause_holds(clause, state, None)? {
                all = false;
                break;
            }
        }
        if all {
            return Ok(true);
        }
    }
    Ok(false)
}

fn clause_holds(
    clause: &Clause,
    state: &WorkflowState,
    item: Option<&Value>,
) -> Result<bool, String> {
    match clause {
        Clause::Bool(b) => Ok(*b),
        Clause::Operand(r) => match resolve(r, state)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "`{r}` must hold a boolean to stand alone, but holds {}",
                describe(&other)
            )),
        },
        Clause::Compare { op, left, right } => {
            let l = operand(left, state, item)?;
            let r = operand(right, state, item)?;
            compare(*op, &l, &r).ok_or_else(|| {
                format!(
                    "`{}` needs numbers on both sides, found {} and {}",
                    op.symbol(),
                    describe(&l),
                    describe(&r)
                )
            })
        }
        Clause::Contains { list, value } => {
            let Value::Array(items) = operand(list, state, item)? else {
                return Err("contains() needs a list".to_owned());
            };
            let wanted = operand(value, state, item)?;
            Ok(items.iter().any(|v| same(v, &wanted)))
        }
        Clause::Exists { list, predicate } => {
            let Value::Array(items) = resolve(list, state)? else {
                return Err(format!("exists() needs a list, and `{list}` is not one"));
            };
            for it in &items {
                let mut all = true;
                for p in predicate {
                    if !clause_holds(p, state, Some(it))? {
                        all = false;
                        break;
                    }
                }
                if all {
                    return Ok(true);
                }
            }
            Ok(false)
        }
    }
}

fn operand(o: &Operand, state: &WorkflowState, item: Option<&Value>) -> Result<Value, String> {
    match o {
        Operand::Literal(v) => Ok(v.clone()),
        Operand::State(r) => resolve(r, state),
        Operand::Item(path) => {
            let mut current = item.ok_or("`item.…` is only known inside exists()")?;
            for key in path {
                current = current
                    .get(key)
                    .ok_or_else(|| format!("the list item has no `{key}`"))?;
            }
            Ok(current.clone())
        }
    }
}

/// `==` as TAKT has it: same type and value; numbers compare by value (`1 == 1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn compare(op: CompareOp, l: &Value, r: &Value) -> Option<bool> {
    match op {
        CompareOp::Eq => return Some(same(l, r)),
        CompareOp::Ne => return Some(!same(l, r)),
        _ => {}
    }
    let (a, b) = (l.as_f64()?, r.as_f64()?);
    Some(match op {
        CompareOp::Gt => a > b,
        CompareOp::Lt => a < b,
        CompareOp::Ge => a >= b,
        _ => a <= b,
    })
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(a) => format!("a list of {}", a.len()),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// The value a state reference reads. Below a list, `length` is its length, a number its
/// item, and any other key that field of every item.
pub(crate) fn resolve(r: &StateRef, state: &WorkflowState) -> Result<Value, String> {
    let scope = match r.root {
        StateRoot::Context => state
            .contexts
            .get(&r.step)
            .map(|m| Value::Object(m.clone())),
        StateRoot::Effect => state.effects.get(&r.step).map(|m| Value::Object(m.clone())),
        StateRoot::Structured => state.structured.get(&r.step).cloned(),
    };
    let what = match r.root {
        StateRoot::Context => "read no `system_inputs`",
        StateRoot::Effect => "ran no effect",
        StateRoot::Structured => "recorded no structured output",
    };
    let mut current = scope.ok_or_else(|| {
        format!(
            "`{r}` reads state of step `{}`, which has {what} in this run yet",
            r.step
        )
    })?;
    for key in &r.path {
        let missing = || {
            format!(
                "`{r}`: the run's {} state has no `{key}` there",
                r.root.name()
            )
        };
        current = match current {
            Value::Array(items) => {
                if key == "length" {
                    Value::from(items.len())
                } else if let Ok(index) = key.parse::<usize>() {
                    items.get(index).cloned().ok_or_else(missing)?
                } else {
                    Value::Array(
                        items
                            .iter()
                            .map(|i| i.get(key).cloned().ok_or_else(missing))
                            .collect::<Result<_, _>>()?,
                    )
                }
            }
            Value::Object(mut map) => map.remove(key).ok_or_else(missing)?,
            _ => return Err(missing()),
        };
    }
    Ok(current)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn state() -> WorkflowState {
        let mut s = WorkflowState::default();
        s.contexts.insert(
            "route".into(),
            json!({
                "queue": {"pending_count": 0, "running_count": 2},
                "pr": {"exists": false},
                "prs": [{"number": 7, "labels": ["bug"]}, {"number": 9, "labels": []}],
            })
            .as_object()
            .unwrap()
            .clone(),
        );
        s.effects.insert(
            "merge".into(),
            json!({"sync_with_root": {"success": true, "conflicted": false}})
                .as_object()
                .unwrap()
                .clone(),
        );
        s.structured.insert(
            "plan".into(),
            json!({"action": "enqueue_new_task", "score": 1.5, "note": null}),
        );
        s
    }

    fn eval(p: &str) -> Result<bool, String> {
        holds(p, &state())
    }

    #[test]
    fn each_operator_compares_as_takt_does() {
        assert_eq!(eval("context.route.queue.pending_count == 0"), Ok(true));
        assert_eq!(eval("context.route.queue.pending_count == 0.0"), Ok(true));
        assert_eq!(eval("context.route.queue.running_count != 2"), Ok(false));
        assert_eq!(eval("context.route.queue.running_count > 1"), Ok(true));
        assert_eq!(eval("context.route.queue.running_count < 2"), Ok(false));
        assert_eq!(eval("context.route.queue.running_count >= 2"), Ok(true));
        assert_eq!(eval("structured.plan.score <= 1.4"), Ok(false));
        assert_eq!(
            eval("structured.plan.action == \"enqueue_new_task\""),
            Ok(true)
        );
        assert_eq!(eval("structured.plan.note == null"), Ok(true));
        assert_eq!(eval("effect.merge.sync_with_root.success"), Ok(true));
        assert_eq!(
            eval("effect.merge.sync_with_root.conflicted == true"),
            Ok(false)
        );
        // `==` compares types: the string "0" is not the number 0.
        assert_eq!(
            eval("context.route.queue.pending_count == \"0\""),
            Ok(false)
        );
    }

    #[test]
    fn and_binds_tighter_than_or() {
        // true || (false && false) is true; (true || false) && false would be false.
        assert_eq!(
            eval(
                "context.route.queue.running_count == 2 || context.route.pr.exists == true && false"
            ),
            Ok(true)
        );
        assert_eq!(
            eval(
                "context.route.pr.exists == true || context.route.queue.running_count == 2 && false"
            ),
            Ok(false)
        );
    }

    #[test]
    fn lists_answer_length_index_and_membership() {
        assert_eq!(eval("context.route.prs.length == 2"), Ok(true));
        assert_eq!(eval("context.route.prs[1].number == 9"), Ok(true));
        assert_eq!(eval("contains(context.route.prs.number, 7)"), Ok(true));
        assert_eq!(
            eval("exists(context.route.prs, contains(item.labels, \"bug\") && item.number == 7)"),
            Ok(true)
        );
        assert_eq!(
            eval("exists(context.route.prs, item.number == 8)"),
            Ok(false)
        );
    }

    #[test]
    fn a_missing_path_is_an_error_naming_it_not_false() {
        let e = eval("context.route.queue.waiting_count > 0").unwrap_err();
        assert!(e.contains("no `waiting_count`"), "{e}");
        let e = eval("context.nowhere.queue.pending_count > 0").unwrap_err();
        assert!(
            e.contains("step `nowhere`") && e.contains("no `system_inputs`"),
            "{e}"
        );
        let e = eval("effect.route.enqueue_task.success == true").unwrap_err();
        assert!(e.contains("ran no effect"), "{e}");
        // An alternative that already holds decides before a later one could fail.
        assert_eq!(eval("true || context.nowhere.x.y == 1"), Ok(true));
    }

    #[test]
    fn ordering_needs_numbers_and_a_bare_reference_a_boolean() {
        let e = eval("structured.plan.action > 1").unwrap_err();
        assert!(e.contains("needs numbers"), "{e}");
        let e = eval("structured.plan.action").unwrap_err();
        assert!(e.contains("must hold a boolean"), "{e}");
    }
}
