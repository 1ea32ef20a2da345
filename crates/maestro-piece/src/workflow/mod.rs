//! TAKT workflows (v0.36 to v0.60): the generation of TAKT files that says `steps`,
//! `initial_step`, `max_steps` and `workflow_config` where v0.30 pieces said `movements`,
//! `initial_movement`, `max_movements` and `piece_config`. They load into the same piece IR
//! (dialect `takt`), checked the way TAKT v0.60's loader checks them: the top level is strict,
//! step fragments and parameters are expanded first, and every step kind is validated whole.
//! See `docs/dialects.md`, "TAKT workflows".

mod calls;
mod condition;
mod expand;
mod layers;
mod resources;
mod step;

use std::collections::BTreeMap;

use crate::check::{Fields, Unknown, fields, known_list, list, string, string_list};
use crate::cx::Cx;
use crate::ir::{Dialect, LoopMonitor, Piece};
use crate::yaml::{Node, Value, join_index, join_key};
use expand::{Fragments, Param};
use layers::Layers;

/// Hex SHA-256 of `source`, and of every workflow its `workflow_call` steps load (their own
/// hashes cover their calls): a run's record tells when any file of the call tree changed.
pub(crate) fn tree_hash(source: &str, piece: &Piece) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(source.as_bytes());
    let mut called = false;
    for m in piece
        .movements
        .iter()
        .flat_map(|m| std::iter::once(m).chain(&m.parallel))
    {
        if let crate::ir::StepKind::WorkflowCall(call) = &m.kind {
            called = true;
            hasher.update(b"\0");
            hasher.update(call.callee.hash.as_bytes());
        }
    }
    if !called {
        return hex::encode(Sha256::digest(source.as_bytes()));
    }
    hex::encode(hasher.finalize())
}

/// Top-level keys that make a file a TAKT workflow.
pub(crate) const WORKFLOW_KEYS: &[&str] =
    &["steps", "initial_step", "max_steps", "workflow_config"];

/// The v0.30 piece keys each workflow key replaced, in the same order.
pub(crate) const PIECE_KEYS: &[&str] = &[
    "movements",
    "initial_movement",
    "max_movements",
    "piece_config",
];

/// Every top-level key of a TAKT v0.60 workflow (plus Maestro's own `dialect`).
const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "subworkflow",
    "workflow_config",
    "capabilities",
    "mcp_servers",
    "schemas",
    "personas",
    "policies",
    "knowledge",
    "instructions",
    "report_formats",
    "all_steps",
    "facet_pools",
    "steps",
    "initial_step",
    "max_steps",
    "loop_monitors",
    "interactive_mode",
    "dialect",
];

/// Top-level keys TAKT removed from workflow files, with where the setting lives now.
const REMOVED_TOP_KEYS: &[(&str, &str)] = &[
    (
        "auto_routing",
        "routing is not a workflow field since TAKT v0.60; configure the model in Maestro's configuration (`llm:`) instead",
    ),
    (
        "rate_limit_fallback",
        "rate-limit fallback is not a workflow field since TAKT v0.60; Maestro's model client retries on its own (`llm:` in the configuration)",
    ),
    (
        "permission_mode",
        "a workflow has no top-level permission mode; give each step `edit`, `required_permission_mode` or `capabilities`",
    ),
    (
        "provider",
        "provider and model are not workflow fields since TAKT v0.60; configure the model in Maestro's configuration (`llm:`)",
    ),
    (
        "model",
        "provider and model are not workflow fields since TAKT v0.60; configure the model in Maestro's configuration (`llm:`)",
    ),
];

/// Which generation of TAKT file a mapping is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Generation {
    /// v0.20–v0.30: `movements`, …
    Piece,
    /// v0.36 and later: `steps`, …
    Workflow,
    /// Both: the keys of each generation that the file has.
    Mixed {
        workflow: Vec<&'static str>,
        piece: Vec<&'static str>,
    },
}

