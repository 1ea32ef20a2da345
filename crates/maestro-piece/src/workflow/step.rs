//! Steps of a TAKT workflow, after fragment and parameter expansion: every step kind is
//! checked the way TAKT v0.60 checks it and lowered into a [`Movement`]. Agent steps and
//! static parallel steps become ordinary movements; the kinds the engine does not run yet keep
//! their definition in [`StepKind`] (see `docs/dialects.md`).

use super::Scope;
use super::calls;
use super::condition;
use super::resources;
use crate::check::{
    Fields, Unknown, boolean, fields, known_list, list, nonempty_string, one_or_many, string,
    string_list,
};
use crate::cx::Cx;
use crate::dynamic::{Dynamic, DynamicFacets, Participants, SelectionMode, SelectorGuidance};
use crate::facets::FacetKind;
use crate::ir::{
    CommandGate, Condition, Facet, Movement, OutputContract, Rule, SessionMode, StepKind, Target,
    WorkflowCall,
};
use crate::takt::movement::{DEFAULT_TOOLS, many_facets, single_facet};
use crate::yaml::{Node, ScalarKind, Span, Value, join_index, join_key};

/// Every key a step of any kind may have (after `uses`/`with` are expanded).
const STEP_KEYS: &[&str] = &[
    "name",
    "description",
    "session_key",
    "kind",
    "mode",
    "call",
    "args",
    "vars",
    "session",
    "persona",
    "persona_name",
    "tags",
    "completion_retry",
    "review_completion",
    "policy",
    "knowledge",
    "allow_git_commit",
    "capabilities",
    "mcp",
    "mcp_servers",
    "promotion",
    "companion",
    "required_permission_mode",
    "edit",
    "requires_user_input",
    "instruction",
    "delay_before_ms",
    "structured_output",
    "system_inputs",
    "effects",
    "rules",
    "output_contracts",
    "quality_gates",
    "pass_previous_response",
    "parallel",
    "concurrency",
    "arpeggio",
    "team_leader",
    "dynamic_facets",
];

/// Step keys TAKT rejects, with the fix.
const REJECTED_STEP_KEYS: &[(&str, &str)] = &[
    (
        "provider",
        "provider and model are not workflow fields since TAKT v0.60; configure the model in Maestro's configuration (`llm:`)",
    ),
    (
        "model",
        "provider and model are not workflow fields since TAKT v0.60; configure the model in Maestro's configuration (`llm:`)",
    ),
    (
        "provider_options",
        "`provider_options` was removed in TAKT v0.60; name a preset with `capabilities` (readonly, edit, enable-skills)",
    ),
    (
        "overrides",
        "`workflow_call.overrides` was removed in TAKT v0.60; the called workflow runs with its caller's model",
    ),
    (
        "allowed_tools",
        "a workflow step does not list tools; name a preset with `capabilities` (readonly, edit, enable-skills)",
    ),
    (
        "permission_mode",
        "use `required_permission_mode` (readonly, edit, full) or `edit`",
    ),
    (
        "instruction_template",
        "`instruction_template` was removed; use `instruction`",
    ),
    (
        "uses",
        "the step fragment could not be expanded (see the error at `uses`)",
    ),
];

/// Keys a `workflow_call` step may have.
const CALL_KEYS: &[&str] = &[
    "name",
    "description",
    "kind",
    "call",
    "args",
    "vars",
    "rules",
];
/// Keys a system step may have.
const SYSTEM_KEYS: &[&str] = &[
    "name",
    "description",
    "kind",
    "mode",
    "system_inputs",
    "effects",
    "delay_before_ms",
    "rules",
];
/// Keys a parallel sub-step (an agent one) may not have.
const SUB_STEP_BANNED: &[&str] = &[
    "description",
    "kind",
    "mode",
    "promotion",
    "companion",
    "requires_user_input",
    "delay_before_ms",
    "structured_output",
    "system_inputs",
    "effects",
    "parallel",
    "concurrency",
    "arpeggio",
    "team_leader",
];

/// Effects that need a Git host (a pull request to act on): validated, then refused when a
/// run reaches them.
pub(crate) const REFUSED_EFFECTS: &[&str] = &["comment_pr", "merge_pr", "close_pr"];

/// Where a step sits; it decides what its rules may say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Normal,
    Parent,
    DynamicParent,
    Sub,
    Call,
    System,
}

/// What a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Agent,
    Call,
    System,
}

fn kind_of(cx: &mut Cx<'_>, s: &Fields<'_>, path: &str) -> Kind {
    let kind = s.get("kind");
    let mode = s.get("mode");
    if let (Some(_), Some(_)) = (&kind, &mode) {
        cx.sink.error(
            &join_key(path, "kind"),
            s.key_span("kind").unwrap_or(s.node.span),
            "a step's kind is written with either `kind` or `mode`, not both; keep `kind`",
        );
    }
    if let Some((node, p)) = &mode
        && node.as_str() != Some("system")
    {
        cx.sink.error(
            p,
            node.span,
            format!("unknown step mode {}; known: system", node.kind_name()),
        );
    }
    match kind.as_ref().map(|(n, _)| n.as_str()) {
        Some(Some("workflow_call")) => return Kind::Call,
        Some(Some("system")) => return Kind::System,
        Some(Some("agent")) => return Kind::Agent,
        Some(_) => {
            if let Some((node, p)) = kind {
                cx.sink.error(
                    &p,
                    node.span,
                    format!(
                        "unknown step kind {}; known: agent, workflow_call, system",
                        node.kind_name()
                    ),
                );
            }
        }
        None => {}
    }
    if mode
        .as_ref()
        .is_some_and(|(n, _)| n.as_str() == Some("system"))
    {
        return Kind::System;
    }
    if s.get("call").is_some() {
        return Kind::Call;
    }
    Kind::Agent
}

/// Reads one top-level step.
pub(super) fn read(cx: &mut Cx<'_>, item: &Node, path: &str, scope: &Scope) -> Option<Movement> {
    let s = step_fields(cx, item, path)?;
    let name = s
        .required(&mut cx.sink, "name", "a step")
        .and_then(|(n, p)| nonempty_string(&mut cx.sink, n, &p))?
        .to_owned();
    let mut movement = match kind_of(cx, &s, path) {
        Kind::Call => read_call(cx, &s, path, scope, Role::Call),
        Kind::System => read_system(cx, &s, path, scope),
        Kind::Agent => read_agent(cx, &s, path, scope, false),
    };
    movement.name = name;
    Some(movement)
}

/// Checks the keys of a step mapping: rejected keys are errors with the fix, unknown keys are
/// warnings (TAKT drops them).
fn step_fields<'n>(cx: &mut Cx<'_>, item: &'n Node, path: &'n str) -> Option<Fields<'n>> {
    if let Some(entries) = item.as_map() {
        for (key, _) in entries {
            if let Some((_, why)) = REJECTED_STEP_KEYS.iter().find(|(k, _)| *k == key.text) {
                if key.text == "uses" {
                    continue;
                }
                cx.sink.error(
                    &join_key(path, &key.text),
                    key.span,
                    format!("`{}` is not allowed in a workflow step: {why}", key.text),
                );
            }
        }
    }
    let known: Vec<&str> = STEP_KEYS
        .iter()
        .copied()
        .chain(REJECTED_STEP_KEYS.iter().map(|(k, _)| *k))
        .collect();
    let s = fields(&mut cx.sink, item, path, "a step", &known, Unknown::Warn)?;
    Some(s)
}

fn refuse_keys(cx: &mut Cx<'_>, s: &Fields<'_>, path: &str, allowed: &[&str], what: &str) {
    for (key, _) in s.entries {
        let k = key.text.as_str();
        if allowed.contains(&k)
            || !STEP_KEYS.contains(&k)
            || REJECTED_STEP_KEYS.iter().any(|(r, _)| *r == k)
            || k.starts_with("x-")
        {
            continue;
        }
        cx.sink.error(
            &join_key(path, k),
            key.span,
            format!("{what} does not allow `{k}`"),
        );
    }
}

