//! The native maestro dialect: every rule of `maestro-piece-schema.md`, enforced with precise
//! paths. Unknown keys are errors here (a typo must not silently drop a permission).

use crate::check::{
    Fields, Str, Unknown, boolean, fields, known_list, list, nonempty_string, positive, string,
    string_list,
};
use crate::cx::{Cx, initial_movement, movement_items};
use crate::facets::FacetKind;
use crate::ir::{Condition, Dialect, Movement, Piece, PieceBudget, Rule, SessionMode, Target};
use crate::names::{is_mcp_slug, is_piece_name, is_ssh_id, is_tool_name};
use crate::yaml::{Node, ScalarKind, Value, join_index};

pub(crate) const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "max_movements",
    "initial_movement",
    "triggers",
    "required_mcp",
    "model",
    "budget",
    "movements",
    "dialect",
];

const MOVEMENT_KEYS: &[&str] = &[
    "name",
    "edit",
    "persona",
    "instruction",
    "allowed_tools",
    "allowed_commands",
    "allowed_ssh_connections",
    "rules",
    "default_next",
    "max_consecutive_revisits",
];

const RULE_KEYS: &[&str] = &["condition", "next"];

/// Tools that reach a remote host and so need `allowed_ssh_connections`.
pub(crate) const SSH_TOOLS: &[&str] = &["SshExec", "SshUpload", "SshDownload"];

pub(crate) fn load(cx: &mut Cx<'_>, top: &Fields<'_>) -> Option<Piece> {
    const WHAT: &str = "a maestro piece";
    let sink = &mut cx.sink;
    let name = top.required(sink, "name", WHAT).and_then(|(node, path)| {
        let name = string(sink, node, &path)?;
        if !is_piece_name(name) {
            sink.error(
                &path,
                node.span,
                format!("invalid piece name `{name}`; use lowercase letters, digits and `-` (pattern [a-z0-9-]+)"),
            );
        } else if name == "auto" {
            // `maestro run auto` and a job of piece `auto` ask the classifier to choose: a piece
            // of that name could never be named.
            sink.error(
                &path,
                node.span,
                "the piece name `auto` is reserved (`auto` asks the classifier to choose a piece); rename the piece",
            );
        }
        Some(name.to_owned())
    });
    let description = top.required_string(sink, "description", WHAT);
    let max_movements = top
        .required(sink, "max_movements", WHAT)
        .and_then(|(node, path)| positive(sink, node, &path));
    let keywords = read_triggers(cx, top);
    let required_mcp = read_required_mcp(cx, top);
    let model = top.optional_string(&mut cx.sink, "model");
    let budget = read_budget(cx, top);

    let items = movement_items(&mut cx.sink, top, WHAT);
    let names = movement_names(cx, items);
    let known: Vec<&str> = names.iter().flatten().map(String::as_str).collect();

    let initial_movement = initial_movement(&mut cx.sink, top, WHAT, &known);

    let movements: Vec<Movement> = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| read_movement(cx, item, &join_index("movements", i), &known))
        .collect();

    Some(Piece {
        name: name?,
        description: description?,
        dialect: Dialect::Maestro,
        source: Default::default(),
        hash: String::new(),
        max_movements: max_movements?,
        initial_movement: initial_movement?,
        start_prompt: None,
        movements,
        loop_monitors: Vec::new(),
        keywords,
        required_mcp,
        model,
        budget,
    })
}

