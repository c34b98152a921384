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
//! The ring is rebuilt only when the candidate list (healthy workers, in order) changes, detected
//! by a fingerprint. Points hash only the worker's URL, so a rebuild is the same ring minus or
//! plus that worker's points, and every replica (or a restarted gateway) builds the same ring
//! whatever order it learnt its workers in.

use std::sync::{Arc, RwLock};

use super::prefix_index::{hash_page, mix64};
use super::{Pick, Policy, RouteRequest};
use crate::workers::{Worker, WorkerId};

/// Points per worker: 160, as the vLLM router and ketama use, keeps shares within a few percent.
const VNODES: u64 = 160;

#[derive(Default)]
struct Ring {
    fingerprint: u64,
    /// (point, candidate index), sorted by point.
    points: Vec<(u64, usize)>,
}

pub struct ConsistentHash {
    load_factor: f64,
    page_size: usize,
    ring: RwLock<Ring>,
}

fn fingerprint(workers: &[&Arc<Worker>]) -> u64 {
    workers
        .iter()
        .fold(workers.len() as u64, |h, w| mix64(h ^ u64::from(w.id.0)))
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

    fn rebuild(&self, workers: &[&Arc<Worker>], fp: u64) {
        let mut points: Vec<(u64, usize)> = workers
            .iter()
            .enumerate()
            .flat_map(|(i, w)| {
                let base = hash_str(w.url());
                (0..VNODES).map(move |v| (mix64(base ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15)), i))
            })
            .collect();
        points.sort_unstable();
        let mut ring = self.ring.write().unwrap_or_else(|e| e.into_inner());
        *ring = Ring {
            fingerprint: fp,
            points,
        };
    }
}

impl Policy for ConsistentHash {
    fn pick(&self, req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<Pick> {
        if workers.is_empty() {
            return None;
        }
        let fp = fingerprint(workers);
        let stale = self
            .ring
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .fingerprint
            != fp;
        if stale {
            self.rebuild(workers, fp);
        }
        let ring = self.ring.read().unwrap_or_else(|e| e.into_inner());
        let n = workers.len();
        let total: usize = workers.iter().map(|w| w.in_flight()).sum();
        let capacity = (self.load_factor * (total + 1) as f64 / n as f64).ceil() as usize;
        let key = self.key(req);
        let start = ring.points.partition_point(|p| p.0 < key);
        let fits = |i: usize| workers.get(i).is_some_and(|w| w.in_flight() < capacity);
        let mut walk = ring.points[start..]
            .iter()
            .chain(&ring.points[..start])
            .map(|p| p.1);
        // A rebuild racing with another membership can leave a ring for another list; the
        // bounds check in `fits` plus the fallback keep that to one odd pick.
        let owner = walk.clone().next().filter(|&i| i < n).unwrap_or(0);
        // Some worker is at or below the mean, and the mean is below capacity: the walk ends.
        let chosen = walk.find(|&i| fits(i)).unwrap_or(owner);
        Some(Pick::at(chosen))
    }

    fn on_workers_changed(&self, _live: &[WorkerId]) {
        // The next pick sees a new candidate list and rebuilds; clearing here frees the old ring.
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
