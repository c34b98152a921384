//! The set of workers. Requests read it through an `Arc` snapshot; membership changes (static
//! list at start, `POST/DELETE /workers`) swap in a new list. A removed worker's in-flight
//! requests keep their `Arc<Worker>` and finish normally.
//!
//! Routing picks among routing units: a worker routed whole, or, for a data-parallel worker
//! (learnt from its `/server_info`, `workers::dp`), one unit per rank in its place. Health
//! checks, load polls and `GET /workers` go through the members; the policies see the units.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::availability::{self, Available};
use super::{Worker, WorkerId};
use crate::protocol::sglang::DpRank;

#[derive(Debug, Default)]
pub struct Registry {
    workers: RwLock<Arc<[Arc<Worker>]>>,
    /// Shared by the registries of one gateway's models, so a worker id names one worker.
    next_id: Arc<AtomicU32>,
    /// A data-parallel member's rank units, by the member's id.
    units: RwLock<HashMap<WorkerId, Arc<[Arc<Worker>]>>>,
    /// The routing units, rebuilt whenever members or units change.
    routing: RwLock<Arc<[Arc<Worker>]>>,
    /// Counts those changes, so a policy hears of units that appear in the background.
    generation: AtomicU64,
    /// The routing units that may take requests, as of a generation and availability epoch.
    available: RwLock<Arc<Available>>,
    /// `--disable-dp-routing`: every worker is routed whole.
    whole_only: AtomicBool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    #[error("{0}")]
    InvalidUrl(String),
    #[error("worker {0} is already registered")]
    Duplicate(String),
}

impl Registry {
    pub fn new(urls: &[String]) -> Result<Registry, RegistryError> {
        let registry = Registry::default();
        for url in urls {
            registry.add(url)?;
        }
        Ok(registry)
    }

    /// A registry whose ids come from `ids`, shared with other registries.
    pub fn sharing_ids(urls: &[String], ids: Arc<AtomicU32>) -> Result<Registry, RegistryError> {
        let registry = Registry {
            next_id: ids,
            ..Registry::default()
        };
        for url in urls {
            registry.add(url)?;
        }
        Ok(registry)
    }

    pub fn add(&self, url: &str) -> Result<Arc<Worker>, RegistryError> {
        let id = WorkerId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let worker = Arc::new(Worker::new(id, url).map_err(RegistryError::InvalidUrl)?);
        let mut guard = self.workers.write().unwrap_or_else(|e| e.into_inner());
        if guard.iter().any(|w| w.url() == worker.url()) {
            return Err(RegistryError::Duplicate(worker.url().to_owned()));
        }
        let mut list: Vec<Arc<Worker>> = guard.iter().cloned().collect();
        list.push(Arc::clone(&worker));
        *guard = list.into();
        self.rebuild_routing(&guard);
        Ok(worker)
    }

    pub fn remove(&self, id: WorkerId) -> Option<Arc<Worker>> {
        let mut guard = self.workers.write().unwrap_or_else(|e| e.into_inner());
        let removed = guard.iter().find(|w| w.id == id).cloned()?;
        *guard = guard
            .iter()
            .filter(|w| w.id != id)
            .cloned()
            .collect::<Vec<_>>()
            .into();
        self.units
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        self.rebuild_routing(&guard);
        Some(removed)
    }

    /// Routes `member` as one unit per rank (`ranks` empty: whole again). Units keep their ids
    /// while the ranks stay the same; returns whether anything changed.
    pub fn set_dp_ranks(&self, member: WorkerId, ranks: &[DpRank]) -> bool {
        let guard = self.workers.write().unwrap_or_else(|e| e.into_inner());
        let Some(worker) = guard.iter().find(|w| w.id == member) else {
            return false;
        };
        {
            let mut units = self.units.write().unwrap_or_else(|e| e.into_inner());
            let current: Vec<Option<DpRank>> = units
                .get(&member)
                .map(|u| u.iter().map(|w| w.dp_rank()).collect())
                .unwrap_or_default();
            let wanted: Vec<Option<DpRank>> = ranks.iter().copied().map(Some).collect();
            if current == wanted {
                return false;
            }
            if ranks.is_empty() {
                units.remove(&member);
            } else {
                let made: Vec<Arc<Worker>> = ranks
                    .iter()
                    .map(|r| {
                        let id = WorkerId(self.next_id.fetch_add(1, Ordering::Relaxed));
                        Arc::new(worker.rank_unit(id, *r))
                    })
                    .collect();
                units.insert(member, made.into());
            }
        }
        self.rebuild_routing(&guard);
        true
    }

