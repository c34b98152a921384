//! One generation as the client sees it: possibly several legs (workers), one stream of
//! deltas. It retries before the first token, continues on another worker when one dies
//! mid-stream (`--migration-limit`), enforces the deadlines, and makes sure everything that
//! must happen once at the end does (load released, metrics observed, worker aborted if it
//! may still be generating).

pub mod leg;

use std::sync::Arc;

use leg::{Leg, LegRequest};

use crate::error::GatewayError;
use crate::metrics::{Endpoint, Outcome, RequestTimer, Stage};
use crate::protocol::sglang::SamplingParams;
use crate::relay::reliability::Deadlines;
use crate::server::AppState;
use crate::upstream::generate::Delta;
use crate::upstream::UpstreamError;
use crate::workers::WorkerId;

pub struct Spec {
    pub rid: String,
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    pub session_key: Option<String>,
    pub endpoint: Endpoint,
    pub timer: RequestTimer,
}

pub struct Generation {
    app: Arc<AppState>,
    spec: Spec,
    leg: Leg,
    /// The first chunk, read while opening the leg, not yet handed out.
    pending: Option<Delta>,
    /// Output ids relayed by earlier legs (the current leg's are in its stream).
    earlier_ids: Vec<u32>,
    /// Tokens produced by earlier legs (a migrated leg counts from zero again).
    tokens_before_leg: u32,
    migrations: u32,
    tried: Vec<WorkerId>,
    deadlines: Deadlines,
    shutdown: tokio::sync::watch::Receiver<bool>,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cached_tokens: u32,
    done: bool,
}

impl Generation {
    /// Routes and starts the generation; returns once the first token is in hand, so every
    /// failure up to then is still an HTTP error (and retryable).
    pub async fn start(app: &Arc<AppState>, spec: Spec) -> Result<Generation, GatewayError> {
        let deadlines = Deadlines::new(
            spec.timer.started(),
            &app.config.reliability,
            app.config.request_timeout_secs,
        );
        let mut tried = Vec::new();
        let mut migrations = 0;
        let req = LegRequest {
            input_ids: &spec.prompt,
            params: &spec.params,
            rid: &spec.rid,
            session_key: spec.session_key.as_deref(),
        };
        let (leg, first) = loop {
            match leg::open(app, &req, &mut tried, &deadlines, false).await {
                // The worker died before its first token: nothing reached the client, and that
                // generation is gone with the worker, so start it over elsewhere.
                Err(GatewayError::Upstream(e @ UpstreamError::Disconnected { .. }))
                    if migrations < app.config.reliability.migration_limit =>
                {
                    migrations += 1;
                    app.metrics
                        .migrations
                        .with_label_values(&["continued"])
                        .inc();
                    tracing::warn!(rid = %spec.rid, error = %e, "worker failed before its first token; starting elsewhere");
                }
                other => break other?,
            }
        };
        Ok(Generation {
            app: Arc::clone(app),
            spec,
            leg,
            pending: Some(first),
            earlier_ids: Vec::new(),
            tokens_before_leg: 0,
            migrations,
            tried,
            deadlines,
            shutdown: app.shutdown.subscribe(),
            prompt_tokens: 0,
            completion_tokens: 0,
            cached_tokens: 0,
            done: false,
        })
    }