fn empty_movement() -> Movement {
    Movement {
        name: String::new(),
        persona: None,
        policies: Vec::new(),
        knowledge: Vec::new(),
        instruction: None,
        edit: false,
        allowed_tools: Vec::new(),
        allowed_commands: None,
        allowed_ssh_connections: None,
        rules: Vec::new(),
        default_next: None,
        max_consecutive_revisits: None,
        pass_previous_response: true,
        session: SessionMode::default(),
        output_contracts: Vec::new(),
        quality_gates: Vec::new(),
        command_gates: Vec::new(),
        companions: Vec::new(),
        parallel: Vec::new(),
        frontmatter_schema: None,
        kind: StepKind::Agent,
        dynamic: None,
        structured_output: None,
        delay_before_ms: None,
        completion_retry: None,
    }
}

/// A `workflow_call` step (top-level, or a parallel sub-step with `role: Sub`).
fn read_call(cx: &mut Cx<'_>, s: &Fields<'_>, path: &str, scope: &Scope, role: Role) -> Movement {
    refuse_keys(cx, s, path, CALL_KEYS, "a workflow_call step");
    let mut callee = None;
    if let Some((node, p)) = s.required(&mut cx.sink, "call", "a workflow_call step")
        && let Some(target) = string(&mut cx.sink, node, &p)
    {
        match calls::find(&scope.layers, target) {
            Ok(c) => callee = Some((target.to_owned(), c, p, node.span)),
            Err(e) => cx.sink.error(&p, node.span, e),
        }
    }
    let mut args = std::collections::BTreeMap::new();
    let mut vars = std::collections::BTreeMap::new();
    if let Some((node, p)) = s.get("args") {
        match node.as_map() {
            Some(entries) => {
                for (key, value) in entries {
                    args.insert(key.text.clone(), value.clone());
                }
                if let Some((_, c, _, _)) = &callee {
                    for (key, _) in entries {
                        if !c.params.contains(&key.text) {
                            cx.sink.error(
                                &join_key(&p, &key.text),
                                key.span,
                                format!(
                                    "the called workflow has no parameter `{}`; its parameters: {}",
                                    key.text,
                                    known_list(&c.params)
                                ),
                            );
                        }
                    }
                }
            }
            None => cx.sink.error(
                &p,
                node.span,
                format!(
                    "expected a mapping of parameter names to values, found {}",
                    node.kind_name()
                ),
            ),
        }
    }
    if let Some((node, p)) = s.get("vars") {
        match node.as_map() {
            Some(entries) => {
                for (key, value) in entries {
                    if let Value::Scalar(sc) = &value.value
                        && sc.kind() != ScalarKind::Null
                    {
                        vars.insert(key.text.clone(), sc.text.clone());
                    } else {
                        cx.sink.error(
                            &join_key(&p, &key.text),
                            value.span,
                            format!(
                                "a workflow_call var is a string, number or boolean, found {}",
                                value.kind_name()
                            ),
                        );
                    }
                }
            }
            None => cx.sink.error(
                &p,
                node.span,
                format!(
                    "expected a mapping of variable names to values, found {}",
                    node.kind_name()
                ),
            ),
        }
    }
    let mut movement = empty_movement();
    let returns: Option<Vec<String>> = callee.as_ref().map(|(_, c, _, _)| c.returns.clone());
    movement.rules = read_rules(
        cx,
        s,
        path,
        scope,
        role_for_call(role),
        &[],
        returns.as_deref(),
    );
    if let Some((name, c, p, span)) = callee {
        match calls::load(cx, &name, &c, args, &scope.chain) {
            Ok(piece) => {
                movement.kind = StepKind::WorkflowCall(Box::new(WorkflowCall {
                    definition: s.node.to_json(),
                    callee: piece,
                    vars,
                }))
            }
            Err(e) => cx.sink.error(&p, span, e),
        }
    }
    movement
}

fn role_for_call(role: Role) -> Role {
    if role == Role::Sub {
        Role::Sub
    } else {
        Role::Call
    }
}

/// A system step: engine-side inputs and effects, no agent.
fn read_system(cx: &mut Cx<'_>, s: &Fields<'_>, path: &str, scope: &Scope) -> Movement {
    refuse_keys(cx, s, path, SYSTEM_KEYS, "a system step");
    if let Some((node, p)) = s.get("system_inputs") {
        system_inputs(cx, node, &p);
    }
    if let Some((node, p)) = s.get("effects") {
        effects(cx, node, &p);
    }
    let mut movement = empty_movement();
    if let Some((node, p)) = s.get("delay_before_ms") {
        movement.delay_before_ms = nonneg(cx, node, &p);
    }
    movement.rules = read_rules(cx, s, path, scope, Role::System, &[], None);
    movement.kind = StepKind::System(s.node.to_json());
    movement
}

const INPUT_TYPES: &[(&str, &str, &[&str])] = &[
    ("task_context", "current_task", &[]),
    ("branch_context", "current_task", &[]),
    ("pr_context", "current_branch", &[]),
    ("issue_context", "current_task", &[]),
    (
        "task_queue_context",
        "current_project",
        &["exclude_current_task"],
    ),
    ("pr_list", "current_project", &["where"]),
    ("pr_selection", "current_project", &["where"]),
    (
        "issue_list",
        "current_project",
        &["exclude_selected_from", "where"],
    ),
    ("issue_selection", "current_project", &["where"]),
];

