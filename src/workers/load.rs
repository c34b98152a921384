//! Load booked on a worker for one request, released when the guard drops: at the end of the
//! response stream, on an error, or when the client goes away. It cannot leak.

use std::sync::Arc;

use super::Worker;

pub struct LoadGuard {
    worker: Arc<Worker>,
    prefill_tokens: u64,
    /// Prompt tokens the routing policy expected this worker to have cached.
    predicted_cached: usize,
    /// The half-open probe this request holds (its claim), until a verdict is reported.
    probe: Option<u64>,
    /// The worker produced a token for this request.
    served: bool,
}

impl LoadGuard {
    pub fn book(worker: Arc<Worker>, prefill_tokens: u64) -> LoadGuard {
        worker.book(prefill_tokens);
        LoadGuard {
            worker,
            prefill_tokens,
            predicted_cached: 0,
            probe: None,
            served: false,
        }
    }

    /// This request is the worker's half-open probe: if it ends without a verdict (the client
    /// left), the probe is released rather than held until it times out.
    pub fn with_probe(mut self, claim: Option<u64>) -> LoadGuard {
        self.probe = claim;
        self
    }

    /// The first token arrived: the prompt is no longer queued prefill work.
    pub fn prefill_done(&mut self) {
        if self.prefill_tokens > 0 {
            self.worker.release_prefill(self.prefill_tokens);
            self.prefill_tokens = 0;
        }
    }

    /// Tokens arrived: the prompt is done, and the worker has shown it works (which spares it
    /// a health probe, `health`).
    pub fn tokens_arrived(&mut self) {
        self.prefill_done();
        if !self.served {
            self.served = true;
            self.worker.mark_served();
        }
    }

    pub fn with_prediction(mut self, predicted_cached: usize) -> LoadGuard {
        self.predicted_cached = predicted_cached;
        self
    }

    pub fn predicted_cached(&self) -> usize {
        self.predicted_cached
    }

    /// Reports how the request went to the worker's circuit breaker.
    pub fn outcome(&mut self, worker_fault: bool) {
        self.probe = None;
        if worker_fault {
            self.worker.breaker().record_failure();
        } else {
            self.worker.breaker().record_success();
        }
    }

    pub fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.prefill_done();
        self.worker.release();
        if let Some(claim) = self.probe {
            self.worker.breaker().release_probe(claim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::WorkerId;

    #[test]
    fn guard_books_and_releases() {
        let w = Arc::new(Worker::new(WorkerId(0), "http://127.0.0.1:1").unwrap());
        let mut g = LoadGuard::book(Arc::clone(&w), 100);
        assert_eq!((w.in_flight(), w.pending_prefill()), (1, 100));
        g.prefill_done();
        assert_eq!(w.pending_prefill(), 0);
        drop(g);
        assert_eq!(w.in_flight(), 0);
    }

    #[test]
    fn a_probe_that_ends_without_a_verdict_frees_the_next_probe() {
        let w = Arc::new(Worker::new(WorkerId(0), "http://127.0.0.1:1").unwrap());
        w.breaker().half_open_now();
        let claim = w.breaker().admit().probe();
        assert!(claim.is_some());
        assert!(!w.breaker().allows(), "one probe at a time");
        // The client left: no verdict, and the next request may probe at once.
        drop(LoadGuard::book(Arc::clone(&w), 0).with_probe(claim));
        let claim = w.breaker().admit().probe();
        assert!(claim.is_some(), "the probe was released");
        // A probe with a verdict keeps it: its failure reopened the breaker.
        let mut g = LoadGuard::book(Arc::clone(&w), 0).with_probe(claim);
        for _ in 0..crate::workers::breaker::FAILURES_TO_OPEN {
            g.outcome(true);
        }
        drop(g);
        assert!(!w.breaker().allows());
    }
}
