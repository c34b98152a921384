//! KV events from `grpc://` workers: `SubscribeKvEvents` on the worker's own connection, fed
//! into the same index as the ZMQ subscriptions.
//!
//! The stream's contract (`smg-grpc-servicer`'s relay, `common.proto`): every DP rank's batches
//! under that rank's own publisher sequence, the rank on each batch; live only (a subscription
//! starts at 0 and gets no history); a gap the relay cannot fill, or a publisher restart, ends
//! the stream with `DATA_LOSS` and the subscriber clears and resubscribes. So a rank's view is
//! in sync when its first batch is the publisher's first (seq 0); joined later, or after a gap,
//! it rebuilds from live events for `--kv-events-rebuild-secs`. `load_only` batches carry no
//! events and move no cursor; a state snapshot (`KvSnapshotChunk`) replaces the view. A worker
//! without events (`UNIMPLEMENTED`) is asked again every 30 s. `page_size`, `dp_size` and
//! `max_total_num_tokens` come from `GetServerInfo`. A data-parallel worker routed per rank has
//! each rank's batches indexed under that rank's unit, as its ZMQ publishers' would be.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost_types::value::Kind;

use super::index::KvIndex;
use super::metrics::KvEventMetrics;
use super::view::View;
use super::wire::{Event, Stored};
use crate::protocol::grpc::pb;
use crate::protocol::grpc::smg::grpc::common;
use crate::upstream::grpc::Channels;
use crate::workers::{Worker, WorkerId};

const RETRY_EVERY: Duration = Duration::from_secs(1);
const REDISCOVER_EVERY: Duration = Duration::from_secs(30);
const INFO_TIMEOUT: Duration = Duration::from_secs(5);
/// A block managed by a residency agent, not the engine: not the engine's cache.
const RESIDENCY_AGENT: &str = "kvcr";
const MAIN_ATTENTION_KINDS: [&str; 3] = ["full_attention", "mla_attention", "sink_full_attention"];

pub(super) struct GrpcFollow {
    pub worker: Arc<Worker>,
    /// A data-parallel worker's rank units: each rank's batches are indexed under its unit.
    pub units: Option<Arc<[Arc<Worker>]>>,
    /// Data-parallel workers are routed per rank (their units are due if not made yet).
    pub per_rank: bool,
    pub channels: Channels,
    pub index: Arc<KvIndex>,
    pub metrics: Arc<KvEventMetrics>,
    pub rebuild: Duration,
}

/// What `GetServerInfo` says about the worker's cache.
struct Shape {
    page_size: usize,
    ranks: u32,
    capacity_blocks: usize,
}

