//! What every handler shares.

use std::sync::Arc;

use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::routing::Policy;
use crate::tokenize::Tokenizer;
use crate::upstream::Client;
use crate::workers::Registry;

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
