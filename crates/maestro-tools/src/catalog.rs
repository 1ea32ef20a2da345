//! The tool names a piece's `allowed_tools` may use, for the piece validator
//! ([`maestro_piece::LoadOptions::tools`]): the tools of this crate and whether the configuration
//! sets them up, the engine's own, and the tools the Maestro specification names that this
//! version does not have yet (known names, so a piece written for them loads with a warning
//! instead of an error). The tool crates of one capability (web, SSH) add their own names; the
//! full catalogue is put together where the tools are (`maestro-app`'s toolbox).

pub use maestro_piece::{Availability, ToolCatalog};

use crate::config::ToolsConfig;

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
    "MergeReviewedResults",
];

/// The pieces tools that write, which need `tools.pieces_dir`.
const PIECE_WRITING_TOOLS: &[&str] = &["CreatePiece", "UpdatePiece"];

/// The skills tools, which exist only with `tools.skills_dirs`.
const SKILLS_TOOLS: &[&str] = &["ListSkills", "ReadSkill"];

/// The tool that installs skills, which exists only with `tools.skills_install_dir`.
const INSTALL_TOOLS: &[&str] = &["InstallSkill"];

/// Tools the engine itself provides to a run that is a job (not in this crate's registry).
pub const ENGINE_TOOLS: &[&str] = &["SpawnSubTask"];

/// Tools the engine itself provides to every run, whatever the job system: they call the
/// run's own model (not in this crate's registry).
pub const RUN_TOOLS: &[&str] = &["BatchReviewTextWithLLM"];

/// Tools the Maestro specification names that this version does not implement yet.
pub const PLANNED_TOOLS: &[&str] = &[];

/// This crate's tools and the engine's, available or with the reason they are not under
/// `tools` (and `subtasks`: `subtasks.max_depth` above 0), plus the planned ones.
pub fn tool_catalog(tools: &ToolsConfig, subtasks: bool) -> ToolCatalog {
    let mut catalog = names_only();
    if tools.pieces_dir.is_none() {
        unavailable(
            &mut catalog,
            PIECE_WRITING_TOOLS,
            "no writable pieces directory is configured; set `tools.pieces_dir` in .maestro/config.yaml",
        );
    }
    if tools.skills_install_dir.is_none() {
        unavailable(
            &mut catalog,
            INSTALL_TOOLS,
            "installing skills is off; set `tools.skills_install_dir` in .maestro/config.yaml \
             (docs/security.md says what that allows)",
        );
    }
    if tools.skill_dirs().is_empty() {
        unavailable(
            &mut catalog,
            SKILLS_TOOLS,
            "no skills directory is configured; set `tools.skills_dirs` in .maestro/config.yaml",
        );
    }
    if !subtasks {
        unavailable(
            &mut catalog,
            ENGINE_TOOLS,
            "subtasks are off; set `subtasks.max_depth` above 0 in .maestro/config.yaml",
        );
    }
    catalog
}

/// Marks each of `names` unavailable, saying `why`.
pub fn unavailable(catalog: &mut ToolCatalog, names: &[&str], why: &str) {
    for name in names {
        catalog.add(*name, Availability::Unavailable(why.to_owned()));
    }
}

/// Marks each of `names` available.
pub fn available(catalog: &mut ToolCatalog, names: &[&str]) {
    for name in names {
        catalog.add(*name, Availability::Available);
    }
}

/// This crate's and the engine's tool names, each available, and the [`PLANNED_TOOLS`]: for
/// callers that do not know the configuration (names are still checked, set-up is not).
pub fn names_only() -> ToolCatalog {
    let mut catalog = ToolCatalog::default();
    available(&mut catalog, BUILTIN_TOOLS);
    available(&mut catalog, PIECE_WRITING_TOOLS);
    available(&mut catalog, SKILLS_TOOLS);
    available(&mut catalog, INSTALL_TOOLS);
    available(&mut catalog, ENGINE_TOOLS);
    available(&mut catalog, RUN_TOOLS);
    unavailable(
        &mut catalog,
        PLANNED_TOOLS,
        "the Maestro specification names it, but this version does not have it yet",
    );
    catalog
}