fn system_inputs(cx: &mut Cx<'_>, node: &Node, path: &str) {
    let Some(items) = list(&mut cx.sink, node, path, "a list of system inputs") else {
        return;
    };
    let mut bound: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(path, i);
        let Some(ty) = item.get("type").and_then(Node::as_str) else {
            cx.sink.error(
                &join_key(&ip, "type"),
                item.span,
                format!(
                    "a system input needs `type`: one of {}",
                    INPUT_TYPES
                        .iter()
                        .map(|t| t.0)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            continue;
        };
        let Some((_, source, extra)) = INPUT_TYPES.iter().find(|t| t.0 == ty) else {
            cx.sink.error(
                &join_key(&ip, "type"),
                item.get("type").map_or(item.span, |n| n.span),
                format!(
                    "unknown system input type `{ty}`; known: {}",
                    INPUT_TYPES
                        .iter()
                        .map(|t| t.0)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            continue;
        };
        let mut keys = vec!["type", "source", "as"];
        keys.extend_from_slice(extra);
        let Some(f) = fields(
            &mut cx.sink,
            item,
            &ip,
            "a system input",
            &keys,
            Unknown::Error,
        ) else {
            continue;
        };
        if let Some((n, p)) = f.required(&mut cx.sink, "source", "a system input")
            && n.as_str() != Some(source)
        {
            cx.sink.error(
                &p,
                n.span,
                format!(
                    "a `{ty}` input reads `source: {source}`, found {}",
                    n.kind_name()
                ),
            );
        }
        if let Some(name) = f.required_string(&mut cx.sink, "as", "a system input") {
            if bound.contains(&name) {
                let (n, p) = f.get("as").unwrap_or((item, ip.clone()));
                cx.sink.error(
                    &p,
                    n.span,
                    format!("the binding `{name}` is used twice in this step"),
                );
            }
            bound.push(name);
        }
    }
}

const EFFECT_TYPES: &[&str] = &[
    "enqueue_task",
    "comment_pr",
    "sync_with_root",
    "resolve_conflicts_with_ai",
    "merge_pr",
    "close_pr",
];

fn effects(cx: &mut Cx<'_>, node: &Node, path: &str) {
    let Some(items) = list(&mut cx.sink, node, path, "a list of effects") else {
        return;
    };
    let mut seen: Vec<&str> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(path, i);
        let ty_node = item.get("type");
        let Some(ty) = ty_node
            .and_then(Node::as_str)
            .and_then(|t| EFFECT_TYPES.iter().find(|e| **e == t))
        else {
            cx.sink.error(
                &join_key(&ip, "type"),
                ty_node.map_or(item.span, |n| n.span),
                format!(
                    "an effect needs a `type`: one of {}",
                    EFFECT_TYPES.join(", ")
                ),
            );
            continue;
        };
        let span = ty_node.map_or(item.span, |n| n.span);
        if seen.contains(ty) {
            cx.sink.error(
                &join_key(&ip, "type"),
                span,
                format!("the effect `{ty}` appears twice in this step; each effect type runs at most once per step"),
            );
        }
        seen.push(ty);
        let keys: &[&str] = match *ty {
            "enqueue_task" => &[
                "type",
                "mode",
                "workflow",
                "task",
                "pr",
                "issue_number",
                "issue",
                "base_branch",
                "worktree",
            ],
            "comment_pr" => &["type", "pr", "body"],
            _ => &["type", "pr"],
        };
        let Some(f) = fields(
            &mut cx.sink,
            item,
            &ip,
            &format!("a `{ty}` effect"),
            keys,
            Unknown::Error,
        ) else {
            continue;
        };
        let what = format!("a `{ty}` effect");
        match *ty {
            "enqueue_task" => {
                let mode = f.required_string(&mut cx.sink, "mode", &what);
                if let Some(m) = &mode
                    && m != "new"
                    && m != "from_pr"
                {
                    let (n, p) = f.get("mode").unwrap_or((item, ip.clone()));
                    cx.sink.error(
                        &p,
                        n.span,
                        format!("unknown enqueue mode `{m}`; known: new, from_pr"),
                    );
                }
                f.required_string(&mut cx.sink, "workflow", &what);
                f.required_string(&mut cx.sink, "task", &what);
                if mode.as_deref() == Some("from_pr") && f.get("pr").is_none() {
                    cx.sink.error(
                        &join_key(&ip, "pr"),
                        item.span,
                        "`enqueue_task` with `mode: from_pr` needs `pr`",
                    );
                }
                if mode.as_deref() == Some("new")
                    && let Some((n, p)) = f.get("pr")
                {
                    cx.sink.error(
                        &p,
                        n.span,
                        "`enqueue_task` with `mode: new` does not take `pr`",
                    );
                }
            }
            "comment_pr" => {
                f.required(&mut cx.sink, "pr", &what);
                f.required_string(&mut cx.sink, "body", &what);
            }
            _ => {
                f.required(&mut cx.sink, "pr", &what);
            }
        }
        if REFUSED_EFFECTS.contains(ty) {
            cx.sink.warn(
                &join_key(&ip, "type"),
                span,
                format!(
                    "the effect `{ty}` needs a Git host's pull requests, which Maestro does not have: it is checked here, and a run that reaches it ends with an error naming `{ty}`"
                ),
            );
        }
    }
}

/// An agent step: a normal step, a parallel parent (static or dynamic), a team leader or an
/// arpeggio step; `sub` for a parallel sub-step.
fn read_agent(cx: &mut Cx<'_>, s: &Fields<'_>, path: &str, scope: &Scope, sub: bool) -> Movement {
    for key in ["call", "args", "vars"] {
        if let Some((_, p)) = s.get(key) {
            cx.sink.error(
                &p,
                s.key_span(key).unwrap_or(s.node.span),
                format!("only `kind: workflow_call` steps can declare `{key}`"),
            );
        }
    }
    for key in ["system_inputs", "effects"] {
        if let Some((_, p)) = s.get(key) {
            cx.sink.error(
                &p,
                s.key_span(key).unwrap_or(s.node.span),
                format!("steps with `{key}` must be system steps: add `kind: system`"),
            );
        }
    }
    let shapes: Vec<&str> = ["parallel", "arpeggio", "team_leader"]
        .into_iter()
        .filter(|k| s.get(k).is_some())
        .collect();
    if shapes.len() > 1 {
        cx.sink.error(
            &join_key(path, shapes[1]),
            s.key_span(shapes[1]).unwrap_or(s.node.span),
            format!(
                "`parallel`, `arpeggio` and `team_leader` are mutually exclusive; this step has {}",
                shapes.join(" and ")
            ),
        );
    }
    let is_parent = s.get("parallel").is_some();
    let special = !shapes.is_empty();
    let only_normal = |cx: &mut Cx<'_>, key: &str, why: &str| {
        if let Some((_, p)) = s.get(key) {
            cx.sink
                .error(&p, s.key_span(key).unwrap_or(s.node.span), why.to_owned());
        }
    };
    if special {
        only_normal(
            cx,
            "session",
            "`session` is only supported on normal agent steps and parallel sub-steps",
        );
        only_normal(
            cx,
            "promotion",
            "`promotion` is only allowed on normal agent steps",
        );
        only_normal(
            cx,
            "companion",
            "`companion` is only allowed on normal agent steps",
        );
        only_normal(
            cx,
            "dynamic_facets",
            "`dynamic_facets` is only allowed on normal agent steps and parallel sub-steps",
        );
    }
    if is_parent {
        only_normal(
            cx,
            "session_key",
            "`session_key` is not supported on parallel parent steps; set it on each sub-step",
        );
        only_normal(
            cx,
            "requires_user_input",
            "`requires_user_input` is not supported on parallel parent steps",
        );
    } else if let Some((_, p)) = s.get("concurrency") {
        cx.sink.error(
            &p,
            s.key_span("concurrency").unwrap_or(s.node.span),
            "`concurrency` bounds a parallel step's sub-steps; only a step with `parallel` takes it",
        );
    }
    if s.get("completion_retry").is_some() && s.get("review_completion").is_some() {
        only_normal(
            cx,
            "review_completion",
            "`review_completion` is the old name of `completion_retry`; keep only `completion_retry`",
        );
    }

    let mut movement = empty_movement();
    movement.persona = single_facet(cx, s, "persona", FacetKind::Persona);
    movement.policies = many_facets(cx, s, "policy", FacetKind::Policy);
    movement.knowledge = many_facets(cx, s, "knowledge", FacetKind::Knowledge);
    movement.instruction = instruction(cx, s, scope);
    for key in ["persona_name", "session_key"] {
        if let Some((n, p)) = s.get(key) {
            nonempty_string(&mut cx.sink, n, &p);
        }
    }
    if let Some((n, p)) = s.get("tags") {
        for t in string_list(&mut cx.sink, n, &p).unwrap_or_default() {
            if t.text.trim().is_empty() {
                cx.sink.error(&t.path, t.span, "a tag cannot be empty");
            }
        }
    }
    for key in ["allow_git_commit", "requires_user_input"] {
        if let Some((n, p)) = s.get(key) {
            boolean(&mut cx.sink, n, &p);
        }
    }
    if let Some((n, p)) = s.get("mcp") {
        string_list(&mut cx.sink, n, &p);
    }
    if let Some((n, p)) = s.get("mcp_servers")
        && n.as_map().is_none()
    {
        cx.sink.error(
            &p,
            n.span,
            format!(
                "expected a mapping of MCP server names to definitions, found {}",
                n.kind_name()
            ),
        );
    }
    if let Some((n, p)) = s.get("delay_before_ms") {
        movement.delay_before_ms = nonneg(cx, n, &p);
    }
    if let Some((n, p)) = s.get("session") {
        movement.session = match string(&mut cx.sink, n, &p) {
            Some("refresh") => SessionMode::Refresh,
            // `compact` keeps the conversation; Maestro's context manager compacts it.
            Some("continue" | "compact") | None => SessionMode::Continue,
            Some(other) => {
                cx.sink.error(
                    &p,
                    n.span,
                    format!("unknown session mode `{other}`; known: continue, refresh, compact"),
                );
                SessionMode::Continue
            }
        };
    }
    if let Some((n, p)) = s.get("pass_previous_response") {
        movement.pass_previous_response = boolean(&mut cx.sink, n, &p).unwrap_or(true);
    }
    permissions(cx, s, scope, &mut movement, is_parent);
    if let Some((n, p)) = s.get("output_contracts") {
        movement.output_contracts = output_contracts(cx, n, &p);
    }
    if let Some((n, p)) = s.get("quality_gates") {
        (movement.quality_gates, movement.command_gates) = quality_gates(cx, n, &p);
    }
    if let Some((n, p)) = s.get("structured_output") {
        movement.structured_output = structured_output(cx, n, &p, scope);
    }
    if let Some((n, p)) = s.get("dynamic_facets")
        && let Some(facets) = dynamic_facets(cx, n, &p, scope)
    {
        movement.dynamic = Some(Box::new(Dynamic {
            participants: None,
            facets: Some(facets),
        }));
    }
    if let Some((n, p)) = s
        .get("completion_retry")
        .or_else(|| s.get("review_completion"))
    {
        movement.completion_retry = completion_retry(cx, n, &p);
    }
    if let Some((n, p)) = s.get("promotion") {
        promotion(cx, n, &p);
    }
    if let Some((n, p)) = s.get("companion") {
        movement.companions = resources::companions(cx, n, &p, &scope.layers);
    }
    if let Some((n, p)) = s.get("concurrency") {
        crate::check::positive(&mut cx.sink, n, &p);
    }

    let mut role = if sub { Role::Sub } else { Role::Normal };
    if let Some((n, p)) = s.get("parallel") {
        match &n.value {
            Value::Seq(items) => {
                role = Role::Parent;
                movement.parallel = read_subs(cx, items, n, &p, scope);
            }
            Value::Map(_) => {
                role = Role::DynamicParent;
                let (subs, participants) = dynamic_parallel(cx, n, &p, scope);
                movement.parallel = subs;
                movement.dynamic = Some(Box::new(Dynamic {
                    participants: Some(participants),
                    facets: None,
                }));
                movement.kind = StepKind::DynamicParallel(s.node.to_json());
            }
            Value::Scalar(_) => cx.sink.error(
                &p,
                n.span,
                format!(
                    "expected a list of sub-steps or `{{fixed, pool, selection}}`, found {}",
                    n.kind_name()
                ),
            ),
        }
    }
    if let Some((n, p)) = s.get("team_leader") {
        let personas = team_leader(cx, n, &p);
        let mut definition = s.node.to_json();
        // The engine needs the personas' texts, not their names: keep them resolved.
        for (key, facet) in [("persona", personas.0), ("part_persona", personas.1)] {
            if let (Some(facet), Some(t)) = (facet, definition.get_mut("team_leader"))
                && let (Some(t), Ok(value)) = (t.as_object_mut(), serde_json::to_value(facet))
            {
                t.insert(format!("{key}_facet"), value);
            }
        }
        movement.kind = StepKind::TeamLeader(definition);
    }
    if let Some((n, p)) = s.get("arpeggio") {
        arpeggio(cx, n, &p);
        movement.kind = StepKind::Arpeggio(s.node.to_json());
    }
    let subs = movement.parallel.clone();
    movement.rules = read_rules(cx, s, path, scope, role, &subs, None);
    movement
}

/// The instruction: one facet, or a list of facets and inline texts joined by `---`, with
/// the workflow-wide rules before it.
fn instruction(cx: &mut Cx<'_>, s: &Fields<'_>, scope: &Scope) -> Option<Facet> {
    let mut facet = match s.get("instruction") {
        Some((node, p)) => match &node.value {
            Value::Seq(items) => {
                if items.is_empty() {
                    cx.sink.error(
                        &p,
                        node.span,
                        "an instruction list needs at least one entry",
                    );
                }
                let parts: Vec<Facet> = one_or_many(&mut cx.sink, node, &p)
                    .into_iter()
                    .map(|item| {
                        cx.facets.resolve(
                            &mut cx.sink,
                            FacetKind::Instruction,
                            item.text,
                            &item.path,
                            item.span,
                        )
                    })
                    .collect();
                Some(Facet {
                    name: parts.first().map(|f| f.name.clone()).unwrap_or_default(),
                    text: parts
                        .iter()
                        .map(|f| f.text.trim_end())
                        .collect::<Vec<_>>()
                        .join("\n\n---\n\n"),
                    path: parts.first().and_then(|f| f.path.clone()),
                })
            }
            _ => single_facet(cx, s, "instruction", FacetKind::Instruction),
        },
        None => None,
    };
    if scope.all_rules.is_empty() {
        return facet;
    }
    let mut text = String::new();
    for before in [false, true] {
        for (rule, b) in &scope.all_rules {
            if *b == before {
                text.push_str(rule);
                text.push_str("\n\n");
            }
        }
    }
    let f = facet.get_or_insert_with(|| Facet {
        name: "all_steps.rules".to_owned(),
        text: String::new(),
        path: None,
    });
    text.push_str(&f.text);
    f.text = text;
    facet
}

/// `edit`, `required_permission_mode` and `capabilities` decide whether the step may edit
/// and which tools it is offered.
fn permissions(
    cx: &mut Cx<'_>,
    s: &Fields<'_>,
    scope: &Scope,
    movement: &mut Movement,
    parent: bool,
) {
    let edit = s
        .get("edit")
        .and_then(|(n, p)| boolean(&mut cx.sink, n, &p));
    let mode = s.get("required_permission_mode").and_then(|(n, p)| {
        let m = string(&mut cx.sink, n, &p)?;
        if !matches!(m, "readonly" | "edit" | "full") {
            cx.sink.error(
                &p,
                n.span,
                format!("unknown permission mode `{m}`; known: readonly, edit, full"),
            );
            return None;
        }
        Some(m.to_owned())
    });
    let caps = match s.get("capabilities") {
        Some((n, p)) => resources::capabilities(&mut cx.sink, n, &p, &scope.layers),
        None => scope.capabilities.as_ref().and_then(|n| {
            // Checked once at the top; read silently here.
            let mut quiet = crate::check::Sink::new(std::path::Path::new(""));
            resources::capabilities(&mut quiet, n, "capabilities", &scope.layers)
        }),
    };
    let may_edit = edit
        .or_else(|| mode.as_deref().map(|m| m != "readonly"))
        .or(caps.as_ref().map(|(_, e)| *e))
        .unwrap_or(false);
    movement.edit = may_edit;
    if mode.as_deref() == Some("full") {
        movement.allowed_commands = Some(vec!["*".to_owned()]);
    }
    let mut tools: Vec<String> = caps.map(|(t, _)| t).unwrap_or_default();
    if tools.is_empty() && !parent {
        tools = DEFAULT_TOOLS.iter().map(|t| (*t).to_owned()).collect();
        if may_edit {
            tools.extend(["Write".to_owned(), "Edit".to_owned()]);
        }
    }
    if may_edit {
        for t in ["Write", "Edit"] {
            if !tools.iter().any(|x| x == t) && !parent {
                tools.push(t.to_owned());
            }
        }
    } else {
        tools.retain(|t| t != "Write" && t != "Edit");
    }
    movement.allowed_tools = tools;
}

fn nonneg(cx: &mut Cx<'_>, node: &Node, path: &str) -> Option<u64> {
    if let Value::Scalar(s) = &node.value
        && let ScalarKind::Int(n) = s.kind()
        && let Ok(v) = u64::try_from(n)
    {
        return Some(v);
    }
    cx.sink.error(
        path,
        node.span,
        format!(
            "expected a non-negative integer, found {}",
            node.kind_name()
        ),
    );
    None
}

/// `output_contracts: {report: [{name, format, use_judge, order}]}`.
fn output_contracts(cx: &mut Cx<'_>, node: &Node, path: &str) -> Vec<OutputContract> {
    let Some(oc) = fields(
        &mut cx.sink,
        node,
        path,
        "`output_contracts`",
        &["report"],
        Unknown::Error,
    ) else {
        return Vec::new();
    };
    let Some((reports, rp)) = oc.get("report") else {
        return Vec::new();
    };
    let Some(items) = list(&mut cx.sink, reports, &rp, "a list of reports") else {
        return Vec::new();
    };
    let mut out: Vec<OutputContract> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(&rp, i);
        let Some(c) = fields(
            &mut cx.sink,
            item,
            &ip,
            "a report",
            &["name", "format", "use_judge", "order"],
            Unknown::Error,
        ) else {
            continue;
        };
        let name = c
            .required(&mut cx.sink, "name", "a report")
            .and_then(|(n, p)| {
                let name = nonempty_string(&mut cx.sink, n, &p)?;
                if name.starts_with(['/', '.']) || name.contains("..") || name.contains('\\') {
                    cx.sink.error(
                        &p,
                        n.span,
                        format!(
                            "report name `{name}` must be a relative path inside the report directory (no leading `/` or `.`, no `..`); use e.g. `plan.md`"
                        ),
                    );
                    return None;
                }
                if out.iter().any(|o| o.name == name) {
                    cx.sink.error(
                        &p,
                        n.span,
                        format!("the report `{name}` is listed twice in this step"),
                    );
                }
                Some(name.to_owned())
            });
        let format = c
            .required(&mut cx.sink, "format", "a report")
            .and_then(|(n, p)| {
                let text = nonempty_string(&mut cx.sink, n, &p)?;
                Some(
                    cx.facets
                        .resolve(&mut cx.sink, FacetKind::ReportFormat, text, &p, n.span),
                )
            });
        if let Some((n, p)) = c.get("use_judge") {
            boolean(&mut cx.sink, n, &p);
        }
        if let Some((n, p)) = c.get("order")
            && let Some(text) = nonempty_string(&mut cx.sink, n, &p)
        {
            let _ = cx
                .facets
                .resolve(&mut cx.sink, FacetKind::ReportFormat, text, &p, n.span);
        }
        if let Some(name) = name {
            out.push(OutputContract {
                name,
                label: None,
                format,
            });
        }
    }
    out
}

