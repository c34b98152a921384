//! Subscriptions: find each worker's publisher, follow it, and keep its view exact.
//!
//! A reconcile loop starts one task per worker in the registry (and stops it, dropping the view,
//! when the worker leaves, or restarts it when its rank units change: a data-parallel worker's
//! rank `r` is indexed under its rank unit, so the policy sees each rank's cache); a `grpc://`
//! worker's task is `grpc_source`'s. The task reads `/server_info`: `kv_events_config` (SGLang's JSON
//! string; a `zmq` publisher), `page_size`, `dp_size` and `max_total_num_tokens`. A `*`,
//! `0.0.0.0` or `::` host is the worker URL's host; `--kv-events-endpoint URL=ENDPOINT` overrides
//! it. Each DP rank is followed at port + rank:
//!
//! - On joining, with a replay endpoint, everything buffered is replayed from seq 0; the view is
//!   in sync if the replay starts at 0 (or the publisher has sent nothing yet), or if the first
//!   live batch is seq 0. Otherwise it rebuilds from live events for `--kv-events-rebuild-secs`.
//! - A batch after a gap asks for a replay of the missing batches; if that fails or comes back
//!   incomplete the view is cleared and rebuilt.
//! - A sequence number going back (to 0, or below what this view ever saw) is a publisher
//!   restart: a new engine starts empty, so the view is cleared and stays in sync. A reconnect
//!   may hide a restart (the new publisher's first batches sent before the subscription
//!   reached it, its sequence past ours): the view is cleared and replayed from seq 0, or
//!   rebuilt.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;
use zeromq::{Socket, SocketEvent, SocketRecv, SubSocket};

use super::advertised::{advertised, EndpointOverride, Publisher};
use super::index::KvIndex;
use super::metrics::KvEventMetrics;
use super::replay::{replay, REPLAY_TIMEOUT};
use super::view::View;
use super::wire;
use crate::upstream::Client;
use crate::workers::{Registry, Worker, WorkerId};

/// What the subscriptions need from `switchboard serve`'s flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Instead of what the workers advertise.
    pub overrides: Vec<EndpointOverride>,
    /// How long a view that lost events rebuilds before routing trusts it again.
    pub rebuild: Duration,
}

const RECONCILE_EVERY: Duration = Duration::from_secs(1);
const INFO_TIMEOUT: Duration = Duration::from_secs(5);
/// A worker without a publisher is asked again after this (it may restart with one), then
/// twice as long each time it still has none, up to [`REDISCOVER_MAX`]: at thousands of
/// workers each ask is a connection and a `/server_info` parse.
const REDISCOVER_EVERY: Duration = Duration::from_secs(30);
const REDISCOVER_MAX: Duration = Duration::from_secs(300);

/// The wait before asking a publisher-less worker again, after waiting `last`.
fn next_rediscover(last: Duration) -> Duration {
    (last * 2).min(REDISCOVER_MAX)
}

/// Starts the reconcile loop.
pub fn spawn(
    registry: Arc<Registry>,
    client: Client,
    index: Arc<KvIndex>,
    metrics: Arc<KvEventMetrics>,
    settings: Settings,
) {
    tokio::spawn(async move {
        // By member: the rank units it was started with, and its task. A data-parallel
        // member's ranks are followed under their units' ids, so a change of units restarts it.
        let mut tasks: HashMap<WorkerId, (Vec<WorkerId>, tokio::task::JoinHandle<()>)> =
            HashMap::new();
        loop {
            let workers = registry.snapshot();
            // A set, not a scan per task: at thousands of workers every second counts.
            let members: HashSet<WorkerId> = workers.iter().map(|w| w.id).collect();
            tasks.retain(|id, (units, task)| {
                let live = members.contains(id) && *units == unit_ids(&registry, *id);
                if !live {
                    task.abort();
                    index.drop_worker(*id);
                    for unit in units.iter() {
                        index.drop_worker(*unit);
                    }
                }
                live
            });
            for w in workers.iter() {
                if tasks.contains_key(&w.id) {
                    continue;
                }
                if w.origin.is_grpc() {
                    let follow = super::grpc_source::GrpcFollow {
                        worker: Arc::clone(w),
                        units: registry.units_of(w.id),
                        per_rank: registry.routes_dp_ranks(),
                        channels: client.grpc().clone(),
                        index: Arc::clone(&index),
                        metrics: Arc::clone(&metrics),
                        rebuild: settings.rebuild,
                    };
                    let units = unit_ids(&registry, w.id);
                    tasks.insert(w.id, (units, tokio::spawn(follow.run())));
                    continue;
                }
                let follow = Follow {
                    worker: Arc::clone(w),
                    units: registry.units_of(w.id),
                    client: client.clone(),
                    index: Arc::clone(&index),
                    metrics: Arc::clone(&metrics),
                    settings: settings.clone(),
                };
                let units = unit_ids(&registry, w.id);
                tasks.insert(w.id, (units, tokio::spawn(follow.run())));
            }
            metrics.refresh(&index, &registry.routing());
            tokio::time::sleep(RECONCILE_EVERY).await;
        }
    });
}

