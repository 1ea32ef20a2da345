//! What a run spent, from its record alone: the tokens of every `llm_response`, priced by the
//! model that answered (`llm.models.<name>.price`).

use maestro_config::{LlmConfig, ModelPrice};
use maestro_protocol::{RunEvent, Usage};
use serde::Serialize;

/// The tokens a run (or a tree of runs) used and what they cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spend {
    /// The tokens of every model call in the record, the classifier's and judges' included.
    pub usage: Usage,
    /// Their cost in US dollars; `None` when a call's model has no price (an unknown cost is
    /// never counted as zero).
    pub cost_usd: Option<f64>,
}

impl Spend {
    /// Adds `other` (a subtask's spend): the cost stays known only while both are.
    pub fn add(&mut self, other: &Spend) {
        self.usage.add(&other.usage);
        self.cost_usd = self.cost_usd.zip(other.cost_usd).map(|(a, b)| a + b);
    }
}

/// What the run whose record is `events` spent, with `price` naming each model's price. A call
/// whose `llm_response` names no model (a record written before models were recorded) is
/// priced by the model its `run_started` names.
pub fn run_spend<'e>(
    events: impl IntoIterator<Item = &'e RunEvent>,
    price: impl Fn(&str) -> Option<ModelPrice>,
) -> Spend {
    let mut spend = Spend {
        usage: Usage::default(),
        cost_usd: Some(0.0),
    };
    let mut run_model: Option<&str> = None;
    for event in events {
        match event {
            RunEvent::RunStarted { model, .. } => run_model = model.as_deref(),
            RunEvent::LlmResponse { model, usage, .. } => {
                spend.usage.add(usage);
                let cost = model
                    .as_deref()
                    .or(run_model)
                    .and_then(&price)
                    .map(|p| p.cost_usd(usage));
                spend.cost_usd = spend.cost_usd.zip(cost).map(|(a, b)| a + b);
            }
            _ => {}
        }
    }
    spend
}

/// [`run_spend`] with the prices of `llm`.
pub fn run_spend_in<'e>(events: impl IntoIterator<Item = &'e RunEvent>, llm: &LlmConfig) -> Spend {
    run_spend(events, |model| llm.price(model))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use maestro_protocol::{CallPurpose, EventRecord};

    fn response(model: Option<&str>, prompt: u64, completion: u64) -> RunEvent {
        RunEvent::LlmResponse {
            movement: "plan".into(),
            purpose: CallPurpose::Movement,
            model: model.map(str::to_string),
            usage: Usage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                total_tokens: prompt + completion,
                cached_prompt_tokens: 0,
                estimated: false,
            },
            finish_reason: None,
            tool_calls: 0,
            text_chars: 0,
            answer: None,
        }
    }

    fn prices(model: &str) -> Option<ModelPrice> {
        match model {
            "cheap" => Some(ModelPrice {
                input_per_mtok: 0.5,
                output_per_mtok: 1.5,
                cached_input_per_mtok: None,
            }),
            "dear" => Some(ModelPrice {
                input_per_mtok: 3.0,
                output_per_mtok: 15.0,
                cached_input_per_mtok: None,
            }),
            _ => None,
        }
    }

    #[test]
    fn each_call_is_priced_by_the_model_that_answered_it() {
        let events = [
            response(Some("cheap"), 1_000_000, 200_000),
            response(Some("dear"), 100_000, 10_000),
        ];
        let spend = run_spend(&events, prices);
        assert_eq!(spend.usage.prompt_tokens, 1_100_000);
        assert_eq!(spend.usage.completion_tokens, 210_000);
        let expected = 0.5 + 0.2 * 1.5 + 0.1 * 3.0 + 0.01 * 15.0;
        assert!((spend.cost_usd.unwrap() - expected).abs() < 1e-9);
    }

    #[test]
    fn a_call_of_a_model_without_a_price_leaves_the_cost_unknown_not_zero() {
        let events = [
            response(Some("cheap"), 1_000, 100),
            response(Some("unpriced"), 1_000, 100),
        ];
        let spend = run_spend(&events, prices);
        assert_eq!(spend.cost_usd, None);
        assert_eq!(spend.usage.total_tokens, 2_200);
        let mut tree = run_spend(&events[..1], prices);
        assert!(tree.cost_usd.is_some());
        tree.add(&spend);
        assert_eq!(
            tree.cost_usd, None,
            "one unknown cost makes the tree's unknown"
        );
    }

    #[test]
    fn an_old_record_is_priced_by_the_model_its_run_started_with() {
        let old: Vec<EventRecord> = [
            r#"{"seq":1,"ts":"t","type":"run_started","run_id":"r","piece":"p","dialect":"maestro","piece_hash":"h","task":"t","max_movements":3,"initial_movement":"plan","run_dir":"/r","workspace":"/w","model":"dear"}"#,
            r#"{"seq":2,"ts":"t","type":"llm_response","movement":"plan","purpose":"movement","usage":{"prompt_tokens":1000000,"completion_tokens":0,"total_tokens":1000000},"tool_calls":0,"text_chars":0}"#,
        ]
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
        let spend = run_spend(old.iter().map(|r| &r.event), prices);
        assert_eq!(spend.cost_usd, Some(3.0));
    }
}
