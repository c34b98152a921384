//! SMG's `cache_aware` policy, over token ids instead of message text.
//!
//! Per request (SMG `cache_aware.rs`, the per-request spill gate of current releases):
//! 1. `load` is the gateway's own in-flight count per worker; take its mean and the
//!    least-loaded worker.
//! 2. `match_rate` = the deepest match any worker has (from the prefix index) / prompt length.
//! 3. `match_rate > --cache-threshold` is a hit: among the workers holding that deepest match
//!    the least-loaded wins, unless it spills: `load > mean × --balance-rel-threshold` **and**
//!    `load > mean + --balance-abs-threshold` send it to the least-loaded worker instead.
//!    Anything else is a miss and goes to the least-loaded worker.
//! 4. The prompt is inserted for the chosen worker, so a spill replicates the prefix there.
//! 5. Every `--eviction-interval-secs` the index is swept down to `--max-tree-size` tokens.
//!
//! Differences, on purpose: matching is page-aligned over token ids (SMG's gRPC token tree,
//! not its HTTP character tree), sizes count tokens, ties are broken by rotating the starting
//! worker (SMG: request counts, then index) so a cold fleet with no load yet still spreads,
//! and the sweep runs inline on the request that finds it due (policies have no thread).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cached::{retain_live_views, Cached};
use super::prefix_index::PrefixIndex;
use super::{Pick, Policy, RouteRequest};
use crate::workers::kv_events::KvIndex;
use crate::workers::{Worker, WorkerId};

#[derive(Debug, Clone, Copy)]
pub struct CacheAwareConfig {
    pub cache_threshold: f64,
    pub balance_abs_threshold: usize,
    pub balance_rel_threshold: f64,
    /// Zero: evict inline at every insert.
    pub eviction_interval: Duration,
    pub page_size: usize,
    pub max_tree_size: usize,
}

pub struct CacheAware {
    cfg: CacheAwareConfig,
    index: PrefixIndex,
    started: Instant,
    last_sweep_ms: AtomicU64,
    rotate: AtomicUsize,
    /// Exact cache contents of workers that publish KV events.
    kv: Option<Arc<KvIndex>>,
}

impl CacheAware {
    pub fn new(cfg: CacheAwareConfig) -> CacheAware {
        let index = PrefixIndex::new(cfg.page_size, cfg.max_tree_size);
        let index = if cfg.eviction_interval.is_zero() {
            index
        } else {
            index.with_periodic_eviction()
        };
        CacheAware {
            cfg,
            index,
            started: Instant::now(),
            last_sweep_ms: AtomicU64::new(0),
            rotate: AtomicUsize::new(0),
            kv: None,
        }
    }

    pub fn with_kv_index(mut self, kv: Option<Arc<KvIndex>>) -> CacheAware {
        self.kv = kv;
        self
    }

    pub fn index(&self) -> &PrefixIndex {
        &self.index
    }

    fn maybe_sweep(&self) {
        let interval = self.cfg.eviction_interval.as_millis() as u64;
        if interval == 0 {
            return;
        }
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        // One request wins the exchange and sweeps; the others go on routing.
        if now.saturating_sub(last) >= interval
            && self
                .last_sweep_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.index.evict();
        }
    }
}

/// What [`CacheAware::pick`] needs of the candidates' (load, matched tokens): the total load,
/// the least-loaded one, and the least-loaded of those with the deepest match. Ties go to the
/// first from `start` on, so equal loads take turns.
#[derive(Debug, PartialEq, Eq)]
struct Survey {
    total: usize,
    least_at: usize,
    least_matched: usize,
    best_at: usize,
    /// The deepest match of any candidate.
    best_matched: usize,
    best_load: usize,
}

