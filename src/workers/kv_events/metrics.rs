//! The KV-event subscriptions' Prometheus series.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::index::KvIndex;
use crate::workers::{Worker, WorkerId};

pub struct KvEventMetrics {
    /// Events applied, by type (`stored`, `removed`, `cleared`, `other`, `orphan`, `skipped`).
    pub events: IntCounterVec,
    pub batches: IntCounter,
    /// Sequence gaps seen (lost messages), and publisher restarts (sequence back to 0).
    pub gaps: IntCounter,
    pub restarts: IntCounter,
    /// Replay requests, by outcome (`repaired`, `incomplete`, `failed`).
    pub replays: IntCounterVec,
    /// Workers whose view is not in sync (routed on the approximate index meanwhile).
    pub stale_workers: IntGauge,
    /// Blocks indexed per worker.
    pub blocks: IntGaugeVec,
}

impl KvEventMetrics {
    pub fn new(registry: &Registry) -> prometheus::Result<KvEventMetrics> {
        let m = KvEventMetrics {
            events: IntCounterVec::new(
                Opts::new(
                    "switchboard_kv_events_total",
                    "KV events received from workers, by type",
                ),
                &["type"],
            )?,
            batches: IntCounter::new(
                "switchboard_kv_event_batches_total",
                "KV event batches received",
            )?,
            gaps: IntCounter::new(
                "switchboard_kv_event_gaps_total",
                "Gaps in a KV event sequence (lost batches)",
            )?,
            restarts: IntCounter::new(
                "switchboard_kv_event_publisher_restarts_total",
                "KV event publishers seen restarting (sequence back to 0)",
            )?,
            replays: IntCounterVec::new(
                Opts::new(
                    "switchboard_kv_event_replays_total",
                    "Replay requests after a gap, by outcome",
                ),
                &["outcome"],
            )?,
            stale_workers: IntGauge::new(
                "switchboard_kv_events_stale_workers",
                "Workers with KV events whose view is out of sync (approximate routing meanwhile)",
            )?,
            blocks: IntGaugeVec::new(
                Opts::new(
                    "switchboard_kv_index_blocks",
                    "Blocks in the exact KV index, per worker",
                ),
                &["worker"],
            )?,
        };
        registry.register(Box::new(m.events.clone()))?;
        registry.register(Box::new(m.batches.clone()))?;
        registry.register(Box::new(m.gaps.clone()))?;
        registry.register(Box::new(m.restarts.clone()))?;
        registry.register(Box::new(m.replays.clone()))?;
        registry.register(Box::new(m.stale_workers.clone()))?;
        registry.register(Box::new(m.blocks.clone()))?;
        Ok(m)
    }
}

impl KvEventMetrics {
    /// Sets the gauges from the index: stale views, and blocks per worker (by URL; a
    /// data-parallel worker's ranks add up).
    pub fn refresh(&self, index: &KvIndex, workers: &[Arc<Worker>]) {
        let stale = index
            .workers()
            .iter()
            .filter(|(_, covered)| !covered)
            .count();
        self.stale_workers.set(stale as i64);
        self.blocks.reset();
        let urls: HashMap<WorkerId, &str> = workers.iter().map(|w| (w.id, w.url())).collect();
        for (id, blocks) in index.blocks_per_worker() {
            if let Some(url) = urls.get(&id) {
                self.blocks.with_label_values(&[url]).add(blocks as i64);
            }
        }
    }
}
