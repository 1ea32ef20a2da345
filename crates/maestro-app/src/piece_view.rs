//! What a piece author looks at besides the YAML: the piece's graph as loaded (its movements,
//! parallel sub-movements and every transition, for all three dialects) and the exact prompts
//! `maestro prompt` prints for one of its movements.

use maestro_config::Config;
use maestro_piece::prompt::{Prompt, PromptContext, assemble};
use maestro_piece::{Condition, Dialect, Movement, Piece, StepKind, Target};
use maestro_store::Store;

use crate::piece_store::{PieceDiagnostic, dir_piece_found, load_stored_piece, valid_piece_name};
use crate::pieces::PieceError;

/// A piece's movements and transitions, as the loaded piece has them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PieceGraph {
    /// The piece's name.
    pub name: String,
    /// The dialect it was written in.
    pub dialect: Dialect,
    /// The movement a run starts with.
    pub initial_movement: String,
    /// Every movement: the top-level ones in file order, each parallel parent followed by its
    /// sub-movements.
    pub movements: Vec<GraphMovement>,
    /// Every transition, in the order a run would try them.
    pub edges: Vec<GraphEdge>,
    /// The special targets some edge leads to (`COMPLETE`, `ABORT`, `ASK`, `WAIT_SUBTASKS`),
    /// in that order.
    pub targets: Vec<String>,
}

/// What a movement is in the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MovementKind {
    /// A movement of its own.
    Movement,
    /// A parallel parent: its sub-movements run at once, its rules aggregate their outcomes.
    Parallel,
    /// A sub-movement of a parallel parent.
    SubMovement,
}

/// One movement of a [`PieceGraph`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GraphMovement {
    /// Its name.
    pub name: String,
    /// What it is.
    pub kind: MovementKind,
    /// True for a parallel parent.
    pub parallel: bool,
    /// For a sub-movement, its parallel parent.
    pub parent: Option<String>,
    /// For a parallel parent, its sub-movements' names.
    pub sub_movements: Vec<String>,
    /// For a sub-movement, the outcomes it can report (its rules' conditions), which the
    /// parent's `all()` / `any()` rules read.
    pub outcomes: Vec<String>,
    /// Whether the movement may change files.
    pub edit: bool,
}

/// How a transition is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// A rule of the movement (a condition, a takt tag, a graph `$status`).
    Rule,
    /// A parallel parent's `all()` / `any()` rule over its sub-movements' outcomes.
    Aggregate,
    /// The engine's fallback when no rule decides (`default_next`).
    DefaultNext,
    /// A takt loop monitor's judge, after the cycle ending here has repeated.
    LoopMonitor,
    /// The maestro dialect's `complete` control tool, offered in every movement: it ends the
    /// run (`success` here; `aborted` and `needs_user_input` end it as ABORT and ASK would).
    CompleteTool,
}

/// One transition of a [`PieceGraph`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GraphEdge {
    /// The movement it leaves.
    pub from: String,
    /// The movement it leads to, or a special target (`COMPLETE`, `ABORT`, `ASK`,
    /// `WAIT_SUBTASKS`).
    pub to: String,
    /// What chooses it: the rule's condition, tag or status as written; empty for a fallback.
    pub label: String,
    /// How it is chosen.
    pub kind: EdgeKind,
    /// The rule's index in its movement's (or loop judge's) `rules`; `None` for a fallback.
    pub rule: Option<usize>,
    /// takt's `requires_user_input`: the run first ends asking the user, and goes on to `to`
    /// with the answer.
    pub requires_user_input: bool,
}

