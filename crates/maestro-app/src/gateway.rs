//! The LLM gateway from the configuration: `gateway:` for its upstreams and routes,
//! `llm.models.<name>.price` for what calls cost, the store for its usage records.

use std::sync::Arc;

use maestro_config::Config;
use maestro_gateway::{GatewayStore, Price, Prices};
use maestro_store::Store;

pub use maestro_gateway::{Gateway, GatewayError, GatewayKey, KEY_PREFIX, key_hash, new_key};
pub use maestro_store::{UsageGroup, UsageTotal};

/// The gateway `config` describes, writing its usage records to `store`. Must be called inside
/// the tokio runtime that serves it (its usage writer is a task).
pub fn gateway(config: &Config, store: Option<Store>) -> Result<Gateway, GatewayError> {
    let prices: Prices = config
        .llm
        .models
        .iter()
        .filter_map(|(name, overrides)| {
            overrides.price.map(|p| {
                (
                    name.clone(),
                    Price {
                        input_per_mtok: p.input_per_mtok,
                        output_per_mtok: p.output_per_mtok,
                        cached_input_per_mtok: p.cached_input_per_mtok,
                    },
                )
            })
        })
        .collect();
    let store = store.map(|s| Arc::new(s) as Arc<dyn GatewayStore>);
    Gateway::new(&config.gateway, prices, store)
}
