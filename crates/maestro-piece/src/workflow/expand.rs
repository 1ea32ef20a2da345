//! What TAKT's loader does to a workflow's steps before its schema sees them: reusable step
//! fragments (`uses:` / `with:`, from `steps/<name>.yaml`) and parameter references
//! (`{ $param: name }`) of fragments and of callable workflows.
//!
//! Nodes that come from a fragment file are given the position of the `uses:` that brought
//! them in, so every later diagnostic points into the workflow being loaded.

use std::collections::BTreeMap;

use super::layers::{Layers, is_bare_name};
use crate::check::Sink;
use crate::yaml::{Key, Node, Span, Value, join_index, join_key};

/// Most nested fragments one step may expand through, and most references in a workflow.
const MAX_FRAGMENT_DEPTH: usize = 64;
const MAX_FRAGMENT_REFS: usize = 512;
/// Largest fragment file read.
const MAX_FRAGMENT_BYTES: usize = 1024 * 1024;

/// The declared type of a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamType {
    FacetRef,
    FacetRefList,
    WorkflowRef,
    FacetPoolRef,
    CompanionRefList,
}

impl ParamType {
    fn parse(text: &str) -> Option<ParamType> {
        match text {
            "facet_ref" => Some(ParamType::FacetRef),
            "facet_ref[]" => Some(ParamType::FacetRefList),
            "workflow_ref" => Some(ParamType::WorkflowRef),
            "facet_pool_ref" => Some(ParamType::FacetPoolRef),
            "companion_ref[]" => Some(ParamType::CompanionRefList),
            _ => None,
        }
    }

    fn is_list(self) -> bool {
        matches!(self, ParamType::FacetRefList | ParamType::CompanionRefList)
    }
}

/// A declared parameter and the value it has in this load.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub ty: ParamType,
    /// The argument or default; `None` when the parameter has neither (a callable workflow
    /// validated on its own).
    pub value: Option<Node>,
}

const FACET_KINDS: &[&str] = &[
    "policy",
    "knowledge",
    "instruction",
    "persona",
    "report_format",
];

/// Reads a `params:` mapping (of a fragment or of `subworkflow`). `defaults` says whether
/// `default:` is allowed (callable workflows) or not (fragments).
pub(crate) fn read_params(
    sink: &mut Sink,
    node: &Node,
    path: &str,
    defaults: bool,
) -> BTreeMap<String, Param> {
    let mut params = BTreeMap::new();
    let Some(entries) = node.as_map() else {
        sink.error(
            path,
            node.span,
            format!(
                "expected a mapping of parameter names to declarations, found {}",
                node.kind_name()
            ),
        );
        return params;
    };
    for (key, decl) in entries {
        let p = join_key(path, &key.text);
        let Some(fields) = decl.as_map() else {
            sink.error(
                &p,
                decl.span,
                format!(
                    "expected a parameter declaration (`type:`, …), found {}",
                    decl.kind_name()
                ),
            );
            continue;
        };
        let allowed: &[&str] = if defaults {
            &["type", "facet_kind", "default"]
        } else {
            &["type", "facet_kind"]
        };
        for (k, _) in fields {
            if !allowed.contains(&k.text.as_str()) {
                let hint = if k.text == "default" {
                    "; step fragment parameters have no defaults: every caller binds them in `with:`"
                } else {
                    ""
                };
                sink.error(
                    &join_key(&p, &k.text),
                    k.span,
                    format!(
                        "unknown field `{}` in a parameter declaration; known: {}{hint}",
                        k.text,
                        allowed.join(", ")
                    ),
                );
            }
        }
        let ty = match decl.get("type") {
            Some(t) => match t.as_str().and_then(ParamType::parse) {
                Some(ty) => ty,
                None => {
                    sink.error(
                        &join_key(&p, "type"),
                        t.span,
                        format!(
                            "unknown parameter type {}; known: facet_ref, facet_ref[], workflow_ref, facet_pool_ref, companion_ref[]",
                            t.kind_name()
                        ),
                    );
                    continue;
                }
            },
            None => {
                sink.error(
                    &join_key(&p, "type"),
                    key.span,
                    "missing required field `type` in a parameter declaration",
                );
                continue;
            }
        };
        if !defaults && ty == ParamType::CompanionRefList {
            sink.error(
                &join_key(&p, "type"),
                decl.get("type").map_or(key.span, |t| t.span),
                "`companion_ref[]` parameters are only supported by callable workflows, not by step fragments",
            );
        }
        match (
            matches!(ty, ParamType::FacetRef | ParamType::FacetRefList),
            decl.get("facet_kind"),
        ) {
            (true, None) => sink.error(
                &join_key(&p, "facet_kind"),
                key.span,
                format!(
                    "a `facet_ref` parameter needs `facet_kind`: one of {}",
                    FACET_KINDS.join(", ")
                ),
            ),
            (true, Some(kind)) if !kind.as_str().is_some_and(|k| FACET_KINDS.contains(&k)) => sink
                .error(
                    &join_key(&p, "facet_kind"),
                    kind.span,
                    format!(
                        "unknown facet kind {}; known: {}",
                        kind.kind_name(),
                        FACET_KINDS.join(", ")
                    ),
                ),
            (false, Some(kind)) => sink.error(
                &join_key(&p, "facet_kind"),
                kind.span,
                "only `facet_ref` and `facet_ref[]` parameters take `facet_kind`",
            ),
            _ => {}
        }
        let value = decl.get("default").cloned();
        if let Some(default) = &value
            && let Err(e) = check_shape(ty, default)
        {
            sink.error(&join_key(&p, "default"), default.span, e);
        }
        params.insert(key.text.clone(), Param { ty, value });
    }
    params
}