/// How a rule's condition reads in a diagram: as the piece file spells it.
fn condition_label(condition: &Condition) -> String {
    let quoted = |items: &[String]| {
        items
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match condition {
        Condition::Text(text) | Condition::Status(text) => text.clone(),
        Condition::Ai(text) => format!("ai({text:?})"),
        Condition::All(items) => format!("all({})", quoted(items)),
        Condition::Any(items) => format!("any({})", quoted(items)),
        Condition::When {
            base: None,
            predicate,
        } => format!("when({predicate})"),
        Condition::When {
            base: Some(base),
            predicate,
        } => format!("{} && when({predicate})", condition_label(base)),
    }
}

const SPECIALS: [Target; 4] = [
    Target::Complete,
    Target::Abort,
    Target::Ask,
    Target::WaitSubtasks,
];

/// The graph of a loaded piece.
pub fn piece_graph(piece: &Piece) -> PieceGraph {
    let mut movements = Vec::new();
    let mut edges = Vec::new();
    let rules_of = |m: &Movement, edges: &mut Vec<GraphEdge>| {
        for (i, rule) in m.rules.iter().enumerate() {
            let Some(next) = &rule.next else { continue };
            let kind = match rule.condition {
                Condition::All(_) | Condition::Any(_) if m.is_parallel() => EdgeKind::Aggregate,
                _ => EdgeKind::Rule,
            };
            edges.push(GraphEdge {
                from: m.name.clone(),
                to: next.label().to_string(),
                label: condition_label(&rule.condition),
                kind,
                rule: Some(i),
                requires_user_input: rule.requires_user_input,
            });
        }
        if let Some(next) = &m.default_next {
            edges.push(GraphEdge {
                from: m.name.clone(),
                to: next.label().to_string(),
                label: String::new(),
                kind: EdgeKind::DefaultNext,
                rule: None,
                requires_user_input: false,
            });
        }
    };
    for m in &piece.movements {
        movements.push(GraphMovement {
            name: m.name.clone(),
            kind: if m.is_parallel() {
                MovementKind::Parallel
            } else {
                MovementKind::Movement
            },
            parallel: m.is_parallel(),
            parent: None,
            sub_movements: m.parallel.iter().map(|s| s.name.clone()).collect(),
            outcomes: Vec::new(),
            edit: m.edit,
        });
        rules_of(m, &mut edges);
        if piece.dialect == Dialect::Maestro {
            edges.push(GraphEdge {
                from: m.name.clone(),
                to: Target::Complete.label().to_string(),
                label: "complete".to_string(),
                kind: EdgeKind::CompleteTool,
                rule: None,
                requires_user_input: false,
            });
        }
        for sub in &m.parallel {
            movements.push(GraphMovement {
                name: sub.name.clone(),
                kind: MovementKind::SubMovement,
                parallel: false,
                parent: Some(m.name.clone()),
                sub_movements: Vec::new(),
                outcomes: sub
                    .rules
                    .iter()
                    .map(|r| condition_label(&r.condition))
                    .collect(),
                edit: sub.edit,
            });
            // A sub-movement's own rules name outcomes, not movements: its parent decides.
            rules_of(sub, &mut edges);
        }
    }
    for monitor in &piece.loop_monitors {
        let Some(last) = monitor.cycle.last() else {
            continue;
        };
        for (i, rule) in monitor.judge.rules.iter().enumerate() {
            let Some(next) = &rule.next else { continue };
            edges.push(GraphEdge {
                from: last.clone(),
                to: next.label().to_string(),
                label: format!(
                    "after {}× {}: {}",
                    monitor.threshold,
                    monitor.cycle.join(" → "),
                    condition_label(&rule.condition)
                ),
                kind: EdgeKind::LoopMonitor,
                rule: Some(i),
                requires_user_input: rule.requires_user_input,
            });
        }
    }
    let targets = SPECIALS
        .iter()
        .map(Target::label)
        .filter(|label| edges.iter().any(|e| e.to == *label))
        .map(str::to_string)
        .collect();
    PieceGraph {
        name: piece.name.clone(),
        dialect: piece.dialect,
        initial_movement: piece.initial_movement.clone(),
        movements,
        edges,
        targets,
    }
}

/// The piece has no movement of that name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("piece `{piece}` has no movement `{movement}`; known: {}", known.join(", "))]
pub struct NoSuchMovement {
    /// The piece's name.
    pub piece: String,
    /// The movement asked for.
    pub movement: String,
    /// Its movements and sub-movements, and the steps of the workflows it calls as
    /// `CALLER/STEP`, in file order.
    pub known: Vec<String>,
}

/// The system prompt and first user message the engine sends when a run of `piece` with the
/// task `task` starts `movement` (a movement, a parallel sub-movement, or a step of a called
/// workflow by its path, `develop/plan`) in its first iteration, as an agent would get them.
pub fn movement_prompt(
    piece: &Piece,
    movement: &str,
    task: &str,
) -> Result<Prompt, NoSuchMovement> {
    let (workflow, found) = movement_at(piece, movement)?;
    Ok(first_prompt(&workflow, &found, task))
}

/// What a run does when it starts `movement` (as [`movement_prompt`] takes it): the prompts of
/// a movement that calls the model, or, for one that makes no model call itself, the steps it
/// runs instead. What `maestro prompt` prints.
pub fn movement_view(
    piece: &Piece,
    movement: &str,
    task: &str,
) -> Result<MovementView, NoSuchMovement> {
    let (workflow, found) = movement_at(piece, movement)?;
    let runs = match &found.kind {
        StepKind::WorkflowCall(call) => Some(Runs::Workflow {
            name: call.callee.name.clone(),
            initial: format!("{}/{}", found.name, call.callee.initial_movement),
            steps: call
                .callee
                .movements
                .iter()
                .map(|m| format!("{}/{}", found.name, m.name))
                .collect(),
        }),
        StepKind::System(_) => Some(Runs::System),
        StepKind::Agent if found.is_parallel() && found.dynamic.is_none() => Some(Runs::Parallel {
            steps: found.parallel.iter().map(|s| s.name.clone()).collect(),
        }),
        _ => None,
    };
    Ok(match runs {
        Some(runs) => MovementView::NoModelCall {
            movement: found.name.clone(),
            runs,
        },
        None => MovementView::Prompt(first_prompt(&workflow, &found, task)),
    })
}

/// What a run does when it starts a movement: see [`movement_view`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MovementView {
    /// The movement calls the model: its first messages.
    Prompt(Prompt),
    /// The movement makes no model call itself.
    NoModelCall {
        /// The movement, by the path `--movement` takes.
        movement: String,
        /// What runs instead.
        runs: Runs,
    },
}

