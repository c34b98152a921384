//! One leg of a generation: the part served by one worker. Opening a leg routes the request,
//! connects, and waits for the worker's first chunk, retrying on other workers while the
//! worker provably did not start generating (nothing has reached the client yet).

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use crate::error::GatewayError;
use crate::metrics::Stage;
use crate::protocol::sglang::SamplingParams;
use crate::relay::reliability::Deadlines;
use crate::routing::RouteRequest;
use crate::server::handlers::dispatch;
use crate::server::AppState;
use crate::upstream::abort::AbortOnDrop;
use crate::upstream::generate::{self, Delta, GenerateStream};
use crate::upstream::UpstreamError;
use crate::workers::{LoadGuard, WorkerId};

pub struct Leg {
    pub upstream: GenerateStream,
    pub guard: LoadGuard,
    pub abort: AbortOnDrop,
}

pub struct LegRequest<'a> {
    pub input_ids: &'a [u32],
    pub params: &'a SamplingParams,
    pub rid: &'a str,
    pub session_key: Option<&'a str>,
}

/// Whether the worker certainly did not start this generation, so running it elsewhere cannot
/// run it twice.
pub fn not_started(e: &UpstreamError) -> bool {
    match e {
        UpstreamError::Connect { .. } => true,
        UpstreamError::Status { status, .. } => status.as_u16() == 503 || status.as_u16() == 429,
        UpstreamError::Aborted {
            status: Some(s), ..
        } => *s == 503 || *s == 429,
        _ => false,
    }
}

/// Whether the request may be sent to another worker: it provably did not start, or the
/// connection broke before any answer. In the latter case the first worker is told to abort
/// the rid (and an OpenAI-compatible worker stops when its connection closes), so the
/// generation still runs only once.
pub fn retryable(e: &UpstreamError) -> bool {
    not_started(e) || matches!(e, UpstreamError::NoResponse { .. })
}

/// Opens a leg on the best worker not in `tried`, returning it with its first chunk.
pub async fn open(
    app: &Arc<AppState>,
    req: &LegRequest<'_>,
    tried: &mut Vec<WorkerId>,
    deadlines: &Deadlines,
    first_token_seen: bool,
) -> Result<(Leg, Delta), GatewayError> {
    let cfg = &app.config.reliability;
    let mut attempt = 0u32;
    loop {
        let route = RouteRequest {
            prompt_ids: req.input_ids,
            session_key: req.session_key,
        };
        let (worker, pick) = match dispatch::pick(app, &route, tried) {
            Ok(p) => p,
            // Every candidate failed already: say what the last one did rather than "none available".
            Err(e) => return Err(e),
        };
        tried.push(worker.id);
        let uncached = req.input_ids.len().saturating_sub(pick.predicted_cached) as u64;
        let mut guard =
            LoadGuard::book(Arc::clone(&worker), uncached).with_prediction(pick.predicted_cached);
        let mut abort =
            AbortOnDrop::new(app.client.clone(), Arc::clone(&worker), req.rid.to_owned());
        let started = std::time::Instant::now();
        let first = async {
            let mut up = generate::start(
                &app.client,
                Arc::clone(&worker),
                Arc::clone(&app.tokenizer),
                req.input_ids,
                req.params,
                req.rid,
            )
            .await?;
            app.metrics
                .stage(Stage::UpstreamHeaders, started.elapsed().as_secs_f64());
            match up.next().await? {
                Some(delta) => Ok((up, delta)),
                None => Err(UpstreamError::Protocol {
                    url: worker.url.clone(),
                    reason: "stream ended before any output".into(),
                }),
            }
        };
        let (limit, what) = deadlines.next_wait(first_token_seen);
        let result = match limit {
            Some(l) => tokio::time::timeout(l, first).await.unwrap_or_else(|_| {
                Err(UpstreamError::Timeout {
                    url: worker.url.clone(),
                    stage: what,
                })
            }),
            None => first.await,
        };
        match result {
            Ok((upstream, delta)) => {
                return Ok((
                    Leg {
                        upstream,
                        guard,
                        abort,
                    },
                    delta,
                ))
            }
            Err(e) => {
                guard.outcome(e.is_worker_fault());
                app.metrics.upstream_error(e.metric_label());
                let retry = retryable(&e);
                if not_started(&e) {
                    abort.disarm(); // in doubt, the armed abort goes out when `abort` drops
                }
                if !retry {
                    guard.prefill_done();
                }
                if !retry || attempt >= cfg.max_retries {
                    return Err(e.into());
                }
                attempt += 1;
                app.metrics.retries.inc();
                tracing::info!(rid = req.rid, worker = %worker.url, error = %e, attempt, "retrying on another worker");
                // Exponential backoff with full jitter, so retries from many clients spread out.
                let cap = cfg.retry_backoff_ms.saturating_mul(1 << attempt.min(10));
                if cap > 0 {
                    let wait = rand::rng().random_range(0..=cap);
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
            }
        }
    }
}
