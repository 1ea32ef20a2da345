//! Types that several Maestro crates exchange: tool specifications and calls, token usage, run
//! statuses, end reasons, the run's events and their records, and secrets. Every reader of a
//! run (the progress display, the store, the HTTP stream) depends on this crate, not on the
//! engine.
//!
//! This crate is deliberately tiny and has no behaviour beyond (de)serialisation, so that the
//! LLM client, the tools and the engine agree on one definition instead of three copies.

mod end_reason;
mod event;
mod secret;
mod values;

pub use end_reason::{EndReason, UnknownEndReason};
pub use event::{
    CallPurpose, ContextLevel, EventRecord, JudgeKind, OutcomeSource, RecordedAnswer, ReminderKind,
    RunEvent, SelectionTarget, TeamPart,
};
pub use secret::{Secret, mask_url_password};
pub use values::{ChecklistItem, Dialect, ImageRef, RunScratch, SubtaskOutcome, ToolMode};

use serde::{Deserialize, Serialize};

/// What the model is told about one tool: its name, a one-sentence description and the JSON
/// Schema of its input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls the tool by (`ReadFile`, `mcp__<server>__<tool>`).
    pub name: String,
    /// One sentence telling the model what the tool does.
    pub description: String,
    /// JSON Schema (draft 2020-12 compatible object schema) of the tool's input.
    pub input_schema: std::sync::Arc<serde_json::Value>,
}

/// One tool call as the model sent it. `arguments` is the raw JSON text, kept unparsed so that a
/// malformed call can be reported back to the model verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id as the model gave it; the tool's result is sent back under it.
    pub id: String,
    /// The name of the tool called.
    pub name: String,
    /// The arguments as the model wrote them: JSON text, or anything else when the model erred.
    pub arguments: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Token usage reported by (or estimated for) one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the request (everything sent to the model).
    pub prompt_tokens: u64,
    /// Tokens of the answer the model produced.
    pub completion_tokens: u64,
    /// Tokens of the request and the answer together.
    pub total_tokens: u64,
    /// Of `prompt_tokens`, those the endpoint read from its prompt cache (OpenAI's
    /// `usage.prompt_tokens_details.cached_tokens`, the Messages API's
    /// `cache_read_input_tokens`); priced at `cached_input_per_mtok` where a price sets one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_prompt_tokens: u64,
    /// True when the endpoint reported no usage and the figures are an estimate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Usage {
    /// Adds another call's usage to this running total.
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
        self.cached_prompt_tokens += other.cached_prompt_tokens;
        self.estimated |= other.estimated;
    }
}

/// How a run ended. The CLI maps each status to its exit code with [`RunStatus::exit_code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// `complete{status: success}`, takt `COMPLETE`, graph `$END`.
    Completed,
    /// `complete{status: aborted}`, takt `ABORT`, loop detection, no control outcome.
    Aborted,
    /// `complete{status: needs_user_input}` or a rule with `requires_user_input`.
    NeedsUserInput,
    /// `max_movements` reached while another movement was due.
    Exceeded,
    /// An error the run could not recover from.
    Failed,
    /// `WAIT_SUBTASKS` with subtasks still running: the run parks until they end (a job
    /// then waits as `waiting_subtasks`), and goes on in the same movement after.
    WaitingSubtasks,
}

impl RunStatus {
    /// The process exit code `maestro run` uses for this status.
    pub fn exit_code(self) -> i32 {
        match self {
            RunStatus::Completed => 0,
            RunStatus::Aborted => 3,
            RunStatus::NeedsUserInput => 4,
            RunStatus::Exceeded => 5,
            RunStatus::Failed => 1,
            RunStatus::WaitingSubtasks => 6,
        }
    }

    /// The snake_case name used in events and output.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Aborted => "aborted",
            RunStatus::NeedsUserInput => "needs_user_input",
            RunStatus::Exceeded => "exceeded",
            RunStatus::Failed => "failed",
            RunStatus::WaitingSubtasks => "waiting_subtasks",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_status_serialises_as_the_event_vocabulary() {
        let all = [
            RunStatus::Completed,
            RunStatus::Aborted,
            RunStatus::NeedsUserInput,
            RunStatus::Exceeded,
            RunStatus::Failed,
            RunStatus::WaitingSubtasks,
        ];
        let names: Vec<String> = all
            .iter()
            .map(|s| serde_json::to_string(s).unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "\"completed\"",
                "\"aborted\"",
                "\"needs_user_input\"",
                "\"exceeded\"",
                "\"failed\"",
                "\"waiting_subtasks\""
            ]
        );
        for s in all {
            assert_eq!(
                serde_json::to_string(&s).unwrap_or_default(),
                format!("\"{s}\"")
            );
        }
    }

    #[test]
    fn usage_adds_up_and_keeps_the_estimate_flag() {
        let mut total = Usage::default();
        total.add(&Usage {
            prompt_tokens: 10,
            completion_tokens: 2,
            total_tokens: 12,
            cached_prompt_tokens: 0,
            estimated: false,
        });
        total.add(&Usage {
            prompt_tokens: 5,
            completion_tokens: 1,
            total_tokens: 6,
            cached_prompt_tokens: 0,
            estimated: true,
        });
        assert_eq!(
            total,
            Usage {
                prompt_tokens: 15,
                completion_tokens: 3,
                total_tokens: 18,
                cached_prompt_tokens: 0,
                estimated: true
            }
        );
    }

    #[test]
    fn cached_prompt_tokens_add_up_and_are_written_only_when_some_were_cached() {
        let mut total = Usage::default();
        for cached in [30, 0, 12] {
            total.add(&Usage {
                prompt_tokens: 100,
                cached_prompt_tokens: cached,
                ..Usage::default()
            });
        }
        assert_eq!(total.cached_prompt_tokens, 42);
        let written = serde_json::to_value(total).unwrap_or_default();
        assert_eq!(written["cached_prompt_tokens"], 42);
        let none = serde_json::to_value(Usage::default()).unwrap_or_default();
        assert_eq!(none.get("cached_prompt_tokens"), None);
        // Events written before the field read as none cached.
        let old: Usage =
            serde_json::from_str(r#"{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}"#)
                .unwrap_or_default();
        assert_eq!(old.cached_prompt_tokens, 0);
        assert_eq!(old.total_tokens, 3);
    }
}