impl GrpcFollow {
    pub async fn run(self) {
        let shape = loop {
            match self.shape().await {
                Some(s) => break s,
                None => tokio::time::sleep(RETRY_EVERY).await,
            }
        };
        if shape.page_size != self.index.block_size() {
            tracing::warn!(worker = self.worker.url(), page_size = shape.page_size, index = self.index.block_size(),
                "kv events: the worker's page size differs from --prefix-page-size; routing it on the approximate index");
            return;
        }
        if shape.ranks > 1 && self.per_rank && self.units.is_none() {
            // Its rank units are not made yet: the reconcile loop starts over once they are
            // (a subscription now would be cut then, and the stream has no history to resume).
            return;
        }
        loop {
            let Ok(mut client) = self.channels.client(&self.worker.origin) else {
                return;
            };
            let call = client.subscribe_kv_events(common::SubscribeKvEventsRequest {
                start_sequence_number: 0,
                load_records_before_first_batch: false,
            });
            match call.await {
                Ok(stream) => {
                    tracing::info!(worker = self.worker.url(), "kv events: subscribed");
                    let ended = self.follow(stream.into_inner(), &shape).await;
                    tracing::warn!(worker = self.worker.url(), reason = %ended, "kv events: subscription ended; resubscribing");
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                Err(s) if s.code() == tonic::Code::Unimplemented => {
                    self.index.drop_worker(self.worker.id);
                    for unit in self.units.iter().flat_map(|u| u.iter()) {
                        self.index.drop_worker(unit.id);
                    }
                    tokio::time::sleep(REDISCOVER_EVERY).await;
                }
                Err(_) => tokio::time::sleep(RETRY_EVERY).await,
            }
        }
    }

    /// The id a rank's blocks are indexed under: its unit's, or the worker's when it is routed
    /// whole.
    fn unit_of(&self, rank: u32) -> WorkerId {
        self.units
            .iter()
            .flat_map(|u| u.iter())
            .find(|u| u.dp_rank().is_some_and(|r| r.rank == rank))
            .map_or(self.worker.id, |u| u.id)
    }

    async fn shape(&self) -> Option<Shape> {
        let mut client = self.channels.client(&self.worker.origin).ok()?;
        let call = client.get_server_info(pb::GetServerInfoRequest {});
        let info = tokio::time::timeout(INFO_TIMEOUT, call)
            .await
            .ok()?
            .ok()?
            .into_inner();
        let arg = |name: &str| {
            let v = info.server_args.as_ref()?.fields.get(name)?;
            match v.kind {
                Some(Kind::NumberValue(n)) if n >= 1.0 => Some(n as usize),
                _ => None,
            }
        };
        let page_size = arg("page_size").unwrap_or(1);
        let capacity_blocks = usize::try_from(info.max_total_num_tokens)
            .ok()
            .filter(|t| *t > 0)
            .map_or(usize::MAX, |t| t / page_size + 1);
        Some(Shape {
            page_size,
            ranks: arg("dp_size").map_or(1, |d| d.clamp(1, 1024) as u32),
            capacity_blocks,
        })
    }

    /// Follows one subscription until it ends; returns why. Every view is left out of sync.
    async fn follow(
        &self,
        mut stream: tonic::Streaming<common::KvEventBatch>,
        shape: &Shape,
    ) -> String {
        for rank in 0..shape.ranks {
            self.index
                .open_view(self.unit_of(rank), rank, shape.capacity_blocks);
        }
        // Per rank: the next sequence expected.
        let mut cursors: HashMap<u32, u64> = HashMap::new();
        let ended = loop {
            match stream.message().await {
                Ok(Some(batch)) => self.on_batch(&mut cursors, batch, shape),
                Ok(None) => break "the worker ended the stream".to_owned(),
                Err(s) => {
                    if s.code() == tonic::Code::DataLoss {
                        self.metrics.gaps.inc();
                    }
                    break s.to_string();
                }
            }
        };
        // Nothing reaches the views until the next subscription: not in sync meanwhile.
        for rank in cursors.keys().copied().chain(0..shape.ranks) {
            self.index
                .open_view(self.unit_of(rank), rank, shape.capacity_blocks);
        }
        ended
    }

    fn on_batch(
        &self,
        cursors: &mut HashMap<u32, u64>,
        batch: common::KvEventBatch,
        shape: &Shape,
    ) {
        if batch.load.as_ref().is_some_and(|l| l.load_only) {
            return; // a load record: no events, no sequence of its own
        }
        let rank = batch
            .dp_rank
            .and_then(|r| u32::try_from(r).ok())
            .unwrap_or(0);
        if rank >= shape.ranks && !cursors.contains_key(&rank) {
            self.index
                .open_view(self.unit_of(rank), rank, shape.capacity_blocks);
        }
        let (w, seq) = (self.unit_of(rank), batch.sequence_number);
        let view = View {
            index: &self.index,
            metrics: &self.metrics,
            worker: w,
            rank,
            url: self.worker.url(),
            rebuild: self.rebuild,
        };
        let events: Vec<Event> = batch.events.iter().map(event).collect();
        if let Some(chunk) = &batch.snapshot {
            // A relay's snapshot of the live blocks: the view starts over from it.
            let known = chunk.unknown_before == 0;
            if chunk.index == 0 {
                if known {
                    self.index.clear_view(w, rank);
                } else {
                    self.index.mark_stale(w, rank, self.rebuild);
                }
            }
            view.apply(&events);
            cursors.insert(rank, seq + 1);
            if known && chunk.index + 1 == chunk.count {
                self.index.mark_fresh(w, rank, Instant::now());
            }
            return;
        }
        match cursors.get(&rank).copied() {
            None if seq == 0 => self.index.mark_fresh(w, rank, Instant::now()),
            Some(next) if seq == next => {}
            Some(next) if seq == 0 && next > 0 => {
                // A new engine starts empty: the cleared view is exact.
                self.metrics.restarts.inc();
                self.index.clear_view(w, rank);
                self.index.mark_fresh(w, rank, Instant::now());
            }
            Some(next) if seq < next => return, // already applied
            _ => {
                // Joined after the publisher's first batch, or lost some: what came before is
                // not on this stream, so the view rebuilds from live events.
                self.metrics.gaps.inc();
                self.index.mark_stale(w, rank, self.rebuild);
            }
        }
        view.apply(&events);
        cursors.insert(rank, seq + 1);
    }
}

/// The tier named by `tier`, or by the older `cache_level`: neither set is the device.
fn on_device(tier: Option<i32>, cache_level: Option<i32>) -> bool {
    match tier.and_then(|t| common::KvCacheTier::try_from(t).ok()) {
        Some(common::KvCacheTier::Device) => true,
        Some(common::KvCacheTier::Unspecified) | None => cache_level.unwrap_or(0) == 0,
        Some(_) => false,
    }
}

fn local(locality: Option<i32>) -> bool {
    locality.is_none_or(|l| l != common::KvCacheLocality::Remote as i32)
}

fn engine_owned(ownership: Option<&str>) -> bool {
    !ownership.is_some_and(|o| o.eq_ignore_ascii_case(RESIDENCY_AGENT))
}

/// A proto event as the wire module's: the device-cache blocks of the base model without a
/// salt or extra keys are the ones a plain request reuses (as for ZMQ events).
fn event(e: &common::KvCacheEvent) -> Event {
    use common::kv_cache_event::Data;
    match &e.data {
        Some(Data::Stored(s)) => {
            let Some(block_size) = s
                .blocks
                .first()
                .and_then(|b| usize::try_from(b.block_size).ok())
                .filter(|b| *b > 0)
            else {
                return Event::Other;
            };
            if s.blocks
                .iter()
                .any(|b| b.token_ids.len() != block_size || b.block_size != s.blocks[0].block_size)
            {
                return Event::Other;
            }
            let main_group = s
                .kv_cache_spec_kind
                .as_deref()
                .is_none_or(|k| MAIN_ATTENTION_KINDS.contains(&k));
            let plain = s.blocks.iter().all(|b| {
                b.lora_id.is_none() && b.extra_keys.is_empty() && on_device(s.tier, b.cache_level)
            });
            Event::Stored(Stored {
                hashes: s.blocks.iter().map(|b| b.block_hash).collect(),
                parent: s.parent_block_hash,
                token_ids: s
                    .blocks
                    .iter()
                    .flat_map(|b| b.token_ids.iter().copied())
                    .collect(),
                block_size,
                device_tier: plain
                    && main_group
                    && local(s.locality)
                    && engine_owned(s.ownership.as_deref())
                    && s.lora_name.is_none()
                    && s.cache_salt.is_none(),
            })
        }
        Some(Data::Removed(r)) => Event::Removed {
            hashes: r.block_hashes.clone(),
            device_tier: on_device(r.tier, r.cache_level)
                && local(r.locality)
                && engine_owned(r.ownership.as_deref()),
        },
        Some(Data::Cleared(c)) if engine_owned(c.ownership.as_deref()) => Event::Cleared,
        _ => Event::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::kv_cache_event::Data;

    fn block(hash: i64, tokens: Vec<u32>) -> common::KvBlock {
        common::KvBlock {
            block_hash: hash,
            block_size: tokens.len() as i32,
            token_ids: tokens,
            ..Default::default()
        }
    }

    #[test]
    fn reads_the_relays_events() {
        let stored = common::KvBlocksStored {
            blocks: vec![block(1, vec![1, 2]), block(2, vec![3, 4])],
            parent_block_hash: Some(9),
            tier: Some(common::KvCacheTier::Device as i32),
            medium: Some("GPU".into()),
            ..Default::default()
        };
        let ev = |data| common::KvCacheEvent {
            event_id: 1,
            data: Some(data),
        };
        assert_eq!(
            event(&ev(Data::Stored(stored.clone()))),
            Event::Stored(Stored {
                hashes: vec![1, 2],
                parent: Some(9),
                token_ids: vec![1, 2, 3, 4],
                block_size: 2,
                device_tier: true
            })
        );
        let host = common::KvBlocksStored {
            tier: Some(common::KvCacheTier::Host as i32),
            ..stored.clone()
        };
        assert!(matches!(event(&ev(Data::Stored(host))), Event::Stored(s) if !s.device_tier));
        let salted = common::KvBlocksStored {
            cache_salt: Some("s".into()),
            ..stored.clone()
        };
        assert!(matches!(event(&ev(Data::Stored(salted))), Event::Stored(s) if !s.device_tier));
        let ragged = common::KvBlocksStored {
            blocks: vec![block(1, vec![1, 2]), block(2, vec![3])],
            ..stored
        };
        assert_eq!(event(&ev(Data::Stored(ragged))), Event::Other);
        let removed = common::KvBlocksRemoved {
            block_hashes: vec![5],
            cache_level: Some(1),
            ..Default::default()
        };
        assert_eq!(
            event(&ev(Data::Removed(removed))),
            Event::Removed {
                hashes: vec![5],
                device_tier: false
            }
        );
        assert_eq!(
            event(&ev(Data::Cleared(common::KvCacheCleared::default()))),
            Event::Cleared
        );
    }
}
