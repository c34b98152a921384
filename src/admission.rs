//! Admission control on inference routes, as a tower layer: a per-key token bucket
//! (`--rate-limit-per-key`), then at most `--max-concurrent-requests` requests in progress with
//! a bounded FIFO wait queue (`--queue-size`, `--queue-timeout-secs`). Refusals are 429s with
//! `Retry-After`, counted in `switchboard_requests_total{status="429"}`.
//!
//! A slot is held until the response *body* ends or is dropped, not when the handler returns
//! its headers: a stream occupies a worker for its whole length, so releasing the slot at the
//! headers would let unbounded streams pile up behind the limit. A stream's watch (`relay::pump`)
//! frees it when it ends the stream of a client that stopped reading, so such a client cannot
//! keep it.

mod rate_limit;
mod slot;

pub use slot::SlotRelease;

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request};
use axum::response::{IntoResponse, Response};
use clap::Args;
use hyper::body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

use crate::error::GatewayError;
use crate::metrics::{Endpoint, Metrics};
use rate_limit::RateLimiter;

#[derive(Debug, Clone, Args)]
pub struct AdmissionConfig {
    /// Inference requests (chat, completions, /generate) in progress at once, streams counted
    /// until their last byte; 0 = unlimited.
    #[arg(long, default_value_t = 0)]
    pub max_concurrent_requests: u32,
    /// Requests that may wait for a slot (FIFO) when all are busy; more get a 429 at once.
    /// Default: 4 × --max-concurrent-requests.
    #[arg(long)]
    pub queue_size: Option<usize>,
    /// Longest wait in the queue before a 429, in seconds (0 = wait until a slot frees).
    #[arg(long, default_value_t = 30)]
    pub queue_timeout_secs: u64,
    /// Sustained requests per second allowed per client address (IPv6: per /64); the Bearer
    /// token is not the key. 0 = no rate limit.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative_rate)]
    pub rate_limit_per_key: f64,
    /// Requests a client may send at once before the rate applies. Default: one second's worth
    /// (at least 1).
    #[arg(long)]
    pub rate_limit_burst: Option<u32>,
}

impl AdmissionConfig {
    /// The queue length in force: explicit, else 4 × the slots (see `queue_size`'s help).
    pub fn queue_len(&self) -> usize {
        self.queue_size
            .unwrap_or_else(|| (self.max_concurrent_requests as usize).saturating_mul(4))
    }
}

fn non_negative_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        _ => Err(format!("`{s}` is not a finite, non-negative number")),
    }
}

/// What `Retry-After` says when the slots and queue are full: no better estimate exists
/// (requests last from milliseconds to minutes), and clients add their own backoff.
const OVERLOAD_RETRY_AFTER_SECS: u64 = 1;

/// Shared by every clone of the service (tower clones a service per request).
struct Shared {
    slots: Option<Arc<Semaphore>>,
    queue_len: usize,
    waiting: AtomicUsize,
    queue_timeout: Option<Duration>,
    limiter: Option<RateLimiter>,
    metrics: Arc<Metrics>,
}

#[derive(Clone)]
pub struct AdmissionLayer {
    shared: Arc<Shared>,
}

impl AdmissionLayer {
    /// `None` when nothing is limited, so the default configuration adds no layer at all.
    pub fn new(config: &AdmissionConfig, metrics: Arc<Metrics>) -> Option<AdmissionLayer> {
        let slots = (config.max_concurrent_requests > 0)
            .then(|| Arc::new(Semaphore::new(config.max_concurrent_requests as usize)));
        let limiter = (config.rate_limit_per_key > 0.0)
            .then(|| RateLimiter::new(config.rate_limit_per_key, config.rate_limit_burst));
        if slots.is_none() && limiter.is_none() {
            return None;
        }
        Some(AdmissionLayer {
            shared: Arc::new(Shared {
                slots,
                queue_len: config.queue_len(),
                waiting: AtomicUsize::new(0),
                queue_timeout: (config.queue_timeout_secs > 0)
                    .then(|| Duration::from_secs(config.queue_timeout_secs)),
                limiter,
                metrics,
            }),
        })
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = Admission<S>;

    fn layer(&self, inner: S) -> Admission<S> {
        Admission {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

#[derive(Clone)]
pub struct Admission<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Service<Request> for Admission<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // The clone that was polled ready serves this request; a fresh clone stays behind.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let endpoint = endpoint(req.uri().path());
            if let Some(limiter) = &shared.limiter {
                if let Err(retry_after_secs) = limiter.check(&client_key(&req)) {
                    let e = GatewayError::TooManyRequests {
                        reason: "rate limit reached for this client address; slow down".into(),
                        code: "rate_limit_exceeded",
                        retry_after_secs,
                    };
                    return Ok(refuse(&shared, endpoint, e));
                }
            }
            let permit = match shared.admit().await {
                Ok(p) => p,
                Err(e) => return Ok(refuse(&shared, endpoint, e)),
            };
            let resp = inner.call(req).await?;
            Ok(match permit {
                Some(permit) => {
                    // A stream's watch may free the slot before its body ends (`SlotRelease`).
                    let slot = resp
                        .extensions()
                        .get::<SlotRelease>()
                        .cloned()
                        .unwrap_or_default();
                    slot.hold(permit);
                    resp.map(|inner| Body::new(SlotBody { inner, slot }))
                }
                None => resp,
            })
        })
    }
}

