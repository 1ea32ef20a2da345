//! Dialect detection: deterministic, and explained.
//!
//! 1. `--dialect` (the caller's [`crate::LoadOptions::dialect`]) wins.
//! 2. A top-level `dialect:` key comes next.
//! 3. `roles` and `graph` at the top level mean graph.
//! 4. A TAKT workflow key (`steps`, `initial_step`, `max_steps`, `workflow_config`) means
//!    takt, read as a workflow (TAKT v0.36 and later); with v0.30 keys beside it the loader
//!    refuses the file, naming the keys of each generation.
//! 5. A field only takt has means takt (see [`TAKT_TOP_KEYS`], [`TAKT_MOVEMENT_KEYS`],
//!    [`TAKT_RULE_KEYS`]).
//! 6. A field only maestro has means maestro (`triggers`, `required_mcp`, `model`, `budget`,
//!    `default_next`, …): takt-style values in such a file are then errors at their place.
//! 7. A takt-style value means takt: `ai()`/`all()`/`any()` conditions, `COMPLETE`/`ABORT`
//!    as a rule's `next`.
//! 8. Otherwise maestro.
//!
//! Fields decide before values because a field cannot be a mistake of the other dialect (it
//! would be an unknown key there), while `next: COMPLETE` in a maestro piece is exactly the
//! mistake the maestro schema forbids.

use crate::ir::Dialect;
use crate::yaml::{Node, Span, Value};

/// Top-level keys only takt pieces use.
pub(crate) const TAKT_TOP_KEYS: &[&str] = &[
    "personas",
    "policies",
    "instructions",
    "report_formats",
    "knowledge",
    "loop_monitors",
    "piece_config",
];

/// Movement keys only takt pieces use.
pub(crate) const TAKT_MOVEMENT_KEYS: &[&str] = &[
    "parallel",
    "policy",
    "knowledge",
    "instruction_template",
    "output_contracts",
    "quality_gates",
    "session",
    "pass_previous_response",
    "provider_options",
    "provider",
    "permission_mode",
    "required_permission_mode",
    "team_leader",
];

/// Rule keys only takt pieces use.
pub(crate) const TAKT_RULE_KEYS: &[&str] = &["requires_user_input", "interactive_only", "appendix"];

/// The detected dialect and the feature that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// The dialect the text is written in.
    pub dialect: Dialect,
    /// Why, e.g. "`movements[0].parallel` is a takt feature".
    pub reason: String,
}

/// Detects the dialect of a piece's source text. Returns `None` when the text is not a YAML
/// mapping (the loader reports why).
pub fn detect_dialect(source: &str) -> Option<Detection> {
    let root = crate::yaml::parse(source).root?;
    root.as_map()?;
    Some(detect(&root))
}

/// Detection on an already parsed tree (steps 2–5 above).
pub(crate) fn detect(root: &Node) -> Detection {
    if let Some(d) = root.get("dialect").and_then(Node::as_str)
        && let Ok(dialect) = d.parse::<Dialect>()
    {
        return Detection {
            dialect,
            reason: "the `dialect:` key says so".to_owned(),
        };
    }
    if root.get("roles").is_some() && root.get("graph").is_some() {
        return Detection {
            dialect: Dialect::Graph,
            reason: "`roles` and `graph` are at the top level".to_owned(),
        };
    }
    if let Some(key) = crate::workflow::WORKFLOW_KEYS
        .iter()
        .find(|k| root.get(k).is_some())
    {
        return Detection {
            dialect: Dialect::Takt,
            reason: format!("`{key}` is a TAKT workflow key (TAKT v0.36 and later)"),
        };
    }
    if let Some(reason) = takt_feature(root, Signal::Field) {
        return Detection {
            dialect: Dialect::Takt,
            reason: format!("{reason} is a takt feature"),
        };
    }
    if let Some((path, _)) = maestro_feature(root) {
        return Detection {
            dialect: Dialect::Maestro,
            reason: format!("`{path}` is a maestro field"),
        };
    }
    if let Some(reason) = takt_feature(root, Signal::Value) {
        return Detection {
            dialect: Dialect::Takt,
            reason: format!("{reason} is a takt feature"),
        };
    }
    Detection {
        dialect: Dialect::Maestro,
        reason: "no graph or takt feature is present".to_owned(),
    }
}

/// What kind of takt signal to look for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    /// A key only takt defines.
    Field,
    /// A value written the takt way in a field both dialects have.
    Value,
}

fn takt_feature(root: &Node, signal: Signal) -> Option<String> {
    if signal == Signal::Field {
        for key in TAKT_TOP_KEYS {
            if root.get(key).is_some() {
                return Some(format!("`{key}`"));
            }
        }
    }
    let Value::Seq(movements) = &root.get("movements")?.value else {
        return None;
    };
    for (i, m) in movements.iter().enumerate() {
        if let Some(reason) = takt_movement(m, &format!("movements[{i}]"), signal) {
            return Some(reason);
        }
    }
    None
}

