//! The list of built-in tools [`Registry::builtin`](crate::Registry::builtin) registers.

use std::sync::Arc;

use crate::checklist::{CheckItem, CreateChecklist, GetChecklist};
use crate::config::ToolsConfig;
use crate::pieces::{CreatePiece, GetPiece, ListPieces, UpdatePiece};
use crate::{Tool, bash, core, data, docs, review, skills, skills_install};

/// Every built-in tool of this crate, configured by `config`.
pub(crate) fn builtin_tools(config: &Arc<ToolsConfig>) -> Vec<Arc<dyn Tool>> {
    let c = || Arc::clone(config);
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(core::ReadTool { config: c() }),
        Arc::new(core::WriteTool { config: c() }),
        Arc::new(core::EditTool { config: c() }),
        Arc::new(core::GlobTool { config: c() }),
        Arc::new(core::GrepTool { config: c() }),
        Arc::new(bash::BashTool { config: c() }),
        Arc::new(data::SqliteTool { config: c() }),
        Arc::new(CreateChecklist),
        Arc::new(CheckItem),
        Arc::new(GetChecklist),
        Arc::new(ListPieces {
            config: c(),
            writer: None,
        }),
        Arc::new(GetPiece {
            config: c(),
            writer: None,
        }),
        Arc::new(CreatePiece {
            config: c(),
            writer: None,
        }),
        Arc::new(UpdatePiece {
            config: c(),
            writer: None,
        }),
        Arc::new(docs::ReadToolDocTool { config: c() }),
        Arc::new(review::MergeReviewedResults { config: c() }),
    ];
    // The skills tools are meta tools (offered to every movement), so they exist only where
    // there are skills to offer.
    if !config.skill_dirs().is_empty() {
        tools.push(Arc::new(skills::ListSkills { config: c() }));
        tools.push(Arc::new(skills::ReadSkill { config: c() }));
    }
    // Installing writes where every later run reads: only where the configuration says so.
    if config.skills_install_dir.is_some() {
        tools.push(Arc::new(skills_install::InstallSkill { config: c() }));
    }
    tools
}
