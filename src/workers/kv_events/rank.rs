//! One DP rank's publisher, followed: the SUB socket, sequence checks, replay after a gap or a
//! reconnect, and the batches applied to the rank's view (`subscriber` says when each applies).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use zeromq::{Socket, SocketEvent, SocketRecv, SubSocket};

use super::advertised::Publisher;
use super::index::KvIndex;
use super::metrics::KvEventMetrics;
use super::replay::{replay, REPLAY_TIMEOUT};
use super::view::View;
use super::wire;
use crate::workers::WorkerId;

pub(super) struct Rank {
    /// The routing unit its events are indexed under.
    pub(super) worker: WorkerId,
    pub(super) url: String,
    pub(super) publisher: Publisher,
    pub(super) index: Arc<KvIndex>,
    pub(super) metrics: Arc<KvEventMetrics>,
    pub(super) rebuild: Duration,
}

/// Where the sequence stands.
struct Cursor {
    /// The next seq expected; `None` before the first batch.
    next: Option<u64>,
    /// Seqs below this were seen live; between it and `next` they came by replay, so a live
    /// copy arriving late is a duplicate, not a restart.
    replayed_from: u64,
}

impl Rank {
    pub(super) async fn run(self) {
        let mut sub = SubSocket::new();
        let mut monitor = sub.monitor();
        // Returns once connected (it retries an unreachable endpoint); then reconnects by itself.
        if let Err(e) = sub.connect(&self.publisher.endpoint).await {
            tracing::warn!(worker = %self.url, endpoint = %self.publisher.endpoint, error = %e, "kv events: cannot subscribe");
            return;
        }
        if sub.subscribe(&self.publisher.topic).await.is_err() {
            return;
        }
        tracing::info!(worker = %self.url, endpoint = %self.publisher.endpoint, "kv events: subscribed");
        let mut cursor = Cursor {
            next: None,
            replayed_from: 0,
        };
        if self.publisher.replay.is_some() {
            self.catch_up(&mut cursor, 0, false).await;
        }
        let mut connections = 0u32;
        loop {
            tokio::select! {
                biased;
                Some(event) = monitor.next() => {
                    if matches!(event, SocketEvent::Connected(..)) {
                        connections += 1;
                        if connections > 1 {
                            self.resync(&mut cursor).await;
                        }
                    }
                }
                msg = sub.recv() => {
                    let msg = match msg {
                        Ok(m) => m.into_vec(),
                        Err(e) => {
                            tracing::warn!(worker = %self.url, error = %e, "kv events: subscription ended");
                            self.index.mark_stale(self.worker, self.publisher.rank, self.rebuild);
                            return;
                        }
                    };
                    let [_topic, seq, payload] = msg.as_slice() else {
                        continue;
                    };
                    let Ok(seq) = wire::seq(seq).and_then(|s| u64::try_from(s).map_err(|_| wire::WireError::Seq(0))) else {
                        continue;
                    };
                    self.on_batch(&mut cursor, seq, payload).await;
                }
            }
        }
    }

    /// Reconnected: the publisher may be a new process whose first batches went out before
    /// the subscription reached it, and whose sequence may already have passed ours. The view
    /// starts over from the replay buffer (seq 0 on), or rebuilds.
    async fn resync(&self, cursor: &mut Cursor) {
        self.metrics.restarts.inc();
        self.index.clear_view(self.worker, self.publisher.rank);
        cursor.next = None;
        cursor.replayed_from = 0;
        if !self.catch_up(cursor, 0, true).await {
            cursor.next = None;
        }
    }

    async fn on_batch(&self, cursor: &mut Cursor, seq: u64, payload: &Bytes) {
        match cursor.next {
            None if seq == 0 => {
                self.index
                    .mark_fresh(self.worker, self.publisher.rank, Instant::now())
            }
            None => {
                // Joined late: what came before is only in the replay buffer, if anywhere.
                self.metrics.gaps.inc();
                if !self.catch_up(cursor, 0, true).await {
                    cursor.next = Some(seq);
                }
            }
            Some(next) if seq == next => {}
            Some(next) if seq < next && seq >= cursor.replayed_from && seq != 0 => return,
            Some(_) if seq == 0 || cursor.next.is_some_and(|n| seq < n) => {
                self.metrics.restarts.inc();
                self.index.clear_view(self.worker, self.publisher.rank);
                cursor.replayed_from = 0;
                if seq == 0 {
                    // A new engine starts empty: the cleared view is exact.
                    self.index
                        .mark_fresh(self.worker, self.publisher.rank, Instant::now());
                } else if !self.catch_up(cursor, 0, true).await {
                    cursor.next = Some(seq);
                }
            }
            Some(next) => {
                self.metrics.gaps.inc();
                if !self.catch_up(cursor, next, true).await {
                    cursor.next = Some(seq);
                }
            }
        }
        if cursor.next.is_some_and(|n| seq < n) {
            return; // the replay already delivered it
        }
        self.apply(payload);
        cursor.next = Some(seq + 1);
        cursor.replayed_from = seq + 1;
    }

    /// Replays from `from`; true if the view is in sync afterwards. On failure the view is
    /// cleared and rebuilds. `after_gap`: counted as a repair (not the first sync on joining).
    async fn catch_up(&self, cursor: &mut Cursor, from: u64, after_gap: bool) -> bool {
        let got = match &self.publisher.replay {
            Some(endpoint) => tokio::time::timeout(REPLAY_TIMEOUT * 4, replay(endpoint, from))
                .await
                .ok()
                .flatten(),
            None => None,
        };
        let complete = got.as_ref().is_some_and(|batches| {
            batches.first().is_none_or(|b| b.0 == from)
                && batches.windows(2).all(|w| w[1].0 == w[0].0 + 1)
        });
        let outcome = match (&got, complete) {
            (None, _) => "failed",
            (Some(_), false) => "incomplete",
            (Some(_), true) => "repaired",
        };
        if self.publisher.replay.is_some() && after_gap {
            self.metrics.replays.with_label_values(&[outcome]).inc();
        }
        if !complete {
            self.index
                .mark_stale(self.worker, self.publisher.rank, self.rebuild);
            if let Some(batches) = got {
                // Rebuild from what there is.
                for (_, payload) in &batches {
                    self.apply(payload);
                }
                if let Some(last) = batches.last() {
                    cursor.next = Some(last.0 + 1);
                }
            }
            cursor.replayed_from = cursor.next.unwrap_or(0);
            return false;
        }
        let batches = got.unwrap_or_default();
        if from == 0 {
            self.index.clear_view(self.worker, self.publisher.rank);
        }
        for (_, payload) in &batches {
            self.apply(payload);
        }
        cursor.replayed_from = cursor.next.unwrap_or(from);
        cursor.next = Some(batches.last().map_or(from, |b| b.0 + 1));
        self.index
            .mark_fresh(self.worker, self.publisher.rank, Instant::now());
        true
    }

    fn apply(&self, payload: &[u8]) {
        let batch = match wire::decode_batch(payload) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(worker = %self.url, error = %e, "kv events: undecodable batch");
                return;
            }
        };
        let view = View {
            index: &self.index,
            metrics: &self.metrics,
            worker: self.worker,
            rank: self.publisher.rank,
            url: &self.url,
            rebuild: self.rebuild,
        };
        view.apply(&batch.events);
    }
}
