//! Routes whose bodies we forward untouched (SGLang `/generate`, and OpenAI requests for
//! `--backend openai` or features the gateway leaves to the worker): the worker's bytes go to
//! the client as they arrive, while a light parse of each event feeds the latency metrics.
//! Retries, deadlines and the ending are the [`Exchange`]'s, as on the token-id path. Only HTTP
//! workers get these: a `grpc://` worker has no such route.

use crate::upstream::abort::Abort;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;

use super::exchange::{Exchange, Usage};
use super::observe::Observer;
use super::pd;
use super::retry::{self, Target, Tried};
use super::Relay;
use crate::error::GatewayError;
use crate::metrics::{Endpoint, Stage};
use crate::protocol::sglang::{LegRanks, Pairing};
use crate::routing::RouteRequest;
use crate::stream::sse::SseParser;
use crate::upstream::{first_event, Body, UpstreamError};
use crate::workers::WorkerId;

/// Largest non-streamed answer we buffer from a worker.
const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// Largest single SSE event we parse for metrics (the bytes themselves pass through regardless).
const MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

pub struct Forward<'a> {
    pub path: &'static str,
    pub body: Bytes,
    pub prompt_ids: &'a [u32],
    pub session_key: Option<&'a str>,
    pub rid: &'a str,
    /// How the worker's request is aborted.
    pub abort: Abort,
    pub endpoint: Endpoint,
    pub start: Instant,
}

pub async fn forward(relay: &Arc<Relay>, f: Forward<'_>) -> Result<Response, GatewayError> {
    // gRPC workers count as tried already: the retry loop picks among the HTTP ones.
    let mut tried = Tried::default();
    tried.workers = grpc_workers(relay, f.path)?;
    // The exchange exists before the request goes out, so a client that leaves while we wait
    // for the worker's headers is counted (and the worker's request aborted) like any other.
    let mut ex = Exchange::new(relay, f.endpoint, f.start);
    let target = Target {
        route: RouteRequest {
            prompt_ids: f.prompt_ids,
            session_key: f.session_key,
        },
        rid: f.rid,
        abort: f.abort,
        prefer: None,
        // A forwarded body says itself whether it streams.
        at_once: None,
    };
    let sent = retry::open(&mut ex, &target, &mut tried, |dest| {
        let client = relay.client.clone();
        let body = f.body.clone();
        async move {
            // Both legs get the body with the pair's bootstrap fields.
            let body = match &dest.prefill {
                Some(p) => {
                    let rid = (dest.rid != f.rid).then_some(dest.rid.as_str());
                    p.bootstrap.inject(&body, rid).map_or(body, Bytes::from)
                }
                None => body,
            };
            let decode_body = with_ranks(
                &body,
                LegRanks {
                    own: dest.worker.dp_rank(),
                    pairing: match &dest.prefill {
                        Some(p) => Pairing::DecodeLeg {
                            prefill: p.worker.dp_rank(),
                        },
                        None => Pairing::Alone,
                    },
                },
            );
            let decode = async {
                let resp = client
                    .post_json(&dest.worker.origin, f.path, decode_body)
                    .instrument(crate::traces::stage("upstream_connect"))
                    .await?;
                // A refusal SGLang streams after its 200 is still an error (and may be retried).
                first_event::read(resp, &dest.worker.origin.url).await
            };
            match &dest.prefill {
                None => decode.await,
                // The decode worker's bytes are the answer; they carry the prefill's cached
                // count already (SGLang's decode reports the transferred one).
                Some(p) => {
                    let prefill_ranks = LegRanks {
                        own: p.worker.dp_rank(),
                        pairing: Pairing::PrefillLeg,
                    };
                    let prefill_body = with_ranks(&body, prefill_ranks);
                    // Boxed, as in `leg`: only PD legs carry the pair's state.
                    let paired = pd::paired(relay, p, f.path, prefill_body, decode);
                    Ok(Box::pin(paired).await?.0)
                }
            }
        }
    })
    .await;
    let (resp, head) = match sent {
        Ok(opened) => (opened.response, opened.head),
        Err(e) => {
            ex.hand_back();
            return Err(e);
        }
    };
    relay
        .metrics
        .stage(Stage::UpstreamHeaders, f.start.elapsed().as_secs_f64());
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("application/json"));
    if !content_type.as_bytes().starts_with(b"text/event-stream") {
        let bytes = whole(&mut ex, resp.into_body()).await?;
        return Ok((status, [(header::CONTENT_TYPE, content_type)], bytes).into_response());
    }
    let deadlines = ex.deadlines();
    let shutdown = relay.shutdown.subscribe();
    let relayed = Relayed {
        head: Some(head).filter(|h| !h.is_empty()),
        upstream: resp.into_body(),
        ex,
        parser: SseParser::new(MAX_EVENT_BYTES),
        observer: Observer::default(),
    };
    let stream = async_stream::stream! {
        let mut relayed = relayed;
        while let Some(chunk) = relayed.next().await {
            yield chunk;
        }
    };
    // Watched, so the deadlines hold whether or not the client reads.
    let (body, slot) = super::pump::spawn(stream, deadlines, shutdown);
    let mut resp = (status, body).into_response();
    resp.extensions_mut().insert(slot);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    Ok(resp)
}