/// The generation `root`'s top-level keys say.
pub(crate) fn generation(root: &Node) -> Generation {
    let has = |keys: &[&'static str]| -> Vec<&'static str> {
        keys.iter()
            .copied()
            .filter(|k| root.get(k).is_some())
            .collect()
    };
    let workflow = has(WORKFLOW_KEYS);
    let piece = has(PIECE_KEYS);
    match (workflow.is_empty(), piece.is_empty()) {
        (true, _) => Generation::Piece,
        (false, true) => Generation::Workflow,
        (false, false) => Generation::Mixed { workflow, piece },
    }
}

/// Loads a TAKT file of either generation; a file mixing them is an error naming the keys.
pub(crate) fn load_takt(cx: &mut Cx<'_>, root: &Node) -> Option<Piece> {
    match generation(root) {
        Generation::Piece => crate::takt::load(cx, root),
        Generation::Workflow => load_with(cx, root, None),
        Generation::Mixed { workflow, piece } => {
            let first = piece
                .iter()
                .filter_map(|k| {
                    root.as_map()?
                        .iter()
                        .find(|(key, _)| key.text == *k)
                        .map(|(key, _)| (k, key.span))
                })
                .next();
            let (key, span) = first.unwrap_or((&"", root.span));
            let renames: Vec<String> = piece
                .iter()
                .filter_map(|p| {
                    let i = PIECE_KEYS.iter().position(|k| k == p)?;
                    Some(format!("`{p}` -> `{}`", WORKFLOW_KEYS[i]))
                })
                .collect();
            cx.sink.error(
                key,
                span,
                format!(
                    "this file mixes the two generations of TAKT files: {} belong to a TAKT workflow (v0.36 and later), {} to a TAKT piece (v0.30 and earlier); write it as one of them (for a workflow rename {})",
                    quote(&workflow),
                    quote(&piece),
                    renames.join(", ")
                ),
            );
            None
        }
    }
}

fn quote(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the steps of a workflow may refer to while they are read.
pub(crate) struct Scope {
    /// The top-level step names.
    pub steps: Vec<String>,
    /// `subworkflow.callable`.
    pub callable: bool,
    /// `subworkflow.returns`.
    pub returns: Vec<String>,
    /// `capabilities` at the top: every step's default.
    pub capabilities: Option<Node>,
    /// Workflow-wide rules, resolved: (text, before the instruction).
    pub all_rules: Vec<(String, bool)>,
    /// `schemas`' keys.
    pub schemas: Vec<String>,
    /// `schemas`: each key's schema name and its JSON, where it resolved.
    pub schema_values: BTreeMap<String, (String, serde_json::Value)>,
    /// `facet_pools`' keys.
    pub pools: Vec<String>,
    /// `facet_pools`' candidates, facets resolved, by pool.
    pub pool_candidates: Vec<resources::Pool>,
    pub layers: Layers,
    /// The workflows on the call chain that loads this one, the root first and this one
    /// last: a `workflow_call` to one of them is a cycle.
    pub chain: Vec<String>,
}

/// Loads a workflow: the root of a load (`call` is `None`), or a called workflow with the
/// call's arguments in place of its parameters' defaults.
pub(crate) fn load_with(
    cx: &mut Cx<'_>,
    root: &Node,
    call: Option<calls::CallInput>,
) -> Option<Piece> {
    const WHAT: &str = "a TAKT workflow";
    check_top_keys(cx, root);
    // Every key `check_top_keys` refused is reported there, once, as an error.
    let mut known = all_top_keys();
    if let Some(entries) = root.as_map() {
        known.extend(entries.iter().map(|(key, _)| key.text.as_str()));
    }
    let top = fields(&mut cx.sink, root, "", WHAT, &known, Unknown::Warn)?;
    cx.facets.read_sections(&mut cx.sink, &top);
    let layers = Layers::new(cx.sink.file(), cx.opts);
    let name = top.required_string(&mut cx.sink, "name", WHAT);
    let description = top
        .optional_string(&mut cx.sink, "description")
        .unwrap_or_default();
    let (callable, returns, mut params) = read_subworkflow(cx, &top);
    let chain = match call {
        Some(call) => {
            for (key, value) in call.args {
                if let Some(param) = params.get_mut(&key) {
                    param.value = Some(value);
                }
            }
            call.chain
        }
        None => name.iter().cloned().collect(),
    };
    let max_movements = read_max_steps(cx, &top);
    if let Some((_, p)) = top.get("workflow_config") {
        read_workflow_config(cx, &top, &p);
    }
    let capabilities = top.get("capabilities").map(|(n, p)| {
        resources::capabilities(&mut cx.sink, n, &p, &layers);
        n.clone()
    });
    let all_rules = resources::all_steps_rules(cx, &top, &layers);
    let (schemas, schema_values) = resources::schemas(cx, &top, &layers);
    let pool_candidates = resources::facet_pools(cx, &top, &layers);
    let pools: Vec<String> = pool_candidates.iter().map(|(n, _)| n.clone()).collect();
    if let Some((node, p)) = top.get("interactive_mode") {
        let known = ["assistant", "grill-me", "passthrough", "quiet", "persona"];
        if !node.as_str().is_some_and(|m| known.contains(&m)) {
            cx.sink.error(
                &p,
                node.span,
                format!(
                    "unknown interactive mode {}; known: {}",
                    node.kind_name(),
                    known.join(", ")
                ),
            );
        }
    }
    if let Some((node, p)) = top.get("mcp_servers")
        && node.as_map().is_none()
    {
        cx.sink.error(
            &p,
            node.span,
            format!(
                "expected a mapping of MCP server names to definitions, found {}",
                node.kind_name()
            ),
        );
    }

    // Steps: fragments first, then the workflow's own parameters, as TAKT does.
    let items: Vec<Node> = match top.required(&mut cx.sink, "steps", WHAT) {
        Some((node, p)) => match list(&mut cx.sink, node, &p, "a list of steps") {
            Some(items) => {
                if items.is_empty() {
                    cx.sink
                        .error(&p, node.span, "a workflow needs at least one step");
                }
                let mut fragments = Fragments::new(&layers);
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let ip = join_index("steps", i);
                        let mut step = fragments.step(&mut cx.sink, item, &ip);
                        expand::substitute(&mut cx.sink, &mut step, &ip, &params, "this workflow");
                        step
                    })
                    .collect()
            }
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let steps = crate::takt::movement::names_in(cx, &items, "steps", "step");
    let initial_movement = match top.get("initial_step") {
        Some((node, p)) => string(&mut cx.sink, node, &p).map(|initial| {
            if !steps.is_empty() && !steps.iter().any(|s| s == initial) {
                cx.sink.error(
                    &p,
                    node.span,
                    format!("unknown step `{initial}`; known: {}", known_list(&steps)),
                );
            }
            initial.to_owned()
        }),
        None => steps.first().cloned(),
    };
    let scope = Scope {
        steps,
        callable,
        returns,
        capabilities,
        all_rules,
        schemas,
        schema_values,
        pools,
        pool_candidates,
        layers,
        chain,
    };
    let movements = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| step::read(cx, item, &join_index("steps", i), &scope))
        .collect();
    let loop_monitors = read_loop_monitors(cx, &top, &scope);
    Some(Piece {
        name: name?,
        description,
        dialect: Dialect::Takt,
        source: Default::default(),
        hash: String::new(),
        max_movements: max_movements?,
        initial_movement: initial_movement?,
        start_prompt: None,
        movements,
        loop_monitors,
        keywords: Vec::new(),
        required_mcp: Vec::new(),
        model: None,
        budget: None,
    })
}

fn all_top_keys() -> Vec<&'static str> {
    TOP_KEYS
        .iter()
        .copied()
        .chain(REMOVED_TOP_KEYS.iter().map(|(k, _)| *k))
        .chain(PIECE_KEYS.iter().copied())
        .collect()
}

