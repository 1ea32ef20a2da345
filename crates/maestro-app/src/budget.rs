//! Cost caps on job trees, enforced through the store's budget ledger: every model call of a
//! run reserves its worst case from the budget `job:<root job id>` before it is made
//! ([`StoreSpend`], the engine's [`SpendGuard`]), and settles to what it spent after.

use std::time::Duration;

use maestro_config::{BudgetSettings, Config, LlmConfig};
use maestro_engine::{SpendAsk, SpendFuture, SpendGuard, SpendRefused, SpendTicket};
use maestro_protocol::Usage;
use maestro_store::{
    BudgetCap, BudgetLimits, BudgetRefusal, Charge, JobId, ReservationId, Store, StoreError,
};

/// How long a reservation holds when its run never settles it (the process died): the
/// longest model call, with room to spare. [`Store::budget_sweep`] gives it back after.
const RESERVATION_TTL: Duration = Duration::from_secs(2 * 60 * 60);

/// US dollars as micro-USD (rounded down: a cap never grows).
pub(crate) fn micro_usd(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        (usd * 1_000_000.0).floor() as u64
    } else {
        0
    }
}

/// A cap in the configuration's terms as the ledger's integers.
pub(crate) fn limits_of(settings: BudgetSettings) -> BudgetLimits {
    BudgetLimits {
        max_tokens: settings.max_total_tokens,
        max_micro_usd: settings.max_cost_usd.map(micro_usd),
    }
}

/// A job's own caps as they were stored with it, in the configuration's terms.
pub(crate) fn settings_of(limits: BudgetLimits) -> BudgetSettings {
    BudgetSettings {
        max_total_tokens: limits.max_tokens,
        max_cost_usd: limits.max_micro_usd.map(|m| m as f64 / 1_000_000.0),
    }
}

/// Where the price of `model` is set, as a person can write it: the dotted path for a plain
/// model id, the YAML for one with dots, slashes or colons in it (a `.gguf` path,
/// `qwen3:8b`), which a dotted path cannot name.
pub(crate) fn price_setting(model: &str) -> String {
    if model
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        format!("llm.models.{model}.price")
    } else {
        format!(
            "the price of this model under llm.models (in YAML: `llm: {{models: {{{}: {{price: \
             {{input_per_mtok: …, output_per_mtok: …}}}}}}}}`)",
            serde_json::Value::String(model.to_string())
        )
    }
}

