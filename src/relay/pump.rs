//! A streamed response read by the client's connection itself: each time the server can take
//! more for the client it polls the stream, which reads the worker's next chunk in the same
//! task, so a chunk crosses no task of its own between the worker's connection and the
//! client's (under load every hand-off waits behind every task already woken: a burst of other
//! streams' chunks).
//!
//! A client that stops reading stops those polls; a small watch task per stream sees it. It
//! gives the client the time a worker would get for its next chunk (the idle gap, or what is
//! left of the total time), and after the shutdown grace period 50 ms: a client that takes
//! nothing for that long is treated as gone. Its stream is dropped (the exchange ends as a 499,
//! the worker is told to abort, its load booking released) and its admission slot freed, though
//! the socket stays open with unread bytes in it. What it costs meanwhile is bounded by the
//! server's write buffer. The client leaving drops the body, and with it the stream, at once.
//!
//! Per stream: one watch task, asleep but for one wake-up per idle gap; per chunk, an
//! uncontended lock and a clock read.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use super::exchange::stopped;
use super::reliability::Deadlines;
use crate::admission::SlotRelease;

/// Most bytes gathered into one chunk for the client (more wait for its next poll).
const GATHER_BYTES: usize = 16 * 1024;

/// After the shutdown grace period, how often the watch looks for a client that is behind.
const STOPPING_LOOK: Duration = Duration::from_millis(50);

type Chunks = Pin<Box<dyn Stream<Item = Bytes> + Send>>;

/// What the body and the watch share.
struct Relay {
    /// `None` once the stream ended or was ended.
    chunks: Option<Chunks>,
    /// Set when a chunk went to the server and the server has not asked for the next yet:
    /// since when the client is (at least momentarily) behind.
    behind_since: Option<Instant>,
}

/// The body that reads `chunks` as the client takes them, and the handle through which the
/// watch frees the request's admission slot when it ends a stream (to be put in the
/// response's extensions).
pub fn spawn<S>(
    chunks: S,
    deadlines: Deadlines,
    shutdown: watch::Receiver<bool>,
) -> (Body, SlotRelease)
where
    S: Stream<Item = Bytes> + Send + 'static,
{
    let relay = Arc::new(Mutex::new(Relay {
        chunks: Some(Box::pin(chunks)),
        behind_since: None,
    }));
    let slot = SlotRelease::default();
    let (ended, watching) = oneshot::channel();
    // In the request's span: its logs name the request, and its exported span ends with the stream.
    let span = tracing::Span::current();
    let watch = watch_client(
        Arc::clone(&relay),
        deadlines,
        shutdown,
        slot.clone(),
        watching,
    );
    tokio::spawn(watch.instrument(span.clone()));
    let body = Reading {
        relay,
        span,
        ended: Some(ended),
    };
    (Body::from_stream(body), slot)
}

/// The response body: the stream, polled by the client's connection.
struct Reading {
    relay: Arc<Mutex<Relay>>,
    span: tracing::Span,
    /// Dropped when the stream ends: the watch's cue to stop.
    ended: Option<oneshot::Sender<()>>,
}

impl Stream for Reading {
    type Item = Result<Bytes, Infallible>;

    /// The next chunk, with every chunk that is ready after it (up to [`GATHER_BYTES`]): when
    /// the gateway is behind its worker, one read from the worker holds several tokens, and
    /// each would otherwise be a write to the client of its own (a `writev` each, the largest
    /// cost of a stream). Nothing waits for a chunk that is not ready.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let _entered = this.span.enter();
        let mut relay = lock(&this.relay);
        relay.behind_since = None;
        let mut out = Gathered::default();
        while out.len() < GATHER_BYTES {
            let polled = match relay.chunks.as_mut() {
                Some(chunks) => chunks.as_mut().poll_next(cx),
                None => Poll::Ready(None),
            };
            match polled {
                Poll::Ready(Some(chunk)) => out.push(chunk),
                Poll::Ready(None) => {
                    drop(relay);
                    end(&this.relay);
                    this.ended = None;
                    return Poll::Ready(out.take().map(Ok));
                }
                Poll::Pending => break,
            }
        }
        match out.take() {
            Some(chunk) => {
                relay.behind_since = Some(Instant::now());
                Poll::Ready(Some(Ok(chunk)))
            }
            None => Poll::Pending,
        }
    }
}

/// Chunks read in one poll, as one (copied only when there is more than one).
#[derive(Default)]
struct Gathered {
    first: Option<Bytes>,
    more: Option<BytesMut>,
}

impl Gathered {
    fn push(&mut self, chunk: Bytes) {
        match (&mut self.more, &self.first) {
            (Some(more), _) => more.extend_from_slice(&chunk),
            (None, Some(first)) => {
                let mut more = BytesMut::with_capacity(first.len() + chunk.len());
                more.extend_from_slice(first);
                more.extend_from_slice(&chunk);
                self.more = Some(more);
                self.first = None;
            }
            (None, None) => self.first = Some(chunk),
        }
    }

    fn len(&self) -> usize {
        self.more
            .as_ref()
            .map_or_else(|| self.first.as_ref().map_or(0, Bytes::len), BytesMut::len)
    }

    fn take(&mut self) -> Option<Bytes> {
        self.more
            .take()
            .map(BytesMut::freeze)
            .or_else(|| self.first.take())
    }
}

impl Drop for Reading {
    /// The client left (or the server is done with the body): the exchange ends now.
    fn drop(&mut self) {
        let _entered = self.span.enter();
        end(&self.relay);
    }
}

/// Ends the stream of a client that takes nothing for longer than the exchange allows, and
/// frees its slot; returns when the stream ends either way.
async fn watch_client(
    relay: Arc<Mutex<Relay>>,
    deadlines: Deadlines,
    mut shutdown: watch::Receiver<bool>,
    slot: SlotRelease,
    mut ended: oneshot::Receiver<()>,
) {
    let mut stopping = false;
    loop {
        let (limit, what) = if stopping {
            (Some(STOPPING_LOOK), "shutdown grace period")
        } else {
            deadlines.next_wait(true)
        };
        let behind_since = {
            let relay = lock(&relay);
            if relay.chunks.is_none() {
                break;
            }
            relay.behind_since
        };
        // Until the client, if behind now, would be past its limit; if it is keeping up, the
        // worker's deadlines apply (in the stream) and this only looks again later.
        let wait = match (behind_since, limit) {
            (Some(since), Some(limit)) => Some(limit.saturating_sub(since.elapsed())),
            (None, Some(limit)) => Some(limit.max(STOPPING_LOOK)),
            (_, None) => None,
        };
        if wait == Some(Duration::ZERO) {
            tracing::warn!(
                limit = what,
                "the client stopped reading its stream; ending it"
            );
            end(&relay);
            break;
        }
        let look_again = async {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut ended => break,
            () = look_again => {}
            () = stopped(&mut shutdown), if !stopping => stopping = true,
        }
    }
    slot.release();
}

/// Drops the stream (which ends its exchange) outside the lock.
fn end(relay: &Mutex<Relay>) {
    let chunks = lock(relay).chunks.take();
    drop(chunks);
}

fn lock(relay: &Mutex<Relay>) -> MutexGuard<'_, Relay> {
    relay.lock().unwrap_or_else(|e| e.into_inner())
}