/// One pass over the `n` candidates in rotation order, reading each once (`figures(i)`): at
/// thousands of workers each read is a cache miss. Two ranges, not `(start + k) % n`: no
/// division per worker. `None` when `n` is 0.
fn survey(n: usize, start: usize, figures: impl Fn(usize) -> (usize, usize)) -> Option<Survey> {
    let mut total = 0usize;
    let mut least: Option<(usize, usize, usize)> = None; // (load, index, matched)
    let mut deepest: Option<(usize, usize, usize)> = None; // (matched, load, index)
    for i in (start.min(n)..n).chain(0..start.min(n)) {
        let (load, depth) = figures(i);
        total = total.saturating_add(load);
        if least.is_none_or(|(l, _, _)| load < l) {
            least = Some((load, i, depth));
        }
        if deepest.is_none_or(|(d, l, _)| depth > d || (depth == d && load < l)) {
            deepest = Some((depth, load, i));
        }
    }
    let ((_, least_at, least_matched), (best_matched, best_load, best_at)) = (least?, deepest?);
    Some(Survey {
        total,
        least_at,
        least_matched,
        best_at,
        best_matched,
        best_load,
    })
}

impl Policy for CacheAware {
    fn index_tokens(&self) -> Option<usize> {
        Some(self.index.size().tokens)
    }

