//! `engine:` — how the engine drives a run. It mirrors [`EngineConfig`] (which is not
//! deserialisable) minus what `llm:` already says (the model and its context length); the
//! defaults are taken from [`EngineConfig::new`], so they cannot drift apart.

use maestro_engine::{ContextThresholds, EngineConfig};
use serde::{Deserialize, Serialize};

/// `engine:` in the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSettings {
    /// Model calls one movement may make before the engine ends it.
    pub max_iterations_per_movement: u32,
    /// Fractions of the context window at which the engine warns, prompts and forces a
    /// transition.
    pub context_thresholds: ContextThresholds,
    /// `max_consecutive_revisits` for movements that do not set it.
    pub default_max_consecutive_revisits: u32,
    /// Rounds of a repeating cycle of movements a maestro run may enter (`loop_detected` past it).
    pub max_cycle_rounds: u32,
    /// Carried text longer than this many characters is cut.
    pub max_carried_chars: usize,
    /// Count `interactive_only` rules.
    pub interactive: bool,
    /// Kept as `f64` so it reads and shows as written (`0.2`, not `0.20000000298023224`).
    pub temperature: Option<f64>,
    /// Cap on each answer's length in tokens; none leaves it to the endpoint.
    pub max_tokens: Option<u32>,
    /// Reminders to call `transition`/`complete` after a plain-text turn (maestro dialect).
    pub control_reminders: u32,
    /// Extra requests after invalid frontmatter (graph dialect).
    pub frontmatter_retries: u32,
    /// Tool calls run from one answer; the rest are refused with a message to the model.
    pub max_tool_calls_per_answer: u32,
    /// The most chunks one `BatchReviewTextWithLLM` call reviews at once.
    pub review_max_concurrency: usize,
    /// The most tokens a job and its subtasks may use together; none: no cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_total_tokens: Option<u64>,
    /// The most US dollars a job and its subtasks may spend together; none: no cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Settings for the runs of one piece, by the piece's name (`budget`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub pieces: std::collections::BTreeMap<String, crate::budget::PieceSettings>,
}

impl Default for EngineSettings {
    fn default() -> Self {
        let engine = EngineConfig::new(String::new());
        EngineSettings {
            max_iterations_per_movement: engine.max_iterations_per_movement,
            context_thresholds: engine.context_thresholds,
            default_max_consecutive_revisits: engine.default_max_consecutive_revisits,
            max_cycle_rounds: engine.max_cycle_rounds,
            max_carried_chars: engine.max_carried_chars,
            interactive: engine.interactive,
            temperature: engine.temperature.map(f64::from),
            max_tokens: engine.max_tokens,
            control_reminders: engine.control_reminders,
            frontmatter_retries: engine.frontmatter_retries,
            max_tool_calls_per_answer: engine.max_tool_calls_per_answer,
            review_max_concurrency: engine.review_max_concurrency,
            max_total_tokens: None,
            max_cost_usd: None,
            pieces: std::collections::BTreeMap::new(),
        }
    }
}

impl EngineSettings {
    /// The caps that apply to a job running `piece`: `engine.max_total_tokens` and
    /// `engine.max_cost_usd`, tightened by `engine.pieces.<piece>.budget`.
    pub fn budget_for(&self, piece: &str) -> crate::budget::BudgetSettings {
        let all = crate::budget::BudgetSettings {
            max_total_tokens: self.max_total_tokens,
            max_cost_usd: self.max_cost_usd,
        };
        match self.pieces.get(piece).and_then(|p| p.budget) {
            Some(own) => all.tightest(own),
            None => all,
        }
    }

    /// The engine's configuration for `model` with a known (or unknown) context window.
    /// Fields added to [`EngineConfig`] later keep its own defaults until they are mirrored here.
    pub fn to_engine_config(
        &self,
        model: impl Into<String>,
        context_length: Option<u64>,
    ) -> EngineConfig {
        let mut config = EngineConfig::new(model);
        config.max_iterations_per_movement = self.max_iterations_per_movement;
        config.context_thresholds = self.context_thresholds;
        config.context_length = context_length;
        config.default_max_consecutive_revisits = self.default_max_consecutive_revisits;
        config.max_cycle_rounds = self.max_cycle_rounds;
        config.max_carried_chars = self.max_carried_chars;
        config.interactive = self.interactive;
        config.temperature = self.temperature.map(|t| t as f32);
        config.max_tokens = self.max_tokens;
        config.control_reminders = self.control_reminders;
        config.frontmatter_retries = self.frontmatter_retries;
        config.max_tool_calls_per_answer = self.max_tool_calls_per_answer;
        config.review_max_concurrency = self.review_max_concurrency;
        config
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn every_setting_reaches_the_engine() {
        let thresholds = ContextThresholds {
            warn: 0.5,
            prompt: 0.6,
            force: 0.7,
        };
        let settings = EngineSettings {
            max_iterations_per_movement: 7,
            context_thresholds: thresholds,
            default_max_consecutive_revisits: 9,
            max_cycle_rounds: 8,
            max_carried_chars: 1234,
            interactive: true,
            temperature: Some(0.25),
            max_tokens: Some(512),
            control_reminders: 5,
            frontmatter_retries: 6,
            max_tool_calls_per_answer: 8,
            review_max_concurrency: 3,
            max_total_tokens: None,
            max_cost_usd: None,
            pieces: Default::default(),
        };
        assert_eq!(
            settings.to_engine_config("qwen3", Some(8192)),
            EngineConfig {
                model: "qwen3".into(),
                max_iterations_per_movement: 7,
                context_thresholds: thresholds,
                context_length: Some(8192),
                default_max_consecutive_revisits: 9,
                max_cycle_rounds: 8,
                max_carried_chars: 1234,
                interactive: true,
                temperature: Some(0.25),
                max_tokens: Some(512),
                control_reminders: 5,
                frontmatter_retries: 6,
                max_tool_calls_per_answer: 8,
                review_max_concurrency: 3,
                max_step_delay_ms: None,
            }
        );
    }
}
