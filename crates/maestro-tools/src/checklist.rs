//! `CreateChecklist`, `CheckItem`, `GetChecklist`: a checklist kept in the run's scratch state,
//! so it survives into later movements (the engine stores [`RunScratch`]).

use std::sync::MutexGuard;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::{ChecklistItem, RunScratch, ToolContext, ToolOutput, TypedTool};

/// The input of a `CreateChecklist` call.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateChecklistInput {
    /// The items, in order. Replaces any existing checklist.
    pub items: Vec<String>,
}

/// The input of a `CheckItem` call.
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

/// The input of a `GetChecklist` call: none.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetChecklistInput {}

/// `CreateChecklist`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateChecklist;

/// `CheckItem`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckItem;

/// `GetChecklist`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GetChecklist;

/// The run's scratch state, or the error saying it is unavailable.
fn scratch(ctx: &ToolContext) -> Result<MutexGuard<'_, RunScratch>, ToolOutput> {
    ctx.scratch.lock().map_err(|_| {
        ToolOutput::error(
            "the checklist is unavailable (its state was poisoned by an earlier failure)",
        )
    })
}

impl TypedTool for CreateChecklist {
    type Input = CreateChecklistInput;
    const NAME: &'static str = "CreateChecklist";
    const DESCRIPTION: &'static str =
        "Create (or replace) the run's checklist of steps; it carries over to later movements.";

    async fn run(&self, ctx: &ToolContext, input: CreateChecklistInput) -> ToolOutput {
        let mut scratch = match scratch(ctx) {
            Ok(s) => s,
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
            return ToolOutput::error("the checklist needs at least one non-empty item");
        }
        scratch.checklist = items;
        ToolOutput::ok(render(&scratch))
    }
}

impl TypedTool for CheckItem {
    type Input = CheckItemInput;
    const NAME: &'static str = "CheckItem";
    const DESCRIPTION: &'static str =
        "Mark a checklist item (1-based index) done or not done, with an optional note.";

    async fn run(&self, ctx: &ToolContext, input: CheckItemInput) -> ToolOutput {
        let mut scratch = match scratch(ctx) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let count = scratch.checklist.len();
        if count == 0 {
            return ToolOutput::error("there is no checklist yet; create one with CreateChecklist");
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
}

impl TypedTool for GetChecklist {
    type Input = GetChecklistInput;
    const NAME: &'static str = "GetChecklist";
    const DESCRIPTION: &'static str = "Show the run's checklist and what is done.";

    async fn run(&self, ctx: &ToolContext, _input: GetChecklistInput) -> ToolOutput {
        let scratch = match scratch(ctx) {
            Ok(s) => s,
            Err(e) => return e,
        };
        if scratch.checklist.is_empty() {
            return ToolOutput::ok("no checklist yet; create one with CreateChecklist");
        }
        ToolOutput::ok(render(&scratch))
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
