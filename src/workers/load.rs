//! Load booked on a worker for one request, released when the guard drops: at the end of the
//! response stream, on an error, or when the client goes away. It cannot leak.

use std::sync::Arc;

use super::Worker;

pub struct LoadGuard {
    worker: Arc<Worker>,
    prefill_tokens: u64,
    /// Prompt tokens the routing policy expected this worker to have cached.
    predicted_cached: usize,
}

impl LoadGuard {
    pub fn book(worker: Arc<Worker>, prefill_tokens: u64) -> LoadGuard {
        worker.book(prefill_tokens);
        LoadGuard {
            worker,
            prefill_tokens,
            predicted_cached: 0,
        }
    }

    /// The first token arrived: the prompt is no longer queued prefill work.
    pub fn prefill_done(&mut self) {
        if self.prefill_tokens > 0 {
            self.worker.release_prefill(self.prefill_tokens);
            self.prefill_tokens = 0;
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
    pub fn outcome(&self, worker_fault: bool) {
        if worker_fault {
            self.worker.breaker.record_failure();
        } else {
            self.worker.breaker.record_success();
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
}
