//! Workflow resources found through TAKT's layers: workflow-wide rules (`all_steps.rules`),
//! structured-output schemas, facet pools, capability presets and companion reviewers.

use super::layers::Layers;
use crate::check::{Fields, Sink, Unknown, fields, list, one_or_many, string};
use crate::cx::Cx;
use crate::facets::FacetKind;
use crate::ir::Facet;
use crate::yaml::{Node, Span, Value, join_index, join_key};

/// `all_steps.rules`: each rule file's text and whether it goes before the instruction.
pub(super) fn all_steps_rules(
    cx: &mut Cx<'_>,
    top: &Fields<'_>,
    layers: &Layers,
) -> Vec<(String, bool)> {
    let Some((node, path)) = top.get("all_steps") else {
        return Vec::new();
    };
    let Some(all) = fields(
        &mut cx.sink,
        node,
        &path,
        "`all_steps`",
        &["rules"],
        Unknown::Error,
    ) else {
        return Vec::new();
    };
    let Some((rules, rpath)) = all.get("rules") else {
        return Vec::new();
    };
    let Some(items) = list(&mut cx.sink, rules, &rpath, "a list of rule references") else {
        return Vec::new();
    };
    let mut out: Vec<(String, String, bool)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(&rpath, i);
        let (name, span, before) = match &item.value {
            Value::Scalar(_) => match string(&mut cx.sink, item, &ip) {
                Some(n) => (n.to_owned(), item.span, false),
                None => continue,
            },
            _ => {
                let Some(r) = fields(
                    &mut cx.sink,
                    item,
                    &ip,
                    "a workflow rule reference",
                    &["ref", "position"],
                    Unknown::Error,
                ) else {
                    continue;
                };
                let before = match r.get("position") {
                    None => false,
                    Some((n, _)) if n.as_str() == Some("before_instruction") => true,
                    Some((n, pp)) => {
                        cx.sink.error(
                            &pp,
                            n.span,
                            format!(
                                "unknown rule position {}; known: before_instruction (omit it to place the rule after the execution rules)",
                                n.kind_name()
                            ),
                        );
                        false
                    }
                };
                match r.required(&mut cx.sink, "ref", "a workflow rule reference") {
                    Some((n, rp)) => match string(&mut cx.sink, n, &rp) {
                        Some(t) => (t.to_owned(), n.span, before),
                        None => continue,
                    },
                    None => continue,
                }
            }
        };
        let Some(found) = layers.find("workflows/rules", &name, &[".md"]) else {
            cx.sink.error(
                &ip,
                span,
                format!(
                    "no workflow rule `{name}`; looked for `{name}.md` in {}",
                    layers.searched("workflows/rules")
                ),
            );
            continue;
        };
        if found.text.contains("{report:") {
            cx.sink.error(
                &ip,
                span,
                format!(
                    "workflow rule file {} contains a `{{report:…}}` reference; workflow-wide rules cannot read reports: remove it",
                    found.path.display()
                ),
            );
        }
        let text = found.text.trim_end().to_owned();
        // The same rule at the same place, with the same text, counts once.
        if !out
            .iter()
            .any(|(n, t, b)| *n == name && *t == text && *b == before)
        {
            out.push((name, text, before));
        }
    }
    out.into_iter().map(|(_, t, b)| (t, b)).collect()
}

/// Schema key → (schema name, schema JSON).
type SchemaValues = std::collections::BTreeMap<String, (String, serde_json::Value)>;