    /// Whether data-parallel workers are routed per rank (on unless `--disable-dp-routing`).
    pub fn route_dp_ranks(&self, on: bool) {
        self.whole_only.store(!on, Ordering::Relaxed);
    }

    pub fn routes_dp_ranks(&self) -> bool {
        !self.whole_only.load(Ordering::Relaxed)
    }

    /// A member's rank units (`None`: routed whole).
    pub fn units_of(&self, member: WorkerId) -> Option<Arc<[Arc<Worker>]>> {
        let units = self.units.read().unwrap_or_else(|e| e.into_inner());
        units.get(&member).cloned()
    }

    /// What routing picks among.
    pub fn routing(&self) -> Arc<[Arc<Worker>]> {
        Arc::clone(&self.routing.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The routing units that may take requests now (`Available::candidates`), built again
    /// only when the units, some worker's health or some breaker changed since last time.
    pub fn available(&self) -> Arc<Available> {
        let (generation, epoch) = (self.generation(), availability::epoch());
        {
            let kept = self.available.read().unwrap_or_else(|e| e.into_inner());
            if kept.is_current(generation, epoch) {
                return Arc::clone(&kept);
            }
        }
        // Two picks may both build; either list is right for what it read.
        let fresh = Arc::new(Available::build(generation, epoch, &self.routing()));
        *self.available.write().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&fresh);
        fresh
    }

    pub fn routing_ids(&self) -> Vec<WorkerId> {
        self.routing().iter().map(|w| w.id).collect()
    }

    /// Changes whenever the routing units do.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Called with the members' write lock held, so two changes cannot interleave.
    fn rebuild_routing(&self, members: &[Arc<Worker>]) {
        let units = self.units.read().unwrap_or_else(|e| e.into_inner());
        let mut routing = Vec::with_capacity(members.len());
        for m in members {
            match units.get(&m.id) {
                Some(u) => routing.extend(u.iter().cloned()),
                None => routing.push(Arc::clone(m)),
            }
        }
        *self.routing.write().unwrap_or_else(|e| e.into_inner()) = routing.into();
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn snapshot(&self) -> Arc<[Arc<Worker>]> {
        Arc::clone(&self.workers.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn ids(&self) -> Vec<WorkerId> {
        self.snapshot().iter().map(|w| w.id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_remove_and_duplicates() {
        let r = Registry::new(&["http://127.0.0.1:1".into()]).unwrap();
        let w = r.add("http://127.0.0.1:2/").unwrap();
        assert_eq!(w.url(), "http://127.0.0.1:2");
        assert!(matches!(
            r.add("http://127.0.0.1:2"),
            Err(RegistryError::Duplicate(_))
        ));
        assert!(matches!(
            r.add("ftp://x"),
            Err(RegistryError::InvalidUrl(_))
        ));
        assert_eq!(r.snapshot().len(), 2);
        assert!(r.remove(w.id).is_some());
        assert!(r.remove(w.id).is_none());
        assert_eq!(r.ids(), vec![WorkerId(0)]);
    }

    #[test]
    fn a_data_parallel_member_is_routed_as_its_ranks() {
        use crate::protocol::sglang::RankField;
        let r = Registry::new(&["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()]).unwrap();
        let rank = |rank| DpRank {
            rank,
            size: 2,
            field: RankField::RoutedDpRank,
        };
        let before = r.generation();
        assert!(r.set_dp_ranks(WorkerId(1), &[rank(0), rank(1)]));
        assert!(r.generation() > before);
        assert!(!r.set_dp_ranks(WorkerId(1), &[rank(0), rank(1)]));
        let routing = r.routing();
        assert_eq!(routing.len(), 3);
        assert_eq!(routing[0].id, WorkerId(0));
        assert_eq!(routing[2].dp_rank(), Some(rank(1)));
        assert_eq!(routing[2].url(), "http://127.0.0.1:2");
        // The units share the member's health and breaker.
        r.snapshot()[1].set_healthy(true);
        assert!(routing[1].is_healthy() && routing[2].is_healthy());
        assert_eq!(r.snapshot().len(), 2);
        assert!(r.remove(WorkerId(1)).is_some());
        assert_eq!(r.routing_ids(), vec![WorkerId(0)]);
        assert!(r.units_of(WorkerId(1)).is_none());
    }
}
