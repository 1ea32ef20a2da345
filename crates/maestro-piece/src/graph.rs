//! The roles + `graph` dialect (`workflow-graph-schema.md`).
//!
//! Each role becomes a movement (persona from `goal`, instruction from `procedure` and
//! `output`, `frontmatter` as the answer's JSON Schema); each edge becomes a rule keyed on a
//! `$status` value. At load time we check what can be checked: edge targets exist, every role
//! is reachable from `$START`, a multi-exit role's statuses match its schema's `$status`
//! values, and every `{{{field}}}` in an edge prompt is a property of the schema.

use std::collections::BTreeSet;

use serde_json::Value as Json;

use crate::check::{Unknown, fields, known_list, string, string_list};
use crate::cx::Cx;
use crate::ir::{Condition, Dialect, Facet, Movement, Piece, Rule, SessionMode, Target};
use crate::template::mustache_names;
use crate::yaml::{Key, Node, join_key};

const TOP_KEYS: &[&str] = &["name", "description", "roles", "graph", "dialect"];
const ROLE_KEYS: &[&str] = &[
    "description",
    "goal",
    "capabilities",
    "procedure",
    "output",
    "frontmatter",
];
const START: &str = "$START";
const END: &str = "$END";
/// The unconditional edge key.
const ANY: &str = "_";

struct Role<'n> {
    key: &'n Key,
    movement: Movement,
}

pub(crate) fn load(cx: &mut Cx<'_>, root: &Node) -> Option<Piece> {
    const WHAT: &str = "a graph piece";
    let top = fields(&mut cx.sink, root, "", WHAT, TOP_KEYS, Unknown::Warn)?;
    let sink = &mut cx.sink;
    let name = top.required_string(sink, "name", WHAT);
    let description = top.optional_string(sink, "description").unwrap_or_default();
    let mut roles = top
        .required(sink, "roles", WHAT)
        .map(|(node, path)| read_roles(cx, node, &path))
        .unwrap_or_default();
    let start = top
        .required(&mut cx.sink, "graph", WHAT)
        .and_then(|(node, path)| read_graph(cx, node, &path, &mut roles));
    let (initial, start_prompt) = start?;
    Some(Piece {
        name: name?,
        description,
        dialect: Dialect::Graph,
        source: Default::default(),
        hash: String::new(),
        max_movements: cx.opts.default_max_movements,
        initial_movement: initial,
        start_prompt: Some(start_prompt),
        movements: roles.into_iter().map(|r| r.movement).collect(),
        loop_monitors: Vec::new(),
        keywords: Vec::new(),
        required_mcp: Vec::new(),
        model: None,
        budget: None,
    })
}

fn read_roles<'n>(cx: &mut Cx<'_>, node: &'n Node, path: &str) -> Vec<Role<'n>> {
    let Some(entries) = node.as_map() else {
        cx.sink.error(
            path,
            node.span,
            format!(
                "expected a mapping of role names to roles, found {}",
                node.kind_name()
            ),
        );
        return Vec::new();
    };
    if entries.is_empty() {
        cx.sink
            .error(path, node.span, "a graph piece needs at least one role");
    }
    let mut roles = Vec::new();
    for (key, value) in entries {
        let role_path = join_key(path, &key.text);
        if key.text == START || key.text == END {
            cx.sink.error(
                &role_path,
                key.span,
                format!(
                    "`{}` is reserved for the graph and cannot name a role",
                    key.text
                ),
            );
            continue;
        }
        if let Some(movement) = read_role(cx, &key.text, value, &role_path) {
            roles.push(Role { key, movement });
        }
    }
    roles
}

