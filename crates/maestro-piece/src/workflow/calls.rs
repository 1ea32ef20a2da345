//! `call:` targets: another workflow found by name in the workflow's own directory, the
//! project's `.takt/workflows/`, the user's `~/.takt/workflows/` or the builtins, which must
//! declare `subworkflow.callable: true`. Its parameters and return labels check the call.

use super::layers::{Layers, is_bare_name};
use crate::yaml::{Node, Value};

/// What a caller needs to know of a called workflow.
#[derive(Debug, Clone)]
pub(super) struct Callee {
    /// `subworkflow.params`' names.
    pub params: Vec<String>,
    /// `subworkflow.returns`.
    pub returns: Vec<String>,
}

/// Finds the callable workflow `name`; the error says what is wrong and where it looked.
pub(super) fn find(layers: &Layers, name: &str) -> Result<Callee, String> {
    if !is_bare_name(name) {
        return Err(format!(
            "`call: {name}` must be the bare name of a workflow (its file name without `.yaml`){}",
            if name.starts_with('@') {
                "; repertoire packages (`@owner/repo/name`) are not supported: copy the workflow into `.takt/workflows/`"
            } else {
                ""
            }
        ));
    }
    let Some(found) = layers.find("workflows", name, &[".yaml", ".yml"]) else {
        return Err(format!(
            "no workflow `{name}` to call; looked for `{name}.yaml` and `{name}.yml` in {}",
            layers.searched("workflows")
        ));
    };
    let parsed = crate::yaml::parse(&found.text);
    let root = parsed
        .root
        .filter(|r| r.as_map().is_some())
        .ok_or_else(|| {
            format!(
                "the called workflow {} is not a YAML mapping",
                found.path.display()
            )
        })?;
    let sub = root.get("subworkflow");
    let callable = sub
        .and_then(|s| s.get("callable"))
        .is_some_and(|c| matches!(&c.value, Value::Scalar(s) if s.text == "true"));
    if !callable {
        return Err(format!(
            "workflow `{name}` ({}) is not callable; a called workflow declares `subworkflow: {{callable: true}}`",
            found.path.display()
        ));
    }
    let params = sub
        .and_then(|s| s.get("params"))
        .and_then(Node::as_map)
        .map(|e| e.iter().map(|(k, _)| k.text.clone()).collect())
        .unwrap_or_default();
    let returns = sub
        .and_then(|s| s.get("returns"))
        .map(|r| match &r.value {
            Value::Seq(items) => items
                .iter()
                .filter_map(Node::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        })
        .unwrap_or_default();
    Ok(Callee { params, returns })
}
