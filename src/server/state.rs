//! What every handler shares.

use std::sync::Arc;

use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::models::Models;
use crate::server::limits::Limits;
use crate::upstream::Client;

pub struct AppState {
    pub config: ServeConfig,
    /// The models served, each with its workers; a request's `model` picks one.
    pub models: Arc<Models>,
    pub limits: Limits,
    /// The wire client every model's relay shares (info routes ask workers with it).
    pub client: Client,
    /// The gateway's metrics: the one model's, or with several, those no model is charged with
    /// (`model="none"`); every model's series render with them (one registry).
    pub metrics: Arc<Metrics>,
    /// Set on SIGTERM: readiness turns 503 and the listener stops accepting.
    pub draining: tokio::sync::watch::Sender<bool>,
    /// Flipped when the grace period is over: every model's in-flight exchanges end.
    pub shutdown: tokio::sync::watch::Sender<bool>,
}
