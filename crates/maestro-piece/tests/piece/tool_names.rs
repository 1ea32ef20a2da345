//! Tool names in `allowed_tools` are checked against the caller's catalog: a name that is no
//! tool is an error with a suggestion, a tool that is not set up here is a warning.

use crate::support;

use std::path::Path;

use maestro_piece::{Availability, LoadOptions, ToolCatalog, load_str, render_diagnostics};
use pretty_assertions::assert_eq;
use support::{errors_with, f, finding};

fn catalog() -> ToolCatalog {
    let mut catalog = ToolCatalog::default();
    for name in ["Read", "Write", "Edit", "Glob", "Grep", "Bash", "WebFetch"] {
        catalog.add(name, Availability::Available);
    }
    catalog.add(
        "WebSearch",
        Availability::Unavailable(
            "no search provider is configured; set `web.search.searxng_url` in .maestro/config.yaml"
                .into(),
        ),
    );
    catalog.add(
        "SpawnSubTask",
        Availability::Unavailable("this version of Maestro does not have it yet".into()),
    );
    catalog
}

fn with_catalog() -> LoadOptions {
    LoadOptions {
        tools: Some(catalog()),
        ..LoadOptions::default()
    }
}

const MAESTRO: &str = "\
name: research
description: Look things up.
max_movements: 4
initial_movement: look
movements:
  - name: look
    edit: false
    persona: You research.
    instruction: Find out.
    allowed_tools: [Raed, Glob, WebSearch, 'mcp__git__*', SpawnSubTask, Deploy]
    rules: []
";

#[test]
fn unknown_names_are_errors_with_a_suggestion_and_unconfigured_tools_warn() {
    let failed = load_str(MAESTRO, Path::new("research.yaml"), &with_catalog()).unwrap_err();
    let errors: Vec<_> = failed.errors.iter().map(finding).collect();
    assert_eq!(
        errors,
        vec![
            f(
                "movements[0].allowed_tools[0]",
                10,
                "unknown tool `Raed`; did you mean `Read`?"
            ),
            f(
                "movements[0].allowed_tools[5]",
                10,
                "unknown tool `Deploy`; use a tool name from `maestro tools list` (e.g. Read, Glob, Grep, Bash) or `mcp__<server>__<tool>` for an MCP server's tool"
            ),
        ]
    );
    let warnings: Vec<_> = failed.warnings.iter().map(finding).collect();
    assert_eq!(
        warnings,
        vec![
            f(
                "movements[0].allowed_tools[2]",
                10,
                "`WebSearch` is not available here, so it is not offered: no search provider is configured; set `web.search.searxng_url` in .maestro/config.yaml"
            ),
            f(
                "movements[0].allowed_tools[4]",
                10,
                "`SpawnSubTask` is not available here, so it is not offered: this version of Maestro does not have it yet"
            ),
        ]
    );
    let mut all = failed.errors.clone();
    all.extend(failed.warnings.iter().cloned());
    all.sort_by_key(|d| (d.line, d.column));
    insta::assert_snapshot!(render_diagnostics(MAESTRO, &all));
}

#[test]
fn without_a_catalog_names_are_not_checked() {
    let loaded = load_str(MAESTRO, Path::new("research.yaml"), &LoadOptions::default()).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

/// takt pieces list Claude Code's tools; those are not offered (a warning), while a typo is
/// still an error, in `allowed_tools` and in `provider_options`.
#[test]
fn takt_pieces_may_name_claude_code_tools() {
    let src = "\
name: t
max_movements: 3
initial_movement: work
movements:
  - name: work
    edit: true
    allowed_tools: [Read, TodoWrite]
    provider_options:
      claude:
        allowed_tools: [Grpe]
    rules:
      - condition: done
        next: COMPLETE
";
    assert_eq!(
        errors_with(src, &with_catalog()),
        vec![f(
            "movements[0].provider_options.claude.allowed_tools[0]",
            10,
            "unknown tool `Grpe`; did you mean `Grep`?"
        )]
    );
    let fixed = src.replace("Grpe", "Grep");
    let loaded = load_str(&fixed, Path::new("t.yaml"), &with_catalog()).unwrap();
    assert_eq!(
        loaded.warnings.iter().map(finding).collect::<Vec<_>>(),
        vec![f(
            "movements[0].allowed_tools[1]",
            7,
            "`TodoWrite` is a Claude Code tool with no Maestro equivalent, so it is not offered; `maestro tools list` shows the tools there are"
        )]
    );
}
