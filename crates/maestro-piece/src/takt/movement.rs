//! Takt movements: normal, parallel (with sub-movements) and loop-monitor judges, and their
//! rules.

use super::condition::parse_condition;
use super::contracts::{output_contracts, provider_tools};
use crate::allowed_tools::{Names, check_tools};
use crate::check::{
    Fields, Unknown, boolean, fields, known_list, list, nonempty_string, one_or_many, string,
    string_list,
};
use crate::cx::Cx;
use crate::facets::FacetKind;
use crate::ir::{Condition, Facet, Movement, Rule, SessionMode, Target};
use crate::yaml::{Node, Value, join_index};

/// Where a rule may lead: the top-level movements, `COMPLETE` and `ABORT`.
pub(crate) struct Targets {
    pub movements: Vec<String>,
}

impl Targets {
    pub(crate) fn describe(&self) -> String {
        format!("{}, COMPLETE, ABORT", known_list(&self.movements))
    }
}

const MOVEMENT_KEYS: &[&str] = &[
    "name",
    "persona",
    "policy",
    "knowledge",
    "instruction",
    "instruction_template",
    "edit",
    "permission_mode",
    "required_permission_mode",
    "session",
    "pass_previous_response",
    "allowed_tools",
    "provider_options",
    "provider",
    "team_leader",
    "output_contracts",
    "quality_gates",
    "rules",
    "parallel",
];

const JUDGE_KEYS: &[&str] = &[
    "persona",
    "policy",
    "knowledge",
    "instruction",
    "instruction_template",
    "rules",
];

const RULE_KEYS: &[&str] = &[
    "condition",
    "next",
    "requires_user_input",
    "interactive_only",
    "appendix",
];

/// The tools a takt movement without any `allowed_tools` gets: reading, searching and `Bash`
/// (whose workspace is read-only unless the movement may edit).
pub(crate) const DEFAULT_TOOLS: &[&str] = &["Read", "Glob", "Grep", "Bash"];

/// The tools that change files, added to [`DEFAULT_TOOLS`] when the movement may edit and
/// removed from every list when it may not.
const EDIT_TOOLS: &[&str] = &["Write", "Edit"];

/// TAKT's permission modes, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum PermissionMode {
    /// No Write or Edit; `Bash` sees the workspace read-only.
    Readonly,
    /// As `edit: true`.
    Edit,
    /// As `edit: true`, and `Bash` may run any program (`allowed_commands: ["*"]`), still in
    /// the sandbox.
    Full,
}

impl PermissionMode {
    fn parse(text: &str) -> Option<PermissionMode> {
        match text {
            "readonly" => Some(PermissionMode::Readonly),
            "edit" => Some(PermissionMode::Edit),
            "full" => Some(PermissionMode::Full),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Readonly => "readonly",
            PermissionMode::Edit => "edit",
            PermissionMode::Full => "full",
        }
    }
}

/// The movement's permission mode from `permission_mode` (which wins over a disagreeing
/// `edit`, with a warning) and `required_permission_mode` (TAKT v0.30's floor: the mode is
/// raised to it). `None` when neither is set: `edit` alone decides.
fn permission_mode(cx: &mut Cx<'_>, m: &Fields<'_>, edit: Option<bool>) -> Option<PermissionMode> {
    let mut read = |key: &str| -> Option<PermissionMode> {
        let (node, p) = m.get(key)?;
        let text = string(&mut cx.sink, node, &p)?;
        let mode = PermissionMode::parse(text);
        if mode.is_none() {
            cx.sink.error(
                &p,
                node.span,
                format!("unknown permission mode `{text}`; known: readonly, edit, full"),
            );
        }
        mode
    };
    let declared = read("permission_mode");
    let floor = read("required_permission_mode");
    if let (Some(mode), Some(edit)) = (declared, edit)
        && (mode != PermissionMode::Readonly) != edit
    {
        let (_, p) = m.get("permission_mode")?;
        cx.sink.warn(
            &p,
            m.key_span("permission_mode").unwrap_or(m.node.span),
            format!(
                "`permission_mode: {}` and `edit: {edit}` disagree; the permission mode decides ({}); make them agree",
                mode.as_str(),
                if mode == PermissionMode::Readonly {
                    "Write and Edit are not offered"
                } else {
                    "Write and Edit are offered"
                }
            ),
        );
    }
    match (declared, floor) {
        (None, None) => None,
        (Some(mode), None) => Some(mode),
        (declared, Some(floor)) => {
            let own = declared.unwrap_or(if edit == Some(true) {
                PermissionMode::Edit
            } else {
                PermissionMode::Readonly
            });
            Some(own.max(floor))
        }
    }
}

