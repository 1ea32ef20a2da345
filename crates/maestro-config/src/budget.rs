//! Cost caps: `engine.max_total_tokens` and `engine.max_cost_usd`, and `budget:` for one piece
//! (`engine.pieces.<name>.budget`). A cap covers a job and every subtask under it.

use serde::{Deserialize, Serialize};

/// Caps on what a job tree may spend. An unset cap is no cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetSettings {
    /// The most tokens (prompt and completion together) the job tree may use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_total_tokens: Option<u64>,
    /// The most US dollars the job tree may spend, priced by `llm.models.<model>.price`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

impl BudgetSettings {
    /// True when neither cap is set.
    pub fn is_empty(&self) -> bool {
        self.max_total_tokens.is_none() && self.max_cost_usd.is_none()
    }

    /// The tighter of each cap of `self` and `other` (a cap set on one side only is kept).
    pub fn tightest(self, other: BudgetSettings) -> BudgetSettings {
        BudgetSettings {
            max_total_tokens: tighter(self.max_total_tokens, other.max_total_tokens, |a, b| {
                a.min(b)
            }),
            max_cost_usd: tighter(self.max_cost_usd, other.max_cost_usd, f64::min),
        }
    }

    /// What is wrong with these caps, as (field, problem, fix); empty when they are valid.
    pub fn problems(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut found = Vec::new();
        if self.max_total_tokens == Some(0) {
            found.push((
                "max_total_tokens",
                "0 tokens allows no model call at all".to_string(),
                "give a positive number of tokens, e.g. 200000, or remove the field for no cap",
            ));
        }
        if let Some(usd) = self.max_cost_usd
            && !(usd.is_finite() && usd > 0.0)
        {
            found.push((
                "max_cost_usd",
                format!("{usd} is not a positive amount of US dollars"),
                "give US dollars above 0, e.g. 2.5, or remove the field for no cap",
            ));
        }
        found
    }
}

fn tighter<T: Copy>(a: Option<T>, b: Option<T>, min: impl Fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(min(a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// `engine.pieces.<name>:` — settings for the runs of one piece (any dialect).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PieceSettings {
    /// Caps on what a job running this piece, with its subtasks, may spend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetSettings>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tightest_cap_of_each_kind_wins_and_an_unset_one_is_no_cap() {
        let config = BudgetSettings {
            max_total_tokens: Some(1_000),
            max_cost_usd: None,
        };
        let job = BudgetSettings {
            max_total_tokens: Some(5_000),
            max_cost_usd: Some(0.5),
        };
        assert_eq!(
            config.tightest(job),
            BudgetSettings {
                max_total_tokens: Some(1_000),
                max_cost_usd: Some(0.5),
            }
        );
        assert!(BudgetSettings::default().is_empty());
        assert_eq!(BudgetSettings::default().tightest(job), job);
    }
}
