//! What every handler shares.

use std::sync::Arc;

use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::model::Model;
use crate::relay::Relay;
use crate::routing::Router;
use crate::server::limits::Limits;

pub struct AppState {
    pub config: ServeConfig,
    pub model: Model,
    pub limits: Limits,
    pub router: Arc<Router>,
    pub relay: Arc<Relay>,
    pub metrics: Arc<Metrics>,
    /// Set on SIGTERM: readiness turns 503 and the listener stops accepting.
    pub draining: tokio::sync::watch::Sender<bool>,
}