/// Which kind of movement is being read; it decides what its rules may say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A top-level movement without `parallel`.
    Normal,
    /// A top-level movement with `parallel`: its rules may aggregate with `all()`/`any()`.
    Parent,
    /// A sub-movement of a parallel movement: its rules classify, the parent picks `next`.
    Sub,
    /// A loop monitor's judge.
    Judge,
}

/// Top-level movement names (duplicates, also against sub-movements, are errors).
pub(crate) fn names(cx: &mut Cx<'_>, items: &[Node]) -> Vec<String> {
    names_in(cx, items, "movements", "movement")
}

/// [`names`] for a list under `list` (`steps` in TAKT workflows), whose entries are `what`s.
pub(crate) fn names_in(cx: &mut Cx<'_>, items: &[Node], list: &str, what: &str) -> Vec<String> {
    let mut top = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut check = |cx: &mut Cx<'_>, node: &Node, path: String| -> Option<String> {
        let name = node.as_str()?;
        if matches!(name, "COMPLETE" | "ABORT") {
            cx.sink.error(
                &path,
                node.span,
                format!("`{name}` is reserved and cannot name a {what}"),
            );
        }
        if let Some((_, first)) = seen.iter().find(|(n, _)| n == name) {
            cx.sink.error(
                &path,
                node.span,
                format!("duplicate {what} name `{name}`; `{first}` already has it"),
            );
            return None;
        }
        seen.push((name.to_owned(), path));
        Some(name.to_owned())
    };
    for (i, item) in items.iter().enumerate() {
        if let Some(node) = item.get("name")
            && let Some(name) = check(cx, node, format!("{list}[{i}].name"))
        {
            top.push(name);
        }
        if let Some(Value::Seq(subs)) = item.get("parallel").map(|p| &p.value) {
            for (j, sub) in subs.iter().enumerate() {
                if let Some(node) = sub.get("name") {
                    check(cx, node, format!("{list}[{i}].parallel[{j}].name"));
                }
            }
        }
    }
    top
}

pub(super) fn read(
    cx: &mut Cx<'_>,
    item: &Node,
    path: &str,
    targets: &Targets,
    piece_tools: &[String],
) -> Option<Movement> {
    let role = if item.get("parallel").is_some() {
        Role::Parent
    } else {
        Role::Normal
    };
    read_movement(cx, item, path, targets, piece_tools, role)
}

/// A loop monitor's judge, as a movement named `judge` whose rules pick the next movement.
pub(crate) fn read_judge(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &str,
    targets: &Targets,
) -> Option<Movement> {
    let j = fields(
        &mut cx.sink,
        node,
        path,
        "a judge",
        JUDGE_KEYS,
        Unknown::Warn,
    )?;
    let mut m = read_body(cx, &j, targets, Role::Judge, &[])?;
    m.name = "judge".to_owned();
    Some(m)
}

