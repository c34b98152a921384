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
use std::time::Duration;

use serde_json::Value;

use super::advertised::{advertised, EndpointOverride};
use super::index::KvIndex;
use super::metrics::KvEventMetrics;
use super::rank::Rank;
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