fn read_role(cx: &mut Cx<'_>, name: &str, node: &Node, path: &str) -> Option<Movement> {
    let r = fields(&mut cx.sink, node, path, "a role", ROLE_KEYS, Unknown::Warn)?;
    let sink = &mut cx.sink;
    let text = |sink: &mut crate::check::Sink, key: &str| {
        r.get(key)
            .and_then(|(node, p)| string(sink, node, &p).map(|s| s.trim_end().to_owned()))
    };
    let goal = text(sink, "goal");
    let procedure = text(sink, "procedure");
    let output = text(sink, "output");
    let _ = text(sink, "description");
    if let Some((node, p)) = r.get("capabilities") {
        string_list(sink, node, &p);
    }
    let frontmatter_schema = r.get("frontmatter").and_then(|(node, p)| {
        let schema = node.to_json();
        if !schema.is_object() {
            sink.error(
                &p,
                node.span,
                format!(
                    "expected a JSON Schema (a mapping), found {}",
                    node.kind_name()
                ),
            );
            return None;
        }
        if let Err(e) = jsonschema::validator_for(&schema) {
            // Keep the schema: the graph checks below still make sense against it.
            let at = e.instance_path().to_string();
            let at = if at.is_empty() {
                String::new()
            } else {
                format!(" at `{at}`")
            };
            sink.error(&p, node.span, format!("invalid JSON Schema{at}: {e}"));
        }
        Some(schema)
    });
    let instruction: Vec<String> = [procedure, output].into_iter().flatten().collect();
    Some(Movement {
        name: name.to_owned(),
        persona: goal.map(|text| Facet {
            name: name.to_owned(),
            text,
            path: None,
        }),
        policies: Vec::new(),
        knowledge: Vec::new(),
        instruction: (!instruction.is_empty()).then(|| Facet {
            name: name.to_owned(),
            text: instruction.join("\n\n"),
            path: None,
        }),
        edit: false,
        allowed_tools: Vec::new(),
        allowed_commands: None,
        allowed_ssh_connections: None,
        rules: Vec::new(),
        default_next: None,
        max_consecutive_revisits: None,
        pass_previous_response: true,
        session: SessionMode::Continue,
        output_contracts: Vec::new(),
        quality_gates: Vec::new(),
        command_gates: Vec::new(),
        companions: Vec::new(),
        parallel: Vec::new(),
        frontmatter_schema,
        kind: Default::default(),
        dynamic: None,
        structured_output: None,
        delay_before_ms: None,
        completion_retry: None,
    })
}

