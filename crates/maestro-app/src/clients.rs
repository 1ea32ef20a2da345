//! The model clients a worker's runs share, and what each endpoint serves.
//!
//! A client holds a connection pool and learns what its endpoint refuses (streaming options,
//! tool modes), so one client per configuration serves all of a worker's runs instead of each
//! run building its own. What an endpoint serves (`GET /v1/models`) is asked once and kept for
//! [`SERVED_FOR`] rather than asked by every job.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use maestro_config::{Config, LlmConfig};
use maestro_llm::flight::{Flight, Turn};
use maestro_llm::{LlmError, ModelClient};
use maestro_protocol::Secret;

use crate::models::{ModelError, allow_aliases, client, judge_served, only_model};

/// How long an endpoint's list of models is trusted. A model missing from a list this old is
/// looked up again before a job is refused for it.
pub(crate) const SERVED_FOR: Duration = Duration::from_secs(60);

/// At most this many client configurations are kept (the oldest goes first).
const MAX_CLIENTS: usize = 16;

/// Which endpoint a list of models belongs to: its URL and the key it was asked with.
type Endpoint = (String, Option<Secret>);

/// The last answer to `GET /v1/models` at one endpoint.
#[derive(Debug)]
struct Listing {
    at: Instant,
    answer: Result<Vec<String>, LlmError>,
}

/// Where one endpoint's last listing is kept.
type ListingSlot = Arc<Slot>;

/// One endpoint's last listing, and the lock its askers take.
#[derive(Debug, Default)]
struct Slot {
    /// Held while the endpoint is asked, so that callers who find no recent answer ask once;
    /// the others wait for that answer together ([`Flight`]).
    asking: Flight<()>,
    /// The last answer, read without waiting: a thousand runs starting at once each take it
    /// in turn here, not in a queue of wake-ups on `asking`.
    last: Mutex<Option<Listing>>,
}

impl Slot {
    /// The kept answer, when it will do: given after `asked_at` (by the caller this one
    /// waited for), or recent enough for `freshness`.
    fn kept(
        &self,
        asked_at: Instant,
        freshness: Freshness,
    ) -> Option<Result<Vec<String>, LlmError>> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let last = last.as_ref()?;
        let answered_while_waiting = last.at >= asked_at;
        let recent =
            freshness == Freshness::Recent && last.answer.is_ok() && last.at.elapsed() < SERVED_FOR;
        (answered_while_waiting || recent).then(|| last.answer.clone())
    }
}

/// Clients and model lists, shared by the runs of one worker.
#[derive(Debug, Default)]
pub(crate) struct ModelClients {
    clients: Mutex<Vec<(LlmConfig, Arc<ModelClient>)>>,
    /// One lock per endpoint, held while it is asked, so that a thousand jobs starting at once
    /// ask once.
    listings: Mutex<Vec<(Endpoint, ListingSlot)>>,
}

/// How fresh a list of models must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Freshness {
    /// At most [`SERVED_FOR`] old.
    Recent,
    /// Asked now (or by a caller this one waited for).
    Now,
}

impl ModelClients {
    /// The client for `config`'s model settings, built once.
    pub(crate) fn client(&self, config: &Config) -> Result<Arc<ModelClient>, ModelError> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, found)) = clients.iter().find(|(llm, _)| *llm == config.llm) {
            return Ok(Arc::clone(found));
        }
        let built = Arc::new(client(config)?);
        if clients.len() >= MAX_CLIENTS {
            clients.remove(0);
        }
        clients.push((config.llm.clone(), Arc::clone(&built)));
        Ok(built)
    }

    /// [`crate::check_served`] with the endpoint's list shared: a model missing from a list
    /// kept from earlier is looked up again before it is refused.
    pub(crate) async fn check_served(
        &self,
        config: &Config,
        model: &str,
    ) -> Result<(), ModelError> {
        let base = &config.llm.base_url;
        let judged = match judge_served(base, model, self.listed(config, Freshness::Recent).await?)
        {
            Err(ModelError::NotServed { .. }) => {
                judge_served(base, model, self.listed(config, Freshness::Now).await?)
            }
            judged => judged,
        };
        allow_aliases(config, judged)
    }

    /// [`crate::served_model`] with the endpoint's list shared.
    pub(crate) async fn served_model(&self, config: &Config) -> Result<String, ModelError> {
        only_model(
            &config.llm.base_url,
            self.listed(config, Freshness::Recent).await?,
        )
    }

    /// The endpoint's answer to `GET /v1/models`. A success is kept for [`SERVED_FOR`]; a
    /// failure is handed only to the callers that waited for that very request, so the next
    /// job asks again.
    async fn listed(
        &self,
        config: &Config,
        freshness: Freshness,
    ) -> Result<Result<Vec<String>, LlmError>, ModelError> {
        let asked_at = Instant::now();
        let slot = {
            let endpoint = (config.llm.base_url.clone(), config.llm.api_key.clone());
            let mut listings = self.listings.lock().unwrap_or_else(|p| p.into_inner());
            match listings.iter().find(|(e, _)| *e == endpoint) {
                Some((_, slot)) => Arc::clone(slot),
                None => {
                    let slot = Arc::default();
                    listings.push((endpoint, Arc::clone(&slot)));
                    slot
                }
            }
        };
        // Kept from earlier, or asked by another caller while this one waited: as fresh as can
        // be.
        let _asking = match slot
            .asking
            .lead_unless(|_| slot.kept(asked_at, freshness))
            .await
        {
            Turn::Done(answer) => return Ok(answer),
            Turn::Lead(asking) => asking,
        };
        let answer = self.client(config)?.list_models().await;
        *slot.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Listing {
            at: Instant::now(),
            answer: answer.clone(),
        });
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use maestro_testkit::ScriptedLlm;

    use super::*;

    fn config(base_url: &str) -> Config {
        let mut config = Config::default();
        config.llm.base_url = base_url.to_string();
        config
    }

    fn listings(server: &ScriptedLlm) -> usize {
        server
            .recorded()
            .iter()
            .filter(|r| r.path == "/v1/models")
            .count()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_starting_together_ask_the_endpoint_once_and_share_a_client() {
        let server = ScriptedLlm::builder().also_serves("other").start().await;
        let clients = ModelClients::default();
        let config = config(&server.base_url());
        let checks = (0..20).map(|_| clients.check_served(&config, "scripted-model"));
        for checked in futures::future::join_all(checks).await {
            checked.unwrap();
        }
        assert_eq!(listings(&server), 1);
        assert!(Arc::ptr_eq(
            &clients.client(&config).unwrap(),
            &clients.client(&config).unwrap()
        ));

        // A model the kept list does not name is looked up again before it is refused.
        let refused = clients.check_served(&config, "missing").await;
        assert!(
            matches!(&refused, Err(ModelError::NotServed { model, .. }) if model == "missing"),
            "{refused:?}"
        );
        assert_eq!(listings(&server), 2);
    }
}
