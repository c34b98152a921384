//! The driver's state under its one lock: the engine, who listens to each request, and where
//! the scheduler's gauges and KV events go.

use std::collections::HashMap;

use tokio::sync::mpsc;

use super::Progress;
use crate::sim::engine::{Engine, Event, RequestId, Step, StepKind};
use crate::sim::gauges::GaugeCadence;
use crate::sim::kv_events::publisher::EventSink;

pub(super) struct Subscriber {
    pub(super) rid: String,
    pub(super) tx: mpsc::UnboundedSender<Progress>,
}

pub(super) struct Core {
    pub(super) engine: Engine,
    pub(super) subscribers: HashMap<RequestId, Subscriber>,
    /// Requests whose rid a later request took over (0.5.9): they run on, heard by nobody, and
    /// their handler waits on a channel that stays open until its client leaves. An abort of
    /// their rid still reaches them in the scheduler.
    pub(super) orphans: HashMap<RequestId, Subscriber>,
    pub(super) next_id: u64,
    /// `--kv-events-config`: where each step's KV events go.
    pub(super) kv_events: Option<EventSink>,
    /// `--enable-metrics`: the load gauges as the scheduler last reported them.
    pub(super) gauges: Option<GaugeCadence>,
}

impl Core {
    /// [`Driver::abort_by_rid`]. An orphan is aborted silently: its output would go to the
    /// rid's new owner, which the same abort ends.
    pub(super) fn abort_by_rid(&mut self, rid_prefix: &str, all: bool) -> usize {
        if !all && !self.subscribers.values().any(|s| s.rid == rid_prefix) {
            return 0;
        }
        let matches = |s: &Subscriber| all || s.rid.starts_with(rid_prefix);
        let ids: Vec<RequestId> = self
            .subscribers
            .iter()
            .filter(|(_, s)| matches(s))
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            self.engine.abort(*id);
            if let Some(sub) = self.subscribers.remove(id) {
                let _ = sub.tx.send(Progress::Aborted);
            }
        }
        for (id, _) in self.orphans.iter().filter(|(_, s)| matches(s)) {
            self.engine.abort(*id);
        }
        ids.len()
    }

    /// The scheduler's stats logging after a step (`--enable-metrics` only: it costs a load
    /// snapshot per prefill step).
    pub(super) fn report_gauges(&mut self, step: &Step) {
        let Some(gauges) = self.gauges.as_mut() else {
            return;
        };
        let now = std::time::Instant::now();
        match step.kind {
            StepKind::Prefill => {
                let hit = step
                    .events
                    .iter()
                    .map(|e| match e {
                        Event::Started { cached_tokens, .. } => *cached_tokens,
                        Event::Token { .. } => 0,
                    })
                    .sum();
                gauges.prefill(&self.engine.loads(), hit, step.prefill_tokens, now);
            }
            StepKind::Decode => gauges.decode(|| self.engine.loads(), now),
        }
    }

    /// One batch per step that changed the cache, as the scheduler publishes after each step.
    pub(super) fn publish_kv_events(&mut self) {
        if let Some(sink) = &self.kv_events {
            sink.publish(self.engine.take_kv_events());
        }
    }
}