/// `budget: {max_total_tokens, max_cost_usd}`: each optional, each positive.
fn read_budget(cx: &mut Cx<'_>, top: &Fields<'_>) -> Option<PieceBudget> {
    let (node, path) = top.get("budget")?;
    let budget = fields(
        &mut cx.sink,
        node,
        &path,
        "`budget`",
        &["max_total_tokens", "max_cost_usd"],
        Unknown::Error,
    )?;
    let mut out = PieceBudget::default();
    if let Some((node, path)) = budget.get("max_total_tokens") {
        let tokens = match &node.value {
            Value::Scalar(s) => match s.kind() {
                ScalarKind::Int(n) if n > 0 => u64::try_from(n).ok(),
                _ => None,
            },
            _ => None,
        };
        match tokens {
            Some(tokens) => out.max_total_tokens = Some(tokens),
            None => cx.sink.error(
                &path,
                node.span,
                "expected a positive whole number of tokens (prompt and answer together), e.g. `max_total_tokens: 200000`",
            ),
        }
    }
    if let Some((node, path)) = budget.get("max_cost_usd") {
        let usd = match &node.value {
            Value::Scalar(s) => match s.kind() {
                ScalarKind::Int(n) => Some(n as f64),
                ScalarKind::Float(f) => Some(f),
                _ => None,
            },
            _ => None,
        };
        match usd {
            Some(usd) if usd.is_finite() && usd > 0.0 => out.max_cost_usd = Some(usd),
            _ => cx.sink.error(
                &path,
                node.span,
                "expected a positive amount of US dollars, e.g. `max_cost_usd: 2.5` (priced by llm.models.<name>.price)",
            ),
        }
    }
    if budget.get("max_total_tokens").is_none() && budget.get("max_cost_usd").is_none() {
        cx.sink.error(
            &path,
            node.span,
            "`budget` sets no cap; give `max_total_tokens`, `max_cost_usd` or both, or remove it",
        );
    }
    if out.max_total_tokens.is_none() && out.max_cost_usd.is_none() {
        return None;
    }
    Some(out)
}

fn read_triggers(cx: &mut Cx<'_>, top: &Fields<'_>) -> Vec<String> {
    let Some((node, path)) = top.get("triggers") else {
        return Vec::new();
    };
    let Some(triggers) = fields(
        &mut cx.sink,
        node,
        &path,
        "`triggers`",
        &["keywords"],
        Unknown::Error,
    ) else {
        return Vec::new();
    };
    triggers
        .get("keywords")
        .and_then(|(node, path)| string_list(&mut cx.sink, node, &path))
        .map(|items| items.into_iter().map(|s| s.text.to_owned()).collect())
        .unwrap_or_default()
}

fn read_required_mcp(cx: &mut Cx<'_>, top: &Fields<'_>) -> Vec<String> {
    let Some((node, path)) = top.get("required_mcp") else {
        return Vec::new();
    };
    let items = string_list(&mut cx.sink, node, &path).unwrap_or_default();
    for slug in &items {
        if !is_mcp_slug(slug.text) {
            cx.sink.error(
                &slug.path,
                slug.span,
                format!(
                    "invalid MCP server slug `{}`; use 1 to 64 of lowercase letters, digits, `_` and `-`",
                    slug.text
                ),
            );
        }
    }
    items.into_iter().map(|s| s.text.to_owned()).collect()
}

/// First pass: the movement names, with duplicates and reserved words reported. An entry is
/// `None` where the name is missing or unusable.
fn movement_names(cx: &mut Cx<'_>, items: &[Node]) -> Vec<Option<String>> {
    let mut names: Vec<Option<String>> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(node) = item.get("name") else {
            names.push(None);
            continue;
        };
        let path = format!("movements[{i}].name");
        let Some(name) = node.as_str() else {
            names.push(None);
            continue;
        };
        if Target::sentinel(name).is_some() {
            cx.sink.error(
                &path,
                node.span,
                format!("`{name}` is reserved and cannot name a movement"),
            );
        }
        if let Some(first) = names.iter().position(|n| n.as_deref() == Some(name)) {
            cx.sink.error(
                &path,
                node.span,
                format!("duplicate movement name `{name}`; movements[{first}] already has it"),
            );
            names.push(None);
            continue;
        }
        names.push(Some(name.to_owned()));
    }
    names
}

