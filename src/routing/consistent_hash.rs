//! Consistent hashing with bounded load (Mirrokni, Thorup, Zadimoghaddam 2018).
//!
//! The key is the session key (`X-SMG-Routing-Key`, `X-Session-ID` or `user`), else the first
//! page of the prompt, which for chat prompts is the system prompt and template header: the same
//! agent or app then keeps landing on the same worker and its cache.
//!
//! Each worker owns `VNODES` points on a ring; a key goes to the first point clockwise. Removing
//! a worker only moves the keys it owned. Bounded load: a worker takes the request only while
//! its in-flight count stays within `ceil(c × (total in-flight + 1) / n)` (`--hash-load-factor`
//! c, default 1.25); otherwise the walk continues clockwise. So a hot key overflows to its ring
//! successors, always the same ones, instead of piling onto one worker.
//!
//! The ring holds every worker it has seen since the last membership change, and a pick walks
//! it skipping points whose worker is not a candidate: a retry that excludes a worker (or a
//! worker that is unhealthy for a while) is the same ring minus that worker's points, with no
//! rebuild. It is rebuilt only when a candidate is missing from it, or cleared when a worker
//! leaves the registry. Points hash only the worker's URL, so every replica (or a restarted
//! gateway) builds the same ring whatever order it learnt its workers in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::prefix_index::{hash_page, mix64};
use super::{Pick, Policy, RouteRequest};
use crate::workers::{Worker, WorkerId};

/// Points per worker: 160, as the vLLM router and ketama use, keeps shares within a few percent.
const VNODES: u64 = 160;

#[derive(Default)]
struct Ring {
    /// The workers that own points, sorted.
    members: Vec<WorkerId>,
    /// (point, owner), sorted by point.
    points: Vec<(u64, WorkerId)>,
}

impl Ring {
    /// Whether every candidate owns points; `by_id` sorted by id, so one merge pass.
    fn covers(&self, by_id: &[(WorkerId, u32)]) -> bool {
        let mut members = self.members.iter().peekable();
        by_id.iter().all(|(id, _)| {
            while members.next_if(|m| *m < id).is_some() {}
            members.peek().is_some_and(|m| *m == id)
        })
    }
}

/// The candidates' ids with their positions, sorted by id (a point's owner is found by binary
/// search, not a scan of the candidates per point walked), and their total in-flight count:
/// one pass over the workers.
fn candidates(workers: &[&Arc<Worker>]) -> (Vec<(WorkerId, u32)>, usize) {
    let mut total = 0;
    let mut by_id: Vec<(WorkerId, u32)> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            total += w.in_flight();
            (w.id, u32::try_from(i).unwrap_or(u32::MAX))
        })
        .collect();
    // Registry order is mostly id order already: the sort is close to one pass.
    by_id.sort_unstable();
    (by_id, total)
}

pub struct ConsistentHash {
    load_factor: f64,
    page_size: usize,
    ring: RwLock<Ring>,
    /// Rings built so far: exclusions must not add to it (checked by the tests).
    builds: AtomicU64,
}

/// FNV-1a, then avalanche: session keys are short strings.
fn hash_str(s: &str) -> u64 {
    let h = s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    mix64(h)
}

impl ConsistentHash {
    pub fn new(load_factor: f64, page_size: usize) -> ConsistentHash {
        ConsistentHash {
            // Below 1 no worker could ever take a request; NaN would compare false everywhere.
            load_factor: if load_factor.is_nan() {
                1.0
            } else {
                load_factor.max(1.0)
            },
            page_size: page_size.max(1),
            ring: RwLock::default(),
            builds: AtomicU64::new(0),
        }
    }

    fn key(&self, req: &RouteRequest<'_>) -> u64 {
        match req.session_key {
            Some(k) => hash_str(k),
            None => {
                let first = &req.prompt_ids[..req.prompt_ids.len().min(self.page_size)];
                hash_page(None, first)
            }
        }
    }

    fn rebuild(&self, workers: &[&Arc<Worker>]) {
        let mut points: Vec<(u64, WorkerId)> = workers
            .iter()
            .flat_map(|w| {
                let (base, id) = (hash_str(w.url()), w.id);
                (0..VNODES).map(move |v| (mix64(base ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15)), id))
            })
            .collect();
        points.sort_unstable();
        let mut members: Vec<WorkerId> = workers.iter().map(|w| w.id).collect();
        members.sort_unstable();
        self.builds.fetch_add(1, Ordering::Relaxed);
        *self.ring.write().unwrap_or_else(|e| e.into_inner()) = Ring { members, points };
    }
}