/// Whether `value` fits a parameter of type `ty` (a forwarded `$param` always does).
fn check_shape(ty: ParamType, value: &Node) -> Result<(), String> {
    if param_ref(value).is_some() {
        return Ok(());
    }
    match (&value.value, ty.is_list()) {
        (Value::Seq(items), true) => {
            if let Some(bad) = items.iter().find(|i| i.as_str().is_none()) {
                return Err(format!(
                    "expected a list of names, found {} in it",
                    bad.kind_name()
                ));
            }
            Ok(())
        }
        (_, true) => Err(format!(
            "expected a list of names, found {}",
            value.kind_name()
        )),
        (_, false) if value.as_str().is_some_and(|s| !s.trim().is_empty()) => Ok(()),
        (_, false) => Err(format!(
            "expected one name (a non-empty string), found {}",
            value.kind_name()
        )),
    }
}

/// The parameter name of a `{ $param: name }` node.
pub(crate) fn param_ref(node: &Node) -> Option<&str> {
    match node.as_map()? {
        [(key, value)] if key.text == "$param" => value.as_str(),
        _ => None,
    }
}

/// Replaces every `{ $param: name }` below `node` by the parameter's value: a list value is
/// spliced into the list it stands in, a parameter without a value removes the entry.
/// References to undeclared parameters are errors.
pub(crate) fn substitute(
    sink: &mut Sink,
    node: &mut Node,
    path: &str,
    params: &BTreeMap<String, Param>,
    whose: &str,
) {
    match &mut node.value {
        Value::Map(entries) => {
            let mut kept = Vec::with_capacity(entries.len());
            for (key, mut value) in std::mem::take(entries) {
                let p = join_key(path, &key.text);
                if let Some(name) = param_ref(&value) {
                    match resolve(sink, &value, &p, name, params, whose) {
                        // An empty `companion_ref[]` omits the field it stands for.
                        Some(Some(Node {
                            value: Value::Seq(items),
                            ..
                        })) if items.is_empty()
                            && params
                                .get(name)
                                .is_some_and(|p| p.ty == ParamType::CompanionRefList) => {}
                        Some(Some(v)) => kept.push((key, v)),
                        Some(None) => {}
                        None => kept.push((key, value)),
                    }
                    continue;
                }
                substitute(sink, &mut value, &p, params, whose);
                kept.push((key, value));
            }
            *entries = kept;
        }
        Value::Seq(items) => {
            let mut kept = Vec::with_capacity(items.len());
            for (i, mut item) in std::mem::take(items).into_iter().enumerate() {
                let p = join_index(path, i);
                if let Some(name) = param_ref(&item) {
                    match resolve(sink, &item, &p, name, params, whose) {
                        Some(Some(Node {
                            value: Value::Seq(values),
                            ..
                        })) => kept.extend(values),
                        Some(Some(v)) => kept.push(v),
                        Some(None) => {}
                        None => kept.push(item),
                    }
                    continue;
                }
                substitute(sink, &mut item, &p, params, whose);
                kept.push(item);
            }
            *items = kept;
        }
        Value::Scalar(_) => {}
    }
}