/// `schemas`: each name must resolve to `<name>.json`. Returns the keys, and the schemas that
/// resolved.
pub(super) fn schemas(
    cx: &mut Cx<'_>,
    top: &Fields<'_>,
    layers: &Layers,
) -> (Vec<String>, SchemaValues) {
    let mut values = SchemaValues::new();
    let Some((node, path)) = top.get("schemas") else {
        return (Vec::new(), values);
    };
    let Some(entries) = node.as_map() else {
        cx.sink.error(
            &path,
            node.span,
            format!(
                "expected a mapping of schema keys to schema names, found {}",
                node.kind_name()
            ),
        );
        return (Vec::new(), values);
    };
    let mut keys = Vec::new();
    for (key, value) in entries {
        let p = join_key(&path, &key.text);
        let Some(name) = string(&mut cx.sink, value, &p) else {
            continue;
        };
        match layers.find("schemas", name, &[".json"]) {
            Some(found) => match serde_json::from_str::<serde_json::Value>(&found.text) {
                Ok(schema) => {
                    values.insert(key.text.clone(), (name.to_owned(), schema));
                }
                Err(_) => cx.sink.error(
                    &p,
                    value.span,
                    format!("schema file {} is not valid JSON", found.path.display()),
                ),
            },
            None => cx.sink.error(
                &p,
                value.span,
                format!(
                    "no schema `{name}`; looked for `{name}.json` in {}",
                    layers.searched("schemas")
                ),
            ),
        }
        keys.push(key.text.clone());
    }
    (keys, values)
}

/// A pool's name and its candidates, facets resolved.
pub(super) type Pool = (String, Vec<crate::dynamic::FacetCandidate>);

/// `facet_pools`: every pool is checked (inline or `uses:` an external pool file) and its
/// facets resolved. Returns the pools, in file order.
pub(super) fn facet_pools(cx: &mut Cx<'_>, top: &Fields<'_>, layers: &Layers) -> Vec<Pool> {
    let Some((node, path)) = top.get("facet_pools") else {
        return Vec::new();
    };
    let Some(entries) = node.as_map() else {
        cx.sink.error(
            &path,
            node.span,
            format!(
                "expected a mapping of pool names to pools, found {}",
                node.kind_name()
            ),
        );
        return Vec::new();
    };
    let mut names = Vec::new();
    for (key, pool) in entries {
        let p = join_key(&path, &key.text);
        names.push((key.text.clone(), Vec::new()));
        let Some(pf) = fields(
            &mut cx.sink,
            pool,
            &p,
            "a facet pool",
            &["uses", "policies", "knowledge", "candidates"],
            Unknown::Error,
        ) else {
            continue;
        };
        if let Some((uses, up)) = pf.get("uses") {
            for inline in ["policies", "knowledge", "candidates"] {
                if pf.get(inline).is_some() {
                    cx.sink.error(
                        &join_key(&p, inline),
                        pf.key_span(inline).unwrap_or(pool.span),
                        format!(
                            "facet pool `{}` has `uses` and `{inline}`; an external pool is used whole: remove `{inline}` or `uses`",
                            key.text
                        ),
                    );
                }
            }
            let Some(name) = string(&mut cx.sink, uses, &up) else {
                continue;
            };
            let Some(found) = layers.find("facet-pools", name, &[".yaml", ".yml"]) else {
                cx.sink.error(
                    &up,
                    uses.span,
                    format!(
                        "no facet pool `{name}`; looked for `{name}.yaml` and `{name}.yml` in {}",
                        layers.searched("facet-pools")
                    ),
                );
                continue;
            };
            let resolved = external_pool(cx, &found, &up, uses.span);
            if let Some(last) = names.last_mut() {
                last.1 = resolved;
            }
            continue;
        }
        let resolved = candidates(cx, &pf, &p, pool.span, &mut |cx, kind, name, path, span| {
            Some(cx.facets.resolve(&mut cx.sink, kind, name, path, span))
        });
        if let Some(last) = names.last_mut() {
            last.1 = resolved;
        }
    }
    names
}

