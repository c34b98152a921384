//! `prefix_cost` (the default policy): send each request where it is estimated to cost least.
//!
//! ```text
//! cost(w) = prefill_weight × (prompt_tokens − predicted_cached(w))       the prefill it adds
//!         + prefill_weight × evicted(w)                                  the cache that evicts
//!         + max(pending_prefill(w), engine.waiting_uncached_tokens(w))   prefill queued before it
//!         + decode_weight × (in_flight(w) + others_running(w))          decode it shares a batch with
//! ```
//! Lowest cost wins; equal costs go to the lower decode load, then queued prefill, then to the
//! next worker in turn (so a cold fleet with no load figures yet still spreads).
//!
//! Everything is in prefill-token equivalents. `predicted_cached` comes from the prefix index
//! (what the gateway routed there, page-aligned). Queued prefill takes the larger of the
//! gateway's own booking (current, but counts whole prompts) and the engine's polled figure
//! (knows its cache, but is up to one poll old). Decode load is the gateway's own bookings, now,
//! plus what the engine ran beyond them at its last report (another gateway's requests): the
//! engine's count alone, one poll old, kept a worker whose batch had just ended looking full,
//! and sent its next requests to a worker in the middle of its batch.
//!
//! Why `--decode-weight` 128 with `--prefill-weight` 1: moving a request off the worker that has
//! its 2,048-token system prompt cached costs 2,048 tokens of prefill elsewhere, which also
//! stalls that worker's decode batch while it runs. Each request already decoding on a worker
//! slows every step there (longer batch, more KV to read) for its whole output, worth a hundred
//! or so prefill tokens on SGLang-class engines. At 128, a cached prefix of 2,048 tokens
//! outweighs a 16-request in-flight gap: a group stays put under ordinary jitter (256 gave 84 %
//! cached against cache_aware's 88 % in `benches/routing_quality.py`'s bench_serving run, with
//! 32 clients on 4 workers the gap of 8 was often reached), but a hot group's worker still sheds
//! load once it runs 16 requests ahead, so a Zipf-skewed workload stays within 2× between the
//! busiest and idlest worker. A spilled request's prompt is indexed on its new worker, so a hot
//! prefix ends up replicated on as many workers as its load needs.
//! Raise `--decode-weight` to balance harder, lower it to stick harder; scale it with the
//! shared prefix length (weight ≈ shared tokens ÷ tolerated in-flight gap).
//!
//! Why `evicted(w)`: a worker whose KV is full makes room for the tokens it prefills by evicting
//! its least recently used cached tokens, which a later request may have to prefill again.
//! Without the term, a request whose home is briefly busy (queueing one cold prompt's prefill is
//! enough) copies its prefix onto another full worker: this request's prefill is paid once, but
//! the copy evicts another group's prefix there, whose next request misses and spills in turn
//! (issue 15's cache-pressure benchmark: 72 % cached against an 83 % ceiling). The term counts
//! every evicted token as one to prefill again (pessimistic: the victim may be dead, such as a
//! finished request's own tail), so on full workers a copy costs twice its prefill and a new
//! prefix prefers a worker with free KV. Known only for workers whose KV events are followed
//! (their capacity and held blocks); with free KV everywhere it is 0 and changes nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::cached::{retain_live_views, Cached};
use super::prefix_index::PrefixIndex;
use super::{Pick, Policy, RouteRequest};
use crate::workers::kv_events::KvIndex;
use crate::workers::{Worker, WorkerId};

pub struct PrefixCost {
    /// The weights in fixed point (`FIXED_ONE` = 1): the scan runs over every candidate on
    /// every request, and integer costs keep it to a multiply-add per figure where floats took
    /// conversions and a longer dependency chain (`benches/routing.rs`).
    prefill_weight: u64,
    decode_weight: u64,
    index: PrefixIndex,
    /// Exact cache contents of workers that publish KV events.
    kv: Option<Arc<KvIndex>>,
    rotate: AtomicUsize,
}

/// Weights keep 16 fractional bits: 1/65,536 is finer than any useful setting.
const FIXED_ONE: u64 = 1 << 16;

/// Negative or NaN weights would invert or break the ordering: 0. Infinite or huge ones
/// saturate, as do the costs they scale (`as` saturates; `max` drops a NaN).
fn fixed(w: f64) -> u64 {
    (w.max(0.0) * FIXED_ONE as f64) as u64
}

