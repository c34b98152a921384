//! Routes whose bodies we forward untouched (SGLang `/generate`, and OpenAI requests for
//! `--backend openai` or features the gateway leaves to the worker): the worker's bytes go to
//! the client as they arrive, while a light parse of each event feeds the latency metrics.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde::Deserialize;

use crate::error::GatewayError;
use crate::metrics::{Endpoint, Metrics, Outcome, RequestTimer, Stage};
use crate::relay::reliability::Deadlines;
use crate::stream::sse::SseParser;
use crate::upstream::abort::AbortOnDrop;
use crate::upstream::{Client, UpstreamError};
use crate::workers::LoadGuard;

/// Largest non-streamed answer we buffer from a worker.
const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

pub struct Forward {
    pub client: Client,
    pub guard: LoadGuard,
    /// Set when the worker understands `/abort_request` for this rid.
    pub abort: Option<AbortOnDrop>,
    pub path: &'static str,
    pub body: Bytes,
    pub endpoint: Endpoint,
    pub metrics: Arc<Metrics>,
    pub timer: RequestTimer,
    pub deadlines: Deadlines,
}

pub async fn forward(f: Forward) -> Result<Response, GatewayError> {
    let Forward {
        deadlines,
        client,
        guard,
        abort,
        path,
        body,
        endpoint,
        metrics,
        timer,
    } = f;
    // The watch exists before the request goes out, so a client that leaves while we wait for
    // the worker's headers is counted (and the worker's request aborted) like any other.
    let mut watch = Watch {
        guard,
        abort,
        timer,
        metrics,
        endpoint,
        observer: Observer::default(),
        deadlines,
        done: false,
    };
    let url = watch.guard.worker().url.clone();
    let send = client.post_json(watch.guard.worker(), path, body);
    let sent = match watch.deadlines.next_wait(false) {
        (Some(limit), what) => tokio::time::timeout(limit, send)
            .await
            .unwrap_or_else(|_| Err(UpstreamError::Timeout { url, stage: what })),
        (None, _) => send.await,
    };
    let resp = match sent {
        Ok(r) => r,
        Err(e) => return Err(watch.hand_back(e)),
    };
    watch.metrics.stage(
        Stage::UpstreamHeaders,
        watch.timer.started().elapsed().as_secs_f64(),
    );
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("application/json"));
    let streaming = content_type.as_bytes().starts_with(b"text/event-stream");
    if !streaming {
        let collected = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await;
        let bytes = match collected {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                let url = watch.guard.worker().url.clone();
                return Err(watch.hand_back(UpstreamError::Disconnected {
                    url,
                    reason: e.to_string(),
                }));
            }
        };
        watch.observer.whole(&bytes);
        // A whole answer reaches the client at once: its first token arrives at the end.
        let n = watch.observer.completion_tokens;
        watch.tokens(n);
        watch.finish(status.as_u16());
        return Ok((status, [(header::CONTENT_TYPE, content_type)], bytes).into_response());
    }
    let upstream = resp.into_body();
    let stream = futures_util::stream::unfold(
        Some((upstream, watch, SseParser::new(64 * 1024 * 1024))),
        |st| async move {
            let (mut upstream, mut watch, mut parser) = st?;
            let (limit, what) = watch.deadlines.next_wait(watch.timer.has_first_token());
            let frame = match limit {
                Some(l) => match tokio::time::timeout(l, upstream.frame()).await {
                    Ok(f) => f,
                    Err(_) => {
                        let url = watch.guard.worker().url.clone();
                        return Some((
                            Ok::<Bytes, std::convert::Infallible>(
                                watch.fail(UpstreamError::Timeout { url, stage: what }),
                            ),
                            None,
                        ));
                    }
                },
                None => upstream.frame().await,
            };
            match frame {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        return Some((Ok(Bytes::new()), Some((upstream, watch, parser))));
                    };
                    parser.push(&data);
                    while let Ok(Some(ev)) = parser.next_event() {
                        let new = watch.observer.event(&ev.data);
                        watch.tokens(new);
                    }
                    Some((Ok(data), Some((upstream, watch, parser))))
                }
                Some(Err(e)) => {
                    let url = watch.guard.worker().url.clone();
                    let err = UpstreamError::Disconnected {
                        url,
                        reason: e.to_string(),
                    };
                    Some((Ok(watch.fail(err)), None))
                }
                None => {
                    watch.finish(200);
                    None
                }
            }
        },
    );
    let mut resp = (status, Body::from_stream(stream)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    Ok(resp)
}

/// Bookkeeping for one forwarded response; dropped unfinished = the client went away.
struct Watch {
    guard: LoadGuard,
    abort: Option<AbortOnDrop>,
    timer: RequestTimer,
    metrics: Arc<Metrics>,
    endpoint: Endpoint,
    observer: Observer,
    deadlines: Deadlines,
    done: bool,
}

