//! A streamed response driven by a task of its own, not by the client's reads: the exchange's
//! deadlines, the worker's end and the client's departure are seen whether or not the client
//! reads. The chunks go to the body through a small bounded channel, so a client that stops
//! reading costs at most that many chunks (plus the server's write buffer). When the channel is
//! full the task waits for the client under the same limit as for a worker (the idle gap, or
//! what is left of the total time): a client that takes nothing for that long, or past the
//! total deadline, is treated as gone. Its stream is dropped (the exchange ends as a 499, the
//! worker is told to abort, its load booking released) and its admission slot freed, though the
//! socket stays open with unread bytes in it.
//!
//! Per stream: one task and one channel; per chunk, a channel send and, only when the client is
//! behind, a timer.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::Poll;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::watch;
use tracing::Instrument;

use super::exchange::stopped;
use super::reliability::Deadlines;
use crate::admission::SlotRelease;

/// Chunks a stream may run ahead of its client.
const BUFFERED_CHUNKS: usize = 16;

/// Most bytes gathered into one chunk for the client (so a client that stops reading still
/// costs at most `BUFFERED_CHUNKS` such chunks).
const GATHER_BYTES: usize = 16 * 1024;

/// Spawns the task that drives `chunks`; returns the body that reads from it and the handle
/// through which the task frees the request's admission slot when it ends (to be put in the
/// response's extensions).
pub fn spawn<S>(
    chunks: S,
    deadlines: Deadlines,
    shutdown: watch::Receiver<bool>,
) -> (Body, SlotRelease)
where
    S: Stream<Item = Bytes> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel(BUFFERED_CHUNKS);
    let slot = SlotRelease::default();
    let release = slot.clone();
    // In the request's span: its logs name the request, and its exported span ends with the stream.
    // Boxed before the task captures it: held by value (and pinned inside `drive`) the stream
    // made the task ~26 KiB, copied into the task's allocation at the spawn.
    let chunks = Box::pin(chunks);
    let task = async move {
        drive(chunks, tx, deadlines, shutdown).await;
        release.release();
    };
    tokio::spawn(task.instrument(tracing::Span::current()));
    let body = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|chunk| chunk.map(Ok::<Bytes, Infallible>))
    });
    (Body::from_stream(body), slot)
}

/// Moves chunks to the client until the stream ends, the client leaves, or the client falls
/// behind for longer than the exchange allows. Dropping `chunks` on return ends the exchange.
async fn drive<S>(
    mut chunks: Pin<Box<S>>,
    tx: mpsc::Sender<Bytes>,
    deadlines: Deadlines,
    mut shutdown: watch::Receiver<bool>,
) where
    S: Stream<Item = Bytes> + Send,
{
    let mut first = true;
    loop {
        // The client may leave while we wait on the worker: notice it at once.
        let chunk = tokio::select! {
            biased;
            c = chunks.next() => c,
            () = tx.closed() => return,
        };
        let Some(chunk) = chunk else { return };
        // The first chunk goes out at once: gathering lets every task already woken run first,
        // which under load puts the time to first token behind a burst of other streams' chunks.
        let (chunk, ended) = if std::mem::take(&mut first) {
            (chunk, false)
        } else {
            gather(chunk, chunks.as_mut()).await
        };
        let chunk = match tx.try_send(chunk) {
            Ok(()) if ended => return,
            Ok(()) => continue,
            Err(TrySendError::Closed(_)) => return,
            Err(TrySendError::Full(chunk)) => chunk,
        };
        // The client is behind: it gets the time a worker would get for its next chunk.
        let (limit, what) = deadlines.next_wait(true);
        let send = async {
            match limit {
                Some(l) => tokio::time::timeout(l, tx.send(chunk)).await.ok(),
                None => Some(tx.send(chunk).await),
            }
        };
        let sent = tokio::select! {
            s = send => s,
            () = stopped(&mut shutdown) => None,
        };
        match sent {
            Some(Ok(())) if ended => return,
            Some(Ok(())) => {}
            Some(Err(_)) => return,
            None => {
                tracing::warn!(
                    limit = what,
                    "the client stopped reading its stream; ending it"
                );
                return;
            }
        }
    }
}

/// `first` and the chunks that follow it at once, as one: when the gateway is behind its worker,
/// several tokens sit read but not yet handed over in the worker connection, and each would
/// otherwise be its own write to the client (a `writev` each, the largest cost of a stream).
/// Between two looks it lets the tasks woken on this thread run (the worker connection's among
/// them, which hands over its next chunk); a look that finds nothing ends the gathering, so a
/// stream that keeps up pays one extra poll per chunk and no latency. Whether the stream ended.
async fn gather<S>(first: Bytes, mut chunks: Pin<&mut S>) -> (Bytes, bool)
where
    S: Stream<Item = Bytes>,
{
    let mut gathered: Option<BytesMut> = None;
    let mut ended = false;
    while gathered.as_ref().map_or(first.len(), BytesMut::len) < GATHER_BYTES {
        let_others_run().await;
        match std::future::poll_fn(|cx| Poll::Ready(chunks.as_mut().poll_next(cx))).await {
            Poll::Ready(Some(more)) => gathered
                .get_or_insert_with(|| BytesMut::from(&first[..]))
                .extend_from_slice(&more),
            Poll::Ready(None) => {
                ended = true;
                break;
            }
            Poll::Pending => break,
        }
    }
    (gathered.map_or(first, BytesMut::freeze), ended)
}

/// Returns after every task already woken on this worker thread ran: a task that wakes itself
/// goes to the back of the thread's run queue (unlike `tokio::task::yield_now`, which waits for
/// the next poll of the I/O driver, a syscall when the thread has nothing else to do).
async fn let_others_run() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}