/// Reads `graph`, attaching each role's edges as rules. Returns the `$START` target and prompt.
fn read_graph(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &str,
    roles: &mut [Role<'_>],
) -> Option<(String, String)> {
    let Some(sources) = node.as_map() else {
        cx.sink.error(
            path,
            node.span,
            format!(
                "expected a mapping of `$START` and role names to status edges, found {}",
                node.kind_name()
            ),
        );
        return None;
    };
    let role_names: Vec<String> = roles.iter().map(|r| r.movement.name.clone()).collect();
    let mut targets_known = role_names.clone();
    targets_known.push(END.to_owned());
    let mut start = None;
    for (key, edges) in sources {
        let source_path = join_key(path, &key.text);
        let role_index = role_names.iter().position(|n| *n == key.text);
        if key.text != START && role_index.is_none() {
            cx.sink.error(
                &source_path,
                key.span,
                format!(
                    "unknown role `{}`; known: {START}, {}",
                    key.text,
                    known_list(&role_names)
                ),
            );
            continue;
        }
        let schema = role_index.and_then(|i| roles[i].movement.frontmatter_schema.clone());
        let rules = read_edges(
            cx,
            key,
            edges,
            &source_path,
            &targets_known,
            schema.as_ref(),
        );
        match role_index {
            Some(i) => roles[i].movement.rules = rules,
            None => start = start_edge(cx, key, &source_path, rules),
        }
    }
    if start.is_none() && !sources.iter().any(|(k, _)| k.text == START) {
        cx.sink.error(
            &join_key(path, START),
            node.span,
            format!(
                "missing `{START}`; add `{START}: {{ _: {{ role: <first role>, prompt: … }} }}`"
            ),
        );
    }
    check_roles(cx, path, roles, start.as_ref().map(|(s, _)| s.as_str()));
    start
}

fn start_edge(
    cx: &mut Cx<'_>,
    key: &Key,
    path: &str,
    rules: Vec<Rule>,
) -> Option<(String, String)> {
    if rules.len() != 1 || rules[0].condition != Condition::Status(ANY.to_owned()) {
        cx.sink.error(
            path,
            key.span,
            format!("`{START}` takes exactly one edge, keyed `_` (there is no previous output to route on)"),
        );
        return None;
    }
    let rule = rules.into_iter().next()?;
    match rule.next {
        Some(Target::Movement(first)) => Some((first, rule.prompt.unwrap_or_default())),
        _ => {
            cx.sink.error(
                &format!("{path}._.role"),
                key.span,
                format!("`{START}` must lead to a role, not `{END}`"),
            );
            None
        }
    }
}

fn read_edges(
    cx: &mut Cx<'_>,
    source: &Key,
    node: &Node,
    path: &str,
    targets: &[String],
    schema: Option<&Json>,
) -> Vec<Rule> {
    let Some(entries) = node.as_map() else {
        cx.sink.error(
            path,
            node.span,
            format!(
                "expected a mapping of `$status` values to `{{ role, prompt }}`, found {}",
                node.kind_name()
            ),
        );
        return Vec::new();
    };
    let properties = schema.map(schema_properties);
    let mut rules = Vec::new();
    for (status, edge) in entries {
        let edge_path = join_key(path, &status.text);
        let Some(e) = fields(
            &mut cx.sink,
            edge,
            &edge_path,
            "an edge",
            &["role", "prompt"],
            Unknown::Warn,
        ) else {
            continue;
        };
        let target = e
            .required(&mut cx.sink, "role", "an edge")
            .and_then(|(node, p)| {
                let role = string(&mut cx.sink, node, &p)?;
                if role == END {
                    return Some(Target::Complete);
                }
                if targets.iter().any(|t| t == role) {
                    return Some(Target::Movement(role.to_owned()));
                }
                cx.sink.error(
                    &p,
                    node.span,
                    format!("unknown role `{role}`; known: {}", known_list(targets)),
                );
                None
            });
        let prompt = e.get("prompt").and_then(|(node, p)| {
            let prompt = string(&mut cx.sink, node, &p)?;
            check_prompt_fields(cx, source, prompt, properties.as_ref(), &p, node);
            Some(prompt.to_owned())
        });
        if let Some(target) = target {
            rules.push(Rule {
                condition: Condition::Status(status.text.clone()),
                next: Some(target),
                requires_user_input: false,
                interactive_only: false,
                appendix: None,
                prompt,
            });
        }
    }
    if source.text != START {
        check_statuses(cx, source, path, entries, schema);
    }
    rules
}

fn check_prompt_fields(
    cx: &mut Cx<'_>,
    source: &Key,
    prompt: &str,
    properties: Option<&BTreeSet<String>>,
    path: &str,
    node: &Node,
) {
    for name in mustache_names(prompt) {
        if source.text == START {
            cx.sink.error(
                path,
                node.span,
                format!("`{{{{{{{name}}}}}}}`: the `{START}` edge has no previous output to take fields from"),
            );
            continue;
        }
        match properties {
            Some(props) if props.contains(&name) => {}
            Some(props) => cx.sink.error(
                path,
                node.span,
                format!(
                    "`{{{{{{{name}}}}}}}` is not a property of role `{}`'s frontmatter schema; known: {}",
                    source.text,
                    known_list(&props.iter().collect::<Vec<_>>())
                ),
            ),
            None => cx.sink.error(
                path,
                node.span,
                format!(
                    "`{{{{{{{name}}}}}}}` needs a field from role `{}`'s frontmatter, but the role has no `frontmatter` schema",
                    source.text
                ),
            ),
        }
    }
}

/// A role with several exits must have a schema whose `$status` values are exactly its edge
/// keys (besides `_`).
fn check_statuses(
    cx: &mut Cx<'_>,
    source: &Key,
    path: &str,
    entries: &[(Key, Node)],
    schema: Option<&Json>,
) {
    let keys: Vec<&Key> = entries
        .iter()
        .map(|(k, _)| k)
        .filter(|k| k.text != ANY)
        .collect();
    if keys.is_empty() {
        return;
    }
    let Some(allowed) = schema.and_then(schema_statuses) else {
        let statuses: Vec<&str> = keys.iter().map(|k| k.text.as_str()).collect();
        cx.sink.error(
            path,
            source.span,
            format!(
                "role `{}` has several exits, so its `frontmatter` schema must constrain `$status` (with `enum` or `const`) to: {}",
                source.text,
                statuses.join(", ")
            ),
        );
        return;
    };
    for key in &keys {
        if !allowed.contains(&key.text) {
            cx.sink.error(
                &join_key(path, &key.text),
                key.span,
                format!(
                    "`{}` is not a `$status` value of role `{}`'s frontmatter schema; known: {}",
                    key.text,
                    source.text,
                    known_list(&allowed.iter().collect::<Vec<_>>())
                ),
            );
        }
    }
    let has_fallback = entries.iter().any(|(k, _)| k.text == ANY);
    for status in &allowed {
        if status != ANY && !has_fallback && !keys.iter().any(|k| &k.text == status) {
            cx.sink.error(
                path,
                source.span,
                format!(
                    "role `{}` can answer `$status: {status}` but `graph.{}` has no edge for it",
                    source.text, source.text
                ),
            );
        }
    }
}

fn check_roles(cx: &mut Cx<'_>, path: &str, roles: &[Role<'_>], start: Option<&str>) {
    let mut reached: Vec<&str> = Vec::new();
    let mut pending: Vec<&str> = start.into_iter().collect();
    while let Some(name) = pending.pop() {
        if reached.contains(&name) {
            continue;
        }
        reached.push(name);
        if let Some(role) = roles.iter().find(|r| r.movement.name == name) {
            for rule in &role.movement.rules {
                if let Some(Target::Movement(next)) = &rule.next {
                    pending.push(next);
                }
            }
        }
    }
    for role in roles {
        let name = role.movement.name.as_str();
        let role_path = format!("roles.{name}");
        if start.is_some() && !reached.contains(&name) {
            cx.sink.error(
                &role_path,
                role.key.span,
                format!(
                    "role `{name}` is not reachable from `{START}`; add an edge to it in `{path}`"
                ),
            );
        }
        if role.movement.rules.is_empty() {
            cx.sink.error(
                &role_path,
                role.key.span,
                format!(
                    "role `{name}` has no edges in `{path}`, so the run could never leave it; add `{path}.{name}: {{ _: {{ role: {END}, prompt: … }} }}`"
                ),
            );
        }
    }
}

