//! `CreateChecklist`, `CheckItem`, `GetChecklist`: a checklist kept in the run's scratch state,
//! so it survives into later movements (the engine stores [`RunScratch`](crate::RunScratch)).

use maestro_protocol::ToolSpec;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::input::{parse_input, spec_for};
use crate::{BoxFuture, ChecklistItem, RunScratch, Tool, ToolContext, ToolOutput};

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateChecklistInput {
    /// The items, in order. Replaces any existing checklist.
    pub items: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CheckItemInput {
    /// 1-based number of the item, as shown by GetChecklist.
    pub index: usize,
    /// Mark it done (default true) or not done (false).
    #[serde(default)]
    pub done: Option<bool>,
    /// A short note, e.g. where the result is.
    #[serde(default)]
    pub note: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetChecklistInput {}

/// Which of the three checklist tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecklistTool {
    Create,
    Check,
    Get,
}

impl Tool for ChecklistTool {
    fn spec(&self) -> ToolSpec {
        match self {
            ChecklistTool::Create => spec_for::<CreateChecklistInput>(
                "CreateChecklist",
                "Create (or replace) the run's checklist of steps; it carries over to later movements.",
            ),
            ChecklistTool::Check => spec_for::<CheckItemInput>(
                "CheckItem",
                "Mark a checklist item (1-based index) done or not done, with an optional note.",
            ),
            ChecklistTool::Get => spec_for::<GetChecklistInput>(
                "GetChecklist",
                "Show the run's checklist and what is done.",
            ),
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let spec = self.spec();
            let Ok(mut scratch) = ctx.scratch.lock() else {
                return ToolOutput::error(
                    "the checklist is unavailable (its state was poisoned by an earlier failure)",
                );
            };
            match self {
                ChecklistTool::Create => {
                    let input: CreateChecklistInput = match parse_input(&spec, input) {
                        Ok(i) => i,
                        Err(e) => return e,
                    };
                    let items: Vec<ChecklistItem> = input
                        .items
                        .into_iter()
                        .map(|t| t.trim().to_string())
                        .filter(|t| !t.is_empty())
                        .map(|text| ChecklistItem {
                            text,
                            done: false,
                            note: None,
                        })
                        .collect();
                    if items.is_empty() {
                        return ToolOutput::error(
                            "the checklist needs at least one non-empty item",
                        );
                    }
                    scratch.checklist = items;
                    ToolOutput::ok(render(&scratch))
                }
                ChecklistTool::Check => {
                    let input: CheckItemInput = match parse_input(&spec, input) {
                        Ok(i) => i,
                        Err(e) => return e,
                    };
                    let count = scratch.checklist.len();
                    if count == 0 {
                        return ToolOutput::error(
                            "there is no checklist yet; create one with CreateChecklist",
                        );
                    }
                    let Some(item) = input
                        .index
                        .checked_sub(1)
                        .and_then(|i| scratch.checklist.get_mut(i))
                    else {
                        return ToolOutput::error(format!(
                            "index {} is out of range; items are numbered 1 to {count}",
                            input.index
                        ));
                    };
                    item.done = input.done.unwrap_or(true);
                    if let Some(note) = input.note {
                        item.note = Some(note).filter(|n| !n.trim().is_empty());
                    }
                    ToolOutput::ok(render(&scratch))
                }
                ChecklistTool::Get => {
                    if let Err(e) = parse_input::<GetChecklistInput>(&spec, input) {
                        return e;
                    }
                    if scratch.checklist.is_empty() {
                        return ToolOutput::ok("no checklist yet; create one with CreateChecklist");
                    }
                    ToolOutput::ok(render(&scratch))
                }
            }
        })
    }
}

/// `1. [x] text — note` lines and a done count.
pub fn render(scratch: &RunScratch) -> String {
    let done = scratch.checklist.iter().filter(|i| i.done).count();
    let mut out = format!("checklist: {done}/{} done\n", scratch.checklist.len());
    for (i, item) in scratch.checklist.iter().enumerate() {
        out.push_str(&format!(
            "{}. [{}] {}",
            i + 1,
            if item.done { "x" } else { " " },
            item.text
        ));
        if let Some(note) = &item.note {
            out.push_str(&format!(" — {note}"));
        }
        out.push('\n');
    }
    out
}