fn read_movement(cx: &mut Cx<'_>, item: &Node, path: &str, known: &[&str]) -> Option<Movement> {
    const WHAT: &str = "a movement";
    let m = fields(
        &mut cx.sink,
        item,
        path,
        WHAT,
        MOVEMENT_KEYS,
        Unknown::Error,
    )?;
    let sink = &mut cx.sink;
    let name = m
        .required(sink, "name", WHAT)
        .and_then(|(node, path)| nonempty_string(sink, node, &path));
    let edit = m
        .required(sink, "edit", WHAT)
        .and_then(|(node, path)| boolean(sink, node, &path));
    let persona = m.required(sink, "persona", WHAT).and_then(|(node, path)| {
        let text = nonempty_string(sink, node, &path)?;
        Some(
            cx.facets
                .resolve(sink, FacetKind::Persona, text, &path, node.span),
        )
    });
    let instruction = m
        .required(sink, "instruction", WHAT)
        .and_then(|(node, path)| {
            let text = nonempty_string(sink, node, &path)?;
            Some(
                cx.facets
                    .resolve(sink, FacetKind::Instruction, text, &path, node.span),
            )
        });
    let tools = m
        .required(sink, "allowed_tools", WHAT)
        .and_then(|(node, path)| string_list(sink, node, &path));
    let allowed_commands = m
        .get("allowed_commands")
        .and_then(|(node, path)| string_list(sink, node, &path))
        .map(|items| items.into_iter().map(|s| s.text.to_owned()).collect());
    let ssh = read_ssh_connections(cx, &m);
    if let Some(tools) = &tools {
        check_tools(cx, tools, ssh.is_some());
        // Malformed names already have their error above.
        let well_formed: Vec<Str<'_>> = tools
            .iter()
            .filter(|t| is_tool_name(t.text))
            .cloned()
            .collect();
        crate::allowed_tools::check_tools(cx, &well_formed, crate::allowed_tools::Names::Maestro);
        if edit == Some(false) {
            for tool in tools
                .iter()
                .filter(|t| crate::catalog::EDIT_TOOLS.contains(&t.text))
            {
                cx.sink.warn(
                    &tool.path,
                    tool.span,
                    format!(
                        "`{}` changes files, so it is offered only to a movement with `edit: \
                         true`, and this one has `edit: false`; set `edit: true`, or drop `{}`",
                        tool.text, tool.text
                    ),
                );
            }
        }
    }
    let sink = &mut cx.sink;
    let rules = m
        .required(sink, "rules", WHAT)
        .and_then(|(node, path)| list(sink, node, &path, "a list of rules"))
        .map(|rules| {
            rules
                .iter()
                .enumerate()
                .filter_map(|(j, rule)| {
                    read_rule(cx, rule, &join_index(&format!("{path}.rules"), j), known)
                })
                .collect::<Vec<_>>()
        });
    let sink = &mut cx.sink;
    let default_next = m.get("default_next").and_then(|(node, path)| {
        let text = string(sink, node, &path)?;
        match Target::sentinel(text) {
            Some(t) => Some(t),
            None if known.contains(&text) => Some(Target::Movement(text.to_owned())),
            None => {
                sink.error(
                    &path,
                    node.span,
                    format!(
                        "unknown movement `{text}`; known: {}, COMPLETE, ABORT, ASK, WAIT_SUBTASKS",
                        known_list(known)
                    ),
                );
                None
            }
        }
    });
    let waits = rules.as_ref().is_some_and(|rules| {
        rules
            .iter()
            .any(|r| r.next.as_ref() == Some(&Target::WaitSubtasks))
    });
    let spawns = tools
        .as_ref()
        .is_some_and(|tools| tools.iter().any(|t| t.text == "SpawnSubTask"));
    if waits
        && !spawns
        && let Some((node, path)) = m.get("rules")
    {
        sink.warn(
            &path,
            node.span,
            "a rule leads to `WAIT_SUBTASKS`, but this movement cannot start subtasks, so the wait \
             always takes `default_next`; add `SpawnSubTask` to `allowed_tools`",
        );
    }
    let max_consecutive_revisits = m
        .get("max_consecutive_revisits")
        .and_then(|(node, path)| positive(sink, node, &path));

    Some(Movement {
        name: name?.to_owned(),
        persona: Some(persona?),
        policies: Vec::new(),
        knowledge: Vec::new(),
        instruction: Some(instruction?),
        edit: edit?,
        allowed_tools: tools?.into_iter().map(|s| s.text.to_owned()).collect(),
        allowed_commands,
        allowed_ssh_connections: ssh,
        rules: rules?,
        default_next,
        max_consecutive_revisits,
        pass_previous_response: true,
        session: SessionMode::default(),
        output_contracts: Vec::new(),
        quality_gates: Vec::new(),
        command_gates: Vec::new(),
        companions: Vec::new(),
        parallel: Vec::new(),
        frontmatter_schema: None,
        kind: Default::default(),
        dynamic: None,
        structured_output: None,
        delay_before_ms: None,
        completion_retry: None,
    })
}