/// TAKT's top level is strict: an unknown key is an error, a removed one says where its
/// setting went.
fn check_top_keys(cx: &mut Cx<'_>, root: &Node) {
    let Some(entries) = root.as_map() else {
        return;
    };
    for (key, _) in entries {
        if TOP_KEYS.contains(&key.text.as_str()) || key.text.starts_with("x-") {
            continue;
        }
        if let Some((_, why)) = REMOVED_TOP_KEYS.iter().find(|(k, _)| *k == key.text) {
            cx.sink.error(
                &key.text,
                key.span,
                format!("`{}` is not allowed in a TAKT workflow: {why}", key.text),
            );
            continue;
        }
        let near = crate::catalog::closest(&key.text, TOP_KEYS.iter().copied())
            .map(|near| format!("; did you mean `{near}`?"))
            .unwrap_or_default();
        let hint = match key.text.as_str() {
            "params" => "; a callable workflow declares its parameters under `subworkflow.params`",
            "returns" | "callable" | "visibility" => "; it belongs under `subworkflow:`",
            _ => near.as_str(),
        };
        cx.sink.error(
            &key.text,
            key.span,
            format!(
                "unknown field `{}` in a TAKT workflow (the top level is strict); known: {}{hint}",
                key.text,
                TOP_KEYS.join(", ")
            ),
        );
    }
}

