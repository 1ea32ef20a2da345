//! The engine's settings, with the defaults of engine-semantics.md.

use crate::context::ContextThresholds;

/// How the engine drives a run. `EngineConfig::new(model)` gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// The model name sent with every request (a piece's own `model` does not override it).
    pub model: String,
    /// Model calls one movement may make before the engine ends it.
    pub max_iterations_per_movement: u32,
    /// The shares of the context window at which the engine warns, tells the model to wrap
    /// up, and ends the movement.
    pub context_thresholds: ContextThresholds,
    /// The context window in tokens; `None` asks the provider, and if it does not know either,
    /// the thresholds are off.
    pub context_length: Option<u64>,
    /// `max_consecutive_revisits` for movements that do not set it.
    pub default_max_consecutive_revisits: u32,
    /// Maestro dialect: how many rounds of a repeating cycle of movements (A→B→A→B…) a run may
    /// enter before it ends as `loop_detected`. A movement of the cycle whose
    /// `max_consecutive_revisits` is higher raises it for that cycle.
    pub max_cycle_rounds: u32,
    /// Carried text (previous answers, reports) longer than this is cut, pointing to the full
    /// copy in the run directory.
    pub max_carried_chars: usize,
    /// Interactive use: `interactive_only` rules count. `maestro run` is not interactive.
    pub interactive: bool,
    /// Sampling temperature sent with every movement call; `None` leaves it to the endpoint.
    pub temperature: Option<f32>,
    /// Cap on each answer's length in tokens (`max_tokens`); `None` leaves it to the endpoint.
    pub max_tokens: Option<u32>,
    /// Maestro: reminders to call `transition`/`complete` after a plain-text turn.
    pub control_reminders: u32,
    /// Graph: extra requests after invalid frontmatter.
    pub frontmatter_retries: u32,
    /// Tool calls run from one answer; the model is told the rest were not run.
    pub max_tool_calls_per_answer: u32,
    /// The most chunks one `BatchReviewTextWithLLM` call reviews at once (its `concurrency`
    /// may ask for fewer, never more).
    pub review_max_concurrency: usize,
    /// Caps a TAKT step's `delay_before_ms` (tests, and hosts that poll differently); `None`
    /// waits as the workflow says.
    pub max_step_delay_ms: Option<u64>,
}

impl EngineConfig {
    /// Settings for `model` with the documented defaults of every `engine.*` key
    /// (docs/configuration.md); the context length is asked of the provider.
    pub fn new(model: impl Into<String>) -> Self {
        EngineConfig {
            model: model.into(),
            max_iterations_per_movement: 30,
            context_thresholds: ContextThresholds::default(),
            context_length: None,
            default_max_consecutive_revisits: 3,
            max_cycle_rounds: 4,
            max_carried_chars: 20_000,
            interactive: false,
            temperature: None,
            max_tokens: None,
            control_reminders: 2,
            frontmatter_retries: 2,
            max_tool_calls_per_answer: 32,
            review_max_concurrency: 8,
            max_step_delay_ms: None,
        }
    }
}