/// A non-streamed answer, read whole: it reaches the client at once, so its first token
/// arrives at the end. A failure here is still the caller's to render (nothing was sent).
async fn whole(ex: &mut Exchange, body: Body) -> Result<Bytes, GatewayError> {
    let read = async {
        Ok(http_body_util::Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await)
    };
    let read = ex.wait(read).await.and_then(|r| {
        r.map(|b| b.to_bytes())
            .map_err(|e| disconnected(ex, e.to_string()))
    });
    match read {
        Ok(bytes) => {
            let mut observer = Observer::default();
            observer.whole(&bytes);
            ex.usage = counts(&observer);
            ex.tokens(observer.completion_tokens);
            ex.succeed();
            Ok(bytes)
        }
        Err(e) => {
            ex.leg_failed(&e);
            ex.hand_back();
            Err(e.into())
        }
    }
}

/// A forwarded stream in flight; dropped unfinished = the client went away.
struct Relayed {
    /// What was read up to the first event while the leg was opened; sent first.
    head: Option<Bytes>,
    upstream: Body,
    ex: Exchange,
    parser: SseParser,
    observer: Observer,
}

impl Relayed {
    /// The next bytes for the client; `None` once the stream ended.
    async fn next(&mut self) -> Option<Bytes> {
        if self.ex.ended() {
            return None;
        }
        if let Some(head) = self.head.take() {
            return Some(self.observe(head));
        }
        let frame = self
            .ex
            .wait(async { Ok(self.upstream.frame().await) })
            .await
            .and_then(|f| {
                f.transpose()
                    .map_err(|e| disconnected(&self.ex, e.to_string()))
            });
        match frame {
            Ok(Some(frame)) => {
                let Ok(data) = frame.into_data() else {
                    return Some(Bytes::new());
                };
                Some(self.observe(data))
            }
            Ok(None) => {
                self.ex.succeed();
                None
            }
            // Told to the client as an SSE error event (no `[DONE]` follows); the worker's
            // request stays armed for abort.
            Err(e) => {
                self.ex.fail(&e);
                let mut out = Vec::new();
                super::format::error_event(&mut out, &GatewayError::Upstream(e));
                Some(Bytes::from(out))
            }
        }
    }

    /// Feeds bytes for the client through the metrics parser, and hands them back.
    fn observe(&mut self, data: Bytes) -> Bytes {
        self.parser.push(&data);
        while let Ok(Some(ev)) = self.parser.next_event() {
            let new = self.observer.event(&ev.data);
            self.ex.tokens(new);
        }
        // Kept current, so a client that leaves mid-stream is counted with what it got.
        self.ex.usage = counts(&self.observer);
        data
    }
}

/// The gRPC workers, which a forwarded body cannot go to; an error if that is every worker.
pub fn grpc_workers(relay: &Relay, route: &'static str) -> Result<Vec<WorkerId>, GatewayError> {
    let workers = relay.router.registry().snapshot();
    let grpc: Vec<WorkerId> = workers
        .iter()
        .filter(|w| w.origin.is_grpc())
        .map(|w| w.id)
        .collect();
    if !grpc.is_empty() && grpc.len() == workers.len() {
        return Err(GatewayError::NeedsHttpWorker { route });
    }
    Ok(grpc)
}

fn disconnected(ex: &Exchange, reason: String) -> UpstreamError {
    UpstreamError::Disconnected {
        url: ex.url().to_owned(),
        reason,
    }
}

fn counts(o: &Observer) -> Usage {
    Usage {
        prompt_tokens: o.prompt_tokens,
        // OpenAI streams without a usage chunk: one token per content-bearing chunk.
        completion_tokens: o.completion_tokens.max(o.chunks),
        cached_tokens: o.cached_tokens,
    }
}

/// The body for a data-parallel worker's rank unit: with its rank fields set (as sent when the
/// worker is routed whole, or when it is not a JSON object).
fn with_ranks(body: &Bytes, ranks: LegRanks) -> Bytes {
    if ranks.own.is_none() {
        return body.clone();
    }
    ranks.inject(body).map_or_else(|| body.clone(), Bytes::from)
}