/// String gates are directives for the model; `type: command` gates are shell checks the
/// engine runs after the step (TAKT shows only the string gates to the model).
fn quality_gates(cx: &mut Cx<'_>, node: &Node, path: &str) -> (Vec<String>, Vec<CommandGate>) {
    let Some(items) = list(&mut cx.sink, node, path, "a list of quality gates") else {
        return (Vec::new(), Vec::new());
    };
    let mut out = Vec::new();
    let mut commands = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(path, i);
        if let Some(text) = item.as_str() {
            out.push(text.to_owned());
            continue;
        }
        let Some(g) = fields(
            &mut cx.sink,
            item,
            &ip,
            "a command quality gate",
            &["type", "name", "command", "cwd", "timeout_ms"],
            Unknown::Error,
        ) else {
            continue;
        };
        if let Some((n, p)) = g.required(&mut cx.sink, "type", "a command quality gate")
            && n.as_str() != Some("command")
        {
            cx.sink.error(
                &p,
                n.span,
                format!(
                    "unknown quality gate type {}; known: command",
                    n.kind_name()
                ),
            );
        }
        let name = g.required_string(&mut cx.sink, "name", "a command quality gate");
        let command = g.required_string(&mut cx.sink, "command", "a command quality gate");
        let cwd = g.optional_string(&mut cx.sink, "cwd");
        if let Some((n, p)) = &g.get("cwd") {
            let text = n.as_str().unwrap_or_default();
            if std::path::Path::new(text).is_absolute()
                || std::path::Path::new(text)
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                cx.sink.error(
                    p,
                    n.span,
                    format!(
                        "the gate's `cwd` `{text}` leaves the workspace; give a directory inside it, relative to its root"
                    ),
                );
            }
        }
        let mut timeout_ms = DEFAULT_GATE_TIMEOUT_MS;
        if let Some((n, p)) = g.get("timeout_ms") {
            crate::check::positive(&mut cx.sink, n, &p);
            if let Value::Scalar(s) = &n.value
                && let Ok(ms) = s.text.parse::<u64>()
            {
                timeout_ms = ms;
            }
        }
        if let (Some(name), Some(command)) = (name, command) {
            commands.push(CommandGate {
                name,
                command,
                cwd: cwd.unwrap_or_else(|| ".".into()),
                timeout_ms,
            });
        }
    }
    (out, commands)
}