/// Why a run with a cost cap cannot start.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// A cap in US dollars applies, and the run's model has no price to count it by.
    #[error(
        "a cost cap of ${cap} applies to this job (engine.max_cost_usd, a piece's budget or the \
         job's own), but the model `{model}` has no price: set {} \
         ({{input_per_mtok, output_per_mtok}}, US dollars per million tokens), or cap tokens \
         with max_total_tokens instead",
        price_setting(model)
    )]
    NoPrice {
        /// The cap in US dollars.
        cap: f64,
        /// The run's model.
        model: String,
    },
    /// The job's tree could not be read.
    #[error("cannot read the budget of job {job}: {source}")]
    Store {
        /// The job whose tree was read.
        job: JobId,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

/// The guard for a run of `job` with `piece` under `config` (`None`: the piece is not chosen
/// yet, for the classifier's call): `None` when no cap applies. The caps are the tightest of
/// the configuration's, the piece's (`engine.pieces.<name>.budget`, and a maestro piece's own
/// `budget:`) and the job tree's root's own.
pub(crate) async fn guard_for(
    store: &Store,
    config: &Config,
    job: &maestro_store::Job,
    piece: Option<&maestro_piece::Piece>,
) -> Result<Option<StoreSpend>, BudgetError> {
    // A root job's budget came with the job (it is set only when the job is submitted); a
    // subtask's tree is capped by its root's, read from the store.
    let (root, own) = match job.parent_id {
        None => (job.id, job.budget),
        Some(_) => store
            .job_tree_budget(job.id)
            .await
            .map_err(|source| BudgetError::Store {
                job: job.id,
                source,
            })?
            .unwrap_or((job.id, BudgetLimits::default())),
    };
    let mut caps = config
        .engine
        .budget_for(piece.map_or("", |p| p.name.as_str()))
        .tightest(settings_of(own));
    if let Some(budget) = piece.and_then(|p| p.budget) {
        caps = caps.tightest(BudgetSettings {
            max_total_tokens: budget.max_total_tokens,
            max_cost_usd: budget.max_cost_usd,
        });
    }
    if caps.is_empty() {
        return Ok(None);
    }
    let model = config.llm.model.clone().unwrap_or_default();
    if let Some(cap) = caps.max_cost_usd
        && config.llm.price(&model).is_none()
    {
        return Err(BudgetError::NoPrice { cap, model });
    }
    Ok(Some(StoreSpend {
        store: store.clone(),
        budget: format!("job:{root}"),
        limits: limits_of(caps),
        llm: config.llm.clone(),
        model,
    }))
}

/// Reserves a run's model calls from its job tree's budget in the store.
#[derive(Debug)]
pub(crate) struct StoreSpend {
    store: Store,
    /// `job:<root job id>`.
    budget: String,
    limits: BudgetLimits,
    /// The prices and the client's cap on an answer.
    llm: LlmConfig,
    /// The run's model: the price of an answer whose model has none of its own.
    model: String,
}

impl StoreSpend {
    fn cost(&self, model: &str, usage: &Usage) -> Option<u64> {
        self.llm
            .price(model)
            .or_else(|| self.llm.price(&self.model))
            .map(|price| micro_usd(price.cost_usd(usage)).max(u64::from(usage.total_tokens > 0)))
    }
}

impl StoreSpend {
    /// The worst case of `ask` with an answer of up to `answer` tokens: its tokens and, when
    /// the model has a price, its cost. `Err` when a cost cap applies and no price is known.
    fn worst_case(&self, ask: &SpendAsk, answer: u64) -> Result<Charge, SpendRefused> {
        let worst = Usage {
            prompt_tokens: ask.prompt_tokens,
            completion_tokens: answer,
            total_tokens: ask.prompt_tokens + answer,
            cached_prompt_tokens: 0,
            estimated: true,
        };
        let micro_usd = match (self.cost(&ask.model, &worst), self.limits.max_micro_usd) {
            (Some(micro), _) => micro,
            (None, None) => 0,
            (None, Some(_)) => {
                return Err(SpendRefused::Exceeded {
                    cap: "max_cost_usd".into(),
                    message: format!(
                        "a cost cap applies but the model `{}` has no price: set {}",
                        ask.model,
                        price_setting(&ask.model)
                    ),
                });
            }
        };
        Ok(Charge {
            tokens: worst.total_tokens,
            micro_usd,
        })
    }

    /// The answer cap that fits what a token cap has left after the prompt, when that is less
    /// than `answer` but still at least [`MIN_FITTED_ANSWER`]; `None` otherwise (the call
    /// fits as asked, or it would leave too little room for an answer to be of use).
    fn fitted_answer(refusal: &BudgetRefusal, ask: &SpendAsk, answer: u64) -> Option<u64> {
        if refusal.cap != BudgetCap::Tokens {
            return None;
        }
        let room = refusal.left().checked_sub(ask.prompt_tokens)?;
        (MIN_FITTED_ANSWER..answer).contains(&room).then_some(room)
    }
}

/// The least answer cap a call is lowered to so that it fits its token cap: below this, the
/// call is refused instead (an answer cut at a few hundred tokens is seldom of use).
const MIN_FITTED_ANSWER: u64 = 1_024;

impl SpendGuard for StoreSpend {
    fn reserve(&self, ask: SpendAsk) -> SpendFuture<'_, Result<SpendTicket, SpendRefused>> {
        Box::pin(async move {
            let mut answer = ask
                .max_answer_tokens
                .map_or(self.llm.max_answer_tokens, u64::from);
            let mut fitted = false;
            loop {
                let charge = self.worst_case(&ask, answer)?;
                let refusal = match self
                    .store
                    .budget_reserve(&self.budget, self.limits, charge, RESERVATION_TTL)
                    .await
                {
                    Ok(Ok(id)) => {
                        return Ok(SpendTicket {
                            id: id.to_string(),
                            // A lowered cap goes out with the call, so the answer cannot pass
                            // what was reserved for it.
                            answer_cap: fitted.then(|| u32::try_from(answer).unwrap_or(u32::MAX)),
                        });
                    }
                    Ok(Err(refusal)) => refusal,
                    Err(e) => return Err(SpendRefused::Unavailable(crate::error_chain(&e))),
                };
                // A call whose answer cap passes what the token cap has left is asked again
                // once, with its answer capped to fit (the cap the endpoint is sent).
                if !fitted && let Some(room) = StoreSpend::fitted_answer(&refusal, &ask, answer) {
                    answer = room;
                    fitted = true;
                    continue;
                }
                return Err(SpendRefused::Exceeded {
                    cap: match refusal.cap {
                        BudgetCap::Tokens => "max_total_tokens",
                        BudgetCap::Usd => "max_cost_usd",
                    }
                    .into(),
                    message: format!(
                        "budget: the {} call of `{}` needs up to {} tokens{} ({} of the \
                         prompt, as estimated, and up to {answer} of the answer) and does not \
                         fit: {}{}",
                        format!("{:?}", ask.purpose).to_lowercase(),
                        ask.movement,
                        charge.tokens,
                        if charge.micro_usd > 0 {
                            format!(" (${:.6})", charge.micro_usd as f64 / 1_000_000.0)
                        } else {
                            String::new()
                        },
                        ask.prompt_tokens,
                        refusal,
                        never_fits_fix(&refusal, charge, answer, ask.max_answer_tokens.is_some()),
                    ),
                });
            }
        })
    }

    fn settle(&self, ticket: SpendTicket, model: String, usage: Usage) -> SpendFuture<'_, ()> {
        Box::pin(async move {
            let Ok(id) = ticket.id.parse::<ReservationId>() else {
                return;
            };
            let actual = Charge {
                tokens: usage.total_tokens,
                micro_usd: self.cost(&model, &usage).unwrap_or(0),
            };
            if let Err(e) = self.store.budget_settle(id, actual).await {
                // The reservation stays until the sweep gives it back; the spend it leaves out
                // is in the run's record.
                tracing::warn!(budget = %self.budget, error = %crate::error_chain(&e), "cannot settle a budget reservation");
            }
        })
    }

    fn release(&self, ticket: SpendTicket) -> SpendFuture<'_, ()> {
        Box::pin(async move {
            let Ok(id) = ticket.id.parse::<ReservationId>() else {
                return;
            };
            if let Err(e) = self.store.budget_release(id).await {
                tracing::warn!(budget = %self.budget, error = %crate::error_chain(&e), "cannot release a budget reservation");
            }
        })
    }
}