/// The `$status` values a schema allows, from `properties.$status.const`/`enum`, merged
/// over `oneOf`/`anyOf`/`allOf` branches. `None` when the schema does not constrain it.
pub(crate) fn schema_statuses(schema: &Json) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut found = false;
    walk_branches(schema, 0, &mut |s| {
        let Some(status) = s.get("properties").and_then(|p| p.get("$status")) else {
            return;
        };
        if let Some(c) = status.get("const").and_then(Json::as_str) {
            found = true;
            out.insert(c.to_owned());
        }
        if let Some(values) = status.get("enum").and_then(Json::as_array) {
            found = true;
            out.extend(values.iter().filter_map(Json::as_str).map(str::to_owned));
        }
    });
    found.then_some(out)
}

/// Every property name a schema defines, over `oneOf`/`anyOf`/`allOf` branches.
fn schema_properties(schema: &Json) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk_branches(schema, 0, &mut |s| {
        if let Some(props) = s.get("properties").and_then(Json::as_object) {
            out.extend(props.keys().cloned());
        }
    });
    out
}

fn walk_branches(schema: &Json, depth: usize, f: &mut dyn FnMut(&Json)) {
    if depth > 16 {
        return;
    }
    f(schema);
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(branches) = schema.get(key).and_then(Json::as_array) {
            for b in branches {
                walk_branches(b, depth + 1, f);
            }
        }
    }
}