/// What a movement that makes no model call runs instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runs {
    /// A `workflow_call` step: the called workflow, whose steps run in its place.
    Workflow {
        /// The called workflow's name.
        name: String,
        /// The step it starts with, by its path.
        initial: String,
        /// Its steps, by the paths `--movement` takes, in file order.
        steps: Vec<String>,
    },
    /// A parallel parent: its sub-steps, which run at the same time; its rules read their
    /// results.
    Parallel {
        /// The sub-steps, in file order.
        steps: Vec<String>,
    },
    /// A TAKT system step: engine-side inputs and effects.
    System,
}

/// The prompts of `movement` of `workflow` in a run's first iteration.
fn first_prompt(workflow: &Piece, movement: &Movement, task: &str) -> Prompt {
    let ctx = PromptContext {
        task: task.to_string(),
        iteration: 1,
        max_movements: workflow.max_movements,
        movement_iteration: 1,
        ..PromptContext::default()
    };
    assemble(workflow, movement, &ctx)
}

/// The movement `path` names, with the workflow a run is in when it runs it: `piece` for its
/// own movements and parallel sub-movements, else, for `CALLER/…/STEP`, the workflow called by
/// the `workflow_call` steps on the path, as the engine names and renders it.
fn movement_at(piece: &Piece, path: &str) -> Result<(Piece, Movement), NoSuchMovement> {
    let unknown = || NoSuchMovement {
        piece: piece.name.clone(),
        movement: path.to_string(),
        known: step_paths(piece, ""),
    };
    let own = maestro_engine::called_workflow(piece, &[]).map_err(|_| unknown())?;
    if let Some(found) = own.movement(path).cloned() {
        return Ok((own, found));
    }
    let segments: Vec<&str> = path.split('/').collect();
    let callers = &segments[..segments.len() - 1];
    if callers.is_empty() {
        return Err(unknown());
    }
    let workflow = maestro_engine::called_workflow(piece, callers).map_err(|_| unknown())?;
    let found = workflow.movement(path).cloned().ok_or_else(unknown)?;
    Ok((workflow, found))
}

/// Every movement of `piece` by the path `--movement` takes: each movement, its parallel
/// sub-movements, and the steps of the workflow a `workflow_call` step calls, under its name.
fn step_paths(piece: &Piece, prefix: &str) -> Vec<String> {
    let under = |name: &str| {
        if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}/{name}")
        }
    };
    let mut paths = Vec::new();
    for m in &piece.movements {
        paths.push(under(&m.name));
        paths.extend(m.parallel.iter().map(|s| under(&s.name)));
        if let StepKind::WorkflowCall(call) = &m.kind {
            paths.extend(step_paths(&call.callee, &under(&m.name)));
        }
    }
    paths
}