    fn pick(&self, req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<Pick> {
        if workers.is_empty() {
            return None;
        }
        let hashes = self.index.page_hashes(req.prompt_ids);
        let cached = Cached::lookup(
            &self.index,
            self.kv.as_deref(),
            req.prompt_ids,
            &hashes,
            workers,
        );
        let n = workers.len();
        let start = self.rotate.fetch_add(1, Ordering::Relaxed) % n;
        let s = survey(n, start, |i| {
            let w = workers[i];
            (w.in_flight(), cached.tokens(w.id))
        })?;
        let mean = s.total as f64 / n as f64;
        let match_rate = s.best_matched as f64 / req.prompt_ids.len().max(1) as f64;
        let least = (s.least_at, s.least_matched);

        let (chosen, predicted) = if s.best_matched > 0 && match_rate > self.cfg.cache_threshold {
            let load = s.best_load as f64;
            let spill = load > mean * self.cfg.balance_rel_threshold
                && load > mean + self.cfg.balance_abs_threshold as f64;
            if spill {
                least
            } else {
                (s.best_at, s.best_matched)
            }
        } else {
            least
        };
        cached.record(&self.index, self.kv.as_deref(), &hashes, workers[chosen].id);
        self.maybe_sweep();
        Some(Pick {
            index: chosen,
            predicted_cached: predicted,
            probe: None,
        })
    }

    fn on_workers_changed(&self, live: &[WorkerId]) {
        self.index.retain_live(live);
        retain_live_views(self.kv.as_deref(), live);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The one pass finds what separate passes over the two lists find (as this policy
        /// did before): `min_by_key` keeps the first minimum in rotation order.
        #[test]
        fn one_pass_finds_what_separate_passes_find(
            figures in proptest::collection::vec((0usize..4, 0usize..3), 1..24),
            start in 0usize..24,
        ) {
            let n = figures.len();
            let start = start % n;
            let order: Vec<usize> = (start..n).chain(0..start).collect();
            let least = order.iter().copied().min_by_key(|&i| figures[i].0).unwrap();
            let deepest = figures.iter().map(|f| f.1).max().unwrap();
            let best = order
                .iter()
                .copied()
                .filter(|&i| figures[i].1 == deepest)
                .min_by_key(|&i| figures[i].0)
                .unwrap();
            let expected = Survey {
                total: figures.iter().map(|f| f.0).sum(),
                least_at: least,
                least_matched: figures[least].1,
                best_at: best,
                best_matched: deepest,
                best_load: figures[best].0,
            };
            proptest::prop_assert_eq!(survey(n, start, |i| figures[i]), Some(expected));
        }
    }
    use crate::workers::LoadGuard;

    fn policy(interval_secs: u64, max_tree_size: usize) -> CacheAware {
        CacheAware::new(CacheAwareConfig {
            cache_threshold: 0.3,
            balance_abs_threshold: 4,
            balance_rel_threshold: 1.5,
            eviction_interval: Duration::from_secs(interval_secs),
            page_size: 16,
            max_tree_size,
        })
    }

    fn prompt(group: u32, question: u32) -> Vec<u32> {
        let mut v: Vec<u32> = (0..256).map(|t| group * 10_000 + t).collect();
        v.extend((0..32).map(|t| 5_000_000 + question * 100 + t));
        v
    }

    fn pick(p: &CacheAware, ids: &[u32], refs: &[&Arc<Worker>]) -> Pick {
        let req = RouteRequest {
            prompt_ids: ids,
            session_key: None,
        };
        p.pick(&req, refs).unwrap()
    }

    #[test]
    fn sticks_to_shared_prefix_and_spreads_misses() {
        let ws = crate::routing::test_workers(4);
        let refs: Vec<_> = ws.iter().collect();
        let p = policy(0, 1 << 20);
        let first: Vec<usize> = (0..4)
            .map(|g| pick(&p, &prompt(g, 0), &refs).index)
            .collect();
        let mut distinct = first.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "unrelated prompts spread: {first:?}");
        for q in 1..20 {
            let pk = pick(&p, &prompt(2, q), &refs);
            assert_eq!(pk.index, first[2]);
            assert_eq!(pk.predicted_cached, 256);
        }
    }

    #[test]
    fn spills_only_past_both_balance_thresholds() {
        let ws = crate::routing::test_workers(4);
        let refs: Vec<_> = ws.iter().collect();
        let p = policy(0, 1 << 20);
        let home = pick(&p, &prompt(7, 0), &refs).index;
        let mut guards = Vec::new();
        // Loads (n, 0, 0, 0): mean n/4. Spill needs n > 1.5·n/4 and n > n/4 + 4, i.e. n ≥ 6.
        for n in 1..=5 {
            guards.push(LoadGuard::book(Arc::clone(&ws[home]), 0));
            assert_eq!(pick(&p, &prompt(7, n), &refs).index, home, "n={n}");
        }
        guards.push(LoadGuard::book(Arc::clone(&ws[home]), 0));
        let spilled = pick(&p, &prompt(7, 9), &refs);
        assert_ne!(spilled.index, home);
        assert_eq!(spilled.predicted_cached, 0);
        // The spill replicated the prefix: the new worker now hits too.
        guards.clear();
        let _busy = LoadGuard::book(Arc::clone(&ws[home]), 0);
        let again = pick(&p, &prompt(7, 10), &refs);
        assert_eq!((again.index, again.predicted_cached), (spilled.index, 256));
    }

    #[test]
    fn low_match_rate_is_a_miss() {
        let ws = crate::routing::test_workers(2);
        let refs: Vec<_> = ws.iter().collect();
        let p = policy(0, 1 << 20);
        let long: Vec<u32> = (0..1000).collect();
        let home = pick(&p, &long[..64], &refs).index;
        let _g = LoadGuard::book(Arc::clone(&ws[home]), 0);
        // 64 of 1000 tokens match (6.4% ≤ 30%): least-loaded wins, not the holder.
        assert_ne!(pick(&p, &long, &refs).index, home);
    }

    #[test]
    fn forgets_removed_workers_and_respects_tree_size() {
        let ws = crate::routing::test_workers(3);
        let refs: Vec<_> = ws.iter().collect();
        let p = policy(0, 100_000);
        for i in 0..4000 {
            pick(&p, &prompt(i, i), &refs);
            assert!(p.index().size().tokens <= 100_000);
        }
        let home = pick(&p, &prompt(1, 1), &refs).index;
        let live: Vec<WorkerId> = ws
            .iter()
            .map(|w| w.id)
            .filter(|&id| id != ws[home].id)
            .collect();
        p.on_workers_changed(&live);
        let again = pick(&p, &prompt(1, 2), &refs);
        assert_eq!(again.predicted_cached, 0);
    }

    #[test]
    fn periodic_sweep_keeps_index_within_twice_the_budget() {
        let ws = crate::routing::test_workers(2);
        let refs: Vec<_> = ws.iter().collect();
        let p = policy(3600, 50_000);
        for i in 0..2000 {
            pick(&p, &prompt(i, i), &refs);
        }
        assert!(p.index().size().tokens <= 2 * p.index().budget_tokens());
        p.index().evict();
        assert!(p.index().size().tokens <= 50_000);
    }
}
