//! One client request's exchange with the workers: the one type that owns its resources (the
//! load booked on the current worker, the armed abort, the timer, the deadlines) and its
//! ending. Every path (token ids, forwarded bodies) ends through it, so the invariants hold
//! everywhere: the end is recorded exactly once; the worker's load is released; the abort stays
//! armed until a clean end; dropped before the end means the client left (499).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

mod booked;
mod shutdown;

pub use booked::Leg;
pub(super) use shutdown::stopped;
use shutdown::ShutdownWait;

use super::reliability::{AtOnce, Deadlines};
use super::Relay;
use crate::metrics::{Endpoint, Outcome, RequestTimer, Stage};
use crate::upstream::{Origin, UpstreamError};
use crate::workers::WorkerId;

/// Token counts reported for the request.
#[derive(Debug, Default, Clone, Copy)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
}

pub struct Exchange {
    relay: Arc<Relay>,
    endpoint: Endpoint,
    timer: RequestTimer,
    deadlines: Deadlines,
    /// Resolves once the shutdown grace period is over: one registration for the whole
    /// exchange, checked without a lock on every wait ([`ShutdownWait`]).
    shutdown: ShutdownWait,
    /// The one timer of the exchange's waits, moved to each wait's deadline: pushing a tokio
    /// timer's deadline later takes no lock, where a fresh timer per wait takes two.
    deadline_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    leg: Option<Leg>,
    /// The worker being waited on: the current leg's, or the one a new leg is being opened on.
    waiting_on: Option<Arc<Origin>>,
    pub usage: Usage,
    ended: bool,
    /// The request's exported span and its current `relay` child (`Span::none()` with traces off).
    span: tracing::Span,
    relay_span: tracing::Span,
    finish_reasons: Vec<&'static str>,
    /// One of several generations of a request (`n > 1`, a batch): it holds its own leg,
    /// deadlines and counts, but records nothing; the request's own exchange does (`choices`).
    part: bool,
    /// A part has had its first token (its timer records nothing).
    part_started: bool,
    /// Where the current leg went: its worker and, for a PD pair, its prefill worker.
    placed: Option<Placement>,
    /// For the request's exchange of a fan-out, which has no leg: the prediction of its first
    /// generation's.
    predicted_cached: Option<usize>,
}

/// The workers a leg runs on (a fan-out's other generations go there too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub worker: WorkerId,
    pub prefill: Option<WorkerId>,
}

impl Exchange {
    /// Starts the clock at `start` (the request's arrival).
    pub fn new(relay: &Arc<Relay>, endpoint: Endpoint, start: Instant) -> Exchange {
        Exchange {
            relay: Arc::clone(relay),
            endpoint,
            timer: RequestTimer::start_at(start),
            deadlines: Deadlines::new(start, &relay.reliability, relay.request_timeout_secs),
            shutdown: ShutdownWait::new(&relay.shutdown),
            deadline_timer: None,
            leg: None,
            waiting_on: None,
            usage: Usage::default(),
            ended: false,
            span: if crate::traces::enabled() {
                tracing::Span::current()
            } else {
                tracing::Span::none()
            },
            relay_span: tracing::Span::none(),
            finish_reasons: Vec::new(),
            part: false,
            part_started: false,
            placed: None,
            predicted_cached: None,
        }
    }

    /// One generation of a request with several: its ending, latency and counts are the
    /// request's exchange's to record.
    pub fn part(relay: &Arc<Relay>, endpoint: Endpoint, start: Instant) -> Exchange {
        let mut ex = Exchange::new(relay, endpoint, start);
        ex.part = true;
        ex.span = tracing::Span::none();
        ex
    }

    /// Where the current leg runs (`None` before one opened).
    pub fn placement(&self) -> Option<Placement> {
        self.placed
    }

    pub fn set_placement(&mut self, placed: Placement) {
        self.placed = Some(placed);
    }

    /// A fan-out's own exchange reports its first generation's cache prediction.
    pub fn set_predicted_cached(&mut self, predicted: usize) {
        self.predicted_cached = Some(predicted);
    }

    pub fn predicted_cached(&self) -> usize {
        self.predicted_cached
            .or_else(|| self.leg.as_ref().map(|l| l.guard.predicted_cached()))
            .unwrap_or(0)
    }

    pub fn relay(&self) -> &Arc<Relay> {
        &self.relay
    }

    /// The worker the request is with ("" before the first attempt).
    pub fn url(&self) -> &str {
        self.waiting_on.as_ref().map_or("", |o| o.url.as_str())
    }

    /// From now on the exchange waits on `worker` (a new leg being opened there).
    pub fn waiting_on(&mut self, worker: &Arc<Origin>) {
        self.waiting_on = Some(Arc::clone(worker));
    }

    /// Makes `leg` the current one. The previous leg drops: its load is released and, if its
    /// worker may still be generating, it is told to abort.
    pub fn set_leg(&mut self, leg: Leg) {
        let origin = Arc::clone(&leg.guard.worker().origin);
        if crate::traces::enabled() {
            crate::traces::attribute(&self.span, "server.address", origin.url.clone());
            self.relay_span = crate::traces::stage_in(&self.span, "relay");
            crate::traces::attribute(&self.relay_span, "server.address", origin.url.clone());
        }
        self.waiting_on = Some(origin);
        self.leg = Some(leg);
    }

    /// The worker ended a generation with this (OpenAI) finish reason.
    pub fn finished_with(&mut self, reason: &'static str) {
        if crate::traces::enabled() {
            self.finish_reasons.push(reason);
        }
    }

    /// The current leg's worker died; it is counted against it before the next leg replaces it.
    pub fn leg_failed(&mut self, e: &UpstreamError) {
        if let Some(leg) = self.leg.as_mut() {
            leg.failed(e, &self.relay);
        }
    }