fn read_movement(
    cx: &mut Cx<'_>,
    item: &Node,
    path: &str,
    targets: &Targets,
    piece_tools: &[String],
    role: Role,
) -> Option<Movement> {
    const WHAT: &str = "a movement";
    let m = fields(&mut cx.sink, item, path, WHAT, MOVEMENT_KEYS, Unknown::Warn)?;
    let name = m
        .required(&mut cx.sink, "name", WHAT)
        .and_then(|(node, p)| nonempty_string(&mut cx.sink, node, &p))?;
    let subs = match (role, m.get("parallel")) {
        (Role::Parent, Some((node, p))) => read_parallel(cx, node, &p, targets, piece_tools),
        _ => Vec::new(),
    };
    let mut movement = read_body(cx, &m, targets, role, &subs)?;
    movement.name = name.to_owned();
    movement.parallel = subs;

    let edit = m
        .get("edit")
        .map(|(node, p)| boolean(&mut cx.sink, node, &p).unwrap_or(false));
    let mode = permission_mode(cx, &m, edit);
    if edit.is_none() && mode.is_none() && role != Role::Parent {
        cx.sink.warn(
            &format!("{path}.edit"),
            m.key_span("name").unwrap_or(item.span),
            format!("movement `{name}` has no `edit`; read as `edit: false` (Write and Edit are not offered)"),
        );
    }
    let mode = mode.unwrap_or(if edit == Some(true) {
        PermissionMode::Edit
    } else {
        PermissionMode::Readonly
    });
    movement.edit = mode != PermissionMode::Readonly;
    if mode == PermissionMode::Full {
        movement.allowed_commands = Some(vec!["*".to_owned()]);
    }
    for (key, why) in [
        (
            "provider",
            "maestro runs every movement on the configured endpoint",
        ),
        (
            "team_leader",
            "team-leader decomposition is not supported; the movement runs as one agent",
        ),
    ] {
        if let Some((_, p)) = m.get(key) {
            cx.sink
                .ignored(key, &p, m.key_span(key).unwrap_or(item.span), why);
        }
    }
    if let Some((node, p)) = m.get("session") {
        movement.session = match string(&mut cx.sink, node, &p) {
            Some("refresh") => SessionMode::Refresh,
            Some("continue") | None => SessionMode::Continue,
            Some(other) => {
                cx.sink.error(
                    &p,
                    node.span,
                    format!("unknown session mode `{other}`; known: continue, refresh"),
                );
                SessionMode::Continue
            }
        };
    }
    if let Some((node, p)) = m.get("pass_previous_response") {
        movement.pass_previous_response = boolean(&mut cx.sink, node, &p).unwrap_or(true);
    }
    let mut tools: Vec<String> = Vec::new();
    if let Some((node, p)) = m.get("allowed_tools") {
        let listed = string_list(&mut cx.sink, node, &p).unwrap_or_default();
        check_tools(cx, &listed, Names::Takt);
        tools.extend(listed.into_iter().map(|s| s.text.to_owned()));
    }
    if let Some((node, p)) = m.get("provider_options") {
        for tool in provider_tools(cx, node, &p) {
            if !tools.contains(&tool) {
                tools.push(tool);
            }
        }
    }
    if tools.is_empty() {
        tools = piece_tools.to_vec();
    }
    // TAKT's schema: `allowed_tools` is for reference, `edit` decides. A movement that names
    // no tools gets the default set for what it may do.
    if tools.is_empty() && role != Role::Parent {
        tools = DEFAULT_TOOLS.iter().map(|t| (*t).to_owned()).collect();
        if movement.edit {
            tools.extend(EDIT_TOOLS.iter().map(|t| (*t).to_owned()));
        }
    }
    if !movement.edit {
        tools.retain(|t| !EDIT_TOOLS.contains(&t.as_str()));
    }
    movement.allowed_tools = tools;
    if let Some((node, p)) = m.get("output_contracts") {
        movement.output_contracts = output_contracts(cx, node, &p);
    }
    if let Some((node, p)) = m.get("quality_gates") {
        movement.quality_gates = string_list(&mut cx.sink, node, &p)
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.text.to_owned())
            .collect();
    }
    Some(movement)
}

