//! Why a run or a visit ended other than by the model's normal outcome: one short code per
//! cause, recorded as `movement_finished.reason` and `run_finished.reason`.
//!
//! The record keeps the codes as strings (`max_movements`, `llm_error: …`); this type is the one
//! place that spells them, so a reason cannot be misspelled where a run ends.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A run-ending (or visit-ending) reason, serialised as its documented code. The variants that
/// carry text are recorded as `code: text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndReason {
    /// `max_movements` movements ran and another one was due.
    MaxMovements,
    /// A movement or a cycle of movements was entered more often than allowed.
    LoopDetected,
    /// The run was cancelled (SIGINT, SIGTERM, the cancel token).
    Cancelled,
    /// The conversation reached the context window's force threshold.
    ContextExhausted,
    /// The movement used up `engine.max_iterations_per_movement` model calls.
    MaxIterations,
    /// A maestro movement ended without calling `transition` or `complete`, reminders included.
    NoControlOutcome,
    /// No rule matched the movement's answer.
    NoRuleMatched,
    /// The matched rule has `requires_user_input`.
    RequiresUserInput,
    /// The model ended the run through `complete` with a status other than success.
    CompleteTool,
    /// A rule led to `ABORT`.
    AbortRule,
    /// A rule led to `ASK`.
    Ask,
    /// A rule led to `WAIT_SUBTASKS` where the run has no subtasks to wait for (subtasks are
    /// off, or none is pending) and the movement has no `default_next`.
    WaitSubtasksUnsupported,
    /// A graph role's frontmatter stayed invalid after the retries; the problem.
    InvalidFrontmatter(String),
    /// The model endpoint failed after the provider's retries; the error.
    LlmError(String),
    /// The run record could not be written; the error.
    RecordError(String),
    /// The piece cannot run as loaded; the problem.
    PieceError(String),
    /// A broken engine invariant; what broke.
    InternalError(String),
    /// The job system failed to spawn or report a subtask; the error.
    SubtaskError(String),
    /// A model call's reservation did not fit a cost cap of the run's job tree
    /// (`engine.max_total_tokens`, `engine.max_cost_usd`, a piece's `budget`, the job's own);
    /// the cap, e.g. `max_cost_usd`. The run ends `exceeded`.
    Budget(String),
    /// A TAKT selector (a dynamic parallel step's participants, a step's `dynamic_facets`)
    /// gave no valid selection; what was wrong with its answer. Nothing of the step ran.
    SelectorFailed(String),
    /// A TAKT agent step's answer carried no JSON valid against its `structured_output`
    /// schema; the problem.
    InvalidStructuredOutput(String),
    /// A TAKT system step's effect that Maestro cannot carry out (it needs a Git host, or
    /// the run has no job queue); the effect and why.
    EffectRefused(String),
    /// A TAKT `when(…)` predicate could not be evaluated (a path the run's state does not
    /// hold, a comparison of the wrong types); the predicate and the problem.
    WhenError(String),
}

impl EndReason {
    /// The short code, without the detail some reasons carry.
    pub fn code(&self) -> &'static str {
        match self {
            EndReason::MaxMovements => "max_movements",
            EndReason::LoopDetected => "loop_detected",
            EndReason::Cancelled => "cancelled",
            EndReason::ContextExhausted => "context_exhausted",
            EndReason::MaxIterations => "max_iterations",
            EndReason::NoControlOutcome => "no_control_outcome",
            EndReason::NoRuleMatched => "no_rule_matched",
            EndReason::RequiresUserInput => "requires_user_input",
            EndReason::CompleteTool => "complete_tool",
            EndReason::AbortRule => "abort_rule",
            EndReason::Ask => "ask",
            EndReason::WaitSubtasksUnsupported => "wait_subtasks_unsupported",
            EndReason::InvalidFrontmatter(_) => "invalid_frontmatter",
            EndReason::LlmError(_) => "llm_error",
            EndReason::RecordError(_) => "record_error",
            EndReason::PieceError(_) => "piece_error",
            EndReason::InternalError(_) => "internal_error",
            EndReason::SubtaskError(_) => "subtask_error",
            EndReason::Budget(_) => "budget",
            EndReason::SelectorFailed(_) => "selector_failed",
            EndReason::InvalidStructuredOutput(_) => "invalid_structured_output",
            EndReason::EffectRefused(_) => "effect_refused",
            EndReason::WhenError(_) => "when_error",
        }
    }

    /// The text a detailed reason carries.
    pub fn detail(&self) -> Option<&str> {
        match self {
            EndReason::InvalidFrontmatter(d)
            | EndReason::LlmError(d)
            | EndReason::RecordError(d)
            | EndReason::PieceError(d)
            | EndReason::InternalError(d)
            | EndReason::SubtaskError(d)
            | EndReason::Budget(d)
            | EndReason::SelectorFailed(d) => Some(d),
            EndReason::InvalidStructuredOutput(d)
            | EndReason::EffectRefused(d)
            | EndReason::WhenError(d) => Some(d),
            _ => None,
        }
    }

    /// The same reason with its detail passed through `redact` (secrets out of provider errors).
    pub fn redacted(self, redact: impl Fn(&str) -> String) -> Self {
        match self {
            EndReason::InvalidFrontmatter(d) => EndReason::InvalidFrontmatter(redact(&d)),
            EndReason::LlmError(d) => EndReason::LlmError(redact(&d)),
            EndReason::RecordError(d) => EndReason::RecordError(redact(&d)),
            EndReason::PieceError(d) => EndReason::PieceError(redact(&d)),
            EndReason::InternalError(d) => EndReason::InternalError(redact(&d)),
            EndReason::SubtaskError(d) => EndReason::SubtaskError(redact(&d)),
            EndReason::SelectorFailed(d) => EndReason::SelectorFailed(redact(&d)),
            EndReason::InvalidStructuredOutput(d) => EndReason::InvalidStructuredOutput(redact(&d)),
            EndReason::EffectRefused(d) => EndReason::EffectRefused(redact(&d)),
            EndReason::WhenError(d) => EndReason::WhenError(redact(&d)),
            plain => plain,
        }
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.detail() {
            Some(detail) => write!(f, "{}: {detail}", self.code()),
            None => f.write_str(self.code()),
        }
    }
}

