//! Which workers likely hold how many leading tokens of a prompt.
//!
//! The gateway cannot see the engines' radix caches, so this records routing history instead:
//! when a policy sends a prompt to a worker it inserts that prompt for that worker, on the bet
//! that the engine will keep it cached for a while. SMG's `cache_aware` tree, Dynamo's
//! `--no-router-kv-events` mode and llm-d's approximate prefix producer all work this way.
//!
//! Layout, and why:
//! - **Pages, not tokens.** A prompt is cut into `page_size`-token pages (SGLang's `--page-size`
//!   and SMG's `--block-size`, 16 by default) and the partial last page is ignored, as an engine
//!   with paged KV cannot reuse it either. Memory is one map entry per page, not per token.
//! - **Chained hashes.** Page `k`'s key hashes its tokens together with page `k-1`'s key, so a
//!   key stands for the whole prefix up to that page and a flat hash map replaces a radix tree:
//!   a prompt matches a worker for as many consecutive pages, from the first, as it holds.
//! - **Shards.** Every request matches and inserts, from many tasks at once, so the map is split
//!   into `SHARDS` mutex-guarded shards picked by key; a lock is held for one page lookup only.
//! - **Budget.** `max_tokens` bounds the (page, worker) entries × `page_size`, split evenly over
//!   the shards. Each shard evicts least-recently-inserted entries first (an O(1) linked list,
//!   `lru`). A prompt's pages are inserted deepest first, so within one prompt the tail ages out before the shared head,
//!   like leaves before inner nodes in a radix tree.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Mutex, MutexGuard};

use smallvec::SmallVec;

use super::lru::Lru;
use crate::workers::page_key::PassThrough;
pub use crate::workers::page_key::{hash_page, mix64};
use crate::workers::WorkerId;

/// Enough shards that 2 to 64 request tasks rarely meet on one lock.
const SHARDS: usize = 32;

/// Page key → (worker, its slot in the shard's recency list), sorted by worker; up to two
/// holders stored inline.
type PageMap = HashMap<u64, SmallVec<[(WorkerId, usize); 2]>, BuildHasherDefault<PassThrough>>;

/// How big the index is right now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexSize {
    /// Distinct prefix pages.
    pub pages: usize,
    /// (page, worker) pairs: a page held by three workers counts three times.
    pub entries: usize,
    /// `entries × page_size`: the figure the token budget bounds.
    pub tokens: usize,
}

#[derive(Default)]
struct Shard {
    /// Page key → the workers holding it, sorted by id, each with its recency slot.
    pages: PageMap,
    lru: Lru,
    entries: usize,
}

impl Shard {
    fn touch(&mut self, key: u64, worker: WorkerId) {
        let holders = self.pages.entry(key).or_default();
        match holders.binary_search_by_key(&worker, |e| e.0) {
            Ok(i) => {
                if let Some(e) = holders.get(i) {
                    self.lru.touch(e.1);
                }
            }
            Err(i) => {
                holders.insert(i, (worker, self.lru.alloc(key, worker)));
                self.entries += 1;
            }
        }
    }

    fn evict_to(&mut self, target: usize) {
        while self.entries > target {
            let Some((key, worker)) = self.lru.pop_oldest() else {
                break;
            };
            if let Some(holders) = self.pages.get_mut(&key) {
                holders.retain(|e| e.0 != worker);
                if holders.is_empty() {
                    self.pages.remove(&key);
                }
            }
            self.entries -= 1;
        }
    }

    fn retain_workers(&mut self, keep: &dyn Fn(WorkerId) -> bool) {
        let lru = &mut self.lru;
        self.pages.retain(|_, holders| {
            holders.retain(|e| {
                let kept = keep(e.0);
                if !kept {
                    lru.release(e.1);
                }
                kept
            });
            !holders.is_empty()
        });
        self.entries = self.pages.values().map(|h| h.len()).sum();
    }
}

