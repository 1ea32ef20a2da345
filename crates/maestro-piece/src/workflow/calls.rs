//! `call:` targets: another workflow found by name in the workflow's own directory, the
//! project's `.takt/workflows/`, the user's `~/.takt/workflows/` or the builtins, which must
//! declare `subworkflow.callable: true`. Its parameters and return labels check the call, and
//! [`load`] loads it whole with the call's arguments, so the engine never reads it again.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::layers::{Layers, is_bare_name};
use crate::check::Sink;
use crate::cx::Cx;
use crate::facets::Resolver;
use crate::ir::Piece;
use crate::yaml::{Node, Value};

/// Most workflows a chain of calls may pass through (the root included); deeper chains are
/// refused at load time, as a cycle is.
pub(super) const MAX_CALL_DEPTH: usize = 16;

/// What a caller needs to know of a called workflow.
#[derive(Debug, Clone)]
pub(super) struct Callee {
    /// `subworkflow.params`' names.
    pub params: Vec<String>,
    /// `subworkflow.returns`.
    pub returns: Vec<String>,
    /// The workflow's text.
    pub text: String,
    /// Where it was found.
    pub path: PathBuf,
}

/// What a called workflow is loaded with: the call's arguments (already substituted with the
/// caller's own parameters) and the chain of workflows calling it, outermost first.
#[derive(Debug, Clone)]
pub(crate) struct CallInput {
    /// `args`, by parameter name.
    pub args: BTreeMap<String, Node>,
    /// The names of the workflows on the call chain, the root first; the callee is last.
    pub chain: Vec<String>,
}

/// Loads the called workflow `name` (found as `callee`) with `args`. `chain` is the calling
/// workflow's chain: a name already on it is a cycle, and the error says which. The callee's
/// own errors come back as one message naming its file, line and field.
pub(super) fn load(
    cx: &Cx<'_>,
    name: &str,
    callee: &Callee,
    args: BTreeMap<String, Node>,
    chain: &[String],
) -> Result<Piece, String> {
    if chain.iter().any(|c| c == name) {
        return Err(format!(
            "workflow call cycle: {} -> {name}; a workflow cannot call itself, directly or through the workflows it calls",
            chain.join(" -> ")
        ));
    }
    if chain.len() >= MAX_CALL_DEPTH {
        return Err(format!(
            "workflow calls nest deeper than {MAX_CALL_DEPTH} workflows ({} -> {name}); flatten the chain",
            chain.join(" -> ")
        ));
    }
    let mut inner = Cx {
        sink: Sink::new(&callee.path),
        facets: Resolver::new(&callee.path, cx.opts),
        opts: cx.opts,
        detected_because: None,
    };
    let parsed = crate::yaml::parse(&callee.text);
    for e in parsed.errors {
        inner.sink.error(&e.path, e.span, e.message);
    }
    let mut chain = chain.to_vec();
    chain.push(name.to_owned());
    let piece = parsed
        .root
        .and_then(|root| super::load_with(&mut inner, &root, Some(CallInput { args, chain })));
    let (errors, _) = inner.sink.finish();
    match (piece, errors.first()) {
        (Some(mut piece), None) => {
            piece.source = callee.path.clone();
            piece.hash = super::tree_hash(&callee.text, &piece);
            Ok(piece)
        }
        (_, first) => Err(match first {
            Some(e) => format!(
                "the called workflow `{name}` does not load with this call's arguments: {}:{}:{}: {} (at `{}`){}",
                e.file.display(),
                e.line,
                e.column,
                e.message,
                e.path,
                match errors.len() {
                    0 | 1 => String::new(),
                    n => format!("; {} more error(s): run `maestro validate` on it", n - 1),
                }
            ),
            None => format!(
                "the called workflow `{name}` ({}) does not load",
                callee.path.display()
            ),
        }),
    }
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
    Ok(Callee {
        params,
        returns,
        path: found.path.clone(),
        text: found.text.clone(),
    })
}