fn read_ssh_connections(cx: &mut Cx<'_>, m: &Fields<'_>) -> Option<Vec<String>> {
    let (node, path) = m.get("allowed_ssh_connections")?;
    let items = string_list(&mut cx.sink, node, &path)?;
    for id in &items {
        if id.text != "*" && !is_ssh_id(id.text) {
            cx.sink.error(
                &id.path,
                id.span,
                format!(
                    "invalid SSH connection id `{}`; use `*` or a connection id of 8 or more lowercase hex digits and `-`",
                    id.text
                ),
            );
        }
    }
    Some(items.into_iter().map(|s| s.text.to_owned()).collect())
}

fn check_tools(cx: &mut Cx<'_>, tools: &[Str<'_>], has_ssh_list: bool) {
    for tool in tools {
        if !is_tool_name(tool.text) {
            let message = if tool.text.contains('*') {
                format!(
                    "invalid tool pattern `{}`; the only wildcards are `mcp__*` and `mcp__<server>__*`",
                    tool.text
                )
            } else {
                format!(
                    "invalid tool name `{}`; tool names use letters, digits, `_` and `-`",
                    tool.text
                )
            };
            cx.sink.error(&tool.path, tool.span, message);
        }
        if SSH_TOOLS.contains(&tool.text) && !has_ssh_list {
            cx.sink.error(
                &tool.path,
                tool.span,
                format!(
                    "`{}` needs `allowed_ssh_connections` on this movement: list connection ids, `['*']` for any, or `[]` to deny all",
                    tool.text
                ),
            );
        }
    }
}

fn read_rule(cx: &mut Cx<'_>, item: &Node, path: &str, known: &[&str]) -> Option<Rule> {
    const WHAT: &str = "a rule";
    let r = fields(&mut cx.sink, item, path, WHAT, RULE_KEYS, Unknown::Error)?;
    let detected_because = cx.detected_because.as_deref();
    let sink = &mut cx.sink;
    let condition = r
        .required(sink, "condition", WHAT)
        .and_then(|(node, path)| nonempty_string(sink, node, &path));
    let next = r.required(sink, "next", WHAT).and_then(|(node, path)| {
        let text = string(sink, node, &path)?;
        if matches!(
            Target::sentinel(text),
            Some(Target::Complete | Target::Abort | Target::Ask)
        ) {
            let mut message = format!(
                "`{text}` cannot be a rule's `next`: a movement ends the run by calling the `complete` tool; terminal sentinels are allowed only in `default_next`; known: {}, WAIT_SUBTASKS; fix: point the rule at a movement, or remove it and set `default_next: {text}` on the movement",
                known_list(known)
            );
            if let Some(because) = detected_because {
                message.push_str(&format!(
                    " (this file is read as maestro because {because}; if it is a takt piece, add `dialect: takt` at the top)"
                ));
            }
            sink.error(&path, node.span, message);
            return None;
        }
        if let Some(Target::WaitSubtasks) = Target::sentinel(text) {
            return Some(Target::WaitSubtasks);
        }
        if !known.contains(&text) {
            sink.error(
                &path,
                node.span,
                format!("unknown movement `{text}`; known: {}, WAIT_SUBTASKS", known_list(known)),
            );
            return None;
        }
        Some(Target::Movement(text.to_owned()))
    });
    Some(Rule {
        condition: Condition::Text(condition?.to_owned()),
        next: Some(next?),
        requires_user_input: false,
        interactive_only: false,
        appendix: None,
        prompt: None,
    })
}
