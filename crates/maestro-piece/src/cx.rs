//! The state every dialect loader shares during one load ([`Cx`]) and the readers the maestro
//! and takt loaders have in common. A leaf below the loaders: `load` calls the dialect loaders,
//! and they all read from here, never from `load`.

use crate::check::{Fields, Sink, known_list, list, string};
use crate::facets::Resolver;
use crate::options::LoadOptions;
use crate::yaml::Node;

/// Shared state of one load.
pub(crate) struct Cx<'a> {
    pub sink: Sink,
    pub facets: Resolver,
    pub opts: &'a LoadOptions,
    /// Why the dialect was chosen, when it was detected (not forced or declared): diagnostics
    /// about a value of the other dialect quote it.
    pub detected_because: Option<String>,
}

/// The required `movements` list of a maestro or takt piece; an empty one is an error.
pub(crate) fn movement_items<'n>(sink: &mut Sink, top: &Fields<'n>, what: &str) -> &'n [Node] {
    top.required(sink, "movements", what)
        .and_then(|(node, path)| {
            let items = list(sink, node, &path, "a list of movements")?;
            if items.is_empty() {
                sink.error(&path, node.span, "a piece needs at least one movement");
            }
            Some(items)
        })
        .unwrap_or_default()
}

/// The required `initial_movement`, which must name one of the `known` top-level movements
/// (not checked when none are known: their own errors are already reported).
pub(crate) fn initial_movement<S: AsRef<str>>(
    sink: &mut Sink,
    top: &Fields<'_>,
    what: &str,
    known: &[S],
) -> Option<String> {
    top.required(sink, "initial_movement", what)
        .and_then(|(node, path)| {
            let initial = string(sink, node, &path)?;
            if !known.is_empty() && !known.iter().any(|m| m.as_ref() == initial) {
                sink.error(
                    &path,
                    node.span,
                    format!("unknown movement `{initial}`; known: {}", known_list(known)),
                );
            }
            Some(initial.to_owned())
        })
}
