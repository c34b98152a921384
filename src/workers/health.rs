//! Active health checks: `GET /health` on every worker each interval; a worker is taken out
//! after consecutive failures and put back after a success.

use std::sync::Arc;
use std::time::Duration;

use super::Registry;
use crate::upstream::Client;

/// Failures in a row before a worker is excluded (one slow answer must not drop it).
const FAILS_TO_EXCLUDE: u32 = 2;

/// One immediate probe of a newly added worker, so it takes traffic without waiting a whole interval.
pub async fn check_now(client: &Client, worker: &crate::workers::Worker) {
    if client
        .probe(worker, "/health", std::time::Duration::from_secs(5))
        .await
    {
        worker.set_healthy(true);
    }
}

pub fn spawn(
    registry: Arc<Registry>,
    client: Client,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut fails = std::collections::HashMap::new();
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            for w in registry.snapshot().iter() {
                let ok = client
                    .probe(w, "/health", interval.min(Duration::from_secs(5)))
                    .await;
                let n: &mut u32 = fails.entry(w.id).or_default();
                *n = if ok { 0 } else { *n + 1 };
                // One success brings a worker in; it takes several failures in a row to take it out.
                let healthy = ok || (w.is_healthy() && *n < FAILS_TO_EXCLUDE);
                if healthy != w.is_healthy() {
                    if healthy {
                        tracing::info!(worker = %w.url, "worker healthy");
                    } else {
                        tracing::warn!(worker = %w.url, "worker failed its health checks; excluded");
                    }
                    w.set_healthy(healthy);
                }
            }
        }
    })
}
