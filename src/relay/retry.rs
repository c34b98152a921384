//! The one retry loop, used by every path: pick → try → classify → back off → next worker.
//! A request goes to another worker only while nothing has reached the client and the error
//! says the first worker cannot run it (see `UpstreamError::started`), so nothing is run twice.
//!
//! With prefill/decode disaggregation a leg is a pair: the loop picks the decode worker (the
//! answer's) from the main pool and a prefill worker from the prefill pool, books both, and
//! hands the attempt both with fresh bootstrap fields. A failure is blamed on the worker it came
//! from; the other leg's abort goes out as it drops, so a failed pair is aborted on both sides.

use crate::upstream::abort::Abort;
use std::future::Future;
use std::sync::Arc;

use tracing::Instrument;

use super::exchange::{Exchange, Leg, Placement};
use super::pd::PrefillTarget;
use super::reliability::AtOnce;
use crate::error::GatewayError;
use crate::routing::{Pick, Policy, RouteRequest, Router};
use crate::upstream::UpstreamError;
use crate::workers::{Worker, WorkerId};

/// What the loop needs to know about the request.
pub struct Target<'a> {
    pub route: RouteRequest<'a>,
    /// The id the worker knows the request by.
    pub rid: &'a str,
    /// How the worker's request is aborted.
    pub abort: Abort,
    /// Workers to use while they can take it (a fan-out's later generations go where its
    /// first went, whose prompt is cached there); otherwise the policy picks.
    pub prefer: Option<Placement>,
    /// The answer is wanted at once (`--whole-answers`), where a worker can send it so.
    pub at_once: Option<AtOnce>,
}

/// Where one attempt goes: the worker whose answer the client gets, and in PD mode the prefill
/// worker paired with it.
pub struct Dest {
    pub worker: Arc<Worker>,
    pub prefill: Option<PrefillTarget>,
    /// The rid this attempt's workers know it by: the request's, except for a PD pair after the
    /// first (`r<n>-<rid>`), whose decode worker may be the last pair's and still hold the rid
    /// until our abort for it lands: the same rid would be refused as a duplicate (0.5.23) or
    /// killed by that abort, and so would any rid it prefixes (SGLang aborts by prefix).
    pub rid: String,
    /// The worker is asked for the whole answer in one response, when the target wants it at
    /// once (a PD pair's prefill worker too: the pair shares one request). Its first token is
    /// its last: see [`AtOnce`] for the limit on its wait.
    pub at_once: Option<AtOnce>,
}

/// Workers a request already failed on, per pool (kept across a restart, so a dead worker is
/// not picked again for the same request), and how many PD pairs it was sent to.
#[derive(Default)]
pub struct Tried {
    pub workers: Vec<WorkerId>,
    pub prefill: Vec<WorkerId>,
    pairs: u32,
}

