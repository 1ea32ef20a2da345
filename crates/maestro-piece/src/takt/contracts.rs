//! Takt `output_contracts` (both forms) and `provider_options` (of which only `allowed_tools`
//! means anything to us).

use crate::allowed_tools::{Names, check_tools};
use crate::check::{Unknown, fields, list, nonempty_string, string, string_list};
use crate::cx::Cx;
use crate::facets::FacetKind;
use crate::ir::OutputContract;
use crate::yaml::{Node, join_index, join_key};

/// The union of `provider_options.<provider>.allowed_tools` over all providers, in first-seen
/// order. Other provider options are reported as ignored.
pub(crate) fn provider_tools(cx: &mut Cx<'_>, node: &Node, path: &str) -> Vec<String> {
    let mut tools: Vec<String> = Vec::new();
    let Some(providers) = node.as_map() else {
        cx.sink.error(
            path,
            node.span,
            format!(
                "expected a mapping of provider names to options, found {}",
                node.kind_name()
            ),
        );
        return tools;
    };
    for (provider, options) in providers {
        let provider_path = join_key(path, &provider.text);
        let Some(entries) = options.as_map() else {
            cx.sink.error(
                &provider_path,
                options.span,
                format!(
                    "expected a mapping of options, found {}",
                    options.kind_name()
                ),
            );
            continue;
        };
        for (key, value) in entries {
            let key_path = join_key(&provider_path, &key.text);
            if key.text == "allowed_tools" {
                let listed = string_list(&mut cx.sink, value, &key_path).unwrap_or_default();
                check_tools(cx, &listed, Names::Takt);
                for tool in listed {
                    if !tools.iter().any(|t| t == tool.text) {
                        tools.push(tool.text.to_owned());
                    }
                }
            } else {
                cx.sink.ignored(
                    &format!("provider_options.*.{}", key.text),
                    &key_path,
                    key.span,
                    "provider-specific options other than `allowed_tools` have no meaning in maestro",
                );
            }
        }
    }
    tools
}

/// `output_contracts: {report: [...]}`; each entry is `{name, format}` (format a
/// `report_formats` key, a facet name or inline text) or `{Label: file.md}`.
pub(crate) fn output_contracts(cx: &mut Cx<'_>, node: &Node, path: &str) -> Vec<OutputContract> {
    let Some(oc) = fields(
        &mut cx.sink,
        node,
        path,
        "`output_contracts`",
        &["report"],
        Unknown::Warn,
    ) else {
        return Vec::new();
    };
    let Some((reports, reports_path)) = oc.get("report") else {
        return Vec::new();
    };
    let Some(items) = list(&mut cx.sink, reports, &reports_path, "a list of reports") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = join_index(&reports_path, i);
        if let Some(contract) = read_contract(cx, item, &item_path) {
            out.push(contract);
        }
    }
    out
}

/// A report name is the name of a file the movement writes into the run's report directory, so
/// it must be a plain file name: no directory part, no `..`, not hidden.
fn plain_file_name(cx: &mut Cx<'_>, name: &str, path: &str, node: &Node) -> Option<()> {
    if name.contains(['/', '\\', '\0']) || name.starts_with('.') {
        cx.sink.error(
            path,
            node.span,
            format!(
                "report name `{name}` must be a plain file name inside the report directory \
                 (no `/`, `\\` or leading `.`, so no `..`); use e.g. `plan.md`"
            ),
        );
        return None;
    }
    Some(())
}

fn read_contract(cx: &mut Cx<'_>, item: &Node, path: &str) -> Option<OutputContract> {
    if let Some(name) = item.as_str() {
        plain_file_name(cx, name, path, item)?;
        return Some(OutputContract {
            name: name.to_owned(),
            label: None,
            format: None,
        });
    }
    let Some(entries) = item.as_map() else {
        cx.sink.error(
            path,
            item.span,
            format!(
                "expected `{{name: file.md, format: …}}` or `{{Label: file.md}}`, found {}",
                item.kind_name()
            ),
        );
        return None;
    };
    if item.get("name").is_none() {
        // Label form: a single `Label: file.md`.
        if let [(label, value)] = entries {
            let value_path = join_key(path, &label.text);
            let file = nonempty_string(&mut cx.sink, value, &value_path)?;
            plain_file_name(cx, file, &value_path, value)?;
            return Some(OutputContract {
                name: file.to_owned(),
                label: Some(label.text.clone()),
                format: None,
            });
        }
        cx.sink.error(
            &join_key(path, "name"),
            item.span,
            "missing required field `name` in a report (or use the label form `Label: file.md`, one per entry)",
        );
        return None;
    }
    let c = fields(
        &mut cx.sink,
        item,
        path,
        "a report",
        &["name", "format", "use_judge"],
        Unknown::Warn,
    )?;
    if let Some((_, p)) = c.get("use_judge") {
        let span = c.key_span("use_judge").unwrap_or(item.span);
        cx.sink.ignored(
            "use_judge",
            &p,
            span,
            "reports are written through the `write_report` tool, never by a separate judge call",
        );
    }
    let (name_node, name_path) = c.get("name")?;
    let name = nonempty_string(&mut cx.sink, name_node, &name_path)?;
    plain_file_name(cx, name, &name_path, name_node)?;
    let format = match c.get("format") {
        Some((node, p)) => {
            let text = string(&mut cx.sink, node, &p)?;
            Some(
                cx.facets
                    .resolve(&mut cx.sink, FacetKind::ReportFormat, text, &p, node.span),
            )
        }
        None => None,
    };
    Some(OutputContract {
        name: name.to_owned(),
        label: None,
        format,
    })
}
