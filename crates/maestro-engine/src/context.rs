//! The context manager: watches how full the model's context window is after each call and says
//! when to warn (an event), prompt (tell the model to wrap up) and force (end the movement).

use maestro_protocol::Usage;
use serde::{Deserialize, Serialize};

use crate::event::ContextLevel;

/// Fractions of the context window at which the engine reacts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ContextThresholds {
    /// Past this share a `context_warning` is recorded (default 0.70).
    pub warn: f64,
    /// Past this share the model is told to wrap up (default 0.85).
    pub prompt: f64,
    /// Past this share the engine ends the movement (default 0.95).
    pub force: f64,
}

impl Default for ContextThresholds {
    fn default() -> Self {
        ContextThresholds {
            warn: 0.70,
            prompt: 0.85,
            force: 0.95,
        }
    }
}

/// Tracks one conversation's size against the window. Each level fires once.
#[derive(Debug, Clone)]
pub struct ContextMeter {
    window: Option<u64>,
    thresholds: ContextThresholds,
    reached: Option<ContextLevel>,
    used: u64,
}

impl ContextMeter {
    /// `window` is the model's context length; `None` (unknown) disables the thresholds.
    pub fn new(window: Option<u64>, thresholds: ContextThresholds) -> Self {
        ContextMeter {
            window,
            thresholds,
            reached: None,
            used: 0,
        }
    }

    /// The model's context window in tokens; `None` when unknown (the thresholds are off).
    pub fn window(&self) -> Option<u64> {
        self.window
    }

    /// Tokens the conversation held at the last call (prompt plus answer).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Records the usage of the conversation's latest call and returns the highest level newly
    /// crossed, if any.
    pub fn observe(&mut self, usage: &Usage) -> Option<ContextLevel> {
        self.used = usage
            .total_tokens
            .max(usage.prompt_tokens + usage.completion_tokens);
        let window = self.window.filter(|w| *w > 0)?;
        let fraction = self.used as f64 / window as f64;
        let level = if fraction >= self.thresholds.force {
            ContextLevel::Force
        } else if fraction >= self.thresholds.prompt {
            ContextLevel::Prompt
        } else if fraction >= self.thresholds.warn {
            ContextLevel::Warn
        } else {
            return None;
        };
        if self.reached.is_some_and(|r| r >= level) {
            return None;
        }
        self.reached = Some(level);
        Some(level)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn used(total: u64) -> Usage {
        Usage {
            prompt_tokens: total,
            completion_tokens: 0,
            total_tokens: total,
            cached_prompt_tokens: 0,
            estimated: false,
        }
    }

    #[test]
    fn each_threshold_fires_once_in_order() {
        let mut meter = ContextMeter::new(Some(1000), ContextThresholds::default());
        let seen: Vec<Option<ContextLevel>> = [100, 700, 750, 860, 990, 999]
            .iter()
            .map(|t| meter.observe(&used(*t)))
            .collect();
        assert_eq!(
            seen,
            vec![
                None,
                Some(ContextLevel::Warn),
                None,
                Some(ContextLevel::Prompt),
                Some(ContextLevel::Force),
                None
            ]
        );
        let mut unknown = ContextMeter::new(None, ContextThresholds::default());
        assert_eq!(unknown.observe(&used(1_000_000)), None);
        let mut jump = ContextMeter::new(Some(100), ContextThresholds::default());
        assert_eq!(jump.observe(&used(96)), Some(ContextLevel::Force));
    }
}