pub struct PrefixIndex {
    page_size: usize,
    /// Entries each shard may hold.
    shard_budget: usize,
    /// Inline eviction starts above this many entries per shard: the budget itself, or twice
    /// it when a periodic sweep (`evict`) is the primary mechanism, as in SMG.
    shard_ceiling: usize,
    shards: Box<[Mutex<Shard>]>,
}

impl PrefixIndex {
    /// `max_tokens` bounds the stored (page, worker) entries × `page_size`.
    pub fn new(page_size: usize, max_tokens: usize) -> PrefixIndex {
        let page_size = page_size.max(1);
        let shard_budget = (max_tokens / page_size / SHARDS).max(1);
        PrefixIndex {
            page_size,
            shard_budget,
            shard_ceiling: shard_budget,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// Lets the index grow to twice its budget between `evict()` sweeps (SMG's eviction
    /// interval), still bounding memory if sweeps stop.
    pub fn with_periodic_eviction(mut self) -> PrefixIndex {
        self.shard_ceiling = self.shard_budget.saturating_mul(2);
        self
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The token budget as rounded to whole pages per shard.
    pub fn budget_tokens(&self) -> usize {
        self.shard_budget * SHARDS * self.page_size
    }

    fn shard(&self, key: u64) -> MutexGuard<'_, Shard> {
        // Bits 32.. pick the shard: the map uses the low bits for buckets and the top 7 as tags.
        let i = (key >> 32) as usize % SHARDS;
        let m = &self.shards[i];
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The chained key of every full page of `tokens`.
    pub fn page_hashes(&self, tokens: &[u32]) -> Vec<u64> {
        let mut prev = None;
        tokens
            .chunks_exact(self.page_size)
            .map(|page| {
                let h = hash_page(prev, page);
                prev = Some(h);
                h
            })
            .collect()
    }

    /// Matched leading pages per worker (workers matching none are absent), sorted by worker.
    pub fn match_pages(&self, hashes: &[u64]) -> Vec<(WorkerId, usize)> {
        let mut out: Vec<(WorkerId, usize)> = Vec::new();
        for (depth, key) in hashes.iter().enumerate() {
            let shard = self.shard(*key);
            let Some(holders) = shard.pages.get(key) else {
                break;
            };
            if depth == 0 {
                out.extend(holders.iter().map(|e| (e.0, 1)));
                continue;
            }
            // Both lists are sorted by worker: one merge pass extends those still matching.
            let mut alive = 0;
            let mut j = 0;
            for entry in out.iter_mut().filter(|e| e.1 == depth) {
                while holders.get(j).is_some_and(|h| h.0 < entry.0) {
                    j += 1;
                }
                if holders.get(j).is_some_and(|h| h.0 == entry.0) {
                    entry.1 += 1;
                    alive += 1;
                }
            }
            if alive == 0 {
                break;
            }
        }
        out
    }

    /// Records that `worker` now holds these pages.
    pub fn insert(&self, hashes: &[u64], worker: WorkerId) {
        for key in hashes.iter().rev() {
            let mut shard = self.shard(*key);
            shard.touch(*key, worker);
            if shard.entries > self.shard_ceiling {
                shard.evict_to(self.shard_budget);
            }
        }
    }

    /// Evicts least-recently-inserted entries down to the budget.
    pub fn evict(&self) {
        for m in self.shards.iter() {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .evict_to(self.shard_budget);
        }
    }

    pub fn remove_worker(&self, id: WorkerId) {
        self.retain_workers(&|w| w != id);
    }

    /// Forgets every worker not in `live`.
    pub fn retain_live(&self, live: &[WorkerId]) {
        self.retain_workers(&|w| live.contains(&w));
    }

    fn retain_workers(&self, keep: &dyn Fn(WorkerId) -> bool) {
        for m in self.shards.iter() {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain_workers(keep);
        }
    }

    pub fn size(&self) -> IndexSize {
        let mut size = IndexSize::default();
        for m in self.shards.iter() {
            let s = m.lock().unwrap_or_else(|e| e.into_inner());
            size.pages += s.pages.len();
            size.entries += s.entries;
        }
        size.tokens = size.entries * self.page_size;
        size
    }
}

/// Matched pages of worker `id` in a `match_pages` result.
pub fn pages_for(matches: &[(WorkerId, usize)], id: WorkerId) -> usize {
    matches
        .binary_search_by_key(&id, |e| e.0)
        .ok()
        .and_then(|i| matches.get(i))
        .map_or(0, |e| e.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(group: u32, len: usize, tail: u32) -> Vec<u32> {
        let mut v: Vec<u32> = (0..len as u32).map(|t| group * 100_000 + t).collect();
        v.extend((0..37).map(|t| 900_000 + tail * 100 + t));
        v
    }

    #[test]
    fn matches_whole_pages_per_worker() {
        let idx = PrefixIndex::new(16, 1 << 20);
        let a = prompt(1, 64, 0);
        idx.insert(&idx.page_hashes(&a), WorkerId(3));
        // 64 shared + 32 of the 37 tail tokens fill 6 pages; the other worker holds 4 of them.
        idx.insert(&idx.page_hashes(&a[..64]), WorkerId(1));
        let b = prompt(1, 64, 1);
        let m = idx.match_pages(&idx.page_hashes(&b));
        assert_eq!(m, vec![(WorkerId(1), 4), (WorkerId(3), 4)]);
        let m = idx.match_pages(&idx.page_hashes(&a));
        assert_eq!(pages_for(&m, WorkerId(3)), 6);
        assert_eq!(pages_for(&m, WorkerId(1)), 4);
        assert_eq!(pages_for(&m, WorkerId(2)), 0);
        // A different first page matches nothing even if later tokens agree.
        let mut c = a.clone();
        c[0] = 7;
        assert!(idx.match_pages(&idx.page_hashes(&c)).is_empty());
        assert_eq!(idx.size().pages, 6);
        assert_eq!(idx.size().tokens, 10 * 16);
    }

    #[test]
    fn remove_worker_forgets_it() {
        let idx = PrefixIndex::new(16, 1 << 20);
        let a = prompt(2, 128, 0);
        let h = idx.page_hashes(&a);
        idx.insert(&h, WorkerId(0));
        idx.insert(&h, WorkerId(1));
        idx.remove_worker(WorkerId(0));
        assert_eq!(idx.match_pages(&h), vec![(WorkerId(1), h.len())]);
        idx.retain_live(&[WorkerId(5)]);
        assert_eq!(idx.size(), IndexSize::default());
    }

    #[test]
    fn budget_holds_under_a_long_stream_and_keeps_hot_prefixes() {
        let idx = PrefixIndex::new(16, 100_000);
        let hot = prompt(0, 512, 0);
        let mut inserted = 0;
        for i in 0..1000u32 {
            // Unique 1k-token prompts: a 1M-token stream through a 100k-token budget.
            let cold = prompt(i + 1, 1000, i);
            idx.insert(&idx.page_hashes(&cold), WorkerId(i % 4));
            inserted += cold.len();
            idx.insert(&idx.page_hashes(&hot), WorkerId(0));
            assert!(idx.size().tokens <= 100_000);
        }
        assert!(inserted >= 1_000_000);
        assert!(idx.size().tokens > 50_000, "{:?}", idx.size());
        let m = idx.match_pages(&idx.page_hashes(&hot));
        assert_eq!(pages_for(&m, WorkerId(0)), 512 / 16 + 2);
    }

    #[test]
    fn periodic_mode_overshoots_until_swept() {
        let idx = PrefixIndex::new(16, 16 * 32 * 10).with_periodic_eviction();
        for i in 0..200u32 {
            idx.insert(&idx.page_hashes(&prompt(i, 160, i)), WorkerId(0));
        }
        assert!(idx.size().tokens <= 2 * idx.budget_tokens());
        idx.evict();
        assert!(idx.size().tokens <= idx.budget_tokens());
    }
}