/// Opens a leg on the best worker not yet tried: `attempt` sends the request and reads up to
/// the point where the caller can answer the client (the first token, or the headers). On
/// success the leg becomes the exchange's current one; a final failure is returned, and the
/// caller decides how the exchange ends.
pub async fn open<T, F, Fut>(
    ex: &mut Exchange,
    target: &Target<'_>,
    tried: &mut Tried,
    mut attempt: F,
) -> Result<T, GatewayError>
where
    F: FnMut(Dest) -> Fut,
    Fut: Future<Output = Result<T, UpstreamError>>,
{
    let relay = Arc::clone(ex.relay());
    let mut retries = 0u32;
    let mut last: Option<UpstreamError> = None;
    // Every candidate failed already: what the last one said is the real answer.
    let give_up = |e: crate::routing::RouteError, last: Option<UpstreamError>| {
        last.map_or_else(|| e.into(), GatewayError::from)
    };
    loop {
        let prefer = target.prefer;
        let picked = crate::traces::stage("route").in_scope(|| {
            let preferred = prefer.map(|p| p.worker);
            match take_preferred(&relay.router, &target.route, preferred, &tried.workers) {
                Some(p) => Ok(p),
                None => relay.router.pick(&target.route, &tried.workers),
            }
        });
        let (worker, pick) = match picked {
            Ok(p) => p,
            Err(e) => return Err(give_up(e, last)),
        };
        let prefill = match &relay.prefill {
            Some(pool) => match take_preferred(
                pool.router(),
                &target.route,
                prefer.and_then(|p| p.prefill),
                &tried.prefill,
            )
            .map_or_else(|| pool.pick(&target.route, &tried.prefill), Ok)
            {
                Ok((pw, ppick)) => Some((pool.bootstrap(&pw), pw, ppick)),
                Err(e) => return Err(give_up(e, last)),
            },
            None => None,
        };
        tried.workers.push(worker.id);
        let rid = match (&prefill, target.abort) {
            (Some(_), Abort::Rid) if tried.pairs > 0 => format!("r{}-{}", tried.pairs, target.rid),
            _ => target.rid.to_owned(),
        };
        tried.pairs += u32::from(prefill.is_some());
        let rids = target.abort.rids(&rid);
        let prompt_len = target.route.prompt_ids.len();
        // A decode worker of a pair computes no prompt: its booked prefill is nil.
        let decode_prompt = if prefill.is_some() { 0 } else { prompt_len };
        let mut leg = Leg::book(&relay, &worker, pick, decode_prompt, rids.clone());
        let mut prefill_leg = prefill
            .as_ref()
            .map(|(_, pw, ppick)| Leg::book(&relay, pw, *ppick, prompt_len, rids));
        ex.waiting_on(&worker.origin);
        let dest = Dest {
            at_once: target.at_once,
            worker: Arc::clone(&worker),
            prefill: prefill.map(|(bootstrap, pw, _)| PrefillTarget {
                worker: pw,
                bootstrap,
            }),
            rid,
        };
        let at_once = dest.at_once;
        let prefill_worker = dest.prefill.as_ref().map(|p| Arc::clone(&p.worker));
        // Boxed: with PD pairs and both wires the attempt future is large for a task's stack.
        // Boxed before it is wrapped in its span, so that only the pointer moves into the span.
        let attempt = Box::pin(attempt(dest)).instrument(crate::traces::upstream(worker.url()));
        match ex.wait_for(attempt, at_once).await {
            Ok(value) => {
                // The prefill worker's part is over once the decode has its first token.
                if let Some(mut p) = prefill_leg {
                    p.done();
                }
                ex.set_placement(Placement {
                    worker: worker.id,
                    prefill: prefill_worker.as_ref().map(|p| p.id),
                });
                ex.set_leg(leg);
                return Ok(value);
            }
            Err(e) => {
                let from_prefill = prefill_worker
                    .as_ref()
                    .filter(|pw| e.worker_url() == Some(pw.url()));
                match (from_prefill, prefill_leg.as_mut()) {
                    (Some(pw), Some(p)) => {
                        // The decode worker was fine: it may serve the next attempt.
                        p.refused(&e, &relay);
                        tried.workers.retain(|id| *id != worker.id);
                        tried.prefill.push(pw.id);
                    }
                    _ => leg.refused(&e, &relay),
                }
                if !e.may_retry() || retries >= relay.reliability.max_retries {
                    return Err(e.into());
                }
                retries += 1;
                relay.metrics.retries.inc();
                tracing::info!(rid = target.rid, worker = %worker.url(), error = %e, attempt = retries, "retrying on another worker");
                // The failed legs drop here: load released, abort sent if a worker may have started.
                drop(leg);
                drop(prefill_leg);
                last = Some(e);
                let wait = relay.reliability.backoff(retries);
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// The `preferred` worker of `router`'s pool, when it can take the request (available, its
/// breaker admitting, not failed on); `None` leaves the pick to the policy.
fn take_preferred(
    router: &Router,
    route: &RouteRequest<'_>,
    preferred: Option<WorkerId>,
    exclude: &[WorkerId],
) -> Option<(Arc<Worker>, Pick)> {
    let id = preferred?;
    let available = router.registry().available();
    crate::routing::select(&Only(id), route, &available, exclude).ok()
}

/// A "policy" that takes one given worker, when it is among the candidates.
struct Only(WorkerId);

impl Policy for Only {
    fn pick(&self, _req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<Pick> {
        workers.iter().position(|w| w.id == self.0).map(Pick::at)
    }
}
