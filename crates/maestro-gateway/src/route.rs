//! Upstreams with their cool-down, and the order a route's targets are tried in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::http::HeaderValue;

use crate::config::UpstreamKind;

/// One model server.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub name: String,
    /// The API it speaks.
    pub kind: UpstreamKind,
    /// The API root without a trailing `/`.
    pub base_url: String,
    /// The key's header value, marked sensitive, when the upstream has a key: `Bearer <key>`
    /// for `openai` (sent as `Authorization`), the key itself for `anthropic` (`x-api-key`).
    pub authorization: Option<HeaderValue>,
    /// `max_tokens` for a Messages request that sets none (`anthropic` only).
    pub max_tokens: Option<u64>,
    /// Milliseconds since the gateway's epoch until which the upstream is passed over.
    cool_until_ms: AtomicU64,
}

impl Upstream {
    pub(crate) fn new(
        name: String,
        base_url: &str,
        authorization: Option<HeaderValue>,
    ) -> Upstream {
        Upstream {
            name,
            kind: UpstreamKind::Openai,
            base_url: base_url.trim_end_matches('/').to_string(),
            authorization,
            max_tokens: None,
            cool_until_ms: AtomicU64::new(0),
        }
    }

    /// The same upstream speaking the Anthropic Messages API, with the `max_tokens` its
    /// requests get when they set none.
    pub(crate) fn anthropic(mut self, max_tokens: Option<u64>) -> Upstream {
        self.kind = UpstreamKind::Anthropic;
        self.max_tokens = max_tokens;
        self
    }

    pub(crate) fn cooling(&self, now_ms: u64) -> bool {
        self.cool_until_ms.load(Ordering::Relaxed) > now_ms
    }

    pub(crate) fn cool_down(&self, until_ms: u64) {
        self.cool_until_ms.fetch_max(until_ms, Ordering::Relaxed);
    }
}

/// One upstream model of a route.
#[derive(Debug)]
pub(crate) struct Target {
    /// Index into the gateway's upstreams.
    pub upstream: usize,
    pub model: String,
    pub weight: u32,
}

/// The targets of one public model name.
#[derive(Debug)]
pub(crate) struct Route {
    pub targets: Vec<Target>,
}

impl Route {
    /// The order to try the targets in: one drawn by weight among those not cooling down,
    /// then the other positive-weight ones not cooling down, then the fallbacks (weight 0),
    /// then those cooling down (better a late try than none), each group in configured order.
    pub(crate) fn order(&self, upstreams: &[Upstream], now_ms: u64) -> Vec<usize> {
        let ready = |i: &usize| !upstreams[self.targets[*i].upstream].cooling(now_ms);
        let all: Vec<usize> = (0..self.targets.len()).collect();
        let weighted: Vec<usize> = all
            .iter()
            .copied()
            .filter(|i| ready(i) && self.targets[*i].weight > 0)
            .collect();
        let mut order = Vec::with_capacity(self.targets.len());
        let total: u64 = weighted
            .iter()
            .map(|i| u64::from(self.targets[*i].weight))
            .sum();
        if total > 0 {
            let mut draw = rand::random_range(0..total);
            for i in &weighted {
                let weight = u64::from(self.targets[*i].weight);
                if draw < weight {
                    order.push(*i);
                    break;
                }
                draw -= weight;
            }
        }
        for i in weighted {
            if !order.contains(&i) {
                order.push(i);
            }
        }
        for i in all.iter().copied().filter(|i| ready(i)) {
            if !order.contains(&i) {
                order.push(i);
            }
        }
        for i in all {
            if !order.contains(&i) {
                order.push(i);
            }
        }
        order
    }
}

/// Milliseconds since `epoch`.
pub(crate) fn millis_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn route(weights: &[u32]) -> (Route, Vec<Upstream>) {
        let upstreams = weights
            .iter()
            .enumerate()
            .map(|(i, _)| Upstream::new(format!("u{i}"), "http://x/v1/", None))
            .collect();
        let targets = weights
            .iter()
            .enumerate()
            .map(|(i, w)| Target {
                upstream: i,
                model: format!("m{i}"),
                weight: *w,
            })
            .collect();
        (Route { targets }, upstreams)
    }

    #[test]
    fn every_target_is_tried_once_and_fallbacks_and_cooling_ones_come_last() {
        let (route, upstreams) = route(&[1, 0, 1]);
        upstreams[2].cool_down(1_000);
        for _ in 0..50 {
            assert_eq!(route.order(&upstreams, 10), vec![0, 1, 2]);
        }
        // Once the cool-down is over, the weighted draw chooses between 0 and 2.
        let mut first = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let order = route.order(&upstreams, 2_000);
            assert_eq!(order.len(), 3);
            assert_eq!(order[2], 1, "the fallback comes after the weighted targets");
            first.insert(order[0]);
        }
        assert_eq!(first, [0, 2].into());
        assert_eq!(upstreams[0].base_url, "http://x/v1");
    }
}
