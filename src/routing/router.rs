//! The one place a worker is chosen: the registry, the policy and the metrics together, so that
//! every path (token ids, forwarded bodies, retries, migrations) picks the same way, and a
//! change of membership always reaches the policy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::{select, Pick, Policy, RouteError, RouteRequest};
use crate::metrics::{Metrics, Stage};
use crate::upstream::Client;
use crate::workers::kv_events::KvIndex;
use crate::workers::{health, Registry, RegistryError, Worker, WorkerId};

pub struct Router {
    registry: Arc<Registry>,
    policy: Box<dyn Policy>,
    metrics: Arc<Metrics>,
    /// For the first health probe of a worker added at run time.
    client: Client,
    /// The exact index the policy reads, when workers' KV events are followed.
    kv_index: Option<Arc<KvIndex>>,
    /// The registry's routing generation the policy last heard of.
    seen_generation: AtomicU64,
}

impl Router {
    pub fn new(
        registry: Arc<Registry>,
        policy: Box<dyn Policy>,
        metrics: Arc<Metrics>,
        client: Client,
    ) -> Router {
        Router {
            registry,
            policy,
            metrics,
            client,
            kv_index: None,
            seen_generation: AtomicU64::new(0),
        }
    }

    /// Records the exact index `policy` was built with, for the subscriptions that fill it.
    pub fn with_kv_index(mut self, kv_index: Option<Arc<KvIndex>>) -> Router {
        self.kv_index = kv_index;
        self
    }

    pub fn kv_index(&self) -> Option<&Arc<KvIndex>> {
        self.kv_index.as_ref()
    }

    /// The best available worker not in `exclude` (workers this request already failed on).
    pub fn pick(
        &self,
        req: &RouteRequest<'_>,
        exclude: &[WorkerId],
    ) -> Result<(Arc<Worker>, Pick), RouteError> {
        let t = Instant::now();
        self.follow_routing_changes();
        let available = self.registry.available();
        let picked = select(self.policy.as_ref(), req, &available, exclude)?;
        self.metrics.pick(picked.0.url());
        self.metrics.stage(Stage::Route, t.elapsed().as_secs_f64());
        Ok(picked)
    }

    /// Rank units appear (and go) in the background, when a worker's `dp_size` is learnt: the
    /// policy hears of it at the next pick.
    fn follow_routing_changes(&self) {
        let now = self.registry.generation();
        if self.seen_generation.swap(now, Ordering::AcqRel) != now {
            self.policy.on_workers_changed(&self.registry.routing_ids());
        }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Registers a worker; it takes traffic once its first health check passes (started now).
    pub fn add_worker(&self, url: &str) -> Result<Arc<Worker>, RegistryError> {
        let worker = self.registry.add(url)?;
        self.policy.on_workers_changed(&self.registry.routing_ids());
        let probe = Arc::clone(&worker);
        let client = self.client.clone();
        let registry = Arc::clone(&self.registry);
        tokio::spawn(async move { health::check_now(&client, &registry, &probe).await });
        Ok(worker)
    }

    /// Removes a worker: no new requests go to it; those in flight finish.
    pub fn remove_worker(&self, id: WorkerId) -> Option<Arc<Worker>> {
        let removed = self.registry.remove(id)?;
        // A gRPC worker's connection goes with it once its last call ends.
        self.client.grpc().forget(&removed.origin);
        self.policy.on_workers_changed(&self.registry.routing_ids());
        self.metrics.forget_worker(removed.url());
        Some(removed)
    }

    /// Tokens held by the policy's prefix index, for policies that keep one.
    pub fn index_tokens(&self) -> Option<usize> {
        self.policy.index_tokens()
    }
}