fn takt_movement(m: &Node, path: &str, signal: Signal) -> Option<String> {
    if signal == Signal::Field {
        for key in TAKT_MOVEMENT_KEYS {
            if m.get(key).is_some() {
                return Some(format!("`{path}.{key}`"));
            }
        }
    }
    let Value::Seq(rules) = &m.get("rules")?.value else {
        return None;
    };
    for (j, rule) in rules.iter().enumerate() {
        let rule_path = format!("{path}.rules[{j}]");
        if signal == Signal::Field {
            for key in TAKT_RULE_KEYS {
                if rule.get(key).is_some() {
                    return Some(format!("`{rule_path}.{key}`"));
                }
            }
            continue;
        }
        if let Some(cond) = rule.get("condition").and_then(Node::as_str) {
            let cond = cond.trim_start();
            if ["ai(", "all(", "any("].iter().any(|p| cond.starts_with(p)) {
                return Some(format!("the condition at `{rule_path}.condition`"));
            }
        }
        if let Some(next) = rule.get("next").and_then(Node::as_str)
            && matches!(next, "COMPLETE" | "ABORT")
        {
            return Some(format!("`next: {next}` at `{rule_path}.next`"));
        }
    }
    None
}

/// The first field only the maestro dialect has, with its position: used to explain a
/// detection that probably went the wrong way.
pub(crate) fn maestro_feature(root: &Node) -> Option<(String, Span)> {
    for key in ["triggers", "required_mcp", "model", "budget"] {
        if let Some(span) = key_span(root, key) {
            return Some((key.to_owned(), span));
        }
    }
    let Value::Seq(movements) = &root.get("movements")?.value else {
        return None;
    };
    for (i, m) in movements.iter().enumerate() {
        for key in [
            "allowed_ssh_connections",
            "allowed_commands",
            "default_next",
            "max_consecutive_revisits",
        ] {
            if let Some(span) = key_span(m, key) {
                return Some((format!("movements[{i}].{key}"), span));
            }
        }
    }
    None
}

fn key_span(node: &Node, key: &str) -> Option<Span> {
    node.as_map()?
        .iter()
        .find(|(k, _)| k.text == key)
        .map(|(k, _)| k.span)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn dialect(src: &str) -> Dialect {
        detect_dialect(src).unwrap().dialect
    }

    #[test]
    fn roles_and_graph_mean_graph() {
        assert_eq!(dialect("name: x\nroles: {}\ngraph: {}\n"), Dialect::Graph);
        // One of the two is not enough.
        assert_eq!(dialect("name: x\nroles: {}\n"), Dialect::Maestro);
    }

    #[test]
    fn any_takt_feature_means_takt() {
        let d = detect_dialect("name: x\nmovements:\n  - name: a\n    rules:\n      - condition: ok\n        next: COMPLETE\n").unwrap();
        assert_eq!(d.dialect, Dialect::Takt);
        assert_eq!(
            d.reason,
            "`next: COMPLETE` at `movements[0].rules[0].next` is a takt feature"
        );
        assert_eq!(dialect("name: x\nloop_monitors: []\n"), Dialect::Takt);
        assert_eq!(
            dialect("movements:\n  - name: a\n    rules:\n      - condition: all(\"x\")\n"),
            Dialect::Takt
        );
    }

    /// `default_next` exists only in maestro, `next: COMPLETE` is only a takt habit: the field
    /// decides, and the stray value is the maestro loader's error.
    #[test]
    fn a_field_of_one_dialect_outweighs_a_value_of_the_other() {
        let d = detect_dialect("name: x\nmovements:\n  - name: a\n    default_next: COMPLETE\n    rules:\n      - condition: ok\n        next: COMPLETE\n").unwrap();
        assert_eq!(
            d,
            Detection {
                dialect: Dialect::Maestro,
                reason: "`movements[0].default_next` is a maestro field".into(),
            }
        );
        // A takt field still wins over a maestro one (the loader then warns).
        assert_eq!(
            dialect("name: x\nmodel: m\nmovements:\n  - name: a\n    session: refresh\n"),
            Dialect::Takt
        );
    }

    #[test]
    fn a_takt_workflow_key_means_takt() {
        let d = detect_dialect("name: x\nmax_steps: 3\nsteps: []\n").unwrap();
        assert_eq!(
            d,
            Detection {
                dialect: Dialect::Takt,
                reason: "`steps` is a TAKT workflow key (TAKT v0.36 and later)".into(),
            }
        );
        // Even beside a maestro field: `steps` is no maestro key.
        assert_eq!(
            dialect("name: x\nmodel: m\ninitial_step: a\n"),
            Dialect::Takt
        );
    }

    #[test]
    fn otherwise_maestro_and_the_key_overrides() {
        assert_eq!(dialect("name: x\nmovements: []\n"), Dialect::Maestro);
        assert_eq!(dialect("dialect: takt\nname: x\n"), Dialect::Takt);
        assert_eq!(
            dialect("dialect: maestro\nroles: {}\ngraph: {}\n"),
            Dialect::Maestro
        );
    }

    #[test]
    fn non_mappings_have_no_dialect() {
        assert_eq!(detect_dialect("- a\n- b\n"), None);
        assert_eq!(detect_dialect("a: [\n"), None);
    }
}