    /// The next delta; `Ok(None)` after the finishing one.
    pub async fn next(&mut self) -> Result<Option<Delta>, UpstreamError> {
        loop {
            if self.done {
                return Ok(None);
            }
            let got = match self.pending.take() {
                Some(d) => Ok(Some(d)),
                None => self.read().await,
            };
            match got {
                Ok(Some(delta)) => return Ok(Some(self.accept(delta))),
                Ok(None) => {
                    self.end();
                    return Ok(None);
                }
                Err(e) if self.can_migrate(&e) => {
                    if let Err(e2) = self.migrate(&e).await {
                        return Err(self.fail(e2));
                    }
                }
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    async fn read(&mut self) -> Result<Option<Delta>, UpstreamError> {
        let (limit, what) = self.deadlines.next_wait(self.spec.timer.has_first_token());
        let url = self.leg.guard.worker().url.clone();
        let next = self.leg.upstream.next();
        let timed = async {
            match limit {
                Some(l) => tokio::time::timeout(l, next)
                    .await
                    .unwrap_or_else(|_| Err(UpstreamError::Timeout { url, stage: what })),
                None => next.await,
            }
        };
        tokio::select! {
            r = timed => r,
            _ = stopped(&mut self.shutdown) => Err(UpstreamError::Aborted { message: "the gateway is shutting down".into(), status: Some(503) }),
        }
    }

    fn accept(&mut self, mut delta: Delta) -> Delta {
        let metrics = &self.app.metrics;
        if !self.spec.timer.has_first_token() && delta.new_tokens > 0 {
            self.leg.guard.prefill_done();
            metrics.stage(
                Stage::UpstreamFirstToken,
                self.spec.timer.started().elapsed().as_secs_f64(),
            );
        }
        self.spec.timer.tokens(
            u64::from(delta.new_tokens),
            metrics.latency(self.spec.endpoint),
        );
        if self.migrations == 0 {
            self.prompt_tokens = delta.prompt_tokens;
            self.cached_tokens = delta.cached_tokens;
        }
        self.completion_tokens = self.tokens_before_leg + delta.completion_tokens;
        delta.completion_tokens = self.completion_tokens;
        delta.prompt_tokens = self.prompt_tokens;
        if delta.finish.is_some() {
            if self.leg.upstream.stopped_here() {
                // Our stop string ended it while the worker still generates: the armed abort stops it.
                self.done = true;
                self.record(200);
            } else {
                self.end();
            }
        }
        delta
    }

    fn can_migrate(&self, e: &UpstreamError) -> bool {
        matches!(e, UpstreamError::Disconnected { .. })
            && self.migrations < self.app.config.reliability.migration_limit
    }

    /// Continues on another worker from where the dead one stopped: the prompt plus every
    /// token already relayed, with the remaining budget.
    async fn migrate(&mut self, cause: &UpstreamError) -> Result<(), UpstreamError> {
        self.migrations += 1;
        let metrics = Arc::clone(&self.app.metrics);
        self.leg.guard.outcome(true);
        metrics.upstream_error(cause.metric_label());
        let budget = self.spec.params.max_new_tokens.unwrap_or(u32::MAX);
        let done_tokens = self.completion_tokens;
        if done_tokens >= budget {
            metrics.migrations.with_label_values(&["failed"]).inc();
            return Err(UpstreamError::Protocol {
                url: self.leg.guard.worker().url.clone(),
                reason: "worker died after the last token".into(),
            });
        }
        let mut params = self.spec.params.clone();
        params.max_new_tokens = Some(budget - done_tokens);
        params.min_new_tokens = params.min_new_tokens.map(|m| m.saturating_sub(done_tokens));
        let mut relayed = std::mem::take(&mut self.earlier_ids);
        relayed.extend_from_slice(self.leg.upstream.output_ids());
        let input: Vec<u32> = self.spec.prompt.iter().chain(&relayed).copied().collect();
        let rid = format!("{}-m{}", self.spec.rid, self.migrations);
        tracing::warn!(rid = %self.spec.rid, from = %self.leg.guard.worker().url, tokens = done_tokens, error = %cause, "worker failed mid-stream; continuing elsewhere");
        let req = LegRequest {
            input_ids: &input,
            params: &params,
            rid: &rid,
            session_key: self.spec.session_key.as_deref(),
        };
        match leg::open(&self.app, &req, &mut self.tried, &self.deadlines, true).await {
            Ok((leg, first)) => {
                // The old leg drops here: its load is released and its (dead) worker told to abort.
                self.leg = leg;
                self.earlier_ids = relayed;
                self.tokens_before_leg = done_tokens;
                self.pending = Some(first);
                metrics.migrations.with_label_values(&["continued"]).inc();
                Ok(())
            }
            Err(e) => {
                metrics.migrations.with_label_values(&["failed"]).inc();
                Err(match e {
                    GatewayError::Upstream(u) => u,
                    other => UpstreamError::Disconnected {
                        url: self.leg.guard.worker().url.clone(),
                        reason: format!("{cause}; no worker could continue: {other}"),
                    },
                })
            }
        }
    }

    /// Successful end: the worker finished, nothing to abort.
    fn end(&mut self) {
        if !self.done {
            self.leg.guard.outcome(false);
            self.leg.abort.disarm();
            self.done = true;
            self.record(200);
        }
    }

    /// Failed end: the worker may still be generating, so the abort stays armed.
    fn fail(&mut self, e: UpstreamError) -> UpstreamError {
        if !self.done {
            self.leg.guard.outcome(e.is_worker_fault());
            self.app.metrics.upstream_error(e.metric_label());
            self.done = true;
            self.record(e.status().as_u16());
        }
        e
    }

    fn record(&self, status: u16) {
        let outcome = Outcome {
            status,
            prompt_tokens: u64::from(self.prompt_tokens),
            completion_tokens: u64::from(self.completion_tokens),
            cached_tokens: u64::from(self.cached_tokens),
            predicted_cached: self.leg.guard.predicted_cached(),
        };
        self.app
            .metrics
            .request_ended(self.spec.endpoint, &self.spec.timer, outcome);
    }
}

/// Resolves once the shutdown grace period is over (never, if the sender is gone).
async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.done {
            // The client left before the end; the armed abort tells the worker (when `leg`
            // drops, after this), and what it generates until then is counted.
            self.app.metrics.client_aborts.inc();
            self.leg
                .upstream
                .count_leftover(self.app.metrics.tokens_after_client_left.clone());
            self.done = true;
            self.record(499);
        }
    }
}