impl Shared {
    /// A slot (`None` when concurrency is unlimited), after waiting in the queue if need be.
    async fn admit(&self) -> Result<Option<OwnedSemaphorePermit>, GatewayError> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        // tokio's semaphore is fair: while anyone waits, `try_acquire` fails, so a newcomer
        // cannot overtake the queue.
        if let Ok(permit) = Arc::clone(slots).try_acquire_owned() {
            return Ok(Some(permit));
        }
        let joined = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w < self.queue_len).then_some(w + 1)
            });
        if joined.is_err() {
            return Err(overloaded(
                format!(
                    "the gateway is at its limit of concurrent requests and its wait queue ({}) is full; retry later",
                    self.queue_len
                ),
                "queue_full",
            ));
        }
        // Leaves the queue however the wait ends, the client hanging up included.
        let _in_queue = LeaveQueue(&self.waiting);
        let acquire = Arc::clone(slots).acquire_owned();
        let acquired = match self.queue_timeout {
            Some(limit) => tokio::time::timeout(limit, acquire).await.ok(),
            None => Some(acquire.await),
        };
        match acquired {
            Some(Ok(permit)) => Ok(Some(permit)),
            // The semaphore is never closed; were it, refusing is the safe answer.
            Some(Err(_)) | None => Err(overloaded(
                format!(
                    "no request slot freed within {} s; retry later",
                    self.queue_timeout.map_or(0, |d| d.as_secs())
                ),
                "queue_timeout",
            )),
        }
    }
}

struct LeaveQueue<'a>(&'a AtomicUsize);

impl Drop for LeaveQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn overloaded(reason: String, code: &'static str) -> GatewayError {
    GatewayError::TooManyRequests {
        reason,
        code,
        retry_after_secs: OVERLOAD_RETRY_AFTER_SECS,
    }
}

fn refuse(shared: &Shared, endpoint: Option<Endpoint>, e: GatewayError) -> Response {
    if let Some(endpoint) = endpoint {
        shared.metrics.request_done(endpoint, e.status().as_u16());
    }
    e.into_response()
}

fn endpoint(path: &str) -> Option<Endpoint> {
    match path {
        "/v1/chat/completions" => Some(Endpoint::Chat),
        "/v1/completions" => Some(Endpoint::Completions),
        "/generate" => Some(Endpoint::Generate),
        "/v1/messages" => Some(Endpoint::Messages),
        "/v1/responses" => Some(Endpoint::Responses),
        _ => None,
    }
}

/// Whose bucket a request draws from: the client's address (`ConnectInfo`), never the Bearer
/// token. Without `--api-key` nothing validates the token, so a fresh token per request would be
/// a fresh bucket; with it, every client sends the same one key, so keying by it would make one
/// global bucket that a single client can drain for everyone. An IPv6 client is keyed by its
/// /64, which one host usually owns whole. `X-Forwarded-For` is not trusted either (any client
/// could pick a fresh bucket per request); without a recorded address all share one bucket.
fn client_key(req: &Request) -> Vec<u8> {
    match req
        .extensions()
        .get::<ConnectInfo<crate::net::ClientAddr>>()
    {
        Some(ConnectInfo(crate::net::ClientAddr(addr))) => address_key(addr.ip()),
        None => b"anonymous".to_vec(),
    }
}

fn address_key(ip: IpAddr) -> Vec<u8> {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets()[..8].to_vec(),
    }
}

/// A response body that holds a concurrency slot until its last frame (or until dropped,
/// e.g. when the client disconnects mid-stream), or until its stream's watch releases it.
struct SlotBody {
    inner: Body,
    slot: SlotRelease,
}

impl Drop for SlotBody {
    fn drop(&mut self) {
        self.slot.release();
    }
}

impl hyper::body::Body for SlotBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            // Free the slot now rather than whenever the server gets round to dropping us.
            self.slot.release();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_defaults_to_four_times_the_slots() {
        let mut c = AdmissionConfig {
            max_concurrent_requests: 3,
            queue_size: None,
            queue_timeout_secs: 30,
            rate_limit_per_key: 0.0,
            rate_limit_burst: None,
        };
        assert_eq!(c.queue_len(), 12);
        c.queue_size = Some(0);
        assert_eq!(c.queue_len(), 0);
    }

    fn from(addr: &str, token: &str) -> Request {
        let addr: std::net::SocketAddr = addr.parse().unwrap();
        let mut req = Request::new(Body::empty());
        req.headers_mut().insert(
            axum::http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        req.extensions_mut()
            .insert(ConnectInfo(crate::net::ClientAddr(addr)));
        req
    }

    #[test]
    fn keyed_by_address_not_by_token() {
        let a = client_key(&from("10.0.0.1:1000", "t1"));
        assert_eq!(a, client_key(&from("10.0.0.1:2000", "t2")));
        assert_ne!(a, client_key(&from("10.0.0.2:1000", "t1")));
        // The same host over IPv4 and v4-mapped IPv6 is one client.
        assert_eq!(a, client_key(&from("[::ffff:10.0.0.1]:1", "t3")));
        // One IPv6 /64 is one client; another /64 is another.
        let v6 = client_key(&from("[2001:db8:0:1::1]:1", "t1"));
        assert_eq!(v6, client_key(&from("[2001:db8:0:1:ffff::9]:1", "t1")));
        assert_ne!(v6, client_key(&from("[2001:db8:0:2::1]:1", "t1")));
        let mut anonymous = from("10.0.0.1:1", "t1");
        anonymous.extensions_mut().clear();
        assert_eq!(client_key(&anonymous), b"anonymous");
    }

    #[test]
    fn rate_must_be_finite_and_non_negative() {
        assert_eq!(non_negative_rate("2.5"), Ok(2.5));
        for bad in ["-1", "NaN", "inf", "x"] {
            assert!(non_negative_rate(bad).is_err(), "{bad}");
        }
    }
}