impl Watch {
    /// A failure before any byte reached the client, returned to the caller (which counts it
    /// and may retry): the worker's request is aborted unless it provably never started.
    fn hand_back(&mut self, e: UpstreamError) -> GatewayError {
        self.guard.outcome(e.is_worker_fault());
        if crate::relay::generation::leg::not_started(&e) {
            if let Some(a) = self.abort.as_mut() {
                a.disarm();
            }
        }
        self.metrics.upstream_error(e.metric_label());
        self.done = true;
        e.into()
    }

    /// Ends a stream that broke or timed out: counted, and told to the client as an SSE error
    /// event (no `[DONE]` follows). The worker's request stays armed for abort.
    fn fail(&mut self, err: UpstreamError) -> Bytes {
        self.metrics.upstream_error(err.metric_label());
        self.finish(err.status().as_u16());
        let mut out = Vec::new();
        super::format::error_event(&mut out, &GatewayError::Upstream(err));
        Bytes::from(out)
    }

    fn tokens(&mut self, n: u64) {
        if n > 0 && !self.timer.has_first_token() {
            self.guard.prefill_done();
            self.metrics.stage(
                Stage::UpstreamFirstToken,
                self.timer.started().elapsed().as_secs_f64(),
            );
        }
        self.timer.tokens(n, self.metrics.latency(self.endpoint));
    }

    fn finish(&mut self, status: u16) {
        if self.done {
            return;
        }
        self.done = true;
        if status != 499 {
            self.guard.outcome(status >= 500 && status != 503);
        }
        if status < 300 {
            if let Some(a) = self.abort.as_mut() {
                a.disarm();
            }
        }
        let outcome = Outcome {
            status,
            prompt_tokens: self.observer.prompt_tokens,
            completion_tokens: self.observer.completion_tokens.max(self.observer.chunks),
            cached_tokens: self.observer.cached_tokens,
            predicted_cached: self.guard.predicted_cached(),
        };
        self.metrics
            .request_ended(self.endpoint, &self.timer, outcome);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.done {
            self.metrics.client_aborts.inc();
            self.finish(499);
        }
    }
}

/// Reads token counts out of SGLang native chunks and OpenAI chunks alike.
#[derive(Default)]
struct Observer {
    completion_tokens: u64,
    prompt_tokens: u64,
    cached_tokens: u64,
    /// Content-bearing chunks, for OpenAI streams without a usage chunk.
    chunks: u64,
}

#[derive(Deserialize)]
struct AnyChunk<'a> {
    #[serde(default)]
    meta_info: Option<Meta>,
    #[serde(default)]
    usage: Option<UsageCounts>,
    #[serde(borrow, default)]
    choices: Option<Vec<ChoiceView<'a>>>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(Deserialize)]
struct UsageCounts {
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<CachedDetails>,
}

#[derive(Deserialize)]
struct CachedDetails {
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(Deserialize)]
struct ChoiceView<'a> {
    #[serde(borrow, default)]
    text: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<DeltaView<'a>>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow, default)]
    content: Option<std::borrow::Cow<'a, str>>,
}

impl Observer {
    /// New tokens this event carried.
    fn event(&mut self, data: &[u8]) -> u64 {
        let Ok(chunk) = serde_json::from_slice::<AnyChunk>(data) else {
            return 0;
        };
        self.usage(&chunk);
        if let Some(meta) = chunk.meta_info {
            let new = meta
                .completion_tokens
                .saturating_sub(self.completion_tokens);
            self.completion_tokens = self.completion_tokens.max(meta.completion_tokens);
            self.prompt_tokens = meta.prompt_tokens;
            self.cached_tokens = meta.cached_tokens;
            return new;
        }
        let has_text = chunk.choices.iter().flatten().any(|c| {
            c.text.as_deref().is_some_and(|t| !t.is_empty())
                || c.delta
                    .as_ref()
                    .and_then(|d| d.content.as_deref())
                    .is_some_and(|t| !t.is_empty())
        });
        if has_text {
            self.chunks += 1;
        }
        u64::from(has_text)
    }

    fn whole(&mut self, body: &[u8]) {
        if let Ok(chunk) = serde_json::from_slice::<AnyChunk>(body) {
            self.usage(&chunk);
            if let Some(meta) = chunk.meta_info {
                self.completion_tokens = meta.completion_tokens;
                self.prompt_tokens = meta.prompt_tokens;
                self.cached_tokens = meta.cached_tokens;
            }
        }
    }

    fn usage(&mut self, chunk: &AnyChunk) {
        if let Some(u) = &chunk.usage {
            self.completion_tokens = u.completion_tokens;
            self.prompt_tokens = u.prompt_tokens;
            self.cached_tokens = u
                .prompt_tokens_details
                .as_ref()
                .map_or(0, |d| d.cached_tokens);
        }
    }
}
