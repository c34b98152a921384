//! What every handler shares.

use std::sync::Arc;

use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::routing::Policy;
use crate::tokenize::Tokenizer;
use crate::upstream::Client;
use crate::workers::{Registry, RegistryError, Worker, WorkerId};

pub struct AppState {
    pub config: ServeConfig,
    pub model: Arc<str>,
    pub context_length: usize,
    pub tokenizer: Arc<Tokenizer>,
    pub registry: Arc<Registry>,
    pub policy: Box<dyn Policy>,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    /// Flipped to `true` when the shutdown grace period is over: in-flight generations end.
    pub shutdown: tokio::sync::watch::Sender<bool>,
    /// Set on SIGTERM: readiness turns 503 and the listener stops accepting.
    pub draining: tokio::sync::watch::Sender<bool>,
}

impl AppState {
    /// Registers a worker; it takes traffic once its first health check passes (started now).
    pub fn add_worker(&self, url: &str) -> Result<Arc<Worker>, RegistryError> {
        let worker = self.registry.add(url)?;
        self.policy.on_workers_changed(&self.registry.ids());
        let probe = Arc::clone(&worker);
        let client = self.client.clone();
        tokio::spawn(async move { crate::workers::health::check_now(&client, &probe).await });
        Ok(worker)
    }

    /// Removes a worker: no new requests go to it; those in flight finish.
    pub fn remove_worker(&self, id: WorkerId) -> Option<Arc<Worker>> {
        let removed = self.registry.remove(id)?;
        self.policy.on_workers_changed(&self.registry.ids());
        Some(removed)
    }
}
