//! Choosing a worker. Each policy is a pure, synchronous pick over a snapshot of the workers;
//! the [`Router`] is how the rest of the gateway asks for one.

pub mod cache_aware;
mod cached;
pub mod config;
pub mod consistent_hash;
mod page_table;
pub mod pd;
pub mod power_of_two;
pub mod prefix_cost;
pub mod prefix_index;
pub mod random;
mod recency;
pub mod round_robin;
mod router;
mod session;
#[cfg(test)]
mod workload_tests;

use std::sync::Arc;

pub use config::{KvEventsMode, PolicyKind, RoutingConfig};
pub use router::Router;
pub use session::session_key;

use crate::workers::{Available, Worker, WorkerId};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RouteError {
    #[error("no healthy worker is available")]
    NoHealthyWorker,
    /// Prefill/decode disaggregation: decode workers are up, but no prefill worker is.
    #[error("no healthy prefill worker is available")]
    NoHealthyPrefillWorker,
}

/// What a policy may look at about the request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteRequest<'a> {
    pub prompt_ids: &'a [u32],
    /// `X-SMG-Routing-Key` / `X-Session-ID` header, or the body's `user` field.
    pub session_key: Option<&'a str>,
}

/// A policy's choice: an index into the candidates, and how many prompt tokens it expects the
/// worker to have cached (0 when the policy does not track prefixes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    pub index: usize,
    pub predicted_cached: usize,
    /// Set by [`select`], not by policies: the half-open breaker probe this request claimed
    /// (its claim time), to be released if the request ends without a verdict.
    pub probe: Option<u64>,
}

impl Pick {
    pub fn at(index: usize) -> Pick {
        Pick {
            index,
            predicted_cached: 0,
            probe: None,
        }
    }
}

pub trait Policy: Send + Sync {
    /// Picks among `workers` (all healthy candidates); `None` only when it is empty. A policy
    /// that indexes prefixes records the prompt against the worker it picked.
    fn pick(&self, req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<Pick>;

    /// Membership changed: forget what belonged to workers no longer in `live`.
    fn on_workers_changed(&self, _live: &[WorkerId]) {}

    /// Tokens held by the policy's prefix index, for policies that keep one.
    fn index_tokens(&self) -> Option<usize> {
        None
    }
}

pub fn build(cfg: &RoutingConfig) -> Box<dyn Policy> {
    build_with_kv_index(cfg, None)
}

/// [`build`], with the exact index of workers that publish KV events (prefix-aware policies).
pub fn build_with_kv_index(
    cfg: &RoutingConfig,
    kv: Option<Arc<crate::workers::kv_events::KvIndex>>,
) -> Box<dyn Policy> {
    match cfg.policy {
        PolicyKind::RoundRobin => Box::new(round_robin::RoundRobin::default()),
        PolicyKind::Random => Box::new(random::Random),
        PolicyKind::PowerOfTwo => Box::new(power_of_two::PowerOfTwo),
        PolicyKind::CacheAware => Box::new(
            cache_aware::CacheAware::new(cache_aware::CacheAwareConfig {
                cache_threshold: cfg.cache_threshold,
                balance_abs_threshold: cfg.balance_abs_threshold,
                balance_rel_threshold: cfg.balance_rel_threshold,
                eviction_interval: std::time::Duration::from_secs(cfg.eviction_interval_secs),
                page_size: page_size(cfg),
                max_tree_size: cfg.max_tree_size.unwrap_or(cfg.prefix_index_max_tokens),
            })
            .with_kv_index(kv),
        ),
        PolicyKind::ConsistentHash => Box::new(consistent_hash::ConsistentHash::new(
            cfg.hash_load_factor,
            page_size(cfg),
        )),
        PolicyKind::PrefixCost => Box::new(
            prefix_cost::PrefixCost::new(
                cfg.prefill_weight,
                cfg.decode_weight,
                prefix_index::PrefixIndex::new(page_size(cfg), cfg.prefix_index_max_tokens),
            )
            .with_kv_index(kv),
        ),
    }
}

fn page_size(cfg: &RoutingConfig) -> usize {
    usize::try_from(cfg.prefix_page_size).unwrap_or(16).max(1)
}

/// Picks among the `available` units (a policy never sees an unavailable one), except
/// `exclude`: workers this request already failed on (retries and migrations go elsewhere).
pub fn select(
    policy: &dyn Policy,
    req: &RouteRequest<'_>,
    available: &Available,
    exclude: &[WorkerId],
) -> Result<(Arc<Worker>, Pick), RouteError> {
    let mut candidates = available.candidates(exclude);
    // A half-open breaker admits one probe, and a breaker may have tripped since the list was
    // built: a worker whose breaker refuses is dropped and the policy picks again (each round
    // removes one candidate).
    loop {
        let pick = policy
            .pick(req, &candidates)
            .ok_or(RouteError::NoHealthyWorker)?;
        let worker = candidates
            .get(pick.index)
            .ok_or(RouteError::NoHealthyWorker)?;
        let admission = worker.breaker().admit();
        if admission.admitted() {
            let probe = admission.probe();
            return Ok((Arc::clone(worker), Pick { probe, ..pick }));
        }
        candidates.remove(pick.index);
    }
}

#[cfg(test)]
pub(crate) fn test_workers(n: usize) -> Vec<Arc<Worker>> {
    (0..n)
        .map(|i| {
            Arc::new(
                Worker::new(
                    crate::workers::WorkerId(i as u32),
                    &format!("http://127.0.0.1:{}", 1000 + i),
                )
                .unwrap(),
            )
        })
        .collect()
}

#[cfg(test)]
mod probe_tests {
    use super::*;

    #[test]
    fn a_half_open_worker_gets_one_request_and_others_take_the_rest() {
        let registry = test_registry(2);
        let ws = registry.snapshot();
        ws[0].breaker().half_open_now();
        let policy = round_robin::RoundRobin::default();
        let req = RouteRequest::default();
        let picked: Vec<WorkerId> = (0..6)
            .map(|_| {
                select(&policy, &req, &registry.available(), &[])
                    .unwrap()
                    .0
                    .id
            })
            .collect();
        let probes = picked.iter().filter(|&&id| id == WorkerId(0)).count();
        assert_eq!(probes, 1, "{picked:?}");
        // With only the half-open worker left, the probe's holder is the only one let through.
        assert!(select(&policy, &req, &registry.available(), &[WorkerId(1)]).is_err());
    }

    #[test]
    fn a_breaker_tripped_since_the_list_was_built_refuses_its_pick() {
        let registry = test_registry(2);
        let ws = registry.snapshot();
        let available = registry.available();
        for _ in 0..crate::workers::breaker::FAILURES_TO_OPEN {
            ws[0].breaker().record_failure();
        }
        let policy = round_robin::RoundRobin::default();
        let req = RouteRequest::default();
        for _ in 0..4 {
            let (w, _) = select(&policy, &req, &available, &[]).unwrap();
            assert_eq!(w.id, WorkerId(1));
        }
    }

    /// A registry of `n` healthy workers.
    fn test_registry(n: usize) -> crate::workers::Registry {
        let urls: Vec<String> = (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 1000 + i))
            .collect();
        let registry = crate::workers::Registry::new(&urls).unwrap();
        for w in registry.snapshot().iter() {
            w.set_healthy(true);
        }
        registry
    }
}
