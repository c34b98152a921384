//! One generation in flight on a worker, as the relay sees it: the upstream stream plus
//! everything that must happen exactly once when it ends (load released, metrics observed,
//! worker told to abort if nobody finished reading).

use std::sync::Arc;

use crate::metrics::{Endpoint, Metrics, RequestTimer, Stage};
use crate::upstream::abort::AbortOnDrop;
use crate::upstream::generate::{Delta, GenerateStream};
use crate::upstream::UpstreamError;
use crate::workers::LoadGuard;

pub struct Generation {
    upstream: GenerateStream,
    guard: LoadGuard,
    abort: AbortOnDrop,
    timer: RequestTimer,
    metrics: Arc<Metrics>,
    endpoint: Endpoint,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cached_tokens: u32,
    done: bool,
}

impl Generation {
    pub fn new(
        upstream: GenerateStream,
        guard: LoadGuard,
        abort: AbortOnDrop,
        timer: RequestTimer,
        metrics: Arc<Metrics>,
        endpoint: Endpoint,
    ) -> Generation {
        Generation {
            upstream,
            guard,
            abort,
            timer,
            metrics,
            endpoint,
            prompt_tokens: 0,
            completion_tokens: 0,
            cached_tokens: 0,
            done: false,
        }
    }

    /// The next delta; `Ok(None)` after the finishing one.
    pub async fn next(&mut self) -> Result<Option<Delta>, UpstreamError> {
        if self.done {
            return Ok(None);
        }
        match self.upstream.next().await {
            Ok(Some(delta)) => {
                if !self.timer.has_first_token() && delta.new_tokens > 0 {
                    self.guard.prefill_done();
                    self.metrics.stage(
                        Stage::UpstreamFirstToken,
                        self.timer.started().elapsed().as_secs_f64(),
                    );
                }
                self.timer.tokens(
                    u64::from(delta.new_tokens),
                    self.metrics.latency(self.endpoint),
                );
                self.prompt_tokens = delta.prompt_tokens;
                self.completion_tokens = delta.completion_tokens;
                self.cached_tokens = delta.cached_tokens;
                if delta.finish.is_some() {
                    if self.upstream.stopped_here() {
                        // Our stop string ended it; the worker is still generating: abort it.
                        self.done = true;
                        self.record(200);
                    } else {
                        self.end(200);
                    }
                }
                Ok(Some(delta))
            }
            Ok(None) => {
                self.end(200);
                Ok(None)
            }
            Err(e) => {
                self.guard.outcome(e.is_worker_fault());
                self.metrics.upstream_error(e.metric_label());
                self.fail(e.status().as_u16());
                Err(e)
            }
        }
    }

    /// Successful end: the worker finished, nothing to abort.
    fn end(&mut self, status: u16) {
        if self.done {
            return;
        }
        self.guard.outcome(false);
        self.done = true;
        self.abort.disarm();
        self.record(status);
    }

    /// Failed end: the worker may still be generating, so the abort stays armed.
    fn fail(&mut self, status: u16) {
        if !self.done {
            self.done = true;
            self.record(status);
        }
    }

    fn record(&self, status: u16) {
        let m = &self.metrics;
        if status == 200 {
            m.cache_prediction(self.guard.predicted_cached(), u64::from(self.cached_tokens));
        }
        self.timer.finish(m.latency(self.endpoint));
        m.request_done(self.endpoint, status);
        m.prompt_tokens.inc_by(u64::from(self.prompt_tokens));
        m.completion_tokens
            .inc_by(u64::from(self.completion_tokens));
        m.cached_tokens.inc_by(u64::from(self.cached_tokens));
    }

    pub fn worker_url(&self) -> &str {
        &self.guard.worker().url
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.done {
            // The client left before the end; the armed AbortOnDrop tells the worker.
            self.metrics.client_aborts.inc();
            self.fail(499);
        }
    }
}
