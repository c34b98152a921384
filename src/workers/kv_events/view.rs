//! Applying one batch's events to the exact index, whatever wire they came over.

use std::time::Duration;

use super::index::{Applied, KvIndex};
use super::metrics::KvEventMetrics;
use super::wire::Event;
use crate::workers::WorkerId;

/// One (worker, rank) view being fed, whatever the events' wire (ZMQ or gRPC).
pub(super) struct View<'a> {
    pub index: &'a KvIndex,
    pub metrics: &'a KvEventMetrics,
    pub worker: WorkerId,
    pub rank: u32,
    pub url: &'a str,
    pub rebuild: Duration,
}

impl View<'_> {
    /// One batch's events, counted by type.
    pub fn apply(&self, events: &[Event]) {
        self.metrics.batches.inc();
        let (w, rank) = (self.worker, self.rank);
        for ev in events {
            let kind = match ev {
                Event::Stored(s) => match self.index.store(w, rank, s) {
                    Applied::Indexed | Applied::Known => "stored",
                    Applied::Skipped => "skipped",
                    Applied::Orphan => "orphan",
                    Applied::Overflow => {
                        tracing::warn!(worker = %self.url, "kv events: the view passed its memory bound; rebuilding");
                        self.index.mark_stale(w, rank, self.rebuild);
                        "overflow"
                    }
                },
                Event::Removed {
                    hashes,
                    device_tier,
                } => {
                    if *device_tier {
                        self.index.remove(w, rank, hashes);
                    }
                    "removed"
                }
                Event::Cleared => {
                    self.index.clear_view(w, rank);
                    "cleared"
                }
                Event::Other => "other",
            };
            self.metrics.events.with_label_values(&[kind]).inc();
        }
    }
}
