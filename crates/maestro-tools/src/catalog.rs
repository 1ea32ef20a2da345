//! The tool names a piece's `allowed_tools` may use, for the piece validator
//! ([`maestro_piece::LoadOptions::tools`]): every tool of this crate, whether the configuration
//! sets it up, and the tools the Maestro specification names that this version does not have
//! yet (known names, so a piece written for them loads with a warning instead of an error).

use maestro_piece::{Availability, ToolCatalog};

use crate::config::ToolsConfig;
use crate::web::WebConfig;

/// The built-in tools that need no configuration (see `builtins.rs`).
const BUILTIN_TOOLS: &[&str] = &[
    "Read",
    "Write",
    "Edit",
    "Glob",
    "Grep",
    "Bash",
    "SQLite",
    "CreateChecklist",
    "CheckItem",
    "GetChecklist",
    "ListPieces",
    "GetPiece",
    "ReadToolDoc",
    "WebFetch",
    "DownloadFile",
];

/// The pieces tools that write, which need `tools.pieces_dir`.
const PIECE_WRITING_TOOLS: &[&str] = &["CreatePiece", "UpdatePiece"];

/// The skills tools, which exist only with `tools.skills_dirs`.
const SKILLS_TOOLS: &[&str] = &["ListSkills", "ReadSkill"];

/// The SSH tools, which need `ssh.connections`.
pub const SSH_TOOLS: &[&str] = &["SshExec", "SshUpload", "SshDownload"];

/// Tools the engine itself provides to a run that is a job (not in this crate's registry).
pub const ENGINE_TOOLS: &[&str] = &["SpawnSubTask"];

/// Tools the Maestro specification names that this version does not implement yet.
pub const PLANNED_TOOLS: &[&str] = &[
    "InstallSkill",
    "ReadImage",
    "AnnotateImage",
    "ReadPdf",
    "ReadExcel",
    "ReadDocx",
    "ReadPPTX",
    "PdfToImages",
    "BatchReviewTextWithLLM",
    "MergeReviewedResults",
    "BrowseWeb",
    "SearchKnowledge",
    "ListDocuments",
    "IngestDocument",
];

/// What the catalog needs to know about the configuration.
#[derive(Debug, Clone, Copy)]
pub struct ToolSetup<'a> {
    pub tools: &'a ToolsConfig,
    pub web: &'a WebConfig,
    /// How many SSH connections are configured (`ssh.connections`).
    pub ssh_connections: usize,
    /// Subtasks are on (`subtasks.max_depth` above 0).
    pub subtasks: bool,
}

/// Every tool name, available or with the reason it is not, under `setup`.
pub fn tool_catalog(setup: ToolSetup<'_>) -> ToolCatalog {
    let mut catalog = names_only();
    let mut unavailable = |names: &[&str], why: &str| {
        for name in names {
            catalog.add(*name, Availability::Unavailable(why.to_owned()));
        }
    };
    if setup.tools.pieces_dir.is_none() {
        unavailable(
            PIECE_WRITING_TOOLS,
            "no writable pieces directory is configured; set `tools.pieces_dir` in .maestro/config.yaml",
        );
    }
    if setup.tools.skills_dirs.is_empty() {
        unavailable(
            SKILLS_TOOLS,
            "no skills directory is configured; set `tools.skills_dirs` in .maestro/config.yaml",
        );
    }
    if setup.web.search.is_none() {
        unavailable(
            &["WebSearch"],
            "no search provider is configured; set `web.search.searxng_url` in .maestro/config.yaml",
        );
    }
    if !setup.subtasks {
        unavailable(
            ENGINE_TOOLS,
            "subtasks are off; set `subtasks.max_depth` above 0 in .maestro/config.yaml",
        );
    }
    if setup.ssh_connections == 0 {
        unavailable(
            SSH_TOOLS,
            "no SSH connections are configured; add them under `ssh.connections` in .maestro/config.yaml",
        );
    }
    catalog
}

/// Every tool name, each available except the [`PLANNED_TOOLS`]: for callers that do not know
/// the configuration (names are still checked, set-up is not).
pub fn names_only() -> ToolCatalog {
    let mut catalog = ToolCatalog::default();
    for name in BUILTIN_TOOLS
        .iter()
        .chain(PIECE_WRITING_TOOLS)
        .chain(SKILLS_TOOLS)
        .chain(SSH_TOOLS)
        .chain(&["WebSearch"])
        .chain(ENGINE_TOOLS)
    {
        catalog.add(*name, Availability::Available);
    }
    for name in PLANNED_TOOLS {
        catalog.add(
            *name,
            Availability::Unavailable(
                "the Maestro specification names it, but this version does not have it yet"
                    .to_owned(),
            ),
        );
    }
    catalog
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Registry;
    use crate::ssh::SshRegistry;

    /// The catalog's names are exactly the tools this crate registers when everything is set
    /// up, plus the planned ones: a new tool cannot be forgotten here.
    #[test]
    fn the_catalog_names_every_registered_tool() {
        let tools = ToolsConfig {
            skills_dirs: vec!["skills".into()],
            pieces_dir: Some("pieces".into()),
            ..ToolsConfig::default()
        };
        let mut registry = Registry::builtin(tools.clone());
        for tool in crate::web::tools(WebConfig::default()) {
            registry.register(tool);
        }
        for tool in crate::ssh::tools(Arc::new(SshRegistry::new(Vec::new()).unwrap()), None) {
            registry.register(tool);
        }
        let mut registered: Vec<String> = registry.list().into_iter().map(|s| s.name).collect();
        registered.sort();
        let web = WebConfig {
            search: Some(crate::web::SearchProvider {
                searxng_url: "http://127.0.0.1:1".into(),
            }),
            ..WebConfig::default()
        };
        let catalog = tool_catalog(ToolSetup {
            tools: &tools,
            web: &web,
            ssh_connections: 1,
            subtasks: true,
        });
        let available: Vec<&str> = catalog
            .names()
            .filter(|n| catalog.get(n) == Some(&Availability::Available))
            .filter(|n| !ENGINE_TOOLS.contains(n))
            .collect();
        assert_eq!(available, registered);
        let planned: Vec<&str> = catalog
            .names()
            .filter(|n| catalog.get(n) != Some(&Availability::Available))
            .collect();
        let mut expected = PLANNED_TOOLS.to_vec();
        expected.sort_unstable();
        assert_eq!(planned, expected);
    }

    #[test]
    fn unconfigured_tools_say_what_to_set() {
        let catalog = tool_catalog(ToolSetup {
            tools: &ToolsConfig::default(),
            web: &WebConfig::default(),
            ssh_connections: 0,
            subtasks: false,
        });
        let why = |name: &str| match catalog.get(name) {
            Some(Availability::Unavailable(why)) => why.clone(),
            other => panic!("{name}: {other:?}"),
        };
        assert!(why("WebSearch").contains("web.search.searxng_url"));
        assert!(why("SshExec").contains("ssh.connections"));
        assert!(why("CreatePiece").contains("tools.pieces_dir"));
        assert!(why("SpawnSubTask").contains("subtasks.max_depth"));
        assert!(why("BrowseWeb").contains("does not have it yet"));
        assert_eq!(catalog.get("Read"), Some(&Availability::Available));
        assert_eq!(catalog.get("WebFetch"), Some(&Availability::Available));
    }
}