/// TAKT's default time limit for a command gate: five minutes.
const DEFAULT_GATE_TIMEOUT_MS: u64 = 300_000;

/// `structured_output: {schema_ref}`, its schema resolved through the workflow's `schemas`
/// map, else as a schema name.
fn structured_output(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &str,
    scope: &Scope,
) -> Option<crate::ir::StructuredOutput> {
    let so = fields(
        &mut cx.sink,
        node,
        path,
        "`structured_output`",
        &["schema_ref"],
        Unknown::Error,
    )?;
    let (n, p) = so.required(&mut cx.sink, "schema_ref", "`structured_output`")?;
    let r = nonempty_string(&mut cx.sink, n, &p)?;
    if let Some((name, schema)) = scope.schema_values.get(r) {
        return Some(crate::ir::StructuredOutput {
            schema_ref: r.to_owned(),
            schema_name: name.clone(),
            schema: schema.clone(),
        });
    }
    if let Some(found) = scope.layers.find("schemas", r, &[".json"])
        && let Ok(schema) = serde_json::from_str(&found.text)
    {
        return Some(crate::ir::StructuredOutput {
            schema_ref: r.to_owned(),
            schema_name: r.to_owned(),
            schema,
        });
    }
    if !scope.schemas.iter().any(|s| s == r) {
        cx.sink.error(
            &p,
            n.span,
            format!(
                "`schema_ref: {r}` is neither a key of the workflow's `schemas` ({}) nor a schema name found in {}",
                known_list(&scope.schemas),
                scope.layers.searched("schemas")
            ),
        );
    }
    None
}

fn selector(cx: &mut Cx<'_>, node: &Node, path: &str) -> Option<SelectorGuidance> {
    let sel = fields(
        &mut cx.sink,
        node,
        path,
        "a selector",
        &["persona", "instruction"],
        Unknown::Error,
    )?;
    let persona = single_facet(cx, &sel, "persona", FacetKind::Persona);
    if sel.get("instruction").is_none() {
        cx.sink.error(
            &join_key(path, "instruction"),
            node.span,
            "a selector needs `instruction`: how to choose",
        );
    }
    let instruction = single_facet(cx, &sel, "instruction", FacetKind::Instruction)?;
    Some(SelectorGuidance {
        persona,
        instruction,
    })
}

fn dynamic_facets(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &str,
    scope: &Scope,
) -> Option<DynamicFacets> {
    let d = fields(
        &mut cx.sink,
        node,
        path,
        "`dynamic_facets`",
        &["pool", "max_selected", "selector"],
        Unknown::Error,
    )?;
    let mut found = None;
    match d.get("pool") {
        Some((n, p)) => {
            let named = string(&mut cx.sink, n, &p);
            if let Some(pool) = named {
                found = scope.pool_candidates.iter().find(|(x, _)| x == pool);
            }
            if let Some(pool) = named
                && !scope.pools.iter().any(|x| x == pool)
            {
                cx.sink.error(
                    &p,
                    n.span,
                    format!(
                        "unknown facet pool `{pool}`; the workflow's `facet_pools`: {}",
                        known_list(&scope.pools)
                    ),
                );
            }
        }
        None => cx.sink.error(
            &join_key(path, "pool"),
            node.span,
            "`dynamic_facets` needs `pool`: a key of the workflow's `facet_pools` (a `$param` left without a value names none)",
        ),
    }
    let max_selected = d
        .get("max_selected")
        .and_then(|(n, p)| crate::check::positive(&mut cx.sink, n, &p));
    let selector = d.get("selector").and_then(|(n, p)| selector(cx, n, &p));
    let (pool, candidates) = found?;
    if let (Some(max), Some((n, p))) = (max_selected, d.get("max_selected"))
        && max as usize > candidates.len()
    {
        cx.sink.error(
            &p,
            n.span,
            format!(
                "`max_selected` is {max}, more than the {} candidate(s) of pool `{pool}`",
                candidates.len()
            ),
        );
    }
    Some(DynamicFacets {
        pool: pool.clone(),
        max_selected,
        candidates: candidates.clone(),
        selector,
    })
}