/// What every movement kind shares: facets and rules.
fn read_body(
    cx: &mut Cx<'_>,
    m: &Fields<'_>,
    targets: &Targets,
    role: Role,
    subs: &[Movement],
) -> Option<Movement> {
    let persona = single_facet(cx, m, "persona", FacetKind::Persona);
    let policies = many_facets(cx, m, "policy", FacetKind::Policy);
    let knowledge = many_facets(cx, m, "knowledge", FacetKind::Knowledge);
    let instruction = match (m.get("instruction"), m.get("instruction_template")) {
        (Some(_), Some((_, p))) => {
            cx.sink.warn(
                &p,
                m.key_span("instruction_template").unwrap_or(m.node.span),
                "both `instruction` and `instruction_template` are set; `instruction_template` is used",
            );
            single_facet(cx, m, "instruction_template", FacetKind::Instruction)
        }
        (Some(_), None) => single_facet(cx, m, "instruction", FacetKind::Instruction),
        (None, _) => single_facet(cx, m, "instruction_template", FacetKind::Instruction),
    };
    let rules = match role {
        Role::Sub => m
            .get("rules")
            .map(|(node, p)| read_rules(cx, node, &p, targets, role, subs)),
        _ => m
            .required(&mut cx.sink, "rules", "a movement")
            .map(|(node, p)| read_rules(cx, node, &p, targets, role, subs)),
    };
    Some(Movement {
        name: String::new(),
        persona,
        policies,
        knowledge,
        instruction,
        edit: false,
        allowed_tools: Vec::new(),
        allowed_commands: None,
        allowed_ssh_connections: None,
        rules: rules.unwrap_or_default(),
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
        kind: Default::default(),
        dynamic: None,
        structured_output: None,
        delay_before_ms: None,
        completion_retry: None,
    })
}

pub(crate) fn single_facet(
    cx: &mut Cx<'_>,
    m: &Fields<'_>,
    key: &str,
    kind: FacetKind,
) -> Option<Facet> {
    let (node, p) = m.get(key)?;
    let text = nonempty_string(&mut cx.sink, node, &p)?;
    Some(cx.facets.resolve(&mut cx.sink, kind, text, &p, node.span))
}

pub(crate) fn many_facets(
    cx: &mut Cx<'_>,
    m: &Fields<'_>,
    key: &str,
    kind: FacetKind,
) -> Vec<Facet> {
    let Some((node, p)) = m.get(key) else {
        return Vec::new();
    };
    one_or_many(&mut cx.sink, node, &p)
        .into_iter()
        .map(|s| {
            cx.facets
                .resolve(&mut cx.sink, kind, s.text, &s.path, s.span)
        })
        .collect()
}

fn read_parallel(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &str,
    targets: &Targets,
    piece_tools: &[String],
) -> Vec<Movement> {
    let Some(items) = list(&mut cx.sink, node, path, "a list of sub-movements") else {
        return Vec::new();
    };
    if items.is_empty() {
        cx.sink.error(
            path,
            node.span,
            "a parallel movement needs at least one sub-movement",
        );
    }
    let mut subs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = join_index(path, i);
        if item.get("parallel").is_some() {
            cx.sink.error(
                &format!("{item_path}.parallel"),
                item.span,
                "parallel movements cannot be nested",
            );
            continue;
        }
        if let Some(sub) = read_movement(cx, item, &item_path, targets, piece_tools, Role::Sub) {
            subs.push(sub);
        }
    }
    subs
}

/// Why an `all()`/`any()` condition does not fit the parallel movement's sub-movements.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum AggregateError {
    #[error(
        "{conditions} conditions for {subs} sub-movements; the positional form names one condition per sub-movement, in order"
    )]
    Count { conditions: usize, subs: usize },
    #[error("condition \"{condition}\" is not a rule condition of {whom}; known: {known}")]
    Unknown {
        condition: String,
        whom: String,
        known: String,
    },
}

/// Each argument of `all()`/`any()` must be a rule condition of a sub-movement. `all("A", "B")`
/// is positional (one argument per sub-movement, in order); `any("A", "B")` means some
/// sub-movement matched one of them (takt's semantics).
fn check_aggregate(condition: &Condition, subs: &[Movement]) -> Result<(), AggregateError> {
    let (args, positional) = match condition {
        Condition::All(args) => (args, args.len() > 1),
        Condition::Any(args) => (args, false),
        Condition::Text(_) | Condition::Ai(_) | Condition::Status(_) | Condition::When { .. } => {
            return Ok(());
        }
    };
    if positional && args.len() != subs.len() {
        return Err(AggregateError::Count {
            conditions: args.len(),
            subs: subs.len(),
        });
    }
    let conditions = |sub: &Movement| -> Vec<String> {
        sub.rules
            .iter()
            .filter_map(|r| match &r.condition {
                Condition::Text(t) | Condition::Ai(t) => Some(t.clone()),
                Condition::All(_)
                | Condition::Any(_)
                | Condition::Status(_)
                | Condition::When { .. } => None,
            })
            .collect()
    };
    for (i, arg) in args.iter().enumerate() {
        let (candidates, whom): (Vec<String>, String) = match subs.get(i) {
            Some(sub) if positional => (conditions(sub), format!("sub-movement `{}`", sub.name)),
            _ => (
                subs.iter().flat_map(conditions).collect(),
                "any sub-movement".to_owned(),
            ),
        };
        if !candidates.contains(arg) {
            return Err(AggregateError::Unknown {
                condition: arg.clone(),
                whom,
                known: known_list(&candidates),
            });
        }
    }
    Ok(())
}