/// `Some(Some(v))`: replace by `v`; `Some(None)`: drop; `None`: an error was reported.
fn resolve(
    sink: &mut Sink,
    at: &Node,
    path: &str,
    name: &str,
    params: &BTreeMap<String, Param>,
    whose: &str,
) -> Option<Option<Node>> {
    let Some(param) = params.get(name) else {
        let known: Vec<&str> = params.keys().map(String::as_str).collect();
        sink.error(
            &join_key(path, "$param"),
            at.span,
            format!(
                "`$param: {name}` names no parameter of {whose}; declared: {}; declare it under `params:` or fix the name",
                if known.is_empty() {
                    "(none)".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        );
        return None;
    };
    Some(param.value.clone())
}

/// Sets every position below `node` (keys included) to `span`.
fn respan(node: &mut Node, span: Span) {
    node.span = span;
    match &mut node.value {
        Value::Map(entries) => {
            for (key, value) in entries {
                key.span = span;
                respan(value, span);
            }
        }
        Value::Seq(items) => items.iter_mut().for_each(|i| respan(i, span)),
        Value::Scalar(_) => {}
    }
}

/// `over` laid on `base`: mappings merge key by key, anything else is replaced.
fn deep_merge(base: Node, over: Node) -> Node {
    match (base.value, over.value) {
        (Value::Map(mut base_entries), Value::Map(over_entries)) => {
            for (key, value) in over_entries {
                match base_entries.iter().position(|(k, _)| k.text == key.text) {
                    Some(i) => {
                        let (_, old) = base_entries.remove(i);
                        base_entries.insert(i, (key, deep_merge(old, value)));
                    }
                    None => base_entries.push((key, value)),
                }
            }
            Node {
                value: Value::Map(base_entries),
                span: over.span,
            }
        }
        (_, value) => Node {
            value,
            span: over.span,
        },
    }
}

fn entry<'n>(node: &'n Node, key: &str) -> Option<(&'n Key, &'n Node)> {
    node.as_map()?
        .iter()
        .find(|(k, _)| k.text == key)
        .map(|(k, v)| (k, v))
}

fn without(node: &Node, keys: &[&str]) -> Node {
    match &node.value {
        Value::Map(entries) => Node {
            value: Value::Map(
                entries
                    .iter()
                    .filter(|(k, _)| !keys.contains(&k.text.as_str()))
                    .cloned()
                    .collect(),
            ),
            span: node.span,
        },
        _ => node.clone(),
    }
}

fn set(node: &mut Node, key: Key, value: Node) {
    if let Value::Map(entries) = &mut node.value {
        match entries.iter().position(|(k, _)| k.text == key.text) {
            Some(i) => entries[i] = (key, value),
            None => entries.push((key, value)),
        }
    }
}

/// A caller's rules, put on the expanded step once its sub-steps are expanded too:
/// (the `rules` key, the rules, the fragment's name).
type Pending = (Key, Node, String);

/// Expands step fragments for one workflow.
pub(crate) struct Fragments<'a> {
    pub layers: &'a Layers,
    refs: usize,
}

impl<'a> Fragments<'a> {
    pub(crate) fn new(layers: &'a Layers) -> Self {
        Fragments { layers, refs: 0 }
    }

    /// Expands `uses` in a step of the workflow and in its parallel sub-steps.
    pub(crate) fn step(&mut self, sink: &mut Sink, node: &Node, path: &str) -> Node {
        let mut chain = Vec::new();
        self.expand(sink, node, path, &mut chain, true)
    }