fn completion_retry(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &str,
) -> Option<crate::ir::CompletionRetry> {
    let c = fields(
        &mut cx.sink,
        node,
        path,
        "`completion_retry`",
        &["retry_instruction", "min_retry", "max_retry"],
        Unknown::Error,
    )?;
    if c.get("retry_instruction").is_none() {
        cx.sink.error(
            &join_key(path, "retry_instruction"),
            node.span,
            "`completion_retry` needs `retry_instruction`: an instruction facet",
        );
    }
    let retry_instruction = single_facet(cx, &c, "retry_instruction", FacetKind::Instruction);
    let min = c.get("min_retry").and_then(|(n, p)| {
        let v = nonneg(cx, n, &p)?;
        if v > 4 {
            cx.sink.error(&p, n.span, "`min_retry` is at most 4");
        }
        Some(v)
    });
    let max = c.get("max_retry").and_then(|(n, p)| nonneg(cx, n, &p));
    if let (Some(min), Some(max)) = (min, max)
        && min > max
        && let Some((n, p)) = c.get("min_retry")
    {
        cx.sink
            .error(&p, n.span, "`min_retry` must be at most `max_retry`");
    }
    Some(crate::ir::CompletionRetry {
        retry_instruction: retry_instruction?,
        min_retry: u32::try_from(min.unwrap_or(0)).unwrap_or(u32::MAX),
        max_retry: u32::try_from(max.unwrap_or(4)).unwrap_or(u32::MAX),
    })
}

fn promotion(cx: &mut Cx<'_>, node: &Node, path: &str) {
    let Some(items) = list(&mut cx.sink, node, path, "a list of `{at: N}` entries") else {
        return;
    };
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(path, i);
        let Some(e) = fields(
            &mut cx.sink,
            item,
            &ip,
            "a promotion entry",
            &["at"],
            Unknown::Error,
        ) else {
            continue;
        };
        if let Some((n, p)) = e.required(&mut cx.sink, "at", "a promotion entry") {
            crate::check::positive(&mut cx.sink, n, &p);
        }
    }
}

/// Checks a `team_leader` block; returns its `persona` and `part_persona`, resolved.
fn team_leader(cx: &mut Cx<'_>, node: &Node, path: &str) -> (Option<Facet>, Option<Facet>) {
    let Some(t) = fields(
        &mut cx.sink,
        node,
        path,
        "`team_leader`",
        &[
            "persona",
            "max_parts",
            "max_concurrency",
            "initial_max_parts",
            "fail_on_part_error",
            "refill_threshold",
            "timeout_ms",
            "inspect_tools",
            "part_persona",
            "part_tags",
            "part_allowed_tools",
            "part_edit",
            "part_permission_mode",
        ],
        Unknown::Error,
    ) else {
        return (None, None);
    };
    for key in ["max_parts", "max_concurrency"] {
        if let Some((n, p)) = t.get(key)
            && let Some(v) = crate::check::positive(&mut cx.sink, n, &p)
            && v > 3
        {
            cx.sink
                .error(&p, n.span, format!("`{key}` is at most 3, found {v}"));
        }
    }
    if t.get("max_parts").is_some()
        && let Some((n, p)) = t.get("max_concurrency")
    {
        cx.sink.error(
            &p,
            n.span,
            "`max_parts` and `max_concurrency` cannot both be set; keep `max_concurrency`",
        );
    }
    for key in ["initial_max_parts", "timeout_ms"] {
        if let Some((n, p)) = t.get(key) {
            crate::check::positive(&mut cx.sink, n, &p);
        }
    }
    if let Some((n, p)) = t.get("refill_threshold")
        && nonneg(cx, n, &p).is_some_and(|v| v != 0)
    {
        cx.sink.error(
            &p,
            n.span,
            "`refill_threshold` may only be 0: parts are planned in batches, each after the last one finished",
        );
    }
    for key in ["fail_on_part_error", "part_edit"] {
        if let Some((n, p)) = t.get(key) {
            boolean(&mut cx.sink, n, &p);
        }
    }
    if let Some((n, p)) = t.get("inspect_tools") {
        for tool in string_list(&mut cx.sink, n, &p).unwrap_or_default() {
            if !matches!(
                tool.text.to_ascii_lowercase().as_str(),
                "read" | "glob" | "grep"
            ) {
                cx.sink.error(
                    &tool.path,
                    tool.span,
                    format!(
                        "`{}` is not an inspection tool; known: read, glob, grep",
                        tool.text
                    ),
                );
            }
        }
    }
    for key in ["part_tags", "part_allowed_tools"] {
        if let Some((n, p)) = t.get(key) {
            for item in string_list(&mut cx.sink, n, &p).unwrap_or_default() {
                if item.text.trim().is_empty() {
                    cx.sink
                        .error(&item.path, item.span, "an entry cannot be empty");
                }
            }
        }
    }
    if let Some((n, p)) = t.get("part_permission_mode")
        && !matches!(n.as_str(), Some("readonly" | "edit" | "full"))
    {
        cx.sink.error(
            &p,
            n.span,
            format!(
                "unknown permission mode {}; known: readonly, edit, full",
                n.kind_name()
            ),
        );
    }
    (
        single_facet(cx, &t, "persona", FacetKind::Persona),
        single_facet(cx, &t, "part_persona", FacetKind::Persona),
    )
}

fn arpeggio(cx: &mut Cx<'_>, node: &Node, path: &str) {
    const WHAT: &str = "`arpeggio`";
    let Some(a) = fields(
        &mut cx.sink,
        node,
        path,
        WHAT,
        &[
            "source",
            "source_path",
            "batch_size",
            "concurrency",
            "template",
            "merge",
            "max_retries",
            "retry_delay_ms",
            "output_path",
        ],
        Unknown::Error,
    ) else {
        return;
    };
    for key in ["source", "source_path", "template"] {
        if let Some((n, p)) = a.required(&mut cx.sink, key, WHAT) {
            nonempty_string(&mut cx.sink, n, &p);
        }
    }
    for key in ["batch_size", "concurrency"] {
        if let Some((n, p)) = a.get(key) {
            crate::check::positive(&mut cx.sink, n, &p);
        }
    }
    for key in ["max_retries", "retry_delay_ms"] {
        if let Some((n, p)) = a.get(key) {
            nonneg(cx, n, &p);
        }
    }
    if let Some((n, p)) = a.get("merge") {
        let Some(m) = fields(
            &mut cx.sink,
            n,
            &p,
            "`arpeggio.merge`",
            &["strategy", "inline_js", "file", "separator"],
            Unknown::Error,
        ) else {
            return;
        };
        let strategy = m
            .optional_string(&mut cx.sink, "strategy")
            .unwrap_or_else(|| "concat".into());
        let code = m.get("inline_js").is_some() || m.get("file").is_some();
        match strategy.as_str() {
            "concat" if code => cx.sink.error(
                &p,
                n.span,
                "`strategy: concat` takes no `inline_js` or `file`; remove them or use `strategy: custom`",
            ),
            "custom" if !code => cx.sink.error(
                &p,
                n.span,
                "`strategy: custom` needs `inline_js` or `file`",
            ),
            "custom" => cx.sink.warn(
                &join_key(&p, "strategy"),
                m.key_span("strategy").unwrap_or(n.span),
                "a custom merge runs the workflow's own code, which Maestro refuses, as TAKT does by default: a run that reaches this step ends with an error; use `strategy: concat`",
            ),
            "concat" => {}
            other => cx.sink.error(
                &join_key(&p, "strategy"),
                m.key_span("strategy").unwrap_or(n.span),
                format!("unknown merge strategy `{other}`; known: concat, custom"),
            ),
        }
    }
}

/// A static parallel step's sub-steps.
fn read_subs(
    cx: &mut Cx<'_>,
    items: &[Node],
    node: &Node,
    path: &str,
    scope: &Scope,
) -> Vec<Movement> {
    if items.is_empty() {
        cx.sink.error(
            path,
            node.span,
            "a parallel step needs at least one sub-step",
        );
    }
    let mut subs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(path, i);
        if let Some(m) = read_sub(cx, item, &ip, scope, false) {
            subs.push(m);
        }
    }
    subs
}

