//! Keep-alive HTTP/1 connections to one worker, kept with the worker's address (`Origin`).
//!
//! hyper's own pooled client keeps every host's connections in one map behind one lock: each
//! request hashes the host twice (check-out, check-in), races the check-out against a lazy
//! connect, and spawns a task that waits for the connection to become free again. With the
//! idle list on the worker itself a request takes a connection from a short vector and its
//! body puts it back when it ends.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;

/// Idle connections are closed before SGLang's own keep-alive (5 s, uvicorn's) would close
/// them: a request sent on a connection the worker is closing may or may not have started.
pub const IDLE_LIMIT: Duration = Duration::from_secs(4);

/// At most this many idle connections are kept per worker (more are closed when they free).
const MAX_IDLE: usize = 1024;

pub type Sender = SendRequest<Full<Bytes>>;

/// One worker's idle connections, most recently used last.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<VecDeque<Idle>>,
}

struct Idle {
    sender: Sender,
    since: Instant,
}

impl Pool {
    /// The most recently freed connection that is still open and younger than [`IDLE_LIMIT`];
    /// older ones are closed on the way.
    pub fn take(&self) -> Option<Sender> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        expire(&mut idle, now);
        while let Some(c) = idle.pop_back() {
            if c.sender.is_ready() {
                return Some(c.sender);
            }
        }
        None
    }

    /// Keeps a connection whose last response was read to its end (or held nothing). hyper
    /// marks it free once its connection task has seen that end, which after a body read to
    /// its end on one runtime thread has already happened; otherwise a small task waits.
    fn put(self: &Arc<Self>, mut sender: Sender) {
        if sender.is_ready() {
            return self.keep(sender);
        }
        // A closed one is not kept; nor, where no runtime runs (a body dropped at shutdown),
        // one that is not free yet.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if sender.is_closed() {
            return;
        }
        let pool = Arc::clone(self);
        runtime.spawn(async move {
            if sender.ready().await.is_ok() {
                pool.keep(sender);
            }
        });
    }

    fn keep(&self, sender: Sender) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        expire(&mut idle, now);
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle { sender, since: now });
        }
    }
}

/// Drops (closes) the connections idle for longer than [`IDLE_LIMIT`]: the oldest are first.
fn expire(idle: &mut VecDeque<Idle>, now: Instant) {
    while idle
        .front()
        .is_some_and(|c| now.duration_since(c.since) > IDLE_LIMIT || c.sender.is_closed())
    {
        idle.pop_front();
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle = self.idle.lock().map_or(0, |idle| idle.len());
        f.debug_struct("Pool").field("idle", &idle).finish()
    }
}

/// A worker's response body: when it has been read to its end, its connection goes back to
/// the worker's pool; so does one dropped with nothing left to read (an empty answer nobody
/// reads, like an abort's). Dropped before its end, the connection closes with it (hyper
/// cannot reuse a connection with an unread body).
#[derive(Debug)]
pub struct Body {
    inner: Incoming,
    home: Option<(Sender, Arc<Pool>)>,
}

impl Body {
    pub(super) fn new(inner: Incoming, sender: Sender, pool: Arc<Pool>) -> Body {
        Body {
            inner,
            home: Some((sender, pool)),
        }
    }

    fn go_home(&mut self) {
        if let Some((sender, pool)) = self.home.take() {
            pool.put(sender);
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.go_home();
        }
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.go_home();
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