fn read_max_steps(cx: &mut Cx<'_>, top: &Fields<'_>) -> Option<u32> {
    let Some((node, p)) = top.get("max_steps") else {
        // TAKT's default; a called workflow shares its caller's budget anyway.
        return Some(10);
    };
    if node.as_str() == Some("infinite") {
        // No budget: the loop monitors and the run's own limits still apply.
        return Some(u32::MAX);
    }
    match &node.value {
        Value::Scalar(s) if matches!(s.kind(), crate::yaml::ScalarKind::Int(_)) => {
            crate::check::positive(&mut cx.sink, node, &p)
        }
        _ => {
            cx.sink.error(
                &p,
                node.span,
                format!(
                    "expected a positive integer or `infinite`, found {}",
                    node.kind_name()
                ),
            );
            None
        }
    }
}

fn read_workflow_config(cx: &mut Cx<'_>, top: &Fields<'_>, path: &str) {
    let Some((node, _)) = top.get("workflow_config") else {
        return;
    };
    let Some(entries) = node.as_map() else {
        cx.sink.error(
            path,
            node.span,
            format!(
                "expected `workflow_config` (a mapping), found {}",
                node.kind_name()
            ),
        );
        return;
    };
    for (key, value) in entries {
        let p = join_key(path, &key.text);
        match key.text.as_str() {
            "runtime" => {
                let Some(rt) = fields(
                    &mut cx.sink,
                    value,
                    &p,
                    "`workflow_config.runtime`",
                    &["prepare"],
                    Unknown::Error,
                ) else {
                    continue;
                };
                if let Some((prep, pp)) = rt.get("prepare")
                    && let Some(items) = string_list(&mut cx.sink, prep, &pp)
                {
                    for item in items {
                        if !matches!(item.text, "node" | "gradle") {
                            cx.sink.error(
                                &item.path,
                                item.span,
                                format!(
                                    "runtime prepare script `{}` is refused: only the presets `node` and `gradle` run (custom scripts need TAKT's `workflow_runtime_prepare.custom_scripts`, which Maestro does not offer); prepare the workspace before the run instead",
                                    item.text
                                ),
                            );
                        }
                    }
                }
            }
            "provider" | "model" | "provider_options" => cx.sink.error(
                &p,
                key.span,
                format!(
                    "`workflow_config.{}` was removed in TAKT v0.60; configure the model in Maestro's configuration (`llm:`) instead",
                    key.text
                ),
            ),
            _ => cx.sink.error(
                &p,
                key.span,
                format!(
                    "unknown field `{}` in `workflow_config`; known: runtime",
                    key.text
                ),
            ),
        }
    }
}

