//! What a job spent, from its stored events: its own run's tokens and cost, and those of the
//! tree of subtasks under it.

use maestro_config::LlmConfig;
use maestro_protocol::{EventRecord, Usage};
use maestro_store::{JobId, JobQueue, Store, StoreError};
use serde::Serialize;

use crate::jobs::JobError;
use crate::spend::{Spend, run_spend_in};

/// The tokens a job used and what they cost, for the job alone and for the job with every
/// subtask under it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct JobSpend {
    /// The tokens of the job's own model calls, so far.
    pub usage: Usage,
    /// Their cost in US dollars; `None` when a call's model has no price.
    pub cost_usd: Option<f64>,
    /// The tokens of the job and every subtask under it.
    pub tree_usage: Usage,
    /// Their cost in US dollars; `None` when any call in the tree has a model without a price.
    pub tree_cost_usd: Option<f64>,
}

/// What the job `id` alone spent, from its stored events, priced by `llm`.
async fn own_spend(store: &Store, id: JobId, llm: &LlmConfig) -> Result<Spend, JobError> {
    let mut records = Vec::new();
    for stored in store.events(id, 0).await? {
        if stored.kind != "llm_response" && stored.kind != "run_started" {
            continue;
        }
        let seq = stored.seq;
        let record: EventRecord =
            serde_json::from_value(stored.payload).map_err(|e| StoreError::Corrupt {
                what: format!("event {seq} of job {id}, which is not a run event: {e}"),
            })?;
        records.push(record);
    }
    Ok(run_spend_in(records.iter().map(|r| &r.event), llm))
}

/// What the job `id` spent, alone and with every subtask under it.
pub async fn job_spend(store: &Store, id: JobId, llm: &LlmConfig) -> Result<JobSpend, JobError> {
    let own = own_spend(store, id, llm).await?;
    let mut tree = own;
    let mut pending = vec![id];
    while let Some(parent) = pending.pop() {
        for child in store.children(parent).await? {
            tree.add(&own_spend(store, child.id, llm).await?);
            pending.push(child.id);
        }
    }
    Ok(JobSpend {
        usage: own.usage,
        cost_usd: own.cost_usd,
        tree_usage: tree.usage,
        tree_cost_usd: tree.cost_usd,
    })
}