fn unit_ids(registry: &Registry, member: WorkerId) -> Vec<WorkerId> {
    registry
        .units_of(member)
        .map(|u| u.iter().map(|w| w.id).collect())
        .unwrap_or_default()
}

struct Follow {
    worker: Arc<Worker>,
    /// A data-parallel worker's rank units (each rank's events are indexed under its unit).
    units: Option<Arc<[Arc<Worker>]>>,
    client: Client,
    index: Arc<KvIndex>,
    metrics: Arc<KvEventMetrics>,
    settings: Settings,
}

impl Follow {
    async fn run(self) {
        let host = self
            .worker
            .url()
            .parse::<hyper::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_owned))
            .unwrap_or_else(|| "127.0.0.1".into());
        let over = self
            .settings
            .overrides
            .iter()
            .find(|o| o.url == self.worker.url());
        let mut rediscover = REDISCOVER_EVERY;
        let adv = loop {
            let info = match self
                .client
                .get(&self.worker.origin, "/server_info", INFO_TIMEOUT)
                .await
            {
                Ok((status, body)) if status.is_success() => {
                    serde_json::from_slice::<Value>(&body).ok()
                }
                _ => None,
            };
            match info.as_ref().and_then(|i| advertised(i, &host, over)) {
                Some(adv) => break adv,
                None if info.is_some() => {
                    tokio::time::sleep(rediscover).await;
                    rediscover = next_rediscover(rediscover);
                }
                None => tokio::time::sleep(RECONCILE_EVERY).await,
            }
        };
        if adv.page_size != self.index.block_size() {
            tracing::warn!(worker = self.worker.url(), page_size = adv.page_size, index = self.index.block_size(),
                "kv events: the worker's page size differs from --prefix-page-size; routing it on the approximate index");
            return;
        }
        let capacity = adv
            .capacity_tokens
            .map_or(usize::MAX, |t| t / adv.page_size + 1);
        if adv.publishers.len() > 1 && self.units.is_none() {
            // Its rank units are not made yet: the reconcile loop starts over once they are.
            return;
        }
        let mut ranks = tokio::task::JoinSet::new();
        for p in adv.publishers {
            let unit = self
                .units
                .iter()
                .flat_map(|u| u.iter())
                .find(|u| u.dp_rank().is_some_and(|r| r.rank == p.rank))
                .map_or(self.worker.id, |u| u.id);
            self.index.open_view(unit, p.rank, capacity);
            let rank = Rank {
                worker: unit,
                url: self.worker.url().to_owned(),
                publisher: p,
                index: Arc::clone(&self.index),
                metrics: Arc::clone(&self.metrics),
                rebuild: self.settings.rebuild,
            };
            ranks.spawn(rank.run());
        }
        while ranks.join_next().await.is_some() {}
    }
}

struct Rank {
    worker: WorkerId,
    url: String,
    publisher: Publisher,
    index: Arc<KvIndex>,
    metrics: Arc<KvEventMetrics>,
    rebuild: Duration,
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
    async fn run(self) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_without_a_publisher_is_asked_less_and_less_often() {
        let mut wait = REDISCOVER_EVERY;
        let mut waits = vec![wait];
        for _ in 0..6 {
            wait = next_rediscover(wait);
            waits.push(wait);
        }
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [30, 60, 120, 240, 300, 300, 300]);
    }
}