/// Why a piece could not be had by name.
#[derive(Debug, thiserror::Error)]
pub enum PieceLookupError {
    /// The stored piece no longer loads under the current configuration (a facet file moved,
    /// a tool is gone): each error with its position.
    #[error(
        "the piece `{name}` in the store does not load ({} error{}); fix it and write it again",
        errors.len(), if errors.len() == 1 { "" } else { "s" }
    )]
    Invalid {
        /// The piece's name.
        name: String,
        /// Every error.
        errors: Vec<PieceDiagnostic>,
    },
    /// The store could not be read.
    #[error("the pieces in the store cannot be read")]
    Store(#[source] maestro_store::StoreError),
}

/// The piece `name` loaded as a run would find it: the store's live version first, else a
/// piece file of the pieces directories. `Ok(None)` when neither has it (or `name` is not a
/// piece name: a name is never a path).
pub async fn loaded_piece(
    store: &Store,
    config: &Config,
    name: &str,
) -> Result<Option<Piece>, PieceLookupError> {
    if !valid_piece_name(name) {
        return Ok(None);
    }
    match load_stored_piece(store, config, name).await {
        Ok(Some(piece)) => return Ok(Some(piece)),
        Ok(None) => {}
        Err(PieceError::Invalid { diagnostics, .. }) => {
            return Err(PieceLookupError::Invalid {
                name: name.to_string(),
                errors: diagnostics
                    .errors
                    .iter()
                    .map(PieceDiagnostic::from_diagnostic)
                    .collect(),
            });
        }
        Err(PieceError::Store(e)) => return Err(PieceLookupError::Store(e)),
        Err(_) => {}
    }
    Ok(dir_piece_found(config, name).map(|found| found.piece))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;

    use maestro_piece::{LoadOptions, load_str};

    use super::*;

    fn load(yaml: &str) -> Piece {
        load_str(yaml, Path::new("/nowhere/p.yaml"), &LoadOptions::default())
            .unwrap()
            .piece
    }

    #[test]
    fn a_maestro_piece_has_its_rules_fallbacks_and_special_targets() {
        let piece = load(
            "name: p\ndescription: d\nmax_movements: 5\ninitial_movement: plan\nmovements:\n\
             \x20 - name: plan\n    edit: false\n    persona: P\n    instruction: I\n\
             \x20   allowed_tools: []\n    rules:\n      - condition: planned\n\
             \x20       next: build\n    default_next: ASK\n\
             \x20 - name: build\n    edit: true\n    persona: P\n    instruction: I\n\
             \x20   allowed_tools: []\n    rules:\n      - condition: split\n\
             \x20       next: WAIT_SUBTASKS\n    default_next: ABORT\n",
        );
        let graph = piece_graph(&piece);
        assert_eq!(graph.initial_movement, "plan");
        let names: Vec<_> = graph.movements.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["plan", "build"]);
        let edges: Vec<_> = graph
            .edges
            .iter()
            .map(|e| (e.from.as_str(), e.to.as_str(), e.label.as_str(), e.kind))
            .collect();
        assert_eq!(
            edges,
            [
                ("plan", "build", "planned", EdgeKind::Rule),
                ("plan", "ASK", "", EdgeKind::DefaultNext),
                ("plan", "COMPLETE", "complete", EdgeKind::CompleteTool),
                ("build", "WAIT_SUBTASKS", "split", EdgeKind::Rule),
                ("build", "ABORT", "", EdgeKind::DefaultNext),
                ("build", "COMPLETE", "complete", EdgeKind::CompleteTool),
            ]
        );
        assert_eq!(graph.targets, ["COMPLETE", "ABORT", "ASK", "WAIT_SUBTASKS"]);
    }

    #[test]
    fn an_unknown_movement_names_the_known_ones() {
        let piece = load(
            "name: p\ndescription: d\nmax_movements: 5\ninitial_movement: only\nmovements:\n\
             \x20 - name: only\n    edit: false\n    persona: P\n    instruction: I\n\
             \x20   allowed_tools: []\n    rules: []\n",
        );
        let err = movement_prompt(&piece, "other", "t").unwrap_err();
        assert_eq!(
            err.to_string(),
            "piece `p` has no movement `other`; known: only"
        );
        let prompt = movement_prompt(&piece, "only", "the task").unwrap();
        assert!(prompt.user.contains("the task"), "{}", prompt.user);
    }
}
