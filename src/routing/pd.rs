//! Prefill/decode disaggregation: the prefill pool, a second [`Router`] (its own workers and
//! policy, cache-aware by default since that is where prefix reuse pays), and each prefill
//! worker's bootstrap port, which the decode worker is sent to.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::{Pick, RouteError, RouteRequest, Router};
use crate::protocol::sglang::Bootstrap;
use crate::workers::{Worker, WorkerId};

pub struct PrefillPool {
    router: Arc<Router>,
    /// Bootstrap port by worker URL (`--prefill URL PORT`); absent or `None`: sent as `null`.
    ports: RwLock<HashMap<String, Option<u16>>>,
}

impl PrefillPool {
    pub fn new(router: Arc<Router>, ports: HashMap<String, Option<u16>>) -> PrefillPool {
        PrefillPool {
            router,
            ports: RwLock::new(ports),
        }
    }

    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The prefill worker for a request, by the pool's policy.
    pub fn pick(
        &self,
        req: &RouteRequest<'_>,
        exclude: &[WorkerId],
    ) -> Result<(Arc<Worker>, Pick), RouteError> {
        self.router
            .pick(req, exclude)
            .map_err(|_| RouteError::NoHealthyPrefillWorker)
    }

    /// Records a worker's bootstrap port (a worker added at run time).
    pub fn set_port(&self, url: &str, port: Option<u16>) {
        let mut ports = self.ports.write().unwrap_or_else(|e| e.into_inner());
        ports.insert(url.trim_end_matches('/').to_owned(), port);
    }

    /// Fresh bootstrap fields (a new room, on the unit's DP rank) pointing at `worker`.
    pub fn bootstrap(&self, worker: &Worker) -> Bootstrap {
        let ports = self.ports.read().unwrap_or_else(|e| e.into_inner());
        let port = ports.get(worker.url()).copied().flatten();
        Bootstrap::new(worker.origin.host(), port, worker.dp_rank())
    }

    /// At least one prefill worker passed its health check.
    pub fn any_healthy(&self) -> bool {
        self.router
            .registry()
            .snapshot()
            .iter()
            .any(|w| w.is_healthy())
    }
}
