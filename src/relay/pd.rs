//! Prefill/decode disaggregation: a PD attempt sends the same request to a prefill and a decode
//! worker at once, with bootstrap fields that pair them. The decode worker's stream (or, with
//! `--whole-answers at-once`, its one response) is the answer; the prefill worker's response,
//! a stream or one object as the request asked, is read to its end (it ends once the KV was
//! handed over) for its `cached_tokens`. Either failing before the first token fails the
//! attempt.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;

use super::observe::Observer;
use super::Relay;
use crate::metrics::Stage;
use crate::protocol::sglang::Bootstrap;
use crate::stream::sse::SseParser;
use crate::upstream::UpstreamError;
use crate::workers::Worker;

/// Largest prefill response read (one token of output, but prompt logprobs when asked).
const MAX_PREFILL_BYTES: usize = 64 * 1024 * 1024;

/// How long one leg's outcome is awaited once the other's is known: after the decode leg
/// failed, a dead prefill worker is the cause to report (and to retry around), not the
/// decode's transfer error; after the decode's first token, the prefill's answer (which ends
/// with the KV hand-over) is due, but its cached count is not worth holding the client for.
const OTHER_LEG_WAIT: Duration = Duration::from_secs(1);

/// The prefill half of a pair: its worker and the bootstrap fields both legs carry.
pub struct PrefillTarget {
    pub worker: Arc<Worker>,
    pub bootstrap: Bootstrap,
}

/// What the prefill worker reported.
#[derive(Debug, Clone, Copy)]
pub struct Prefilled {
    pub cached_tokens: u64,
}

/// Sends `body` (already carrying the bootstrap fields) to `prefill` on `path` while `decode`
/// runs up to its first token; both must succeed. The prefill's outcome comes with it when it
/// is known (a prefill whose answer broke after the decode's first token no longer matters).
pub async fn paired<T>(
    relay: &Relay,
    prefill: &PrefillTarget,
    path: &'static str,
    body: Bytes,
    decode: impl Future<Output = Result<T, UpstreamError>>,
) -> Result<(T, Option<Prefilled>), UpstreamError> {
    let started = Instant::now();
    let prefilled = async {
        let done = send_prefill(relay, &prefill.worker, path, body).await;
        if done.is_ok() {
            relay
                .metrics
                .stage(Stage::Prefill, started.elapsed().as_secs_f64());
        }
        done
    };
    tokio::pin!(decode, prefilled);
    tokio::select! {
        first = &mut decode => match first {
            Ok(t) => match tokio::time::timeout(OTHER_LEG_WAIT, prefilled).await {
                Ok(Ok(p)) => Ok((t, Some(p))),
                Ok(Err(e)) => {
                    tracing::warn!(worker = %prefill.worker.url(), error = %e, "prefill answer failed after the decode's first token");
                    Ok((t, None))
                }
                Err(_) => Ok((t, None)),
            },
            Err(e) => match tokio::time::timeout(OTHER_LEG_WAIT, prefilled).await {
                Ok(Err(cause)) => Err(cause),
                _ => Err(e),
            },
        },
        p = &mut prefilled => {
            let p = p?;
            let t = decode.await?;
            Ok((t, Some(p)))
        }
    }
}

/// One prefill request, read to its end. Its refusals carry its URL, so the retry loop blames
/// (and avoids) the prefill worker, not the decode worker.
async fn send_prefill(
    relay: &Relay,
    worker: &Worker,
    path: &'static str,
    body: Bytes,
) -> Result<Prefilled, UpstreamError> {
    let url = worker.url();
    let resp = relay.client.post_json(&worker.origin, path, body).await?;
    let body = http_body_util::Limited::new(resp.into_body(), MAX_PREFILL_BYTES)
        .collect()
        .await
        .map_err(|e| UpstreamError::Disconnected {
            url: url.to_owned(),
            reason: e.to_string(),
        })?
        .to_bytes();
    let mut observer = Observer::default();
    if !body.starts_with(b"data:") {
        observer.whole(&body);
        return Ok(Prefilled {
            cached_tokens: observer.cached_tokens,
        });
    }
    let mut parser = SseParser::new(MAX_PREFILL_BYTES);
    parser.push(&body);
    let mut events = 0;
    while let Ok(Some(ev)) = parser.next_event() {
        if ev.is_done() {
            return Ok(Prefilled {
                cached_tokens: observer.cached_tokens,
            });
        }
        let refused = crate::protocol::sglang::error_event(&ev.data)
            .or_else(|| crate::protocol::sglang::status_abort(&ev.data));
        if let Some(e) = refused {
            return Err(UpstreamError::Status {
                url: url.to_owned(),
                status: axum::http::StatusCode::from_u16(e.status)
                    .unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
                message: e.message,
                retry_after: None,
            });
        }
        events += 1;
        observer.event(&ev.data);
    }
    Err(UpstreamError::Disconnected {
        url: url.to_owned(),
        reason: format!("the prefill stream ended without [DONE] after {events} events"),
    })
}