fn read_sub(
    cx: &mut Cx<'_>,
    item: &Node,
    path: &str,
    scope: &Scope,
    pool: bool,
) -> Option<Movement> {
    let s = step_fields(cx, item, path)?;
    let name = s
        .required(&mut cx.sink, "name", "a sub-step")
        .and_then(|(n, p)| nonempty_string(&mut cx.sink, n, &p))?
        .to_owned();
    let kind = kind_of(cx, &s, path);
    if kind == Kind::Call && !pool {
        let mut m = read_call(cx, &s, path, scope, Role::Sub);
        m.name = name;
        return Some(m);
    }
    if kind != Kind::Agent {
        cx.sink.error(
            &join_key(path, "kind"),
            s.key_span("kind")
                .or(s.key_span("mode"))
                .unwrap_or(item.span),
            "a parallel sub-step is an agent step (or, in a static parallel step, a workflow_call)",
        );
        return None;
    }
    for key in SUB_STEP_BANNED {
        if *key == "description" && pool {
            continue;
        }
        if s.get(key).is_some() && !matches!(*key, "kind" | "mode") {
            cx.sink.error(
                &join_key(path, key),
                s.key_span(key).unwrap_or(item.span),
                format!("a parallel sub-step does not allow `{key}`"),
            );
        }
    }
    if pool {
        match s.get("description") {
            Some((n, _)) if n.as_str().is_some_and(|d| !d.trim().is_empty()) => {}
            Some((n, p)) => cx.sink.error(
                &p,
                n.span,
                format!("dynamic parallel pool sub-step `{name}` needs a non-empty `description`: the selector picks by it"),
            ),
            None => cx.sink.error(
                &join_key(path, "description"),
                s.key_span("name").unwrap_or(item.span),
                format!("dynamic parallel pool sub-step `{name}` needs a non-empty `description`: the selector picks by it"),
            ),
        }
    }
    let mut m = read_agent(cx, &s, path, scope, true);
    m.name = name;
    Some(m)
}

/// `parallel: {fixed, pool, selection}`: the candidates are read as sub-steps.
fn dynamic_parallel(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &str,
    scope: &Scope,
) -> (Vec<Movement>, Participants) {
    let mut participants = Participants {
        fixed: 0,
        descriptions: Vec::new(),
        mode: SelectionMode::Replace,
        reports: Vec::new(),
        selector: None,
    };
    let Some(d) = fields(
        &mut cx.sink,
        node,
        path,
        "a dynamic parallel block",
        &["fixed", "pool", "selection"],
        Unknown::Error,
    ) else {
        return (Vec::new(), participants);
    };
    let mut subs = Vec::new();
    if let Some((n, p)) = d.get("fixed")
        && let Some(items) = list(&mut cx.sink, n, &p, "a list of sub-steps")
    {
        for (i, item) in items.iter().enumerate() {
            subs.extend(read_sub(cx, item, &join_index(&p, i), scope, false));
        }
    }
    participants.fixed = subs.len();
    match d.get("pool") {
        Some((n, p)) => {
            if let Some(items) = list(&mut cx.sink, n, &p, "a list of sub-steps") {
                if items.is_empty() {
                    cx.sink.error(
                        &p,
                        n.span,
                        "a dynamic parallel step needs at least one pool sub-step",
                    );
                }
                for (i, item) in items.iter().enumerate() {
                    if let Some(sub) = read_sub(cx, item, &join_index(&p, i), scope, true) {
                        participants.descriptions.push(
                            item.get("description")
                                .and_then(Node::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        );
                        subs.push(sub);
                    }
                }
            }
        }
        None => cx.sink.error(
            &join_key(path, "pool"),
            node.span,
            "a dynamic parallel step needs `pool`: the sub-steps the selector chooses from",
        ),
    }
    let mut names: Vec<&str> = Vec::new();
    for m in &subs {
        if names.contains(&m.name.as_str()) {
            cx.sink.error(
                path,
                node.span,
                format!(
                    "the dynamic parallel step has two sub-steps named `{}`",
                    m.name
                ),
            );
        }
        names.push(&m.name);
    }
    // Without `selection`, `mode: replace`.
    if let Some((n, p)) = d.get("selection")
        && let Some(sel) = fields(
            &mut cx.sink,
            n,
            &p,
            "`selection`",
            &["mode", "reports", "selector"],
            Unknown::Error,
        )
    {
        if let Some((m, _)) = sel.get("mode")
            && m.as_str() == Some("cumulative")
        {
            participants.mode = SelectionMode::Cumulative;
        }
        if let Some((m, mp)) = sel.get("mode")
            && !matches!(m.as_str(), Some("replace" | "cumulative"))
        {
            cx.sink.error(
                &mp,
                m.span,
                format!(
                    "unknown selection mode {}; known: replace, cumulative",
                    m.kind_name()
                ),
            );
        }
        if let Some((r, rp)) = sel.get("reports") {
            participants.reports = string_list(&mut cx.sink, r, &rp)
                .unwrap_or_default()
                .into_iter()
                .map(|r| r.text.to_owned())
                .collect();
        }
        if let Some((sn, sp)) = sel.get("selector") {
            participants.selector = selector(cx, sn, &sp);
        }
    }
    (subs, participants)
}

/// The labels a step's own rules define (what an aggregate may name).
fn labels(m: &Movement) -> Vec<String> {
    m.rules
        .iter()
        .filter_map(|r| condition::label(&r.condition).map(str::to_owned))
        .collect()
}

/// TAKT's label for a sub-step that failed: every aggregate may name it.
const ERROR_LABEL: &str = "error";

fn read_rules(
    cx: &mut Cx<'_>,
    s: &Fields<'_>,
    path: &str,
    scope: &Scope,
    role: Role,
    subs: &[Movement],
    call_returns: Option<&[String]>,
) -> Vec<Rule> {
    let node_path = join_key(path, "rules");
    let Some((node, rp)) = s.get("rules") else {
        if role != Role::Sub {
            cx.sink.error(
                &node_path,
                s.key_span("name").unwrap_or(s.node.span),
                "missing required field `rules` in a step",
            );
        }
        return Vec::new();
    };
    let Some(items) = list(&mut cx.sink, node, &rp, "a list of rules") else {
        return Vec::new();
    };
    if items.is_empty() && role != Role::Sub {
        cx.sink
            .error(&rp, node.span, "a step needs at least one rule");
    }
    let mut out = Vec::new();
    let mut appendices: Vec<(String, Option<String>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(&rp, i);
        let Some(r) = fields(
            &mut cx.sink,
            item,
            &ip,
            "a rule",
            &[
                "condition",
                "next",
                "return",
                "appendix",
                "requires_user_input",
                "interactive_only",
            ],
            Unknown::Error,
        ) else {
            continue;
        };
        let condition = r
            .required(&mut cx.sink, "condition", "a rule")
            .and_then(|(n, p)| {
                let text = match &n.value {
                    Value::Scalar(sc) => sc.text.as_str(),
                    _ => {
                        string(&mut cx.sink, n, &p);
                        return None;
                    }
                };
                match condition::parse(text) {
                    Ok(c) => {
                        check_condition(cx, &c, role, subs, call_returns, &p, n.span);
                        check_state_steps(cx, &c, scope, &p, n.span);
                        Some(c)
                    }
                    Err(e) => {
                        cx.sink.error(&p, n.span, e);
                        None
                    }
                }
            });
        let next = match (r.get("next"), r.get("return")) {
            (Some(_), Some((rn, rpath))) => {
                cx.sink.error(
                    &rpath,
                    rn.span,
                    "a rule has either `next` or `return`, not both",
                );
                None
            }
            (Some((_, p)), None) if role == Role::Sub => {
                cx.sink.ignored(
                    "next",
                    &p,
                    r.key_span("next").unwrap_or(item.span),
                    "a parallel sub-step's rules only classify its result; the parent step's rules pick the next step",
                );
                None
            }
            (Some((n, p)), None) => {
                let text = string(&mut cx.sink, n, &p);
                match text {
                    Some("COMPLETE") => Some(Target::Complete),
                    Some("ABORT") => Some(Target::Abort),
                    Some(t) if scope.steps.iter().any(|x| x == t) => {
                        Some(Target::Movement(t.to_owned()))
                    }
                    Some(t) => {
                        cx.sink.error(
                            &p,
                            n.span,
                            format!(
                                "unknown step `{t}`{}; known: {}, COMPLETE, ABORT",
                                crate::catalog::closest(
                                    t,
                                    scope
                                        .steps
                                        .iter()
                                        .map(String::as_str)
                                        .chain(["COMPLETE", "ABORT"])
                                )
                                .map(|near| format!("; did you mean `{near}`?"))
                                .unwrap_or_default(),
                                known_list(&scope.steps)
                            ),
                        );
                        None
                    }
                    None => None,
                }
            }
            (None, Some((n, p))) => {
                if role == Role::Sub {
                    cx.sink
                        .error(&p, n.span, "parallel sub-step rules do not allow `return`");
                    None
                } else {
                    let label = string(&mut cx.sink, n, &p);
                    match label {
                        Some(l) if !scope.callable => {
                            cx.sink.error(
                                &p,
                                n.span,
                                format!(
                                    "`return: {l}` ends a called workflow, but this workflow is not callable; declare `subworkflow: {{callable: true, returns: [{l}]}}` or use `next`"
                                ),
                            );
                            None
                        }
                        Some(l) if !scope.returns.iter().any(|x| x == l) => {
                            cx.sink.error(
                                &p,
                                n.span,
                                format!(
                                    "`return: {l}` is not a label of `subworkflow.returns` ({}); add it there",
                                    known_list(&scope.returns)
                                ),
                            );
                            None
                        }
                        // The called workflow ends; its caller's rules route on the label.
                        Some(l) => Some(Target::Return(l.to_owned())),
                        None => None,
                    }
                }
            }
            (None, None) => {
                if role != Role::Sub {
                    cx.sink.error(
                        &join_key(&ip, "next"),
                        r.key_span("condition").unwrap_or(item.span),
                        "missing required field `next` (or `return`) in a rule",
                    );
                }
                None
            }
        };
        let flag = |cx: &mut Cx<'_>, key: &str| {
            r.get(key)
                .and_then(|(n, p)| boolean(&mut cx.sink, n, &p))
                .unwrap_or(false)
        };
        let requires_user_input = flag(cx, "requires_user_input");
        let interactive_only = flag(cx, "interactive_only");
        let appendix = r
            .get("appendix")
            .and_then(|(n, p)| string(&mut cx.sink, n, &p).map(str::to_owned));
        if let Some(c) = &condition
            && let Some(l) = condition::label(c)
        {
            if let Some((_, a)) = appendices.iter().find(|(x, _)| x == l)
                && *a != appendix
                && let Some((n, p)) = r.get("appendix").or_else(|| r.get("condition"))
            {
                cx.sink.error(
                    &p,
                    n.span,
                    format!("rules sharing the label `{l}` must have the same `appendix`"),
                );
            }
            appendices.push((l.to_owned(), appendix.clone()));
        }
        let Some(condition) = condition else {
            continue;
        };
        if role != Role::Sub && next.is_none() {
            continue;
        }
        out.push(Rule {
            condition,
            next,
            requires_user_input,
            interactive_only,
            appendix,
            prompt: None,
        });
    }
    out
}