impl Policy for ConsistentHash {
    fn pick(&self, req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<Pick> {
        if workers.is_empty() {
            return None;
        }
        let (by_id, total) = candidates(workers);
        let covered = self
            .ring
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .covers(&by_id);
        if !covered {
            self.rebuild(workers);
        }
        let ring = self.ring.read().unwrap_or_else(|e| e.into_inner());
        let n = workers.len();
        let capacity = (self.load_factor * (total + 1) as f64 / n as f64).ceil() as usize;
        let key = self.key(req);
        let start = ring.points.partition_point(|p| p.0 < key);
        let position = |owner: WorkerId| {
            let at = by_id.binary_search_by_key(&owner, |e| e.0).ok()?;
            by_id.get(at).map(|e| e.1 as usize)
        };
        // Points of workers that are not candidates (excluded by a retry, unhealthy) are
        // skipped: the walk is the one the ring without them would make.
        let mut walk = ring.points[start..]
            .iter()
            .chain(&ring.points[..start])
            .filter_map(|p| position(p.1));
        // A membership change racing with this pick can leave a ring without the candidates;
        // the fallback keeps that to one odd pick.
        let Some(owner) = walk.next() else {
            return Some(Pick::at(0));
        };
        // Some worker is at or below the mean, and the mean is below capacity: the walk ends.
        let chosen = std::iter::once(owner)
            .chain(walk)
            .find(|&i| workers.get(i).is_some_and(|w| w.in_flight() < capacity))
            .unwrap_or(owner);
        Some(Pick::at(chosen))
    }

    fn on_workers_changed(&self, _live: &[WorkerId]) {
        // A worker left: its points go with the whole ring, and the next pick builds a new one.
        *self.ring.write().unwrap_or_else(|e| e.into_inner()) = Ring::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::LoadGuard;

    fn pick_key(p: &ConsistentHash, key: &str, refs: &[&Arc<Worker>]) -> usize {
        let req = RouteRequest {
            prompt_ids: &[1, 2, 3],
            session_key: Some(key),
        };
        p.pick(&req, refs).unwrap().index
    }

    #[test]
    fn sessions_stick_and_spread() {
        let ws = crate::routing::test_workers(4);
        let refs: Vec<_> = ws.iter().collect();
        let p = ConsistentHash::new(1.25, 16);
        let mut per_worker = [0; 4];
        for s in 0..400 {
            let key = format!("session-{s}");
            let home = pick_key(&p, &key, &refs);
            assert_eq!(pick_key(&p, &key, &refs), home);
            per_worker[home] += 1;
        }
        assert!(per_worker.iter().all(|&c| c > 50), "{per_worker:?}");
    }

    #[test]
    fn prompt_head_is_the_fallback_key() {
        let ws = crate::routing::test_workers(8);
        let refs: Vec<_> = ws.iter().collect();
        let p = ConsistentHash::new(1.25, 16);
        let system: Vec<u32> = (0..16).collect();
        let homes: Vec<usize> = (0..10u32)
            .map(|q| {
                let mut ids = system.clone();
                ids.extend([1000 + q, 7, 8]);
                let req = RouteRequest {
                    prompt_ids: &ids,
                    session_key: None,
                };
                p.pick(&req, &refs).unwrap().index
            })
            .collect();
        assert!(homes.iter().all(|&h| h == homes[0]), "{homes:?}");
    }

    #[test]
    fn overloaded_home_moves_to_the_same_successor() {
        let ws = crate::routing::test_workers(4);
        let refs: Vec<_> = ws.iter().collect();
        let p = ConsistentHash::new(1.25, 16);
        let home = pick_key(&p, "hot", &refs);
        let mut guards: Vec<LoadGuard> = (0..4)
            .flat_map(|i| (0..4).map(move |_| i))
            .map(|i| LoadGuard::book(Arc::clone(&ws[i]), 0))
            .collect();
        // Even load 4 each: capacity ceil(1.25 × 17 / 4) = 6, so the home still takes it.
        assert_eq!(pick_key(&p, "hot", &refs), home);
        guards.extend((0..3).map(|_| LoadGuard::book(Arc::clone(&ws[home]), 0)));
        // Home at 7 ≥ capacity ceil(1.25 × 20 / 4) = 7: moves, and always to the same worker.
        let moved = pick_key(&p, "hot", &refs);
        assert_ne!(moved, home);
        assert_eq!(pick_key(&p, "hot", &refs), moved);
        guards.clear();
        assert_eq!(pick_key(&p, "hot", &refs), home);
    }

    #[test]
    fn removing_a_worker_moves_only_its_keys() {
        let ws = crate::routing::test_workers(5);
        let refs: Vec<_> = ws.iter().collect();
        let p = ConsistentHash::new(1.25, 16);
        let keys: Vec<String> = (0..300).map(|s| format!("k{s}")).collect();
        let before: Vec<WorkerId> = keys.iter().map(|k| ws[pick_key(&p, k, &refs)].id).collect();
        let gone = ws[2].id;
        let fewer: Vec<_> = ws.iter().filter(|w| w.id != gone).collect();
        p.on_workers_changed(&fewer.iter().map(|w| w.id).collect::<Vec<_>>());
        for (k, was) in keys.iter().zip(&before) {
            let now = fewer[pick_key(&p, k, &fewer)].id;
            assert_ne!(now, gone);
            if *was != gone {
                assert_eq!(now, *was, "{k} moved though its worker stayed");
            }
        }
        assert_eq!(p.pick(&RouteRequest::default(), &[]), None);
    }

    #[test]
    fn exclusion_walks_the_same_ring_without_rebuilding_it() {
        let ws = crate::routing::test_workers(5);
        let refs: Vec<_> = ws.iter().collect();
        let p = ConsistentHash::new(1.25, 16);
        let keys: Vec<String> = (0..200).map(|s| format!("k{s}")).collect();
        let homes: Vec<usize> = keys.iter().map(|k| pick_key(&p, k, &refs)).collect();
        assert_eq!(p.builds.load(Ordering::Relaxed), 1);
        for (k, &home) in keys.iter().zip(&homes) {
            // A retry: the home worker is excluded from the candidates.
            let rest: Vec<_> = ws.iter().filter(|w| w.id != ws[home].id).collect();
            let retried = rest[pick_key(&p, k, &rest)].id;
            // The ring built without that worker, from scratch, picks the same successor.
            let fresh = ConsistentHash::new(1.25, 16);
            assert_eq!(rest[pick_key(&fresh, k, &rest)].id, retried, "{k}");
            assert_ne!(retried, ws[home].id);
            // And the full candidate list goes home again.
            assert_eq!(pick_key(&p, k, &refs), home, "{k}");
        }
        assert_eq!(
            p.builds.load(Ordering::Relaxed),
            1,
            "an exclusion rebuilt the ring"
        );
        // A new worker is not on the ring: that is a rebuild.
        let more = crate::routing::test_workers(6);
        pick_key(&p, "k0", &more.iter().collect::<Vec<_>>());
        assert_eq!(p.builds.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn candidates_in_any_order_get_the_same_worker() {
        // Registry order is not id order once data-parallel rank units join: owners are found
        // among the candidates by id, whatever their order, loaded or not.
        let ws = crate::routing::test_workers(9);
        let _load: Vec<LoadGuard> = [4, 4, 4, 7, 7]
            .iter()
            .map(|&i| LoadGuard::book(Arc::clone(&ws[i]), 0))
            .collect();
        let sorted: Vec<_> = ws.iter().collect();
        let mut shuffled = sorted.clone();
        shuffled.reverse();
        shuffled.swap(0, 4);
        let without_two: Vec<_> = shuffled
            .iter()
            .copied()
            .filter(|w| w.id != ws[2].id)
            .collect();
        let p = ConsistentHash::new(1.25, 16);
        for s in 0..300 {
            let key = format!("k{s}");
            let home = sorted[pick_key(&p, &key, &sorted)].id;
            assert_eq!(shuffled[pick_key(&p, &key, &shuffled)].id, home, "{key}");
            let fresh = ConsistentHash::new(1.25, 16);
            let sorted_rest: Vec<_> = sorted
                .iter()
                .copied()
                .filter(|w| w.id != ws[2].id)
                .collect();
            assert_eq!(
                without_two[pick_key(&p, &key, &without_two)].id,
                sorted_rest[pick_key(&fresh, &key, &sorted_rest)].id,
                "{key}"
            );
        }
        assert_eq!(p.builds.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn replicas_that_learnt_workers_in_another_order_agree() {
        let urls: Vec<String> = (0..5).map(|i| format!("http://10.0.0.{i}:8000")).collect();
        let one: Vec<Arc<Worker>> = urls
            .iter()
            .enumerate()
            .map(|(i, u)| Arc::new(Worker::new(WorkerId(i as u32), u).unwrap()))
            .collect();
        // Another replica: the same workers discovered in reverse order, so other ids.
        let other: Vec<Arc<Worker>> = urls
            .iter()
            .rev()
            .enumerate()
            .map(|(i, u)| Arc::new(Worker::new(WorkerId(i as u32), u).unwrap()))
            .collect();
        let (r1, r2): (Vec<_>, Vec<_>) = (one.iter().collect(), other.iter().collect());
        let (p1, p2) = (ConsistentHash::new(1.25, 16), ConsistentHash::new(1.25, 16));
        for s in 0..200 {
            let key = format!("session-{s}");
            assert_eq!(
                one[pick_key(&p1, &key, &r1)].url(),
                other[pick_key(&p2, &key, &r2)].url(),
                "{key}"
            );
        }
    }
}