/// For a call that could not fit even the cap unspent: how to make it fit. Empty otherwise
/// (the cap is spent, and the message says so).
fn never_fits_fix(
    refusal: &BudgetRefusal,
    charge: Charge,
    answer: u64,
    answer_capped: bool,
) -> String {
    let needed = match refusal.cap {
        BudgetCap::Tokens => charge.tokens,
        BudgetCap::Usd => charge.micro_usd,
    };
    if needed <= refusal.limit {
        return String::new();
    }
    let answer_setting = if answer_capped {
        "`engine.max_tokens`"
    } else {
        "`llm.max_answer_tokens`, or set `engine.max_tokens`"
    };
    format!(
        "; this call cannot fit the cap even unspent: the worst case counts the answer at \
         {answer} tokens, so lower {answer_setting} (an answer of a few thousand tokens is \
         usually enough), or raise the cap"
    )
}

#[cfg(test)]
mod price_tests {
    use super::price_setting;

    #[test]
    fn a_model_id_a_dotted_path_cannot_name_is_given_as_yaml() {
        assert_eq!(price_setting("gpt-4o_mini"), "llm.models.gpt-4o_mini.price");
        assert_eq!(
            price_setting("/models/SmolLM2.gguf"),
            "the price of this model under llm.models (in YAML: `llm: {models: \
             {\"/models/SmolLM2.gguf\": {price: {input_per_mtok: …, output_per_mtok: …}}}}`)"
        );
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::*;

    fn refusal(limit: u64, spent: u64) -> BudgetRefusal {
        BudgetRefusal {
            cap: BudgetCap::Tokens,
            limit,
            spent,
            reserved: 0,
        }
    }

    #[test]
    fn a_call_that_cannot_fit_an_unspent_cap_says_how_to_make_it_fit() {
        let charge = Charge {
            tokens: 66_157,
            micro_usd: 0,
        };
        let fix = never_fits_fix(&refusal(50_000, 0), charge, 65_536, false);
        assert!(fix.contains("cannot fit the cap even unspent"), "{fix}");
        assert!(fix.contains("65536 tokens"), "{fix}");
        assert!(
            fix.contains("`llm.max_answer_tokens`, or set `engine.max_tokens`"),
            "{fix}"
        );
        assert!(
            never_fits_fix(&refusal(50_000, 0), charge, 65_536, true)
                .contains("lower `engine.max_tokens`")
        );
        // A call that would fit the cap unspent was refused for what is spent: nothing to add.
        let small = Charge {
            tokens: 700,
            micro_usd: 0,
        };
        assert_eq!(never_fits_fix(&refusal(1_000, 600), small, 100, true), "");
        assert_eq!(
            refusal(1_000, 600).to_string(),
            "the token cap of 1000 has 400 left (600 spent, 0 reserved by calls in progress)"
        );
    }
}