/// `subworkflow`: (callable, returns, params with their defaults).
fn read_subworkflow(
    cx: &mut Cx<'_>,
    top: &Fields<'_>,
) -> (bool, Vec<String>, BTreeMap<String, Param>) {
    let Some((node, p)) = top.get("subworkflow") else {
        return (false, Vec::new(), BTreeMap::new());
    };
    let Some(sub) = fields(
        &mut cx.sink,
        node,
        &p,
        "`subworkflow`",
        &["callable", "visibility", "returns", "params"],
        Unknown::Error,
    ) else {
        return (false, Vec::new(), BTreeMap::new());
    };
    let callable = sub
        .get("callable")
        .and_then(|(n, p)| crate::check::boolean(&mut cx.sink, n, &p))
        .unwrap_or(false);
    if let Some((n, vp)) = sub.get("visibility")
        && n.as_str() != Some("internal")
    {
        cx.sink.error(
            &vp,
            n.span,
            format!("unknown visibility {}; known: internal", n.kind_name()),
        );
    }
    let mut returns = Vec::new();
    if let Some((n, rp)) = sub.get("returns")
        && let Some(items) = string_list(&mut cx.sink, n, &rp)
    {
        for item in items {
            if matches!(item.text, "COMPLETE" | "ABORT") {
                cx.sink.error(
                    &item.path,
                    item.span,
                    format!(
                        "`{}` is a reserved result and cannot be listed in `subworkflow.returns`; every workflow can end with it",
                        item.text
                    ),
                );
            } else {
                returns.push(item.text.to_owned());
            }
        }
    }
    let params = sub
        .get("params")
        .map(|(n, pp)| expand::read_params(&mut cx.sink, n, &pp, true))
        .unwrap_or_default();
    if !callable {
        for key in ["returns", "params", "visibility"] {
            if sub.get(key).is_some() {
                cx.sink.error(
                    &join_key(&p, key),
                    sub.key_span(key).unwrap_or(node.span),
                    format!("`subworkflow.{key}` requires `callable: true`"),
                );
            }
        }
    }
    (callable, returns, params)
}

fn read_loop_monitors(cx: &mut Cx<'_>, top: &Fields<'_>, scope: &Scope) -> Vec<LoopMonitor> {
    let Some((node, path)) = top.get("loop_monitors") else {
        return Vec::new();
    };
    let Some(items) = list(&mut cx.sink, node, &path, "a list of loop monitors") else {
        return Vec::new();
    };
    let targets = crate::takt::movement::Targets {
        movements: scope.steps.clone(),
    };
    let mut monitors = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(&path, i);
        let Some(m) = fields(
            &mut cx.sink,
            item,
            &ip,
            "a loop monitor",
            &["cycle", "ignore_steps", "threshold", "judge"],
            Unknown::Error,
        ) else {
            continue;
        };
        let names = |cx: &mut Cx<'_>, key: &str| -> Vec<String> {
            let Some((n, p)) = m.get(key) else {
                return Vec::new();
            };
            let items = string_list(&mut cx.sink, n, &p).unwrap_or_default();
            for s in &items {
                if !scope.steps.iter().any(|x| x == s.text) {
                    cx.sink.error(
                        &s.path,
                        s.span,
                        format!(
                            "unknown step `{}`; known: {}",
                            s.text,
                            known_list(&scope.steps)
                        ),
                    );
                }
            }
            items.iter().map(|s| s.text.to_owned()).collect()
        };
        let cycle = names(cx, "cycle");
        let ignore = names(cx, "ignore_steps");
        if let Some((n, p)) = m.get("cycle")
            && cycle.len() < 2
        {
            cx.sink.error(
                &p,
                n.span,
                "a loop monitor's `cycle` names at least two steps",
            );
        }
        for s in &ignore {
            if cycle.contains(s)
                && let Some((n, p)) = m.get("ignore_steps")
            {
                cx.sink.error(
                    &p,
                    n.span,
                    format!("ignored step `{s}` cannot also be part of the monitored cycle"),
                );
            }
        }
        let threshold = match m.get("threshold") {
            Some((n, p)) => crate::check::positive(&mut cx.sink, n, &p),
            None => Some(3),
        };
        let judge = m
            .required(&mut cx.sink, "judge", "a loop monitor")
            .and_then(|(n, p)| {
                if let Some(entries) = n.as_map() {
                    for (k, _) in entries {
                        if let Some(why) = match k.text.as_str() {
                            "session_key" => Some(
                                "`session_key` is not supported on `loop_monitors.judge`; judges always start a fresh session",
                            ),
                            "provider" | "model" | "provider_options" => Some(
                                "a judge has no provider settings since TAKT v0.60; configure the model in Maestro's configuration (`llm:`)",
                            ),
                            "instruction_template" => Some(
                                "`instruction_template` was removed; use `instruction`",
                            ),
                            _ => None,
                        } {
                            cx.sink.error(&join_key(&p, &k.text), k.span, why);
                        }
                    }
                }
                crate::takt::movement::read_judge(cx, n, &p, &targets)
            });
        if let (Some(threshold), Some(judge)) = (threshold, judge) {
            monitors.push(LoopMonitor {
                cycle,
                threshold,
                judge,
            });
        }
    }
    monitors
}