    /// The request's time limits (a stream's watch gives its client as long).
    pub fn deadlines(&self) -> Deadlines {
        self.deadlines
    }

    pub fn has_first_token(&self) -> bool {
        self.part_started || self.timer.has_first_token()
    }

    /// Awaits the worker under the deadline that applies now (time to first token, idle gap or
    /// total), and gives up when the gateway's shutdown grace period is over.
    pub async fn wait<T>(
        &mut self,
        fut: impl Future<Output = Result<T, UpstreamError>>,
    ) -> Result<T, UpstreamError> {
        self.wait_for(fut, None).await
    }

    /// [`Exchange::wait`] for an answer that may come `at_once` (its first token is its last):
    /// see [`Deadlines::for_answer_at_once`].
    pub async fn wait_for<T>(
        &mut self,
        fut: impl Future<Output = Result<T, UpstreamError>>,
        at_once: Option<AtOnce>,
    ) -> Result<T, UpstreamError> {
        let deadlines = match at_once {
            Some(at_once) => self.deadlines.for_answer_at_once(at_once),
            None => self.deadlines,
        };
        let (limit, stage) = deadlines.next_wait(self.has_first_token());
        let shutdown = &mut self.shutdown;
        let outcome = match limit {
            Some(limit) => {
                let deadline = tokio::time::Instant::now() + limit;
                let timer = self
                    .deadline_timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                timer.as_mut().reset(deadline);
                tokio::select! {
                    biased;
                    r = fut => Some(r),
                    () = shutdown => return Err(shutting_down()),
                    () = timer.as_mut() => None,
                }
            }
            None => tokio::select! {
                biased;
                r = fut => Some(r),
                () = shutdown => return Err(shutting_down()),
            },
        };
        outcome.unwrap_or_else(|| {
            Err(UpstreamError::Timeout {
                url: self.url().to_owned(),
                stage,
            })
        })
    }

    /// `n` new tokens reached the client (or are about to).
    pub fn tokens(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        // Per leg: a continued leg's prompt stops being queued prefill at its own first token.
        if let Some(leg) = self.leg.as_mut() {
            leg.guard.tokens_arrived();
        }
        if self.part {
            self.part_started = true;
            return;
        }
        if !self.timer.has_first_token() {
            let ttft = self.timer.started().elapsed().as_secs_f64();
            self.relay.metrics.stage(Stage::UpstreamFirstToken, ttft);
            crate::traces::attribute(&self.span, "gen_ai.server.time_to_first_token", ttft);
        }
        self.timer
            .tokens(n, self.relay.metrics.latency(self.endpoint));
    }

    /// The worker finished: nothing left to abort.
    pub fn succeed(&mut self) {
        if self.ended {
            return;
        }
        if let Some(leg) = self.leg.as_mut() {
            leg.guard.outcome(false);
            leg.disarm();
        }
        self.end(200);
    }

    /// Our own stop string ended the answer while the worker may still be generating: a success
    /// for the client, and the armed abort stops the worker.
    pub fn succeed_early(&mut self) {
        if !self.ended {
            self.end(200);
        }
    }

    /// The response failed after it started: counted; the abort stays armed.
    pub fn fail(&mut self, e: &UpstreamError) {
        if self.ended {
            return;
        }
        // The client's error event names no worker; the log does.
        tracing::warn!(worker = e.worker_url().unwrap_or(self.url()), error = %e, "response failed after it started");
        self.leg_failed(e);
        self.end(e.status().as_u16());
    }

    /// A failure before any byte reached the client: the caller renders and counts it.
    pub fn hand_back(&mut self) {
        self.ended = true;
    }

    pub fn ended(&self) -> bool {
        self.ended
    }

    fn end(&mut self, status: u16) {
        self.ended = true;
        if self.part {
            return;
        }
        let outcome = Outcome {
            status,
            prompt_tokens: self.usage.prompt_tokens,
            completion_tokens: self.usage.completion_tokens,
            cached_tokens: self.usage.cached_tokens,
            predicted_cached: self.predicted_cached(),
        };
        if crate::traces::enabled() {
            self.trace_outcome(&outcome);
        }
        self.relay
            .metrics
            .request_ended(self.endpoint, &self.timer, outcome);
    }

    /// The GenAI attributes of the request's span; the `relay` span ends here.
    fn trace_outcome(&mut self, outcome: &Outcome) {
        use crate::traces::attribute;
        let span = &self.span;
        attribute(span, "http.response.status_code", i64::from(outcome.status));
        let tokens = [
            ("gen_ai.usage.input_tokens", outcome.prompt_tokens),
            ("gen_ai.usage.output_tokens", outcome.completion_tokens),
            (
                "gen_ai.usage.cache_read.input_tokens",
                outcome.cached_tokens,
            ),
        ];
        for (key, n) in tokens {
            attribute(span, key, i64::try_from(n).unwrap_or(i64::MAX));
        }
        if !self.finish_reasons.is_empty() {
            let reasons: Vec<opentelemetry::StringValue> =
                self.finish_reasons.iter().map(|r| (*r).into()).collect();
            attribute(
                span,
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(reasons.into()),
            );
        }
        if outcome.status >= 400 {
            attribute(span, "error.type", outcome.status.to_string());
        }
        self.relay_span = tracing::Span::none();
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if !self.ended && !self.part {
            // The client left before the end; the armed abort tells the worker when the leg
            // drops, right after this.
            self.relay.metrics.client_aborts.inc();
            self.end(499);
        }
    }
}

fn shutting_down() -> UpstreamError {
    UpstreamError::Aborted {
        message: "the gateway is shutting down".into(),
        status: Some(503),
    }
}
