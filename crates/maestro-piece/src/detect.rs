//! Dialect detection: deterministic, and explained.
//!
//! 1. `--dialect` (the caller's [`crate::LoadOptions::dialect`]) wins.
//! 2. A top-level `dialect:` key comes next.
//! 3. `roles` and `graph` at the top level mean graph.
//! 4. Any takt-only feature means takt (see [`TAKT_TOP_KEYS`], [`TAKT_MOVEMENT_KEYS`],
//!    [`TAKT_RULE_KEYS`], `ai()`/`all()`/`any()` conditions and `COMPLETE`/`ABORT` as a
//!    rule's `next`).
//! 5. Otherwise maestro.

use crate::ir::Dialect;
use crate::yaml::{Node, Span, Value};

/// Top-level keys only takt pieces use.
pub const TAKT_TOP_KEYS: &[&str] = &[
    "personas",
    "policies",
    "instructions",
    "report_formats",
    "knowledge",
    "loop_monitors",
    "piece_config",
];

/// Movement keys only takt pieces use.
pub const TAKT_MOVEMENT_KEYS: &[&str] = &[
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
pub const TAKT_RULE_KEYS: &[&str] = &["requires_user_input", "interactive_only", "appendix"];

/// The detected dialect and the feature that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
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
    if let Some(reason) = takt_feature(root) {
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

fn takt_feature(root: &Node) -> Option<String> {
    for key in TAKT_TOP_KEYS {
        if root.get(key).is_some() {
            return Some(format!("`{key}`"));
        }
    }
    let Value::Seq(movements) = &root.get("movements")?.value else {
        return None;
    };
    for (i, m) in movements.iter().enumerate() {
        if let Some(reason) = takt_movement(m, &format!("movements[{i}]")) {
            return Some(reason);
        }
    }
    None
}

fn takt_movement(m: &Node, path: &str) -> Option<String> {
    for key in TAKT_MOVEMENT_KEYS {
        if m.get(key).is_some() {
            return Some(format!("`{path}.{key}`"));
        }
    }
    let Value::Seq(rules) = &m.get("rules")?.value else {
        return None;
    };
    for (j, rule) in rules.iter().enumerate() {
        let rule_path = format!("{path}.rules[{j}]");
        for key in TAKT_RULE_KEYS {
            if rule.get(key).is_some() {
                return Some(format!("`{rule_path}.{key}`"));
            }
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
    for key in ["triggers", "required_mcp", "model"] {
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