impl PrefixCost {
    pub fn new(prefill_weight: f64, decode_weight: f64, index: PrefixIndex) -> PrefixCost {
        PrefixCost {
            prefill_weight: fixed(prefill_weight),
            decode_weight: fixed(decode_weight),
            index,
            kv: None,
            rotate: AtomicUsize::new(0),
        }
    }

    pub fn with_kv_index(mut self, kv: Option<Arc<KvIndex>>) -> PrefixCost {
        self.kv = kv;
        self
    }

    pub fn index(&self) -> &PrefixIndex {
        &self.index
    }
}

impl Policy for PrefixCost {
    fn index_tokens(&self) -> Option<usize> {
        Some(self.index.size().tokens)
    }

    fn pick(&self, req: &RouteRequest<'_>, workers: &[&Arc<Worker>]) -> Option<Pick> {
        let n = workers.len();
        if n == 0 {
            return None;
        }
        let hashes = self.index.page_hashes(req.prompt_ids);
        let held = Cached::lookup(
            &self.index,
            self.kv.as_deref(),
            req.prompt_ids,
            &hashes,
            workers,
        );
        let prompt = req.prompt_ids.len();
        let start = self.rotate.fetch_add(1, Ordering::Relaxed) % n;
        // The best so far: (cost, decode, queued), its index and cached tokens. Strict `<` keeps
        // the first in rotation order.
        let mut best = (u64::MAX, u64::MAX, u64::MAX);
        let (mut index, mut predicted) = (None, 0);
        // Two ranges, not `(start + k) % n`: no division per worker.
        for i in (start..n).chain(0..start) {
            let w = workers[i];
            let (cached, evicted) = held.tokens_and_evicted(w.id, prompt);
            let queued = w.pending_prefill().max(w.engine_waiting_uncached());
            let decode = w.running();
            let cost = self
                .prefill_weight
                .saturating_mul((prompt - cached + evicted) as u64)
                .saturating_add(queued.saturating_mul(FIXED_ONE))
                .saturating_add(self.decode_weight.saturating_mul(decode));
            let candidate = (cost, decode, queued);
            if candidate < best || index.is_none() {
                best = candidate;
                (index, predicted) = (Some(i), cached);
            }
        }
        let index = index?;
        held.record(&self.index, self.kv.as_deref(), &hashes, workers[index].id);
        Some(Pick {
            index,
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
    use crate::workers::kv_events::index::Applied;
    use crate::workers::kv_events::wire::Stored;
    use crate::workers::{EngineLoad, LoadGuard};

    fn policy() -> PrefixCost {
        PrefixCost::new(1.0, 256.0, PrefixIndex::new(16, 1 << 22))
    }

    fn prompt(group: u32, question: u32) -> Vec<u32> {
        let mut v: Vec<u32> = (0..2048).map(|t| group * 10_000 + t).collect();
        v.extend((0..128).map(|t| 50_000_000 + question * 1000 + t));
        v
    }

    fn pick(p: &PrefixCost, ids: &[u32], refs: &[&Arc<Worker>]) -> Pick {
        let req = RouteRequest {
            prompt_ids: ids,
            session_key: None,
        };
        p.pick(&req, refs).unwrap()
    }

    #[test]
    fn shared_prefix_sticks_and_unrelated_prompts_spread() {
        let ws = crate::routing::test_workers(4);
        let refs: Vec<_> = ws.iter().collect();
        let p = policy();
        let homes: Vec<usize> = (0..4)
            .map(|g| pick(&p, &prompt(g, 0), &refs).index)
            .collect();
        let mut distinct = homes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "{homes:?}");
        for q in 1..10 {
            let pk = pick(&p, &prompt(1, q), &refs);
            assert_eq!((pk.index, pk.predicted_cached), (homes[1], 2048));
        }
    }

    #[test]
    fn leaves_an_overloaded_worker() {
        let ws = crate::routing::test_workers(2);
        let refs: Vec<_> = ws.iter().collect();
        // 2048 cached tokens outweigh 7 more decoding requests (7 × 256); at 8 the costs tie
        // and the lower load wins.
        stays_until_loaded_past(&policy(), &ws, 3, 7);

        // The engine's own figures count too, even when the gateway sees no load.
        let p = policy();
        let home = pick(&p, &prompt(4, 0), &refs).index;
        assert_eq!(pick(&p, &prompt(4, 1), &refs).index, home);
        ws[home].set_engine_load(
            EngineLoad {
                running_requests: 2,
                waiting_requests: 3,
                waiting_uncached_tokens: 3000,
            },
            0,
        );
        // Home: 128 + 3000 + 2 × 256 = 3640 against 2176 elsewhere.
        let moved = pick(&p, &prompt(4, 2), &refs);
        assert_eq!((moved.index, moved.predicted_cached), (1 - home, 0));
    }

    /// Two workers each ran 128 of our requests at their engines' last report; worker 0's all
    /// ended since. Its clients' next requests go back to it, not to worker 1 in the middle
    /// of its batch (where each would stall 128 decoding requests with its prefill): the
    /// engine's count, one poll old, is not taken over our own current bookings. (Half of
    /// them here; past ~120 the prefill queued on worker 0 outweighs the gap.)
    #[test]
    fn a_worker_whose_requests_just_ended_takes_the_next_ones() {
        let ws = crate::routing::test_workers(2);
        let refs: Vec<_> = ws.iter().collect();
        let p = policy();
        let book = |w: usize, tokens| LoadGuard::book(Arc::clone(&ws[w]), tokens);
        let mut ended: Vec<_> = (0..128).map(|_| book(0, 0)).collect();
        let _running: Vec<_> = (0..128).map(|_| book(1, 0)).collect();
        for w in &ws {
            let load = EngineLoad {
                running_requests: 128,
                ..EngineLoad::default()
            };
            w.set_engine_load(load, 128);
        }
        ended.clear();
        let mut next = Vec::new();
        for q in 0..64u32 {
            let ids: Vec<u32> = (0..16).map(|t| 1_000_000 + q * 100 + t).collect();
            assert_eq!(pick(&p, &ids, &refs).index, 0, "request {q}");
            next.push(book(0, 16));
        }
    }

    #[test]
    fn fractional_weights_keep_their_ratio() {
        // 0.25 and 32: the ratio of 1 and 128, so 2,048 cached tokens (512 weighted) outweigh
        // 15 more decoding requests (480) and tie at 16, where the lower load wins.
        let p = PrefixCost::new(0.25, 32.0, PrefixIndex::new(16, 1 << 22));
        stays_until_loaded_past(&p, &crate::routing::test_workers(2), 6, 15);
    }

    /// `group`'s home keeps its next request with `stays` more requests decoding there than
    /// on the other worker, and loses the one after at `stays + 1`.
    fn stays_until_loaded_past(p: &PrefixCost, ws: &[Arc<Worker>], group: u32, stays: usize) {
        let refs: Vec<_> = ws.iter().collect();
        let home = pick(p, &prompt(group, 0), &refs).index;
        let mut guards: Vec<_> = (0..stays)
            .map(|_| LoadGuard::book(Arc::clone(&ws[home]), 0))
            .collect();
        assert_eq!(pick(p, &prompt(group, 1), &refs).index, home);
        guards.push(LoadGuard::book(Arc::clone(&ws[home]), 0));
        assert_ne!(pick(p, &prompt(group, 2), &refs).index, home);
    }

    #[test]
    fn an_absurd_engine_report_counts_as_the_highest_load() {
        let ws = crate::routing::test_workers(2);
        let refs: Vec<_> = ws.iter().collect();
        let p = policy();
        ws[0].set_engine_load(
            EngineLoad {
                running_requests: u64::MAX,
                waiting_requests: 0,
                waiting_uncached_tokens: u64::MAX,
            },
            0,
        );
        for q in 0..4 {
            assert_eq!(pick(&p, &prompt(q, 0), &refs).index, 1);
        }
    }

    #[test]
    fn infinite_costs_everywhere_still_pick_a_worker() {
        let ws = crate::routing::test_workers(3);
        let refs: Vec<_> = ws.iter().collect();
        let p = PrefixCost::new(f64::INFINITY, f64::INFINITY, PrefixIndex::new(16, 1 << 22));
        for w in &ws {
            w.set_engine_load(
                EngineLoad {
                    running_requests: u64::MAX,
                    waiting_requests: 0,
                    waiting_uncached_tokens: u64::MAX,
                },
                0,
            );
        }
        assert!(pick(&p, &prompt(0, 0), &refs).index < 3);
    }

    #[test]
    fn forgets_removed_workers() {
        let ws = crate::routing::test_workers(3);
        let refs: Vec<_> = ws.iter().collect();
        let p = policy();
        let home = pick(&p, &prompt(5, 0), &refs).index;
        p.on_workers_changed(&[ws[(home + 1) % 3].id, ws[(home + 2) % 3].id]);
        assert_eq!(pick(&p, &prompt(5, 1), &refs).predicted_cached, 0);
        assert_eq!(p.pick(&RouteRequest::default(), &[]), None);
    }

    #[test]
    fn only_workers_without_events_teach_the_approximate_index() {
        let ws = crate::routing::test_workers(2);
        let refs: Vec<_> = ws.iter().collect();
        let kv = Arc::new(KvIndex::new(16, 1 << 20));
        kv.open_view(ws[0].id, 0, usize::MAX);
        kv.mark_fresh(ws[0].id, 0, std::time::Instant::now());
        let p = policy().with_kv_index(Some(Arc::clone(&kv)));
        let mut routed = [0usize; 2];
        for g in 0..8 {
            let pk = pick(&p, &prompt(g, g), &refs);
            routed[pk.index] += 1;
        }
        assert!(routed[0] > 0 && routed[1] > 0, "{routed:?}");
        // 136 pages per prompt: the covered worker's are speculative credits, the other's guesses.
        assert_eq!(p.index().size().entries, 136 * routed[1]);
        assert_eq!(kv.speculative(), 136 * routed[0]);
    }

    /// An exact index where `ws[i]` holds `held[i]` (whole pages, one chain) in a KV of
    /// `capacity[i]` blocks.
    fn kv_holding(ws: &[Arc<Worker>], held: &[Vec<u32>], capacity: &[usize]) -> Arc<KvIndex> {
        let kv = Arc::new(KvIndex::new(16, 1 << 20));
        for (i, w) in ws.iter().enumerate() {
            kv.open_view(w.id, 0, capacity[i]);
            kv.mark_fresh(w.id, 0, std::time::Instant::now());
            let pages = (held[i].len() / 16) as i64;
            let stored = Stored {
                hashes: (0..pages).map(|p| i as i64 * 100_000 + p).collect(),
                parent: None,
                token_ids: held[i].clone(),
                block_size: 16,
                device_tier: true,
            };
            assert_eq!(kv.store(w.id, 0, &stored), Applied::Indexed);
        }
        kv
    }

    #[test]
    fn under_kv_pressure_a_briefly_busy_home_keeps_its_prefix() {
        let ws = crate::routing::test_workers(2);
        let refs: Vec<_> = ws.iter().collect();
        // Home (0) has the group cached and one cold prompt's prefill queued; 1 holds another
        // group. Home: 128 to prefill (evicting 128) + 2,200 queued + 256 decode = 2,712.
        let _busy = LoadGuard::book(Arc::clone(&ws[0]), 2200);
        let held = [prompt(3, 0), prompt(4, 0)];
        // Worker 1 with room to spare: 2,176 to prefill and nothing evicted, so it goes there.
        let roomy = kv_holding(&ws, &held, &[136, 1000]);
        let p = policy().with_kv_index(Some(roomy));
        assert_eq!(pick(&p, &prompt(3, 1), &refs).index, 1);
        // Worker 1 full: the copy would also evict 2,176 cached tokens there (4,352 in all).
        let full = kv_holding(&ws, &held, &[136, 136]);
        let p = policy().with_kv_index(Some(full));
        let pk = pick(&p, &prompt(3, 1), &refs);
        assert_eq!((pk.index, pk.predicted_cached), (0, 2048));
    }

    #[test]
    fn under_kv_pressure_a_new_prefix_goes_where_kv_is_free() {
        let ws = crate::routing::test_workers(2);
        let refs: Vec<_> = ws.iter().collect();
        // Neither holds group 5. 0 is full and idle; 1 has room and 2 requests decoding.
        let kv = kv_holding(&ws, &[prompt(3, 0), prompt(4, 0)], &[136, 1000]);
        let _busy: Vec<_> = (0..2)
            .map(|_| LoadGuard::book(Arc::clone(&ws[1]), 0))
            .collect();
        let p = policy().with_kv_index(Some(kv));
        // 0: 2,176 + 2,176 evicted; 1: 2,176 + 2 × 256.
        assert_eq!(pick(&p, &prompt(5, 0), &refs).index, 1);
    }

    #[test]
    fn index_budget_holds() {
        let ws = crate::routing::test_workers(4);
        let refs: Vec<_> = ws.iter().collect();
        let p = PrefixCost::new(1.0, 256.0, PrefixIndex::new(16, 100_000));
        for g in 0..460 {
            pick(&p, &prompt(g, g), &refs);
            assert!(p.index().size().tokens <= 100_000);
        }
    }
}