/// A recorded reason that is not one of [`EndReason`]'s codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a known end reason")]
pub struct UnknownEndReason(pub String);

impl FromStr for EndReason {
    type Err = UnknownEndReason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((code, detail)) = s.split_once(": ") {
            let detail = detail.to_string();
            return match code {
                "invalid_frontmatter" => Ok(EndReason::InvalidFrontmatter(detail)),
                "llm_error" => Ok(EndReason::LlmError(detail)),
                "record_error" => Ok(EndReason::RecordError(detail)),
                "piece_error" => Ok(EndReason::PieceError(detail)),
                "internal_error" => Ok(EndReason::InternalError(detail)),
                "subtask_error" => Ok(EndReason::SubtaskError(detail)),
                "budget" => Ok(EndReason::Budget(detail)),
                "selector_failed" => Ok(EndReason::SelectorFailed(detail)),
                "invalid_structured_output" => Ok(EndReason::InvalidStructuredOutput(detail)),
                "effect_refused" => Ok(EndReason::EffectRefused(detail)),
                "when_error" => Ok(EndReason::WhenError(detail)),
                _ => Err(UnknownEndReason(s.to_string())),
            };
        }
        Ok(match s {
            "max_movements" => EndReason::MaxMovements,
            "loop_detected" => EndReason::LoopDetected,
            "cancelled" => EndReason::Cancelled,
            "context_exhausted" => EndReason::ContextExhausted,
            "max_iterations" => EndReason::MaxIterations,
            "no_control_outcome" => EndReason::NoControlOutcome,
            "no_rule_matched" => EndReason::NoRuleMatched,
            "requires_user_input" => EndReason::RequiresUserInput,
            "complete_tool" => EndReason::CompleteTool,
            "abort_rule" => EndReason::AbortRule,
            "ask" => EndReason::Ask,
            "wait_subtasks_unsupported" => EndReason::WaitSubtasksUnsupported,
            _ => return Err(UnknownEndReason(s.to_string())),
        })
    }
}

impl Serialize for EndReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for EndReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn every() -> Vec<(EndReason, &'static str)> {
        vec![
            (EndReason::MaxMovements, "max_movements"),
            (EndReason::LoopDetected, "loop_detected"),
            (EndReason::Cancelled, "cancelled"),
            (EndReason::ContextExhausted, "context_exhausted"),
            (EndReason::MaxIterations, "max_iterations"),
            (EndReason::NoControlOutcome, "no_control_outcome"),
            (EndReason::NoRuleMatched, "no_rule_matched"),
            (EndReason::RequiresUserInput, "requires_user_input"),
            (EndReason::CompleteTool, "complete_tool"),
            (EndReason::AbortRule, "abort_rule"),
            (EndReason::Ask, "ask"),
            (
                EndReason::WaitSubtasksUnsupported,
                "wait_subtasks_unsupported",
            ),
            (
                EndReason::InvalidFrontmatter("missing `verdict`".into()),
                "invalid_frontmatter: missing `verdict`",
            ),
            (
                EndReason::LlmError("HTTP 401: bad key".into()),
                "llm_error: HTTP 401: bad key",
            ),
            (
                EndReason::RecordError("disk full".into()),
                "record_error: disk full",
            ),
            (
                EndReason::PieceError("no movement `x`".into()),
                "piece_error: no movement `x`",
            ),
            (
                EndReason::SubtaskError("store closed".into()),
                "subtask_error: store closed",
            ),
            (
                EndReason::InternalError("no movement is due".into()),
                "internal_error: no movement is due",
            ),
            (
                EndReason::Budget("max_cost_usd".into()),
                "budget: max_cost_usd",
            ),
            (
                EndReason::SelectorFailed("`selected_ids` is missing".into()),
                "selector_failed: `selected_ids` is missing",
            ),
            (
                EndReason::InvalidStructuredOutput("missing `action`".into()),
                "invalid_structured_output: missing `action`",
            ),
            (
                EndReason::EffectRefused("`merge_pr`".into()),
                "effect_refused: `merge_pr`",
            ),
            (
                EndReason::WhenError("no `context.a`".into()),
                "when_error: no `context.a`",
            ),
        ]
    }

    #[test]
    fn every_reason_serialises_to_its_documented_code_and_back() {
        for (reason, text) in every() {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(reason.to_string(), text);
            assert_eq!(serde_json::from_str::<EndReason>(&json).unwrap(), reason);
            assert_eq!(text.parse::<EndReason>().unwrap(), reason);
        }
    }

    #[test]
    fn every_plain_code_is_in_the_engine_docs() {
        let docs = include_str!("../../../docs/engine.md");
        for (reason, _) in every() {
            assert!(
                docs.contains(&format!("`{}", reason.code())),
                "`{}` is not documented in docs/engine.md",
                reason.code()
            );
        }
    }

    #[test]
    fn an_unknown_code_is_refused() {
        assert_eq!(
            "max_movement".parse::<EndReason>(),
            Err(UnknownEndReason("max_movement".into()))
        );
        assert!(serde_json::from_str::<EndReason>("\"loop\"").is_err());
    }
}
