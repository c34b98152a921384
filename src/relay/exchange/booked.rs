//! A leg's resources: the load booked on one worker and the abort armed there, with what its
//! failure or success tells the breaker.

use std::sync::Arc;

use crate::relay::Relay;
use crate::routing::Pick;
use crate::upstream::abort::AbortOnDrop;
use crate::upstream::{Fault, Started, UpstreamError};
use crate::workers::{LoadGuard, Worker};

/// The part of an exchange served by one worker.
pub struct Leg {
    pub guard: LoadGuard,
    /// Armed while the worker may be generating for us; `None` for workers that cannot abort by
    /// rid (OpenAI-compatible ones stop when the connection closes).
    pub abort: Option<AbortOnDrop>,
    /// Its failure was already told to the breaker and the metrics (a failed migration must not
    /// count the dead worker twice).
    blamed: bool,
}

impl Leg {
    /// Books the request's uncached prompt on `worker` and arms its abort.
    pub fn book(
        relay: &Relay,
        worker: &Arc<Worker>,
        pick: Pick,
        prompt_len: usize,
        abort_rids: Vec<String>,
    ) -> Leg {
        let uncached = prompt_len.saturating_sub(pick.predicted_cached) as u64;
        Leg {
            guard: LoadGuard::book(Arc::clone(worker), uncached)
                .with_prediction(pick.predicted_cached)
                .with_probe(pick.probe),
            abort: (!abort_rids.is_empty()).then(|| {
                AbortOnDrop::new(relay.client.clone(), Arc::clone(&worker.origin), abort_rids)
            }),
            blamed: false,
        }
    }

    /// This leg failed: told to the breaker and the metrics. The abort stays armed, so it goes
    /// out when the leg drops.
    pub fn failed(&mut self, e: &UpstreamError, relay: &Relay) {
        if !self.blamed {
            self.blamed = true;
            self.guard.outcome(e.fault() == Fault::Worker);
            relay.metrics.upstream_error(e.metric_label());
        }
    }

    /// The attempt failed before any answer: disarm the abort only if the worker provably never
    /// started (it said it is full, or refused the connection); in doubt it goes out.
    pub fn refused(&mut self, e: &UpstreamError, relay: &Relay) {
        self.failed(e, relay);
        if e.started() == Started::No {
            self.disarm();
        }
    }

    /// Its worker finished its part (a prefill worker once the decode has its first token):
    /// a success for the breaker, and nothing to abort.
    pub fn done(&mut self) {
        self.guard.outcome(false);
        self.disarm();
    }

    pub(super) fn disarm(&mut self) {
        if let Some(a) = self.abort.as_mut() {
            a.disarm();
        }
    }
}