/// An external pool file: its candidates resolve against its own section maps only.
fn external_pool(
    cx: &mut Cx<'_>,
    found: &super::layers::Found,
    path: &str,
    span: Span,
) -> Vec<crate::dynamic::FacetCandidate> {
    let file = found.path.display().to_string();
    let parsed = crate::yaml::parse(&found.text);
    let Some(root) = parsed.root.filter(|_| parsed.errors.is_empty()) else {
        cx.sink.error(
            path,
            span,
            format!("facet pool file {file} is not valid YAML"),
        );
        return Vec::new();
    };
    for banned in ["uses", "params"] {
        if root.get(banned).is_some() {
            cx.sink.error(
                path,
                span,
                format!(
                    "facet pool file {file} declares `{banned}`; an external pool is self-contained"
                ),
            );
        }
    }
    let mut sink = Sink::new(&found.path);
    let Some(pf) = fields(
        &mut sink,
        &root,
        "",
        "a facet pool file",
        &["policies", "knowledge", "candidates"],
        Unknown::Error,
    ) else {
        cx.sink.error(
            path,
            span,
            format!("facet pool file {file} must be a mapping"),
        );
        return Vec::new();
    };
    let map = |kind: &str| -> Vec<(String, String)> {
        root.get(kind)
            .and_then(Node::as_map)
            .map(|e| {
                e.iter()
                    .filter_map(|(k, v)| Some((k.text.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let policies = map("policies");
    let knowledge = map("knowledge");
    let base = found.path.parent().map(std::path::Path::to_path_buf);
    let builtin = found.path.starts_with(crate::takt_builtins::ORIGIN);
    let mut problems: Vec<String> = Vec::new();
    let resolved = candidates(cx, &pf, "", root.span, &mut |_, kind, name, _, _| {
        let entries = if kind == FacetKind::Policy {
            &policies
        } else {
            &knowledge
        };
        let Some((_, rel)) = entries.iter().find(|(k, _)| k == name) else {
            problems.push(format!(
                    "candidate facet `{name}` is not in the pool file's own `{}` map (an external pool never uses the workflow's facets)",
                    kind.section()
                ));
            return None;
        };
        let (text, path) = if builtin {
            let inner = rel.strip_prefix("../");
            (
                inner
                    .and_then(crate::takt_builtins::file)
                    .map(str::to_owned),
                inner.map(crate::takt_builtins::origin),
            )
        } else {
            let file = base.as_ref().map(|b| lexical(&b.join(rel)));
            (
                file.as_ref()
                    .filter(|f| f.is_file())
                    .and_then(|f| std::fs::read_to_string(f).ok()),
                file,
            )
        };
        let Some(text) = text else {
            problems.push(format!("`{name}`: file `{rel}` not found or not readable"));
            return None;
        };
        Some(Facet {
            name: name.to_owned(),
            text,
            path,
        })
    });
    for d in sink.finish().0 {
        problems.push(format!("line {}: {}", d.line, d.message));
    }
    if !problems.is_empty() {
        cx.sink.error(
            path,
            span,
            format!("facet pool file {file}: {}", problems.join("; ")),
        );
    }
    resolved
}

/// `path` with `.` and `..` taken out without touching the file system, so two references
/// to one facet file compare equal.
fn lexical(path: &std::path::Path) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

type OnFacet<'f> = dyn FnMut(&mut Cx<'_>, FacetKind, &str, &str, Span) -> Option<Facet> + 'f;

/// Checks a pool's `candidates` (ids unique, a description, at least one of policy and
/// knowledge), hands each facet name to `on_facet` to resolve, and returns the candidates.
fn candidates(
    cx: &mut Cx<'_>,
    pool: &Fields<'_>,
    path: &str,
    span: Span,
    on_facet: &mut OnFacet<'_>,
) -> Vec<crate::dynamic::FacetCandidate> {
    let Some((node, cp)) = pool.get("candidates") else {
        cx.sink.error(
            &join_key(path, "candidates"),
            span,
            "a facet pool needs `candidates` (or `uses:` an external pool)",
        );
        return Vec::new();
    };
    let Some(items) = list(&mut cx.sink, node, &cp, "a list of candidates") else {
        return Vec::new();
    };
    let mut resolved = Vec::new();
    if items.is_empty() {
        cx.sink
            .error(&cp, node.span, "a facet pool needs at least one candidate");
    }
    let mut ids: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = join_index(&cp, i);
        let Some(c) = fields(
            &mut cx.sink,
            item,
            &ip,
            "a facet pool candidate",
            &["id", "description", "policy", "knowledge"],
            Unknown::Error,
        ) else {
            continue;
        };
        let mut candidate = crate::dynamic::FacetCandidate {
            id: String::new(),
            description: String::new(),
            policies: Vec::new(),
            knowledge: Vec::new(),
        };
        if let Some(id) = c.required_string(&mut cx.sink, "id", "a facet pool candidate") {
            candidate.id = id.clone();
            if id.trim().is_empty() || ids.contains(&id) {
                let (n, p) = c.get("id").unwrap_or((item, ip.clone()));
                cx.sink.error(
                    &p,
                    n.span,
                    format!("facet pool candidate id `{id}` is empty or used twice in this pool"),
                );
            }
            ids.push(id);
        }
        match c.get("description") {
            Some((n, _)) if n.as_str().is_some_and(|d| !d.trim().is_empty()) => {
                candidate.description = n.as_str().unwrap_or_default().to_owned();
            }
            Some((n, p)) => cx.sink.error(
                &p,
                n.span,
                "a facet pool candidate needs a non-empty `description`: the selector chooses by it",
            ),
            None => cx.sink.error(
                &join_key(&ip, "description"),
                item.span,
                "a facet pool candidate needs a non-empty `description`: the selector chooses by it",
            ),
        }
        if c.get("policy").is_none() && c.get("knowledge").is_none() {
            cx.sink.error(
                &join_key(&ip, "id"),
                item.span,
                "a facet pool candidate needs at least one of `policy` and `knowledge`",
            );
        }
        for (key, kind) in [
            ("policy", FacetKind::Policy),
            ("knowledge", FacetKind::Knowledge),
        ] {
            if let Some((n, p)) = c.get(key) {
                for s in one_or_many(&mut cx.sink, n, &p) {
                    if let Some(facet) = on_facet(cx, kind, s.text, &s.path, s.span) {
                        if kind == FacetKind::Policy {
                            candidate.policies.push(facet);
                        } else {
                            candidate.knowledge.push(facet);
                        }
                    }
                }
            }
        }
        resolved.push(candidate);
    }
    resolved
}

/// The tools a list of capability presets grants, and whether it grants editing. Unknown
/// presets and leaves other than capabilities are errors.
pub(super) fn capabilities(
    sink: &mut Sink,
    node: &Node,
    path: &str,
    layers: &Layers,
) -> Option<(Vec<String>, bool)> {
    let names = one_or_many(sink, node, path);
    if matches!(&node.value, Value::Seq(items) if items.is_empty()) {
        sink.error(path, node.span, "`capabilities` names at least one preset");
        return None;
    }
    let mut tools: Vec<String> = Vec::new();
    for name in names {
        let Some(found) = layers.find("provider-options", name.text, &[".yaml", ".yml"]) else {
            sink.error(
                &name.path,
                name.span,
                format!(
                    "unknown capability preset `{}`; looked for `{}.yaml` in {} (the builtin presets are readonly, edit, enable-skills)",
                    name.text,
                    name.text,
                    layers.searched("provider-options")
                ),
            );
            continue;
        };
        let parsed = crate::yaml::parse(&found.text);
        let Some(root) = parsed.root else {
            continue;
        };
        for (provider, options) in root.as_map().unwrap_or_default() {
            for (leaf, value) in options.as_map().unwrap_or_default() {
                if !matches!(
                    leaf.text.as_str(),
                    "allowed_tools" | "network_access" | "sandbox" | "skills"
                ) {
                    sink.error(
                        &name.path,
                        name.span,
                        format!(
                            "capability preset `{}` ({}) sets `{}.{}`; a preset grants only capabilities (allowed_tools, network_access, sandbox, skills)",
                            name.text,
                            found.path.display(),
                            provider.text,
                            leaf.text
                        ),
                    );
                }
                // Claude's names are the canonical tool names Maestro knows.
                if provider.text == "claude"
                    && leaf.text == "allowed_tools"
                    && let Value::Seq(items) = &value.value
                {
                    for t in items.iter().filter_map(Node::as_str) {
                        if !tools.iter().any(|x| x == t) {
                            tools.push(t.to_owned());
                        }
                    }
                }
            }
        }
    }
    let edit = tools.iter().any(|t| t == "Edit" || t == "Write");
    Some((tools, edit))
}

/// Checks a companion selection (`[a, b]` or `{fixed, pool, moderator}`): every name must be
/// a companion definition, and at most three reviewers run together.
pub(super) fn companions(cx: &mut Cx<'_>, node: &Node, path: &str, layers: &Layers) -> Vec<String> {
    let mut names = Vec::new();
    let mut check = |cx: &mut Cx<'_>, n: &Node, p: &str| {
        let Some(name) = string(&mut cx.sink, n, p) else {
            return;
        };
        names.push(name.to_owned());
        match layers.find("companions", name, &[".yaml", ".yml"]) {
            Some(found) => {
                let parsed = crate::yaml::parse(&found.text);
                let ok = parsed.errors.is_empty()
                    && parsed
                        .root
                        .as_ref()
                        .and_then(Node::as_map)
                        .is_some_and(|e| {
                            e.iter().all(|(k, _)| {
                                matches!(
                                    k.text.as_str(),
                                    "name"
                                        | "description"
                                        | "persona"
                                        | "policy"
                                        | "knowledge"
                                        | "instruction"
                                        | "interval_ms"
                                )
                            })
                        });
                if !ok {
                    cx.sink.error(
                        p,
                        n.span,
                        format!(
                            "companion definition {} is not valid: it may hold name, description, persona, policy, knowledge, instruction and interval_ms",
                            found.path.display()
                        ),
                    );
                }
            }
            None => cx.sink.error(
                p,
                n.span,
                format!(
                    "unknown companion `{name}`; looked for `{name}.yaml` in {}",
                    layers.searched("companions")
                ),
            ),
        }
    };
    match &node.value {
        Value::Seq(items) => {
            if items.is_empty() {
                cx.sink.error(
                    path,
                    node.span,
                    "an empty companion selection is not allowed; omit `companion`",
                );
            }
            if items.len() > 3 {
                cx.sink.error(
                    path,
                    node.span,
                    "at most three companion reviewers run together",
                );
            }
            for (i, item) in items.iter().enumerate() {
                check(cx, item, &join_index(path, i));
            }
        }
        Value::Map(_) => {
            let Some(c) = fields(
                &mut cx.sink,
                node,
                path,
                "a companion selection",
                &["fixed", "pool", "moderator"],
                Unknown::Error,
            ) else {
                return names;
            };
            let mut count = 0;
            for key in ["fixed", "pool"] {
                if let Some((n, p)) = c.get(key)
                    && let Some(items) = list(&mut cx.sink, n, &p, "a list of companion names")
                {
                    count += items.len();
                    for (i, item) in items.iter().enumerate() {
                        check(cx, item, &join_index(&p, i));
                    }
                }
            }
            if count == 0 {
                cx.sink.error(
                    path,
                    node.span,
                    "a companion selection needs at least one fixed or pool reviewer",
                );
            }
            if let Some((n, p)) = c.get("moderator") {
                check(cx, n, &p);
            }
        }
        Value::Scalar(_) => cx.sink.error(
            path,
            node.span,
            format!(
                "expected a list of companion names or `{{fixed, pool, moderator}}`, found {}",
                node.kind_name()
            ),
        ),
    }
    names
}
