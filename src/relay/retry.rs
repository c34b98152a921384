//! The one retry loop, used by every path: pick → try → classify → back off → next worker.
//! A request goes to another worker only while nothing has reached the client and the error
//! says the first worker cannot run it (see `UpstreamError::started`), so nothing is run twice.

use crate::upstream::abort::Abort;
use std::future::Future;
use std::sync::Arc;

use tracing::Instrument;

use super::exchange::{Exchange, Leg};
use crate::error::GatewayError;
use crate::routing::RouteRequest;
use crate::upstream::UpstreamError;
use crate::workers::{Worker, WorkerId};

/// What the loop needs to know about the request.
pub struct Target<'a> {
    pub route: RouteRequest<'a>,
    /// The id the worker knows the request by.
    pub rid: &'a str,
    /// How the worker's request is aborted.
    pub abort: Abort,
}

/// Opens a leg on the best worker not in `tried`: `attempt` sends the request and reads up to
/// the point where the caller can answer the client (the first token, or the headers). On
/// success the leg becomes the exchange's current one; a final failure is returned, and the
/// caller decides how the exchange ends.
pub async fn open<T, F, Fut>(
    ex: &mut Exchange,
    target: &Target<'_>,
    tried: &mut Vec<WorkerId>,
    mut attempt: F,
) -> Result<T, GatewayError>
where
    F: FnMut(Arc<Worker>) -> Fut,
    Fut: Future<Output = Result<T, UpstreamError>>,
{
    let relay = Arc::clone(ex.relay());
    let mut retries = 0u32;
    let mut last: Option<UpstreamError> = None;
    loop {
        let picked =
            crate::traces::stage("route").in_scope(|| relay.router.pick(&target.route, tried));
        let (worker, pick) = match picked {
            Ok(p) => p,
            // Every candidate failed already: what the last one said is the real answer.
            Err(e) => return Err(last.map_or_else(|| e.into(), GatewayError::from)),
        };
        tried.push(worker.id);
        let mut leg = Leg::book(
            &relay,
            &worker,
            pick,
            target.route.prompt_ids.len(),
            target.abort.rids(target.rid),
        );
        ex.waiting_on(&worker.origin);
        let attempt =
            attempt(Arc::clone(&worker)).instrument(crate::traces::upstream(worker.url()));
        match ex.wait(attempt).await {
            Ok(value) => {
                ex.set_leg(leg);
                return Ok(value);
            }
            Err(e) => {
                leg.refused(&e, &relay);
                if !e.may_retry() || retries >= relay.reliability.max_retries {
                    return Err(e.into());
                }
                retries += 1;
                relay.metrics.retries.inc();
                tracing::info!(rid = target.rid, worker = %worker.url(), error = %e, attempt = retries, "retrying on another worker");
                // The failed leg drops here: load released, abort sent if the worker may have started.
                drop(leg);
                last = Some(e);
                let wait = relay.reliability.backoff(retries);
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}