/// What a condition may say where it stands.
fn check_condition(
    cx: &mut Cx<'_>,
    c: &Condition,
    role: Role,
    subs: &[Movement],
    call_returns: Option<&[String]>,
    path: &str,
    span: Span,
) {
    if let Some((which, args)) = condition::aggregate(c) {
        match role {
            Role::Parent => {
                let positional = which == "all" && args.len() > 1;
                if positional && args.len() != subs.len() {
                    cx.sink.error(
                        path,
                        span,
                        format!(
                            "`all(…)` with {} labels is positional, one per sub-step, but this step has {} sub-steps",
                            args.len(),
                            subs.len()
                        ),
                    );
                    return;
                }
                for (i, arg) in args.iter().enumerate() {
                    if arg == ERROR_LABEL {
                        continue;
                    }
                    let defined = if positional {
                        subs.get(i).is_none_or(|s| {
                            s.kind.is_agent() && labels(s).contains(arg) || !s.kind.is_agent()
                        })
                    } else {
                        subs.iter()
                            .any(|s| labels(s).contains(arg) || !s.kind.is_agent())
                    };
                    if !defined {
                        let whom = match subs.get(i) {
                            Some(s) if positional => format!("the sub-step `{}`", s.name),
                            _ => "any sub-step".to_owned(),
                        };
                        cx.sink.error(
                            path,
                            span,
                            format!(
                                "the aggregate label \"{arg}\" is not a rule condition of {whom}; the sub-steps define: {}",
                                known_list(&subs.iter().flat_map(labels).collect::<Vec<_>>())
                            ),
                        );
                    }
                }
            }
            Role::DynamicParent => {
                if args.len() != 1 {
                    cx.sink.error(
                        path,
                        span,
                        "a dynamic parallel step's aggregate names exactly one label: `all(\"x\")` or `any(\"x\")`",
                    );
                    return;
                }
                let arg = &args[0];
                if arg == ERROR_LABEL {
                    return;
                }
                if let Some(missing) = subs.iter().find(|s| !labels(s).contains(arg)) {
                    cx.sink.error(
                        path,
                        span,
                        format!(
                            "the aggregate label \"{arg}\" must be defined by every fixed and pool sub-step, and `{}` does not define it",
                            missing.name
                        ),
                    );
                }
            }
            _ => cx.sink.error(
                path,
                span,
                if role == Role::Sub {
                    "parallel sub-step rules do not allow aggregate conditions".to_owned()
                } else {
                    "aggregate conditions (`all(…)`, `any(…)`) only work on parallel parent steps"
                        .to_owned()
                },
            ),
        }
    }
    if role == Role::Call
        && let Some(returns) = call_returns
    {
        let ok = match c {
            Condition::Text(t) => t == "COMPLETE" || t == "ABORT" || returns.contains(t),
            _ => false,
        };
        if !ok {
            cx.sink.error(
                path,
                span,
                format!(
                    "a workflow_call step routes on how the called workflow ended: COMPLETE, ABORT{}{}",
                    if returns.is_empty() { "" } else { ", " },
                    returns.join(", ")
                ),
            );
        }
    }
    if role == Role::System && !matches!(c, Condition::When { base: None, .. }) {
        cx.sink.error(
            path,
            span,
            "a system step runs no agent, so its rules route on `when(…)` predicates only",
        );
    }
}

/// The steps a condition's `when(…)` predicate reads (`structured.<step>.…`,
/// `context.<step>.…`, `effect.<step>.…`) must be steps of this workflow: a name that is none
/// is an error with the closest step name, as an unknown `next` is.
fn check_state_steps(cx: &mut Cx<'_>, c: &Condition, scope: &Scope, path: &str, span: Span) {
    let Condition::When { predicate, .. } = c else {
        return;
    };
    let Ok(expr) = crate::when::WhenExpr::parse(predicate) else {
        return;
    };
    let mut reported: Vec<&str> = Vec::new();
    for reference in expr.references() {
        let step = reference.step.as_str();
        if scope.steps.iter().any(|s| s == step) || reported.contains(&step) {
            continue;
        }
        reported.push(step);
        cx.sink.error(
            path,
            span,
            format!(
                "`{reference}` names the unknown step `{step}`{}; known: {}",
                crate::catalog::closest(step, scope.steps.iter().map(String::as_str))
                    .map(|near| format!("; did you mean `{near}`?"))
                    .unwrap_or_default(),
                known_list(&scope.steps)
            ),
        );
    }
}