fn read_rules(
    cx: &mut Cx<'_>,
    node: &Node,
    path: &str,
    targets: &Targets,
    role: Role,
    subs: &[Movement],
) -> Vec<Rule> {
    let Some(items) = list(&mut cx.sink, node, path, "a list of rules") else {
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| read_rule(cx, item, &join_index(path, i), targets, role, subs))
        .collect()
}

fn read_rule(
    cx: &mut Cx<'_>,
    item: &Node,
    path: &str,
    targets: &Targets,
    role: Role,
    subs: &[Movement],
) -> Option<Rule> {
    const WHAT: &str = "a rule";
    let r = fields(&mut cx.sink, item, path, WHAT, RULE_KEYS, Unknown::Warn)?;
    let sink = &mut cx.sink;
    let condition = r
        .required(sink, "condition", WHAT)
        .and_then(|(node, p)| {
            let text = nonempty_string(sink, node, &p)?;
            match parse_condition(text) {
                Ok(c @ (Condition::All(_) | Condition::Any(_))) if role != Role::Parent => {
                    sink.error(
                        &p,
                        node.span,
                        "`all(…)` and `any(…)` aggregate sub-movement results, so they only work in the rules of a movement with `parallel`",
                    );
                    Some(c)
                }
                Ok(c @ (Condition::All(_) | Condition::Any(_))) => {
                    if let Err(e) = check_aggregate(&c, subs) {
                        sink.error(&p, node.span, e.to_string());
                    }
                    Some(c)
                }
                Ok(c) => Some(c),
                Err(e) => {
                    sink.error(&p, node.span, e.to_string());
                    None
                }
            }
        });
    let next = match (role, r.get("next")) {
        (Role::Sub, Some((_, p))) => {
            sink.ignored(
                "next",
                &p,
                r.key_span("next").unwrap_or(item.span),
                "a sub-movement's rules only classify its result; the parallel parent's rules pick the next movement",
            );
            None
        }
        (Role::Sub, None) => None,
        (_, _) => r
            .required(sink, "next", WHAT)
            .and_then(|(node, p)| {
                let text = string(sink, node, &p)?;
                match Target::sentinel(text) {
                    Some(sentinel @ (Target::Complete | Target::Abort)) => Some(sentinel),
                    _ if targets.movements.iter().any(|m| m == text) => {
                        Some(Target::Movement(text.to_owned()))
                    }
                    _ => {
                        sink.error(
                            &p,
                            node.span,
                            format!("unknown movement `{text}`; known: {}", targets.describe()),
                        );
                        None
                    }
                }
            })
            .map(Some)
            .unwrap_or(None),
    };
    let flag = |sink: &mut crate::check::Sink, key: &str| {
        r.get(key)
            .and_then(|(node, p)| boolean(sink, node, &p))
            .unwrap_or(false)
    };
    let requires_user_input = flag(sink, "requires_user_input");
    let interactive_only = flag(sink, "interactive_only");
    let appendix = r
        .get("appendix")
        .and_then(|(node, p)| string(sink, node, &p).map(str::to_owned));
    if role != Role::Sub && next.is_none() {
        return None;
    }
    Some(Rule {
        condition: condition?,
        next,
        requires_user_input,
        interactive_only,
        appendix,
        prompt: None,
    })
}
