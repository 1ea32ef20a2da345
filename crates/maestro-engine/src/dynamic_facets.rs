//! TAKT `dynamic_facets`: right before a step (or a parallel sub-step) with a facet pool runs,
//! the selector picks candidates from the pool, the choice is recorded (`selection_made`), and
//! the chosen candidates' policies and knowledge are added after the step's fixed ones: in
//! candidate definition order, declaration order within a candidate, a facet the step already
//! has (the same file) left out. Every visit selects again; nothing carries over from an
//! earlier round.

use std::path::{Component, Path, PathBuf};

use maestro_piece::{Facet, Movement};

use crate::ctx::RunCtx;
use crate::error::EngineError;
use crate::event::RunEvent;
use crate::selector::{self, Candidate, Question};

/// The movement's facet pool, when it has `dynamic_facets`.
pub(crate) fn pool(movement: &Movement) -> Option<&maestro_piece::DynamicFacets> {
    movement.dynamic.as_ref().and_then(|d| d.facets.as_ref())
}

/// The movement with its selected facets added (and its pool dropped, so it is not selected
/// for again in this visit); `Ok(None)` when it has no `dynamic_facets`; the inner `Err` when
/// the selector's answer broke the contract, with the reason the run fails with.
pub(crate) async fn compose(
    run: &RunCtx,
    movement: &Movement,
) -> Result<Result<Option<Movement>, String>, EngineError> {
    let Some(pool) = pool(movement) else {
        return Ok(Ok(None));
    };
    let state = run.journal.state();
    let round = state.visits_of(&movement.name) + 1;
    let mut context = format!("## Task\n{}\n", state.task);
    if let Some(instruction) = &movement.instruction {
        context.push_str(&format!(
            "\n## The instruction the step's agent will get\n{}\n",
            instruction.text.trim_end()
        ));
    }
    let fixed: Vec<&str> = movement
        .policies
        .iter()
        .chain(&movement.knowledge)
        .map(|f| f.name.as_str())
        .collect();
    if !fixed.is_empty() {
        context.push_str(&format!(
            "\n## Facets the step always has\n{}\n",
            fixed.join(", ")
        ));
    }
    context.push_str(&crate::dynamic_parallel::reports_context(run, &state, &[]));
    let question = Question {
        step: &movement.name,
        what: &format!(
            "additional policy and knowledge facets (pool `{}`)",
            pool.pool
        ),
        round,
        context,
        candidates: pool
            .candidates
            .iter()
            .map(|c| Candidate {
                id: &c.id,
                description: &c.description,
            })
            .collect(),
        max_selected: pool.max_selected.map(|m| m as usize),
        guidance: pool.selector.as_ref(),
    };
    let choice = match selector::select(run, &question).await? {
        Ok(choice) => choice,
        Err(problem) => {
            return Ok(Err(format!(
                "step `{}`: the facet selector for pool `{}` gave no valid selection: {problem}",
                movement.name, pool.pool
            )));
        }
    };
    let chosen: Vec<_> = pool
        .candidates
        .iter()
        .filter(|c| choice.selected.contains(&c.id))
        .collect();
    run.emit(RunEvent::SelectionMade {
        movement: movement.name.clone(),
        target: crate::event::SelectionTarget::Facets,
        round,
        selected: choice.selected.clone(),
        effective: chosen.iter().map(|c| c.id.clone()).collect(),
        rationale: choice.rationale,
    })
    .await?;
    let mut composed = movement.clone();
    composed.dynamic = None;
    for candidate in chosen {
        add(&mut composed.policies, &candidate.policies);
        add(&mut composed.knowledge, &candidate.knowledge);
    }
    Ok(Ok(Some(composed)))
}

/// Appends the facets `to` does not hold yet.
fn add(to: &mut Vec<Facet>, more: &[Facet]) {
    for facet in more {
        if !to.iter().any(|f| same(f, facet)) {
            to.push(facet.clone());
        }
    }
}

/// The same facet resource: the same file, or (inline text) the same name and text.
fn same(a: &Facet, b: &Facet) -> bool {
    match (&a.path, &b.path) {
        (Some(x), Some(y)) => lexical(x) == lexical(y),
        (None, None) => a.name == b.name && a.text == b.text,
        _ => false,
    }
}

fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn file(name: &str, path: &str) -> Facet {
        Facet {
            name: name.into(),
            text: format!("{name} text"),
            path: Some(PathBuf::from(path)),
        }
    }

    #[test]
    fn a_facet_already_fixed_is_not_added_again_and_order_is_kept() {
        let mut fixed = vec![file("coding", "/w/facets/policies/coding.md")];
        add(
            &mut fixed,
            &[
                file("security", "/w/facet-pools/../facets/policies/security.md"),
                file("coding", "/w/facet-pools/../facets/policies/coding.md"),
            ],
        );
        let names: Vec<&str> = fixed.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["coding", "security"]);
    }
}