    fn expand(
        &mut self,
        sink: &mut Sink,
        node: &Node,
        path: &str,
        chain: &mut Vec<String>,
        concrete: bool,
    ) -> Node {
        let (mut out, pending) = match entry(node, "uses") {
            Some((key, uses)) => self
                .call(sink, node, key, uses, path, chain, concrete)
                .unwrap_or_else(|| (without(node, &["uses", "with"]), None)),
            None => (node.clone(), None),
        };
        // Sub-steps of a static (`parallel: [...]`) or dynamic (`fixed`/`pool`) parallel step.
        if let Some((pkey, parallel)) = entry(&out, "parallel") {
            let ppath = join_key(path, "parallel");
            let pkey = pkey.clone();
            let expanded = match &parallel.value {
                Value::Seq(items) => Some(Node {
                    value: Value::Seq(
                        items
                            .iter()
                            .enumerate()
                            .map(|(i, item)| {
                                self.expand(sink, item, &join_index(&ppath, i), chain, concrete)
                            })
                            .collect(),
                    ),
                    span: parallel.span,
                }),
                Value::Map(entries) => {
                    let mut entries = entries.clone();
                    for (k, v) in &mut entries {
                        if (k.text == "fixed" || k.text == "pool")
                            && let Value::Seq(items) = &v.value
                        {
                            let lpath = join_key(&ppath, &k.text);
                            let items = items
                                .iter()
                                .enumerate()
                                .map(|(i, item)| {
                                    self.expand(sink, item, &join_index(&lpath, i), chain, concrete)
                                })
                                .collect();
                            v.value = Value::Seq(items);
                        }
                    }
                    Some(Node {
                        value: Value::Map(entries),
                        span: parallel.span,
                    })
                }
                Value::Scalar(_) => None,
            };
            if let Some(expanded) = expanded {
                set(&mut out, pkey, expanded);
            }
        }
        if let Some((key, rules, name)) = pending {
            self.apply_rules(sink, &mut out, key, rules, path, &name);
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn call(
        &mut self,
        sink: &mut Sink,
        caller: &Node,
        uses_key: &Key,
        uses: &Node,
        path: &str,
        chain: &mut Vec<String>,
        concrete: bool,
    ) -> Option<(Node, Option<Pending>)> {
        let upath = join_key(path, "uses");
        let Some(name) = uses.as_str() else {
            sink.error(
                &upath,
                uses.span,
                format!(
                    "expected the name of a step fragment, found {}",
                    uses.kind_name()
                ),
            );
            return None;
        };
        self.refs += 1;
        if self.refs > MAX_FRAGMENT_REFS || chain.len() >= MAX_FRAGMENT_DEPTH {
            sink.error(
                &upath,
                uses.span,
                format!(
                    "too many step fragments: a workflow expands at most {MAX_FRAGMENT_DEPTH} nested fragments and {MAX_FRAGMENT_REFS} references in all"
                ),
            );
            return None;
        }
        if chain.iter().any(|c| c == name) {
            sink.error(
                &upath,
                uses.span,
                format!(
                    "step fragment `{name}` uses itself: {} -> {name}; break the cycle",
                    chain.join(" -> ")
                ),
            );
            return None;
        }
        if !is_bare_name(name) {
            sink.error(
                &upath,
                uses.span,
                format!(
                    "`uses: {name}` must be the bare name of a step fragment (a file `steps/<name>.yaml`), without a path{}",
                    if name.starts_with('@') {
                        "; repertoire packages (`@owner/repo/name`) are not supported: copy the fragment into `.takt/steps/`"
                    } else {
                        ""
                    }
                ),
            );
            return None;
        }
        let Some(found) = self.layers.find("steps", name, &[".yaml", ".yml"]) else {
            sink.error(
                &upath,
                uses.span,
                format!(
                    "no step fragment `{name}`; looked for `{name}.yaml` and `{name}.yml` in {}",
                    self.layers.searched("steps")
                ),
            );
            return None;
        };
        let file = found.path.display().to_string();
        if found.text.len() > MAX_FRAGMENT_BYTES {
            sink.error(
                &upath,
                uses.span,
                format!("step fragment {file} is larger than 1 MiB"),
            );
            return None;
        }
        let parsed = crate::yaml::parse(&found.text);
        if let Some(e) = parsed.errors.first() {
            sink.error(
                &upath,
                uses.span,
                format!(
                    "step fragment {file} cannot be read: line {}: {}",
                    e.span.line, e.message
                ),
            );
            return None;
        }
        let Some(mut fragment) = parsed.root.filter(|r| r.as_map().is_some()) else {
            sink.error(
                &upath,
                uses.span,
                format!("step fragment {file} must hold exactly one step (a mapping)"),
            );
            return None;
        };
        respan(&mut fragment, uses.span);
        if entry(&fragment, "rules").is_some() {
            sink.error(
                &upath,
                uses.span,
                format!(
                    "step fragment `{name}` ({file}) declares `rules`; a fragment leaves routing to the workflow that uses it: move the rules to the calling step"
                ),
            );
        }
        if let Some((
            _,
            Node {
                value: Value::Seq(subs),
                ..
            },
        )) = entry(&fragment, "parallel")
            && subs.iter().any(|s| entry(s, "rules").is_some())
        {
            sink.error(
                &upath,
                uses.span,
                format!(
                    "step fragment `{name}` ({file}) declares `rules` on a parallel sub-step; give the calling step a rule tree (`rules: {{self: […], parallel: {{<sub-step>: […]}}}}`) instead"
                ),
            );
        }
        // Bind the fragment's parameters.
        let params = entry(&fragment, "params")
            .map(|(_, p)| read_params(sink, p, &join_key(&upath, "params"), false))
            .unwrap_or_default();
        let mut bound: BTreeMap<String, Param> = params.clone();
        let with = entry(caller, "with").map(|(_, w)| w);
        let wpath = join_key(path, "with");
        if let Some(with) = with {
            match with.as_map() {
                Some(entries) => {
                    for (key, value) in entries {
                        match params.get(&key.text) {
                            None => sink.error(
                                &join_key(&wpath, &key.text),
                                key.span,
                                format!(
                                    "step fragment `{name}` has no parameter `{}`; its parameters: {}",
                                    key.text,
                                    if params.is_empty() {
                                        "(none)".to_owned()
                                    } else {
                                        params.keys().cloned().collect::<Vec<_>>().join(", ")
                                    }
                                ),
                            ),
                            Some(param) => {
                                if let Err(e) = check_shape(param.ty, value) {
                                    sink.error(&join_key(&wpath, &key.text), value.span, e);
                                }
                                if let Some(b) = bound.get_mut(&key.text) {
                                    b.value = Some(value.clone());
                                }
                            }
                        }
                    }
                }
                None => sink.error(
                    &wpath,
                    with.span,
                    format!(
                        "expected a mapping of parameter names to values, found {}",
                        with.kind_name()
                    ),
                ),
            }
        }
        for (pname, param) in &bound {
            if param.value.is_none() {
                sink.error(
                    &wpath,
                    with.map_or(uses_key.span, |w| w.span),
                    format!(
                        "step fragment `{name}` needs the parameter `{pname}`; bind it under `with:` (fragment parameters have no defaults)"
                    ),
                );
            }
        }
        let mut body = without(&fragment, &["params"]);
        substitute(
            sink,
            &mut body,
            &upath,
            &bound,
            &format!("step fragment `{name}`"),
        );
        // A fragment may itself use another one.
        chain.push(name.to_owned());
        let body = self.expand(sink, &body, path, chain, false);
        chain.pop();
        if body.get("kind").and_then(Node::as_str) == Some("system")
            || body.get("mode").and_then(Node::as_str) == Some("system")
        {
            sink.error(
                &upath,
                uses.span,
                format!(
                    "step fragment `{name}` is a system step; system steps cannot come from a fragment, write them in the workflow"
                ),
            );
        }
        let caller_rules = entry(caller, "rules").map(|(k, v)| (k.clone(), v.clone()));
        let overlay = without(caller, &["uses", "with", "rules"]);
        let mut merged = deep_merge(body, overlay);
        if entry(&merged, "name").is_none() {
            set(
                &mut merged,
                Key {
                    text: "name".into(),
                    span: uses.span,
                },
                Node {
                    value: Value::Scalar(crate::yaml::Scalar {
                        text: name.to_owned(),
                        plain: false,
                    }),
                    span: uses.span,
                },
            );
        }
        let pending = match caller_rules {
            Some((key, rules)) => Some((key, rules, name.to_owned())),
            None if concrete => {
                sink.error(
                &join_key(path, "rules"),
                uses_key.span,
                    format!(
                        "a step that uses the fragment `{name}` needs its own non-empty `rules`; fragments never bring routing"
                    ),
                );
                None
            }
            None => None,
        };
        Some((merged, pending))
    }

    /// Puts the caller's rules on the expanded step: a list on the step itself, or for a
    /// parallel fragment the rule tree `{self: […], parallel: {<sub-step>: […]}}`.
    fn apply_rules(
        &mut self,
        sink: &mut Sink,
        merged: &mut Node,
        key: Key,
        rules: Node,
        path: &str,
        name: &str,
    ) {
        let rpath = join_key(path, "rules");
        let is_parallel_list = matches!(
            entry(merged, "parallel").map(|(_, p)| &p.value),
            Some(Value::Seq(_) | Value::Map(_))
        );
        match (&rules.value, is_parallel_list) {
            (Value::Seq(items), _) => {
                if items.is_empty() {
                    sink.error(
                        &rpath,
                        rules.span,
                        format!("a step that uses the fragment `{name}` needs at least one rule"),
                    );
                }
                set(merged, key, rules);
            }
            (Value::Map(_), true) => {
                for (k, _) in rules.as_map().unwrap_or_default() {
                    if k.text != "self" && k.text != "parallel" {
                        sink.error(
                            &join_key(&rpath, &k.text),
                            k.span,
                            format!(
                                "unknown field `{}` in a rule tree; known: self, parallel",
                                k.text
                            ),
                        );
                    }
                }
                match entry(&rules, "self") {
                    Some((_, own)) => set(merged, key.clone(), own.clone()),
                    None => sink.error(
                        &join_key(&rpath, "self"),
                        rules.span,
                        "a rule tree needs `self`: the parallel parent's rules",
                    ),
                }
                let subs = entry(&rules, "parallel").map(|(_, p)| p.clone());
                let Some(parallel) = entry(merged, "parallel").map(|(_, p)| p.clone()) else {
                    return;
                };
                // A static parallel step's sub-steps, or a dynamic one's fixed and pool items.
                let children: Vec<Node> = match &parallel.value {
                    Value::Seq(items) => items.clone(),
                    Value::Map(_) => ["fixed", "pool"]
                        .iter()
                        .filter_map(|k| match entry(&parallel, k) {
                            Some((
                                _,
                                Node {
                                    value: Value::Seq(items),
                                    ..
                                },
                            )) => Some(items.clone()),
                            _ => None,
                        })
                        .flatten()
                        .collect(),
                    Value::Scalar(_) => return,
                };
                let child_names: Vec<String> = children
                    .iter()
                    .filter_map(|c| c.get("name").and_then(Node::as_str).map(str::to_owned))
                    .collect();
                let subs_entries = subs
                    .as_ref()
                    .and_then(|s| s.as_map().map(<[_]>::to_vec))
                    .unwrap_or_default();
                for (k, _) in &subs_entries {
                    if !child_names.contains(&k.text) {
                        sink.error(
                            &join_key(&join_key(&rpath, "parallel"), &k.text),
                            k.span,
                            format!(
                                "the fragment `{name}` has no parallel sub-step `{}`; its sub-steps: {}",
                                k.text,
                                child_names.join(", ")
                            ),
                        );
                    }
                }
                let mut new_children = Vec::new();
                for child in children {
                    let cname = child.get("name").and_then(Node::as_str).unwrap_or_default();
                    let mut child = child.clone();
                    match subs_entries.iter().find(|(k, _)| k.text == cname) {
                        Some((k, r)) => set(
                            &mut child,
                            Key {
                                text: "rules".into(),
                                span: k.span,
                            },
                            r.clone(),
                        ),
                        None => sink.error(
                            &join_key(&rpath, "parallel"),
                            subs.as_ref().map_or(rules.span, |s| s.span),
                            format!(
                                "the rule tree lists no rules for the sub-step `{cname}` of the fragment `{name}`; every sub-step needs its rules here"
                            ),
                        ),
                    }
                    new_children.push(child);
                }
                let Some(pkey) = entry(merged, "parallel").map(|(k, _)| k.clone()) else {
                    return;
                };
                let value = match parallel.value {
                    Value::Seq(_) => Node {
                        value: Value::Seq(new_children),
                        span: parallel.span,
                    },
                    _ => {
                        let mut rebuilt = parallel.clone();
                        let mut rest = new_children.into_iter();
                        for k in ["fixed", "pool"] {
                            if let Some((
                                key,
                                Node {
                                    value: Value::Seq(items),
                                    span,
                                },
                            )) = entry(&parallel, k).map(|(a, b)| (a.clone(), b.clone()))
                            {
                                let taken: Vec<Node> = rest.by_ref().take(items.len()).collect();
                                set(
                                    &mut rebuilt,
                                    key,
                                    Node {
                                        value: Value::Seq(taken),
                                        span,
                                    },
                                );
                            }
                        }
                        rebuilt
                    }
                };
                set(merged, pkey, value);
            }
            _ => sink.error(
                &rpath,
                rules.span,
                format!(
                    "expected a list of rules{}, found {}",
                    if is_parallel_list {
                        " or a rule tree `{self: […], parallel: {…}}`"
                    } else {
                        ""
                    },
                    rules.kind_name()
                ),
            ),
        }
    }
}
