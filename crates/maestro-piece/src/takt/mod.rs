//! The takt dialect (`takt-piece-schema.ja.md`, as used by takt v0.30's builtin pieces).
//!
//! Every key takt defines is read; keys that have no meaning for maestro (`piece_config`,
//! `provider`, `team_leader`, `required_permission_mode`, provider options other than
//! `allowed_tools`) are accepted with a warning, as are unknown keys: a takt piece written for
//! a newer takt still loads.

pub(crate) mod condition;
pub(crate) mod contracts;
pub(crate) mod movement;

use crate::check::{Fields, Unknown, fields, known_list, list, positive, string_list};
use crate::cx::{Cx, initial_movement, movement_items};
use crate::ir::{Dialect, LoopMonitor, Piece};
use crate::yaml::{Node, join_index};
use movement::Targets;

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "max_movements",
    "initial_movement",
    "personas",
    "policies",
    "instructions",
    "report_formats",
    "knowledge",
    "movements",
    "loop_monitors",
    "piece_config",
    "dialect",
];

pub(crate) fn load(cx: &mut Cx<'_>, root: &Node) -> Option<Piece> {
    const WHAT: &str = "a takt piece";
    let top = fields(&mut cx.sink, root, "", WHAT, TOP_KEYS, Unknown::Warn)?;
    cx.facets.read_sections(&mut cx.sink, &top);
    let sink = &mut cx.sink;
    let name = top.required_string(sink, "name", WHAT);
    let description = top.optional_string(sink, "description").unwrap_or_default();
    let max_movements = top
        .required(sink, "max_movements", WHAT)
        .and_then(|(node, path)| positive(sink, node, &path));
    let piece_tools = read_piece_config(cx, &top);

    let items = movement_items(&mut cx.sink, &top, WHAT);
    let targets = Targets {
        movements: movement::names(cx, items),
    };
    let initial_movement = initial_movement(&mut cx.sink, &top, WHAT, &targets.movements);
    let movements = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            movement::read(
                cx,
                item,
                &join_index("movements", i),
                &targets,
                &piece_tools,
            )
        })
        .collect();
    let loop_monitors = read_loop_monitors(cx, &top, &targets);

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

/// `piece_config`: its `provider_options.*.allowed_tools` become the default tool list of
/// movements that name none; the rest is provider tuning with no meaning here.
fn read_piece_config(cx: &mut Cx<'_>, top: &Fields<'_>) -> Vec<String> {
    let Some((node, path)) = top.get("piece_config") else {
        return Vec::new();
    };
    let Some(config) = fields(
        &mut cx.sink,
        node,
        &path,
        "`piece_config`",
        &["provider_options"],
        Unknown::Warn,
    ) else {
        return Vec::new();
    };
    match config.get("provider_options") {
        Some((node, path)) => contracts::provider_tools(cx, node, &path),
        None => Vec::new(),
    }
}

fn read_loop_monitors(cx: &mut Cx<'_>, top: &Fields<'_>, targets: &Targets) -> Vec<LoopMonitor> {
    let Some((node, path)) = top.get("loop_monitors") else {
        return Vec::new();
    };
    let Some(items) = list(&mut cx.sink, node, &path, "a list of loop monitors") else {
        return Vec::new();
    };
    let mut monitors = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = join_index(&path, i);
        if let Some(monitor) = read_loop_monitor(cx, item, &item_path, targets) {
            monitors.push(monitor);
        }
    }
    monitors
}

fn read_loop_monitor(
    cx: &mut Cx<'_>,
    item: &Node,
    path: &str,
    targets: &Targets,
) -> Option<LoopMonitor> {
    const WHAT: &str = "a loop monitor";
    let m = fields(
        &mut cx.sink,
        item,
        path,
        WHAT,
        &["cycle", "threshold", "judge"],
        Unknown::Warn,
    )?;
    let sink = &mut cx.sink;
    let cycle = m
        .required(sink, "cycle", WHAT)
        .and_then(|(node, path)| string_list(sink, node, &path))
        .map(|names| {
            for name in &names {
                if !targets.movements.iter().any(|m| m == name.text) {
                    sink.error(
                        &name.path,
                        name.span,
                        format!(
                            "unknown movement `{}`; known: {}",
                            name.text,
                            known_list(&targets.movements)
                        ),
                    );
                }
            }
            names
                .into_iter()
                .map(|n| n.text.to_owned())
                .collect::<Vec<_>>()
        });
    let threshold = m
        .required(sink, "threshold", WHAT)
        .and_then(|(node, path)| positive(sink, node, &path));
    let judge = m
        .required(sink, "judge", WHAT)
        .and_then(|(node, path)| movement::read_judge(cx, node, &path, targets));
    Some(LoopMonitor {
        cycle: cycle?,
        threshold: threshold?,
        judge: judge?,
    })
}
